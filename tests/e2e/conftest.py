"""The cluster the chart's end-to-end tests install into: two GPU nodes of 4 GPUs, on each backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.backends import backends
from tests.e2e.chart_install import Cluster


@pytest.fixture(params=backends())
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(nodes=2, gpus_per_node=4, backend=request.param)
    try:
        yield c
    finally:
        c.close()
