"""The pending-claim explainer: only pods the scheduler gave up on, one allocator run per interval, one\nevent per reason; the allocator runs in the worker process."""

from __future__ import annotations

from typing import Any

from gpucluster.clusterstate import ClusterState
from gpucluster.controller.explain import Explainer
from gpucluster.dra.worker import AllocatorWorker
from tests.fixtures import load_fixture

GPU_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
             "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}  # fmt: skip
UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


def claim(name: str, product: str) -> dict[str, Any]:
    selector = {"cel": {"expression": f'device.attributes["gpu.nvidia.com"].productName == "{product}"'}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [selector]}}]}}}  # fmt: skip


def pod(name: str, claim_name: str, *, judged: bool = True) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending"}
    if judged:
        status["conditions"] = [UNSCHEDULABLE]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}], "containers": [{"name": "c"}]},
            "status": status}  # fmt: skip


def state(*objects: dict[str, Any]) -> ClusterState:
    return ClusterState.from_objects([GPU_CLASS, *load_fixture("h100-node"), *objects])


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def key(p: dict[str, Any]) -> str:
    return f"ml/{p['metadata']['name']}"


async def test_only_pods_the_scheduler_found_unschedulable_are_explained(worker: AllocatorWorker) -> None:
    judged, fresh = pod("judged", "b200"), pod("fresh", "b200", judged=False)
    explainer = Explainer(state(claim("b200", "NVIDIA B200"), judged, fresh), worker=worker)
    found, requeue = await explainer.explain(judged, key(judged))
    assert found is not None and requeue is None
    explained, claims, reason = found
    assert explained["metadata"]["name"] == "judged"
    assert [c["metadata"]["name"] for c in claims] == ["b200"]
    assert "8 selector #0 false" in reason
    assert await explainer.explain(fresh, key(fresh)) == (None, None)  # left to the scheduler


async def test_satisfiable_claims_are_left_to_the_scheduler(worker: AllocatorWorker) -> None:
    p = pod("p", "h100")
    explainer = Explainer(state(claim("h100", "NVIDIA H100 80GB HBM3"), p), worker=worker)
    assert await explainer.explain(p, key(p)) == (None, None)


async def test_one_event_per_reason_and_at_most_one_allocator_run_per_interval(worker: AllocatorWorker) -> None:
    clock = Clock()
    p = pod("p", "b200")
    explainer = Explainer(state(claim("b200", "NVIDIA B200"), p), min_interval=60, clock=clock, worker=worker)
    found, _ = await explainer.explain(p, key(p))
    assert found is not None
    clock.now = 30
    # Within the interval: not even computed; looked at again when it ends.
    assert await explainer.explain(p, key(p)) == (None, 30)
    clock.now = 120
    assert await explainer.explain(p, key(p)) == (None, None)  # computed again, same reason: no new event


async def test_a_pod_that_is_gone_or_scheduled_is_forgotten(worker: AllocatorWorker) -> None:
    clock = Clock()
    p = pod("p", "b200")
    explainer = Explainer(state(claim("b200", "NVIDIA B200"), p), min_interval=60, clock=clock, worker=worker)
    assert (await explainer.explain(p, key(p)))[0] is not None
    assert await explainer.explain(None, key(p)) == (None, None)
    found, _ = await explainer.explain(p, key(p))  # a namesake later is explained afresh
    assert found is not None


async def test_a_pod_is_explained_once_it_has_been_unschedulable_for_the_settle_time(worker: AllocatorWorker) -> None:
    # A burst's pods, found unschedulable a moment ago, are not explained yet: no allocator run,
    # no event; each is looked at again when its settle time is over.
    runs = {"n": 0}
    check = worker.check_async

    async def counted(*args: Any, **kwargs: Any) -> Any:
        runs["n"] += 1
        return await check(*args, **kwargs)

    worker.check_async = counted  # type: ignore[method-assign]
    wall = Clock()
    wall.now = 1_800_000_000.5
    p = pod("p", "b200")
    p["status"]["conditions"] = [{**UNSCHEDULABLE, "lastTransitionTime": "2027-01-15T08:00:00Z"}]  # 1.8e9 s
    explainer = Explainer(state(claim("b200", "NVIDIA B200"), p), worker=worker, settle=2.0, wall=wall)
    assert await explainer.explain(p, key(p)) == (None, 1.5)
    assert runs["n"] == 0
    wall.now = 1_800_000_002.0
    found, requeue = await explainer.explain(p, key(p))
    assert found is not None and requeue is None and runs["n"] >= 1
    unreadable = pod("q", "b200")
    unreadable["status"]["conditions"] = [{**UNSCHEDULABLE, "lastTransitionTime": "yesterday"}]
    assert (await explainer.explain(unreadable, key(unreadable)))[0] is not None  # explained at once
