"""The reflector caches objects without managedFields, and says when it (re)listed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gpucluster.clusterstate import ClusterState
from gpucluster.kube.reflector import RESOURCES, Reflector, strip_managed_fields
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


async def test_the_transform_sees_every_object_before_it_is_cached_or_told() -> None:
    state = ClusterState()
    kube = FakeKube([node("n1")])
    events: list[tuple[str, dict[str, Any]]] = []

    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        return {"kind": obj["kind"], "metadata": {"name": obj["metadata"]["name"], "seen": True}}

    reflector = Reflector(
        kube, RESOURCES["Node"], state, transform=transform, on_event=lambda type_, obj: events.append((type_, obj))
    )
    task = asyncio.create_task(reflector.run())
    await until(lambda: state.get("Node", "n1"))  # listed
    kube.put(node("n2"))  # watched: added
    await until(lambda: state.get("Node", "n2"))
    kube.remove("/api/v1/nodes/n1")  # watched: deleted
    await until(lambda: state.get("Node", "n1") is None)
    task.cancel()
    assert state.list("Node") == [{"kind": "Node", "metadata": {"name": "n2", "seen": True}}]
    assert [(type_, obj["metadata"]) for type_, obj in events] == [
        ("ADDED", {"name": "n2", "seen": True}),
        ("DELETED", {"name": "n1", "seen": True}),
    ]


async def test_a_relist_keeps_the_cached_copy_of_an_object_whose_version_did_not_change() -> None:
    state = ClusterState()
    kube = FakeKube([node("n1"), node("n2")])
    transformed: list[str] = []

    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        transformed.append(obj["metadata"]["name"])
        return strip_managed_fields(obj)

    reflector = Reflector(kube, RESOURCES["Node"], state, transform=transform)
    await reflector._list()
    n1, n2 = state.get("Node", "n1"), state.get("Node", "n2")
    kube.put({**node("n2"), "metadata": {"name": "n2", "labels": {"changed": "true"}}})
    await reflector._list()  # a relist, as after a 410
    assert state.get("Node", "n1") is n1  # the same object: no second copy while the old is held
    changed = state.get("Node", "n2")
    assert changed is not n2 and changed is not None and changed["metadata"]["labels"] == {"changed": "true"}
    assert transformed == ["n1", "n2", "n2"]


async def test_an_event_that_changes_nothing_kept_is_neither_cached_nor_told() -> None:
    """A node's heartbeat changes its status, which the transform drops: the cached object stays
    (same object, same kind generation: derived caches and the allocator's copy stay valid) and
    the handler is not told; a label change is cached and told."""
    state = ClusterState()
    labelled = {**node("n1"), "metadata": {"name": "n1", "labels": {"a": "1"}}}
    kube = FakeKube([labelled])
    events: list[tuple[str, str]] = []

    def keep_labels(obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return {
            "kind": obj["kind"],
            "metadata": {k: meta[k] for k in ("name", "resourceVersion", "labels") if k in meta},
        }

    def same_labels(cached: dict[str, Any], obj: dict[str, Any]) -> bool:
        return bool(cached["metadata"].get("labels") == obj["metadata"].get("labels"))

    reflector = Reflector(
        kube, RESOURCES["Node"], state, transform=keep_labels, unchanged=same_labels,
        on_event=lambda type_, obj: events.append((type_, obj["metadata"]["name"])),
    )  # fmt: skip
    task = asyncio.create_task(reflector.run())
    await until(lambda: state.get("Node", "n1"))
    cached, generation = state.get("Node", "n1"), state.kind_generation("Node")
    kube.put({**labelled, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})  # a heartbeat
    await until(lambda: reflector.skipped)
    assert state.get("Node", "n1") is cached and state.kind_generation("Node") == generation and events == []
    kube.put({**labelled, "metadata": {"name": "n1", "labels": {"a": "2"}}})
    await until(lambda: events)
    task.cancel()
    assert events == [("MODIFIED", "n1")] and reflector.skipped == 1
    changed = state.get("Node", "n1")
    assert changed is not None and changed["metadata"]["labels"] == {"a": "2"}
