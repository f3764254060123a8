"""Status and events that tell the truth: Normal events for what happened to operands, no status
write when nothing changed, inventory-only changes coalesced."""

from __future__ import annotations

from typing import Any

import pytest

from gpucluster.clusterstate import ClusterState
from gpucluster.controller.plan import Apply, Delete
from gpucluster.controller.reconcile import Api, ChangeLog, Reconciler, StatusWrites
from tests.controller import test_reconcile_e2e as base
from tests.controller.test_day2 import DS_PATH, PLUGIN, wait_ready
from tests.controller.test_reconcile_e2e import GC_PATH, GPUCLUSTER, Env
from tests.kit.fakekube import FakeKube

env = base.env  # the sandbox + controller fixture

MERGE = "application/merge-patch+json"


def stock(nodes: int) -> dict[str, Any]:
    return {"nodes": nodes, "gpus": 8 * nodes, "migDevices": 0, "allocated": 0, "products": []}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reconciler(status: StatusWrites) -> tuple[FakeKube, Reconciler]:
    """A reconciler whose cache and API server hold one GPUCluster, its status writes as ``status`` says."""
    cluster = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster",
               "metadata": {"name": "gpu-cluster", "generation": 1, "uid": "u"}}  # fmt: skip
    kube = FakeKube([cluster])
    state = ClusterState()
    state.upsert("GPUCluster", kube.object(f"{GC_PATH}/gpu-cluster"))
    return kube, Reconciler(Api(kube, now=lambda: "2026-01-01T00:00:00Z"), state, status=status)


async def test_inventory_changes_are_coalesced_but_state_changes_are_written_at_once() -> None:
    clock = Clock()
    kube, rec = reconciler(StatusWrites(inventory_quiet=5.0, clock=clock))

    async def report(state_: str, nodes: int) -> None:
        current = rec.state.get("GPUCluster", "gpu-cluster")
        assert current is not None
        reason = "Reconciled" if state_ == "ready" else "OperandsNotReady"
        await rec.set_status(current, state=state_, reason=reason, message=state_, inventory=stock(nodes))

    await report("ready", 1000)
    assert rec.status.writes == 1
    await report("ready", 1000)  # nothing changed: no write
    assert rec.status.writes == 1
    # 200 nodes leave one by one within a second of that write: held back, due once the
    # inventory has not moved for 5 s.
    for left in range(1, 201):
        clock.now += 0.005
        await report("ready", 1000 - left)
    assert rec.status.writes == 1
    assert rec.status.due == pytest.approx(1006.0)
    # A change of state is written at once, with the latest inventory.
    await report("notReady", 800)
    assert rec.status.writes == 2
    assert kube.object(f"{GC_PATH}/gpu-cluster")["status"]["inventory"]["nodes"] == 800
    assert rec.status.due is None
    # Once the interval has passed, the held-back inventory is written.
    await report("notReady", 799)
    assert rec.status.writes == 2
    clock.now += 5.0
    await report("notReady", 799)
    assert rec.status.writes == 3 and kube.object(f"{GC_PATH}/gpu-cluster")["status"]["inventory"]["nodes"] == 799


async def test_nodes_leaving_for_a_long_while_are_two_status_writes() -> None:
    """The first inventory change after a quiet while is written at once; the rest of a removal
    that goes on for 40 s (a large cluster's) is held back until the inventory settles: two writes,
    where writing at most every 5 s made nine. Steady churn still shows every 60 s."""
    clock = Clock()
    kube, rec = reconciler(StatusWrites(clock=clock))

    async def report(nodes: int) -> None:
        current = rec.state.get("GPUCluster", "gpu-cluster")
        assert current is not None
        await rec.set_status(current, state="ready", reason="Reconciled", message="ready", inventory=stock(nodes))

    def written() -> int:
        return int(kube.object(f"{GC_PATH}/gpu-cluster")["status"]["inventory"]["nodes"])

    await report(20000)
    clock.now += 60.0
    for left in range(1, 201):  # one node every 0.2 s
        await report(20000 - left)
        if left == 1:
            assert rec.status.writes == 2 and written() == 19999  # at once
        clock.now += 0.2
    assert rec.status.writes == 2 and rec.status.due == pytest.approx(clock.now - 0.2 + 5.0)
    clock.now += 5.0
    await report(19800)  # the requeue when due
    assert rec.status.writes == 3 and written() == 19800 and rec.status.due is None
    # A node every second, for two minutes: one write a minute, not one a node.
    clock.now += 60.0
    for left in range(1, 121):
        await report(19800 - left)
        clock.now += 1.0
    assert rec.status.writes == 3 + 2  # the first at once, then the next 60 s later (then 61 s after that)


