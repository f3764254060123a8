"""The reflector caches objects without managedFields, and says when it (re)listed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gpucluster.clusterstate import ClusterState
from gpucluster.kube.reflector import RESOURCES, Reflector
from tests.kit.fakekube import FakeKube

MANAGED = [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "managedFields": MANAGED}}


async def until(done: Callable[[], object]) -> None:
    async with asyncio.timeout(5):
        while not done():
            await asyncio.sleep(0.01)


async def test_listed_and_watched_objects_are_cached_without_managed_fields() -> None:
    state = ClusterState()
    kube = FakeKube([node("n1")])
    lists: list[str] = []
    events: list[tuple[str, str]] = []
    reflector = Reflector(
        kube, RESOURCES["Node"], state, on_list=lists.append,
        on_event=lambda type_, obj: events.append((type_, obj["metadata"]["name"])),
    )  # fmt: skip
    task = asyncio.create_task(reflector.run())
    await until(lambda: lists)  # n1 listed
    kube.put(node("n2"))  # then n2 is watched
    await until(lambda: events)
    task.cancel()
    assert lists == ["Node"] and events == [("ADDED", "n2")]
    assert [(c.method, c.path) for c in kube.calls] == [("GET", "/api/v1/nodes"), ("WATCH", "/api/v1/nodes")]
    for name in ("n1", "n2"):
        cached = state.get("Node", name)
        assert cached is not None and "managedFields" not in cached["metadata"]
        assert cached["metadata"]["resourceVersion"]
