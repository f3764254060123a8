"""The pending-claim explainer: only pods the scheduler gave up on, bounded work, one event per reason."""

from __future__ import annotations

from typing import Any

from controller.explain import Explainer
from gpucluster.clusterstate import ClusterState
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


def test_only_pods_the_scheduler_found_unschedulable_are_explained() -> None:
    cluster = state(claim("b200", "NVIDIA B200"), pod("judged", "b200"), pod("fresh", "b200", judged=False))
    [(explained, claims, reason)] = Explainer(cluster).explanations()
    assert explained["metadata"]["name"] == "judged"
    assert [c["metadata"]["name"] for c in claims] == ["b200"]
    assert "8 selector #0 false" in reason


def test_satisfiable_claims_are_left_to_the_scheduler() -> None:
    cluster = state(claim("h100", "NVIDIA H100 80GB HBM3"), pod("p", "h100"))
    assert Explainer(cluster).explanations() == []


def test_one_event_per_reason_and_at_most_one_allocator_run_per_interval() -> None:
    clock = Clock()
    cluster = state(claim("b200", "NVIDIA B200"), pod("p", "b200"))
    explainer = Explainer(cluster, min_interval=60, clock=clock)
    assert len(explainer.explanations()) == 1
    clock.now = 30
    assert explainer.explanations() == []  # within the interval: not even computed
    clock.now = 120
    assert explainer.explanations() == []  # computed again, same reason: no new event


def test_work_per_pass_is_bounded() -> None:
    pods = [pod(f"p{i}", "b200") for i in range(5)]
    cluster = state(claim("b200", "NVIDIA B200"), *pods)
    explainer = Explainer(cluster, max_per_pass=2)
    assert len(explainer.explanations()) == 2
    assert len(explainer.explanations()) == 2
    assert len(explainer.explanations()) == 1
