"""Shared helpers: the golden files, and the ``gpucluster`` command with migrate and audit registered."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpucluster import cli

GOLDEN = Path(__file__).resolve().parent / "golden"
INPUT = GOLDEN / "input"
EXPECTED = GOLDEN / "expected"

Main = Callable[..., int]


@pytest.fixture
def gpucluster() -> Main:
    """``gpucluster ARGS...`` in-process, exactly as the console script runs it (exit code returned)."""

    def main(*argv: str) -> int:
        return cli.main(list(argv))

    return main
