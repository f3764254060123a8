"""The oracle tier: each test asks a running oracle of its version (built on first use when Go
is here; skipped with one line where it is not, failed under CI=true)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.oracle.build import require
from tests.oracle.client import Oracle


@pytest.fixture(scope="module")
def oracles() -> Iterator[dict[str, Oracle]]:
    started: dict[str, Oracle] = {}
    try:
        yield _Lazy(started)  # type: ignore[misc]
    finally:
        for oracle in started.values():
            oracle.close()


class _Lazy(dict[str, Oracle]):
    def __init__(self, started: dict[str, Oracle]) -> None:
        super().__init__()
        self._started = started

    def __missing__(self, minor: str) -> Oracle:
        oracle = self._started.get(minor) or Oracle(require(minor))
        self._started[minor] = oracle
        self[minor] = oracle
        return oracle
