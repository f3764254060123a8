"""Fixtures: an ApiCore without HTTP, an in-loop Sandbox, and a Sandbox in a background thread."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yaml

from gpucluster.sandbox.apiserver.core import ApiCore, Context
from gpucluster.sandbox.apiserver.resources import ResourceType
from gpucluster.sandbox.server import Sandbox, SandboxThread

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "charts" / "gpucluster" / "crds" / "nvidia.com_gpuclusters.yaml"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def rt(core: ApiCore, group: str, version: str, plural: str) -> ResourceType:
    found = core.registry.get(group, version, plural)
    assert found is not None, (group, version, plural)
    return found


def gpucluster_crd() -> dict[str, object]:
    doc = yaml.safe_load(CRD_FILE.read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.fixture
async def core() -> ApiCore:
    c = ApiCore()
    ns = rt(c, "", "v1", "namespaces")
    for name in ("default", "team"):
        await c.create(ns, "", {"metadata": {"name": name}}, Context(field_manager="test"))
    return c


@pytest.fixture
async def sandbox() -> AsyncIterator[Sandbox]:
    s = Sandbox(bookmark_interval=0.2)
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


@pytest.fixture(scope="module")
def threaded() -> Iterator[SandboxThread]:
    runner = SandboxThread(bookmark_interval=0.5, history_limit=50)
    runner.start()
    try:
        yield runner
    finally:
        runner.stop()


PYTHON_IMAGE = "example.com/python:3"  # runs this interpreter as a process: the image entrypoint is python


async def process_sandbox(tmp_path: Path, backoff: tuple[float, float] = (0.2, 1.0)) -> Sandbox:
    """A started sandbox with one node whose pods of PYTHON_IMAGE run as local processes, a short
    crash-loop back-off, and the ServiceAccount "default" in namespace default (the sandbox has no
    ServiceAccount controller)."""
    import sys

    from gpucluster.sandbox.sim import SimulationOptions

    options = SimulationOptions(
        nodes=1,
        process_images={PYTHON_IMAGE.split(":")[0]: [sys.executable]},
        restart_backoff=backoff,
        process_root=tmp_path / "pods",
    )
    s = Sandbox(simulate=options)
    await s.start()
    accounts = rt(s.core, "", "v1", "serviceaccounts")
    await s.core.create(accounts, "default", {"metadata": {"name": "default"}}, Context(field_manager="test"))
    return s
