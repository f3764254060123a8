"""Fixtures: an ApiCore without HTTP, an in-loop Sandbox, and a Sandbox in a background thread."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yaml

from sandbox.apiserver.core import ApiCore, Context
from sandbox.apiserver.resources import ResourceType
from sandbox.server import Sandbox, SandboxThread

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
