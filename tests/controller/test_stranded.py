"""Opt-in deletion of stranded pods: once per controller, then with back-off, never a loop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucluster.clusterstate import ClusterState
from gpucluster.controller.stranded import DECLINED_REASON, DELETE_BACKOFF, DELETE_BACKOFF_MAX, StrandedPods
from tests.controller.test_provision import stranded_pod


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_stranded_replacement_is_not_deleted_again_until_its_back_off_has_passed() -> None:
    clock = Clock()
    state = ClusterState.from_objects([])
    stranded = StrandedPods(state, "gpu-operator", delete=True, clock=clock)
    deleted: list[str] = []
    messages: list[tuple[str, str]] = []

    async def event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        messages.append((obj["metadata"]["name"], message))

    async def delete(obj: Mapping[str, Any]) -> None:
        deleted.append(obj["metadata"]["name"])

    first = stranded_pod("server-1", owned=True)
    # Passes over the same pod before the cache sees it go: deleted once.
    for _ in range(5):
        await stranded.check(first, "ml/server-1", event, delete)
    assert deleted == ["server-1"]
    await stranded.check(None, "ml/server-1", event, delete)

    # Its replacement (same ReplicaSet) is stranded again: the webhook is still down. Not deleted,
    # and told so once, however many passes.
    for i in range(2, 50):
        replacement = stranded_pod(f"server-{i}", owned=True)
        clock.now += 5.0
        for _ in range(3):
            await stranded.check(replacement, f"ml/server-{i}", event, delete)
        await stranded.check(None, f"ml/server-{i}", event, delete)
        if len(deleted) > 1:
            break
    # ... until DELETE_BACKOFF seconds after the first deletion.
    assert deleted == ["server-1", f"server-{i}"] and clock.now == 1000.0 + DELETE_BACKOFF
    held = [m for name, m in messages if name == "server-2" and m.startswith("not deleted")]
    assert len(held) == 1 and "next deletion is due in 55s" in held[0], messages
    # The back-off doubles for that controller, up to its cap; another controller is not held back.
    clock.now += DELETE_BACKOFF + 1
    await stranded.check(stranded_pod("late", owned=True), "ml/late", event, delete)
    assert deleted[-1] == f"server-{i}"
    clock.now += DELETE_BACKOFF
    await stranded.check(stranded_pod("later", owned=True), "ml/later", event, delete)
    assert deleted[-1] == "later"
    other = stranded_pod("job-1")
    other["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": "job-uid", "controller": True}]
    await stranded.check(other, "ml/job-1", event, delete)
    assert deleted[-1] == "job-1"
    assert DELETE_BACKOFF * 2**10 > DELETE_BACKOFF_MAX


def _gpu_slice(*profiles: str) -> dict[str, Any]:
    devices = [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}]
    devices += [
        {"name": f"mig-{i}", "attributes": {"type": {"string": "mig"}, "profile": {"string": p}}}
        for i, p in enumerate(profiles)
    ]
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": "node-1-gpu.nvidia.com"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "node-1", "pool": {"name": "node-1"}, "devices": devices},
    }


async def test_a_pod_the_webhook_declines_on_purpose_is_told_why_and_never_deleted() -> None:
    state = ClusterState.from_objects([_gpu_slice("1g.10gb")])
    too_many = stranded_pod("big", owned=True)
    too_many["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "33"}
    unknown_mig = stranded_pod("mig", owned=True)
    unknown_mig["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-3g.40gb": "1"}
    never_seen = stranded_pod("plain", owned=True)
    stranded = StrandedPods(state, "gpu-operator", delete=True)
    events: list[tuple[str, str, str]] = []
    deleted: list[str] = []

    async def event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        events.append((obj["metadata"]["name"], reason, message))

    async def delete(obj: Mapping[str, Any]) -> None:
        deleted.append(obj["metadata"]["name"])

    for _ in range(2):
        for pod in (too_many, unknown_mig, never_seen):
            await stranded.check(pod, f"ml/{pod['metadata']['name']}", event, delete)
    assert deleted == ["plain"]  # only the pod the webhook never saw
    assert stranded.gauge._value.get() == 1
    declined = {name: message for name, reason, message in events if reason == DECLINED_REASON}
    assert sorted(declined) == ["big", "mig"]  # once each
    assert len([e for e in events if e[1] == DECLINED_REASON]) == 2
    assert "33 devices" in declined["big"] and "recreat" in declined["big"] and "change the request" in declined["big"]
    assert "no node publishes MIG profile 3g.40gb" in declined["mig"]
    assert not any("webhook was unavailable" in message for name, _, message in events if name in declined)


def _device_class(created: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com", "creationTimestamp": created},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
    }


async def test_a_pod_created_before_the_dra_model_is_not_said_to_have_met_an_unavailable_webhook() -> None:
    # Pods created before the chart's GPUCluster and DeviceClasses existed were left alone by the
    # webhook as it leaves every pod where no DRA model runs: recreating them helps, but nothing was down.
    cluster = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "GPUCluster",
        "metadata": {"name": "gpu-cluster", "creationTimestamp": "2026-12-07T10:00:05Z"},
        "spec": {},
    }
    state = ClusterState.from_objects([cluster, _device_class("2026-12-07T10:00:09Z")])
    stranded = StrandedPods(state, "gpu-operator")
    events: list[tuple[str, str, str]] = []

    async def event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        events.append((obj["metadata"]["name"], reason, message))

    async def delete(obj: Mapping[str, Any]) -> None:
        raise AssertionError("not asked to delete")

    old = stranded_pod("old", creationTimestamp="2026-12-07T09:59:00Z")
    same_second = stranded_pod("same-second", creationTimestamp="2026-12-07T10:00:05Z")
    later = stranded_pod("later", creationTimestamp="2026-12-07T11:00:00Z")
    for pod in (old, same_second, later):
        await stranded.check(pod, f"ml/{pod['metadata']['name']}", event, delete)
    said = {name: (reason, message) for name, reason, message in events}
    assert {reason for reason, _ in said.values()} == {"UntranslatedGPURequest"}
    assert said["old"][1].startswith(
        "created before the DRA model served NVIDIA GPUs here (GPUCluster gpu-cluster since 2026-12-07T10:00:05Z)"
    )
    assert "recreate it" in said["old"][1] and "unavailable" not in said["old"][1]
    for name in ("same-second", "later"):  # not known to be earlier: the webhook was down
        assert said[name][1].startswith("admitted without translation while the webhook was unavailable; recreate it")


async def test_without_a_creation_time_the_stranded_message_is_the_webhooks_unavailability() -> None:
    # A DRA model known from ResourceSlices alone (they carry no creation time in the cache).
    state = ClusterState.from_objects([_gpu_slice()])
    events: list[str] = []

    async def event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        events.append(message)

    async def delete(obj: Mapping[str, Any]) -> None:
        raise AssertionError("not asked to delete")

    pod = stranded_pod("old", creationTimestamp="2000-01-01T00:00:00Z")
    await StrandedPods(state, "gpu-operator").check(pod, "ml/old", event, delete)
    assert len(events) == 1 and events[0].startswith("admitted without translation while the webhook was unavailable")
