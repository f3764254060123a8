"""Which work a watch event queues (controller/runtime.py): the key of what it touches, not a pass
over the cluster. Plain data; no API server."""

from __future__ import annotations

from typing import Any

from gpucluster.api.gpucluster import SINGLETON_NAME
from gpucluster.controller.runtime import Controller

GPU_NODE = {"kind": "Node", "metadata": {"name": "gpu-0", "labels": {"nvidia.com/gpu.present": "true"}}}
NEW_GPU_NODE = {
    "kind": "Node",
    "metadata": {"name": "gpu-1", "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"}},
}
CPU_NODE = {"kind": "Node", "metadata": {"name": "cpu-0", "labels": {}}}
POD = {"kind": "Pod", "metadata": {"name": "train", "namespace": "ml"}}


def controller() -> Controller:
    c = Controller(kube=None, leader_election=False)  # type: ignore[arg-type]
    for obj in (GPU_NODE, NEW_GPU_NODE, CPU_NODE, POD):
        c.state.upsert(str(obj["kind"]), dict(obj))
    c.reconciler.operands.active = True  # operands rendered: nodes are labelled
    return c


def queued(c: Controller) -> dict[str, set[Any]]:
    return {name: set(q.keys()) for name, q in (("gpucluster", c.clusters), ("nodes", c.nodes), ("pods", c.pods))}


def test_a_labelled_nodes_heartbeat_queues_nothing() -> None:
    c = controller()
    c._on_event("MODIFIED", GPU_NODE)
    assert queued(c) == {"gpucluster": set(), "nodes": set(), "pods": set()}
    assert c.labeller.pending == set()


def test_a_node_that_needs_labels_queues_only_its_own_key_and_counts_as_pending() -> None:
    c = controller()
    c._on_event("ADDED", NEW_GPU_NODE)
    assert queued(c) == {"gpucluster": set(), "nodes": {"gpu-1"}, "pods": set()}
    assert c.reconciler.peers.unlabelled_nodes() == 1


def test_nodes_are_not_labelled_before_the_operands_render() -> None:
    c = controller()
    c.reconciler.operands.active = False
    c._on_event("ADDED", NEW_GPU_NODE)
    assert queued(c)["nodes"] == set()


def test_a_pod_event_queues_that_pod() -> None:
    c = controller()
    c._on_event("MODIFIED", POD)
    assert queued(c) == {"gpucluster": set(), "nodes": set(), "pods": {"ml/train"}}


def test_slices_and_claims_queue_the_gpucluster_and_the_pending_pods() -> None:
    c = controller()
    c._on_event("ADDED", {"kind": "ResourceSlice", "metadata": {"name": "s"}})
    assert queued(c) == {"gpucluster": {SINGLETON_NAME}, "nodes": set(), "pods": {"ml/train"}}
    claim = {
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml"},
        "status": {"allocation": {"devices": {"results": [{"driver": "gpu.nvidia.com", "pool": "cpu-0"}]}}},
    }
    c._on_event("MODIFIED", claim)
    assert queued(c)["nodes"] == set()  # cpu-0 has no deploy label to keep or drop


WAITING = [
    {"kind": "Pod", "metadata": {"name": f"w{i}", "namespace": "ml"}, "spec": {"resourceClaims": [{"name": "gpu"}]}}
    for i in range(3)
]
NAMED = {
    "kind": "Pod",
    "metadata": {"name": "named", "namespace": "ml"},
    "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}]},
}
OTHER_NS = {
    "kind": "Pod",
    "metadata": {"name": "named", "namespace": "dev"},
    "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}]},
}


