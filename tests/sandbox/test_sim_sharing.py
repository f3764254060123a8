"""The sandbox's scheduler allocates devices as kube-scheduler of the sandbox's version does: at
v1.36 (DRAConsumableCapacity on by default) pods share a GPU that allows multiple allocations,
each allocation written with its own shareID and what it consumes, until the capacity is used up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpucluster.sandbox.server import Sandbox
from gpucluster.sandbox.sim import SimulationOptions
from tests.sandbox.test_sim_pods import CLAIMS, PODS, create, eventually

Obj = dict[str, Any]
NS = "default"
GPU = "gpu.nvidia.com"
NODE = "gpu-node-0"


@pytest.fixture(params=["v1.36.0", "v1.35.0"])
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    options = SimulationOptions(
        nodes=1, gpus_per_node=1, slices=False, kubelet=False, workloads=False, jobs=False, endpoints=False
    )
    s = Sandbox(git_version=request.param, simulate=options)
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


async def _setup(s: Sandbox) -> None:
    await create(s, "resource.k8s.io", "deviceclasses", "", {
        "metadata": {"name": GPU},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{GPU}'"}}]},
    })  # fmt: skip
    device = {"name": "gpu-0", "allowMultipleAllocations": True, "capacity": {"memory": {"value": "80Gi"}}}
    await create(s, "resource.k8s.io", "resourceslices", "", {
        "metadata": {"name": f"{NODE}-gpu"},
        "spec": {"driver": GPU, "nodeName": NODE, "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                 "devices": [device]},
    })  # fmt: skip


async def _pod_with_memory(s: Sandbox, name: str, memory: str) -> None:
    request = {"name": "gpu", "exactly": {"deviceClassName": GPU, "capacity": {"requests": {"memory": memory}}}}
    await create(s, "resource.k8s.io", "resourceclaims", NS, {
        "metadata": {"name": name}, "spec": {"devices": {"requests": [request]}},
    })  # fmt: skip
    await create(s, "", "pods", NS, {
        "metadata": {"name": name},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                 "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}]},
    })  # fmt: skip


def _unschedulable(s: Sandbox, name: str) -> list[Obj]:
    pod = s.core.store.get(PODS, NS, name)
    conditions = (pod or {}).get("status", {}).get("conditions") or []
    return [c for c in conditions if c.get("reason") == "Unschedulable"]


def _node_of(s: Sandbox, name: str) -> str | None:
    pod = s.core.store.get(PODS, NS, name)
    return None if pod is None else pod["spec"].get("nodeName")


async def test_pods_share_a_gpu_while_its_memory_lasts_at_1_36(cluster: Sandbox) -> None:
    s = cluster
    await _setup(s)
    await _pod_with_memory(s, "a", "40Gi")
    await _pod_with_memory(s, "b", "40Gi")
    if s.git_version == "v1.35.0":
        # DRAConsumableCapacity is off before 1.36, and 1.35's default allocator (incubating) has
        # no consumable-capacity code: capacity requests are not read, the one GPU goes whole to
        # one pod, and the other waits (the oracle's v0.35.10 answers the same).
        await eventually(s, "one pod scheduled", lambda: _node_of(s, "a") or _node_of(s, "b"))
        first, second = ("a", "b") if _node_of(s, "a") else ("b", "a")
        await eventually(s, f"pod {second} unschedulable", lambda: _unschedulable(s, second))
        claim = s.core.store.get(CLAIMS, NS, first)
        assert claim is not None
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert result["device"] == "gpu-0" and "shareID" not in result and "consumedCapacity" not in result
        return
    await eventually(s, "both pods scheduled", lambda: _node_of(s, "a") and _node_of(s, "b"))
    results = []
    for name in ("a", "b"):
        claim = s.core.store.get(CLAIMS, NS, name)
        assert claim is not None
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (result["device"], result["consumedCapacity"]) == ("gpu-0", {"memory": "40Gi"})
        results.append(result)
    assert results[0]["shareID"] != results[1]["shareID"]
    # All 80Gi are consumed: a third pod waits, however little it asks.
    await _pod_with_memory(s, "c", "1Gi")
    [condition] = await eventually(s, "pod c unschedulable", lambda: _unschedulable(s, "c"))
    assert "capacity gpu.nvidia.com/memory: needs 1Gi, 0 of 80Gi left" in condition["message"]
    assert _node_of(s, "c") is None
    claim = s.core.store.get(CLAIMS, NS, "c")
    assert claim is not None and not (claim.get("status") or {}).get("allocation")
