"""Shared pytest configuration."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from gpucluster.sandbox.controlplane.cluster import ControlPlane
    from gpucluster.sandbox.server import SandboxThread

REPO = Path(__file__).resolve().parent.parent


def pytest_report_header(config: pytest.Config) -> str:
    from tests.e2e.backends import image_status

    return image_status()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The same line after a run that included the chart's end-to-end tests (-q hides the header)."""
    stats = terminalreporter.stats
    ran = [r for key in ("passed", "failed", "error", "skipped") for r in stats.get(key, [])]
    if any(getattr(r, "nodeid", "").startswith(("tests/e2e/", "tests/image/")) for r in ran):
        from tests.e2e.backends import image_status

        terminalreporter.write_line(image_status())


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="module")
def sb() -> Iterator[SandboxThread]:
    """A plain sandbox (no simulated cluster) on its own loop in a thread, shared by a test module."""
    from gpucluster.sandbox.server import SandboxThread

    runner = SandboxThread()
    runner.start()
    try:
        yield runner
    finally:
        runner.stop()


@pytest.fixture(scope="module")
def bare_kube() -> Iterator[ControlPlane]:
    """The real control plane without nodes, with the CRDs and the operator namespace, shared by a
    test module (skips, or fails under CI=true, where it is not built)."""
    from tests.e2e.backends import start_kube

    plane = start_kube(node_agent=False)
    try:
        yield plane
    finally:
        plane.stop()