def claim(name: str, owner: str | None = None, devices: tuple[str, ...] = (), **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml"}
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": owner, "apiVersion": "v1", "uid": "u"}]
    results = [{"driver": "gpu.nvidia.com", "pool": "gpu-0", "device": d, "request": "gpu"} for d in devices]
    if results:
        status["allocation"] = {"devices": {"results": results}}
    return {"kind": "ResourceClaim", "metadata": meta, "status": status}


def controller_with_waiting_pods() -> Controller:
    c = Controller(kube=None, leader_election=False)  # type: ignore[arg-type]
    for pod in (*WAITING, NAMED, OTHER_NS):
        c.state.upsert("Pod", dict(pod))
    return c


def test_a_new_claim_queues_only_the_pods_that_use_it() -> None:
    # A burst of 200 pods makes 200 claims: each claim's event is its own pod's business, not a
    # pass over every waiting pod (200 x 200 explanations).
    c = controller_with_waiting_pods()
    c._on_event("ADDED", claim("w1-gpu-abcde", owner="w1"))
    assert queued(c)["pods"] == {"ml/w1"}
    c = controller_with_waiting_pods()
    c._on_event("ADDED", claim("shared"))  # named by one pod of ml (the same name in dev is another claim)
    assert queued(c)["pods"] == {"ml/named"}
    c = controller_with_waiting_pods()
    c._on_event("MODIFIED", claim("shared", reservedFor=[{"resource": "pods", "name": "w2", "uid": "u2"}]))
    assert queued(c)["pods"] == {"ml/named", "ml/w2"}


def test_devices_taken_or_freed_queue_every_waiting_pod() -> None:
    c = controller_with_waiting_pods()
    c._on_event("MODIFIED", claim("w0-gpu-abcde", owner="w0", devices=("gpu-3",)))  # taken
    everyone = {"ml/w0", "ml/w1", "ml/w2", "ml/named", "dev/named"}
    assert queued(c)["pods"] == everyone
    c2 = controller_with_waiting_pods()
    c2._claim_devices = dict(c._claim_devices)
    c2._on_event("MODIFIED", claim("w0-gpu-abcde", owner="w0", devices=("gpu-3",), reservedFor=[]))  # same devices
    assert queued(c2)["pods"] == {"ml/w0"}
    c2._on_event("DELETED", claim("w0-gpu-abcde", owner="w0", devices=("gpu-3",)))  # freed
    assert queued(c2)["pods"] == everyone


def test_owned_objects_and_other_namespaces() -> None:
    c = controller()
    c._on_event("MODIFIED", {"kind": "Namespace", "metadata": {"name": "ml"}})
    assert queued(c)["gpucluster"] == set()
    c._on_event("MODIFIED", {"kind": "DaemonSet", "metadata": {"name": "x", "namespace": "gpu-operator"}})
    assert queued(c)["gpucluster"] == {SINGLETON_NAME}


def test_a_gpucluster_status_change_does_not_start_a_reconcile_but_a_spec_change_does() -> None:
    c = controller()
    cluster = {"kind": "GPUCluster", "metadata": {"name": SINGLETON_NAME, "uid": "u", "generation": 1}}
    c._on_event("ADDED", cluster)
    assert queued(c)["gpucluster"] == {SINGLETON_NAME}
    c.clusters = type(c.clusters)("gpucluster")  # drained
    c._on_event("MODIFIED", {**cluster, "status": {"state": "ready"}})  # our own status write, read back
    assert queued(c)["gpucluster"] == set()
    c._on_event("MODIFIED", {**cluster, "metadata": {**cluster["metadata"], "generation": 2}})
    assert queued(c)["gpucluster"] == {SINGLETON_NAME}


def test_a_deallocated_claim_rechecks_the_node_it_was_allocated_on() -> None:
    c = controller()
    c.state.upsert(
        "Node",
        {"kind": "Node", "metadata": {"name": "old-gpu", "labels": {"nvidia.com/gpu.deploy.dra-driver": "true"}}},
    )
    allocated = {
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml"},
        "status": {
            "reservedFor": [{"resource": "pods", "name": "p"}],
            "allocation": {"devices": {"results": [{"driver": "gpu.nvidia.com", "pool": "old-gpu"}]}},
        },
    }
    c.state.upsert("ResourceClaim", allocated)
    c._on_event("ADDED", allocated)
    assert queued(c)["nodes"] == set()  # in use: the driver label stays
    released = {"kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "ml"}, "status": {}}
    c.state.upsert("ResourceClaim", released)
    c._on_event("MODIFIED", released)  # reservedFor and allocation cleared in one update
    assert queued(c)["nodes"] == {"old-gpu"}  # now its driver label can go


def test_a_relist_forgets_pending_nodes_that_are_gone() -> None:
    c = controller()
    c._on_event("ADDED", NEW_GPU_NODE)
    assert c.labeller.pending == {"gpu-1"}
    c.state.replace("Node", [dict(GPU_NODE), dict(CPU_NODE)])  # deleted while the watch was down
    c._on_list("Node")
    assert c.labeller.pending == set()
