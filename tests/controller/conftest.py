"""Fixtures shared by the controller tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpucluster.dra.worker import AllocatorWorker


@pytest.fixture(scope="module")
def worker() -> Iterator[AllocatorWorker]:
    """An allocator worker process, as the controller's explanations use (generous deadline)."""
    w = AllocatorWorker(deadline=30)
    try:
        yield w
    finally:
        w.close()
