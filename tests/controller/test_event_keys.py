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


def test_slices_and_claims_queue_the_gpucluster_and_the_pending_pods_with_claims() -> None:
    c = controller()
    c.state.upsert("Pod", dict(WAITING[0]))
    c._on_event("ADDED", {"kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": {"devices": []}})
    # ml/train has no claims, and no MIG profile came or went: no answer of its can change
    assert queued(c) == {"gpucluster": {SINGLETON_NAME}, "nodes": set(), "pods": {"ml/w0"}}
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


def gpu_slice(node: str, *devices: dict[str, Any], generation: int = 1, rv: str = "1") -> dict[str, Any]:
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu", "resourceVersion": rv, "labels": {"x": rv}},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "pool": {"name": node, "generation": generation,
                 "resourceSliceCount": 1}, "devices": list(devices)},
    }  # fmt: skip


def gpu(name: str, profile: str | None = None) -> dict[str, Any]:
    attributes: dict[str, Any] = {"type": {"string": "mig" if profile else "gpu"}}
    if profile:
        attributes["profile"] = {"string": profile}
    return {"name": name, "attributes": attributes}


LEGACY = {
    "kind": "Pod",
    "metadata": {"name": "legacy", "namespace": "ml"},
    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
}


def test_a_slice_event_that_changes_no_device_queues_nothing() -> None:
    # A relist or a label or managedFields write at 10k nodes must not re-explain every waiting pod.
    c = controller_with_waiting_pods()
    c.state.upsert("ResourceSlice", gpu_slice("gpu-0", gpu("gpu-0")))
    c._on_event("ADDED", gpu_slice("gpu-0", gpu("gpu-0")))
    c.pods, c.clusters = type(c.pods)("pods"), type(c.clusters)("gpucluster")  # drained
    changed_metadata = gpu_slice("gpu-0", gpu("gpu-0"), rv="2")
    c.state.upsert("ResourceSlice", changed_metadata)
    c._on_event("MODIFIED", changed_metadata)
    assert queued(c) == {"gpucluster": set(), "nodes": set(), "pods": set()}
    new_device = gpu_slice("gpu-0", gpu("gpu-0"), gpu("gpu-1"), generation=2, rv="3")
    c.state.upsert("ResourceSlice", new_device)
    c._on_event("MODIFIED", new_device)
    assert queued(c)["gpucluster"] == {SINGLETON_NAME}
    assert queued(c)["pods"] == {"ml/w0", "ml/w1", "ml/w2", "ml/named", "dev/named"}


def test_a_slice_queues_pods_without_claims_only_when_the_published_mig_profiles_change() -> None:
    c = controller_with_waiting_pods()
    c.state.upsert("Pod", dict(LEGACY))
    with_mig = gpu_slice("gpu-0", gpu("gpu-0-mig-0", profile="1g.10gb"))
    c.state.upsert("ResourceSlice", with_mig)
    c._on_event("ADDED", with_mig)
    assert "ml/legacy" in queued(c)["pods"]  # a profile was published: the declined pod's reason changes
    c.pods = type(c.pods)("pods")
    more = gpu_slice("gpu-0", gpu("gpu-0-mig-0", profile="1g.10gb"), gpu("gpu-0-mig-1", profile="1g.10gb"), rv="2")
    c.state.upsert("ResourceSlice", more)
    c._on_event("MODIFIED", more)
    assert "ml/legacy" not in queued(c)["pods"] and "ml/w0" in queued(c)["pods"]
    c.pods = type(c.pods)("pods")
    c.state.delete("ResourceSlice", more)
    c._on_event("DELETED", more)
    assert "ml/legacy" in queued(c)["pods"]  # the profile is gone again


def test_a_class_event_queues_the_pods_whose_claims_ask_for_it() -> None:
    c = controller_with_waiting_pods()
    asks = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}
    asks_mig = {
        "devices": {"requests": [{"name": "g", "firstAvailable": [{"name": "a", "deviceClassName": "mig.nvidia.com"}]}]}
    }
    shared = {**claim("shared"), "spec": asks}
    c.state.upsert("ResourceClaim", shared)
    for i, spec in ((0, asks), (1, asks_mig)):
        made = {**claim(f"w{i}-gpu"), "spec": spec}
        c.state.upsert("ResourceClaim", made)
        pod = dict(WAITING[i], status={"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"w{i}-gpu"}]})
        c.state.upsert("Pod", pod)
    gpu_class = {"kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"}, "spec": {"selectors": []}}
    c._on_event("ADDED", gpu_class)
    # w2's claim does not exist yet (what it will ask for is unknown); dev/named's "shared" is not in ml
    assert queued(c)["pods"] == {"ml/w0", "ml/named", "ml/w2", "dev/named"}
    c.pods = type(c.pods)("pods")
    c._on_event("MODIFIED", {**gpu_class, "metadata": {"name": "gpu.nvidia.com", "labels": {"a": "b"}}})
    assert queued(c)["pods"] == set()


def test_the_classes_a_claim_asks_for_in_each_api_version() -> None:
    from gpucluster.controller.affected import requested_classes

    v1 = {"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "x"}},
                                   {"name": "b", "firstAvailable": [{"name": "s", "deviceClassName": "y"}]}]}}  # fmt: skip
    v1beta1 = {"devices": {"requests": [{"name": "a", "deviceClassName": "z"}]}}
    assert requested_classes({"spec": v1}) == {"x", "y"}
    assert requested_classes({"spec": v1beta1}) == {"z"}
    assert requested_classes({"spec": {"devices": {"requests": "not a list"}}}) == set()
