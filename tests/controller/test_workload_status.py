"""A DaemonSet is ready only when its status covers every node it should run on."""

from __future__ import annotations

from typing import Any

from gpucluster.controller.status import workload_status

LABEL = "nvidia.com/gpu.deploy.dcgm-exporter"


def node(name: str, labels: dict[str, str], taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints or []}}


def daemonset(desired: int, available: int) -> dict[str, Any]:
    return {
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-dcgm-exporter", "generation": 1},
        "spec": {"template": {"spec": {"nodeSelector": {LABEL: "true"}}}},
        "status": {"observedGeneration": 1, "desiredNumberScheduled": desired,
                   "updatedNumberScheduled": available, "numberAvailable": available},
    }  # fmt: skip


NODES = [
    node("gpu-0", {LABEL: "true"}),
    node("gpu-1", {LABEL: "true"}),
    node("cpu-0", {}),
    node("tainted", {LABEL: "true"}, [{"key": "maintenance", "effect": "NoSchedule"}]),
]


def test_a_fresh_daemonset_counting_no_node_is_not_ready() -> None:
    assert workload_status(daemonset(0, 0)).ready  # rollout status alone says complete
    status = workload_status(daemonset(0, 0), NODES)
    assert not status.ready and status.detail == "0/2 nodes scheduled"


def test_covering_every_node_it_should_run_on_is_ready() -> None:
    # The tainted node is not expected: the DaemonSet does not tolerate its taint.
    assert workload_status(daemonset(2, 2), NODES).ready
    assert not workload_status(daemonset(2, 1), NODES).ready
