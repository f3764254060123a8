"""The reflector caches objects without managedFields, and says when it (re)listed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from gpucluster.clusterstate import ClusterState
from gpucluster.kube.reflector import RESOURCES, Reflector

MANAGED = [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]


class FakeKube:
    def __init__(self) -> None:
        self.watched = asyncio.Event()

    async def get(self, path: str, query: Any = None) -> dict[str, Any]:
        node = {"metadata": {"name": "n1", "resourceVersion": "1", "managedFields": MANAGED}}
        return {"apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": [node]}

    async def watch(self, path: str, query: Any, timeout: float) -> AsyncIterator[dict[str, Any]]:
        node = {"kind": "Node", "metadata": {"name": "n2", "resourceVersion": "2", "managedFields": MANAGED}}
        yield {"type": "ADDED", "object": node}
        self.watched.set()
        await asyncio.Event().wait()


async def test_listed_and_watched_objects_are_cached_without_managed_fields() -> None:
    state = ClusterState()
    kube = FakeKube()
    lists: list[str] = []
    events: list[tuple[str, str]] = []
    reflector = Reflector(
        kube,  # type: ignore[arg-type]
        RESOURCES["Node"], state, on_list=lists.append,
        on_event=lambda type_, obj: events.append((type_, obj["metadata"]["name"])),
    )  # fmt: skip
    task = asyncio.create_task(reflector.run())
    await asyncio.wait_for(kube.watched.wait(), 5)
    task.cancel()
    assert lists == ["Node"] and events == [("ADDED", "n2")]
    for name in ("n1", "n2"):
        node = state.get("Node", name)
        assert node is not None and "managedFields" not in node["metadata"]
        assert node["metadata"]["resourceVersion"]
