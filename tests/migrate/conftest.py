"""Shared helpers: the golden files, and the ``gpucluster`` command with migrate and audit registered.
The audit runs pods through the webhook's rules: a rule that raises fails the test (:mod:`tests.webhook.rulecrash`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpucluster import cli
from tests.webhook.rulecrash import register_marker, rules_never_crash

__all__ = ["rules_never_crash"]

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


def pytest_configure(config: pytest.Config) -> None:
    register_marker(config)