def test_one_event_per_kind_of_change_workloads_named_first_then_the_warnings() -> None:
    log = ChangeLog()

    def obj(kind: str) -> dict[str, Any]:
        return {"kind": kind, "metadata": {"name": kind.lower()}}

    log.changed(Apply(obj("Service"), "OperandCreated", "created Service"))
    log.changed(Apply(obj("DeviceClass"), "OperandCreated", "created DeviceClass"))
    log.changed(Delete(obj("Role"), reason="OperandPruned", message="deleted Role"))
    log.changed(Apply(obj("DaemonSet"), "OperandCreated", "created DaemonSet"))
    log.warnings.append(("ExtendedResourceNotServed", "dropped"))
    assert log.events() == [
        ("Normal", "OperandCreated", "created DaemonSet; created DeviceClass; created Service"),
        ("Normal", "OperandPruned", "deleted Role"),
        ("Warning", "ExtendedResourceNotServed", "dropped"),
    ]


async def _events(env: Env) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await env.kube.get("/api/v1/namespaces/default/events"))["items"]
    return [e for e in items if e["involvedObject"].get("kind") == "GPUCluster"]


async def test_normal_events_for_operands_created_updated_and_pruned(env: Env) -> None:
    controller = await env.start_controller()
    await env.kube.request("POST", GC_PATH, body=GPUCLUSTER)
    await wait_ready(env)

    async def reasons(reason: str, text: str) -> Any:
        found = [e for e in await _events(env) if e["reason"] == reason and text in e["message"]]
        return found if found and all(e["type"] == "Normal" for e in found) else None

    created = await env.wait(lambda: reasons("OperandCreated", f"DaemonSet gpu-operator/{PLUGIN}"))
    assert f"created DaemonSet gpu-operator/{PLUGIN}" in created[0]["message"].split("; ")
    assert await reasons("OperandCreated", "DeviceClass gpu.nvidia.com")

    # A hand edit reverted is an update.
    plugin = await env.kube.get(f"{DS_PATH}/{PLUGIN}")
    patched = plugin["spec"]["template"]["spec"]["containers"][0] | {"image": "example.com/evil:1"}
    await env.kube.request("PATCH", f"{DS_PATH}/{PLUGIN}", content_type="application/strategic-merge-patch+json",
                           body={"spec": {"template": {"spec": {"containers": [patched]}}}})  # fmt: skip
    await env.wait(lambda: reasons("OperandUpdated", f"DaemonSet gpu-operator/{PLUGIN}"), timeout=10)

    # Turning compute domains off prunes their Deployment.
    await env.kube.request("PATCH", f"{GC_PATH}/gpu-cluster", body={"spec": {"draDriver": {"computeDomains": {"enabled": False}}}},
                           content_type=MERGE)  # fmt: skip
    pruned = await env.wait(lambda: reasons("OperandPruned", "Deployment gpu-operator/nvidia-dra-driver-controller"))
    assert "its operand is disabled" in pruned[0]["message"]

    # Steady state: no status writes, no events.
    await wait_ready(env)
    writes, passes = controller.reconciler.status.writes, controller.passes
    total = controller.reconciler.api.writes
    for _ in range(3):
        controller.resync()
        await env.wait(lambda p=passes: _true(controller.passes > p))
        passes = controller.passes
    assert controller.reconciler.status.writes == writes and controller.reconciler.api.writes == total


async def _true(value: bool) -> bool:
    return value


def test_the_inventory_is_counted_again_only_when_a_slice_or_claim_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reconcile pass while thousands of nodes are labelled (every 5 s, and each round of a pass)
    reuses the inventory: counting half a million devices again each time held the event loop
    from the label writes for as long (and as long again: a pass is followed by as long a pause)."""
    import gpucluster.controller.reconcile as reconcile
    from gpucluster.controller.plan import Prerequisites
    from gpucluster.sandbox.sim.gpunodes import node_slices

    counted: list[int] = []

    def counting(slices: Any, claims: Any = ()) -> dict[str, Any]:
        counted.append(1)
        return status_inventory(slices, claims)

    status_inventory = reconcile.inventory
    monkeypatch.setattr(reconcile, "inventory", counting)
    state = ClusterState()
    for i, resource_slice in enumerate(node_slices("gpu-0", "H100", 8)):
        state.upsert("ResourceSlice", {**resource_slice, "kind": "ResourceSlice", "metadata": {"name": f"s{i}"}})
    rec = Reconciler(Api(FakeKube()), state)
    first = rec.observe(Prerequisites(), {}).stock
    state.upsert("Node", {"kind": "Node", "metadata": {"name": "gpu-0", "labels": {"nvidia.com/dra": "true"}}})
    again = rec.observe(Prerequisites(), {}).stock
    assert first is again and first is not None and first["gpus"] == 8 and len(counted) == 1
    state.delete("ResourceSlice", {"metadata": {"name": "s0"}})
    after = rec.observe(Prerequisites(), {}).stock
    assert after is not None and after["gpus"] == 0 and len(counted) == 2
