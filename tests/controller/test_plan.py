"""The GPUCluster reconciler's decisions on plain data (controller/plan.py): no API, no sandbox."""

from __future__ import annotations

import copy
from typing import Any

from gpucluster.clusterstate import ADMIN_ACCESS_LABEL
from gpucluster.controller.drift import project
from gpucluster.controller.operands import OperandObjects
from gpucluster.controller.plan import (
    ADMIN_ACCESS_MARK,
    FINALIZER,
    HASH_ANNOTATION,
    OPERAND_CREATED,
    OPERAND_PRUNED,
    AddFinalizer,
    Apply,
    Delete,
    LabelNamespace,
    Observed,
    Prerequisites,
    RemoveFinalizer,
    UnlabelNamespace,
    UnlabelNode,
    _conflict_events,
    _ignored_clusters,
    _labelling_problem,
    _prerequisite_problem,
    _readiness,
    _render,
    _sync_operands,
    _workload_statuses,
    content_hash,
    key_of,
    plan,
    summarize,
    with_hash,
)
from gpucluster.controller.status import (
    DELETING,
    NOT_SINGLETON,
    OPERAND_CONFLICT,
    OPERANDS_NOT_READY,
    PERMISSION_DENIED,
    PREREQUISITE_NOT_MET,
    RECONCILE_FAILED,
)
from tests.controller.helpers import ENV, NAMESPACE, UID, manifest

Obj = dict[str, Any]
PLUGIN = ("DaemonSet", NAMESPACE, "nvidia-dra-driver-kubelet-plugin")


def gpucluster(**meta: Any) -> Obj:
    obj = manifest()
    obj["metadata"].update({"uid": UID, "generation": 1, "finalizers": [FINALIZER], **meta})
    return obj


def observed(cluster: Obj | None = None, **kwargs: Any) -> Observed:
    defaults: dict[str, Any] = {
        "clusters": [cluster or gpucluster()],
        "namespace": NAMESPACE,
        "env": ENV,
        "prerequisites": Prerequisites(version="v1.34.2"),
        "namespace_labels": {ADMIN_ACCESS_LABEL: "true"},
    }
    return Observed(**{**defaults, **kwargs})


class Absent(dict[Any, Any]):
    """Every live copy looked up and absent."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: Any) -> None:
        return None


def installed() -> tuple[dict[Any, Obj], dict[Any, str]]:
    """The cache and the applied hashes right after every operand was created as planned."""
    first = plan(observed(looked_up=Absent()))
    cached, applied = {}, {}
    for write in first.writes:
        assert isinstance(write, Apply)
        live = copy.deepcopy(write.obj)
        live["metadata"]["resourceVersion"] = "1"  # what the server adds is not drift
        cached[key_of(live)] = live
        applied[key_of(live)] = content_hash(project(write.obj, live))
    return cached, applied


def test_no_gpucluster_plans_nothing() -> None:
    out = plan(Observed(clusters=[], namespace=NAMESPACE))
    assert not out.writes and not out.statuses and not out.lookups and not out.active


def test_a_second_gpucluster_is_disabled_and_only_it() -> None:
    other = manifest()
    other["metadata"]["name"] = "second"
    out = plan(Observed(clusters=[other], namespace=NAMESPACE))
    assert [(s.cluster["metadata"]["name"], s.state, s.reason) for s in out.statuses] == [
        ("second", "disabled", NOT_SINGLETON)
    ]


def test_a_new_gpucluster_gets_its_finalizer_namespace_label_and_every_operand_created() -> None:
    cluster = gpucluster(finalizers=[])
    out = plan(observed(cluster, looked_up=Absent(), namespace_labels={}))
    kinds = [type(w) for w in out.writes]
    assert kinds.count(AddFinalizer) == 1 and kinds.count(LabelNamespace) == 1
    applies = [w for w in out.writes if isinstance(w, Apply)]
    assert PLUGIN in {key_of(a.obj) for a in applies}
    assert all(a.reason == OPERAND_CREATED and HASH_ANNOTATION in a.obj["metadata"]["annotations"] for a in applies)
    assert out.active


def test_objects_missing_from_the_cache_are_looked_up_before_anything_is_decided() -> None:
    out = plan(observed())
    assert PLUGIN in {key_of(o) for o in out.lookups}
    assert not out.statuses  # no status from a partial view


def test_steady_state_plans_no_writes() -> None:
    cached, applied = installed()
    out = plan(observed(cached=cached, owned=list(cached.values()), applied=applied))
    assert out.writes == [] and not out.lookups
    [status] = out.statuses
    assert status.reason == OPERANDS_NOT_READY  # the DaemonSets have no status yet


def test_a_hand_edit_of_an_applied_field_is_reverted() -> None:
    cached, applied = installed()
    edited = copy.deepcopy(cached[PLUGIN])
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "example.com/evil:1"
    cached[PLUGIN] = edited  # the hash annotation is unchanged: only the fields tell
    out = plan(observed(cached=cached, owned=list(cached.values()), applied=applied))
    [write] = out.writes
    assert isinstance(write, Apply) and write.drift and key_of(write.obj) == PLUGIN
    assert "made by someone else" in write.message


def test_an_object_with_an_operand_name_that_is_not_ours_is_never_written() -> None:
    admins = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": PLUGIN[2], "namespace": NAMESPACE}}
    out = plan(observed(looked_up=Absent(), cached={PLUGIN: admins}))
    assert PLUGIN not in {key_of(w.obj) for w in out.writes if isinstance(w, Apply | Delete)}
    [status] = out.statuses
    assert status.reason == OPERAND_CONFLICT and f"DaemonSet {NAMESPACE}/{PLUGIN[2]}" in status.message
    [event] = out.events
    assert event.type == "Warning" and event.reason == OPERAND_CONFLICT
    # Reported once: the next plan with the same conflict has no new event.
    again = plan(observed(looked_up=Absent(), cached={PLUGIN: admins}, previous_conflicts=out.conflicts))
    assert again.events == []


def test_a_disabled_operand_is_pruned_but_an_admins_object_is_not() -> None:
    cached, applied = installed()
    ours = copy.deepcopy(cached[PLUGIN])
    ours["metadata"]["name"] = "left-over"
    admins = {"kind": "Service", "metadata": {"name": "x", "namespace": NAMESPACE, "labels": {}}}
    owned = [*cached.values(), ours, admins]
    out = plan(observed(cached=cached, owned=owned, applied=applied))
    [delete] = out.writes
    assert isinstance(delete, Delete) and delete.obj is ours and delete.reason == OPERAND_PRUNED


def test_a_clusterpolicy_is_a_prerequisite_not_met_and_nothing_is_applied() -> None:
    policy = {"kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"}}
    out = plan(observed(policies=[policy], looked_up=Absent()))
    assert not [w for w in out.writes if isinstance(w, Apply)]
    [status] = out.statuses
    assert status.reason == PREREQUISITE_NOT_MET and "cluster-policy" in status.message


def test_unlabelled_gpu_nodes_keep_the_cluster_not_ready() -> None:
    cached, applied = installed()
    for key, obj in cached.items():
        if key[0] == "DaemonSet":
            obj["status"] = {"observedGeneration": 1, "desiredNumberScheduled": 0, "numberReady": 0}
        if key[0] == "Deployment":
            obj["status"] = {"observedGeneration": 1, "readyReplicas": 1, "updatedReplicas": 1, "availableReplicas": 1}
            obj["metadata"]["generation"] = 1
        obj["metadata"]["generation"] = 1
    ready = plan(observed(cached=cached, owned=list(cached.values()), applied=applied))
    assert [s.state for s in ready.statuses] == ["ready"], ready.statuses
    waiting = plan(observed(cached=cached, owned=list(cached.values()), applied=applied, unlabelled_nodes=3))
    [status] = waiting.statuses
    assert status.state == "notReady" and "DRA labels of 3 nodes" in status.message


def _allocated_claim(namespace: str, name: str, pod: str, driver: str = "gpu.nvidia.com") -> Obj:
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": driver, "pool": "n1", "device": "g0"}]}
            },
            "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}],
        },
    }


def test_deletion_drains_claim_consumers_first_then_drops_the_finalizer() -> None:
    cached, _ = installed()
    consumers = [
        o for o in cached.values() if o["kind"] == "DaemonSet" and o["spec"]["template"]["spec"].get("resourceClaims")
    ]
    classes = [o for o in cached.values() if o["kind"] == "DeviceClass"]
    assert consumers and classes
    deleting = gpucluster(deletionTimestamp="2026-01-01T00:00:00Z")
    out = plan(observed(deleting, owned=list(cached.values())))
    deletes = [w for w in out.writes if isinstance(w, Delete)]
    assert len(deletes) == len(out.writes)
    # The DeviceClasses first (nothing new is allocated), then the claim consumers, in the foreground.
    assert {key_of(w.obj) for w in deletes} == {key_of(c) for c in consumers + classes}
    assert {key_of(w.obj) for w in deletes if w.propagation == "Foreground"} == {key_of(c) for c in consumers}
    [status] = out.statuses
    assert status.reason == DELETING
    others = [o for o in cached.values() if o not in consumers and o not in classes]
    done = plan(observed(deleting, owned=others))
    assert [type(w) for w in done.writes] == [RemoveFinalizer]


def test_deletion_waits_while_pods_hold_nvidia_claims_then_deletes_our_templates() -> None:
    cached, _ = installed()
    rest = [o for o in cached.values() if o["kind"] not in ("DeviceClass",)]
    rest = [o for o in rest if not (o["kind"] == "DaemonSet" and o["spec"]["template"]["spec"].get("resourceClaims"))]
    deleting = gpucluster(deletionTimestamp="2026-01-01T00:00:00Z")
    claims = [
        _allocated_claim("team-a", "train-gpu-x1", "train"),
        _allocated_claim("team-b", "cd-x", "worker", driver="compute-domain.nvidia.com"),
        _allocated_claim("team-c", "other-x", "other", driver="example.com"),  # not a device of ours
        {"kind": "ResourceClaim", "metadata": {"name": "pending", "namespace": "team-d"}, "status": {}},
    ]
    template = {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpucluster-abc", "namespace": "team-a", "uid": "t1"},
    }
    waiting = plan(observed(deleting, owned=rest, claims=claims, templates=[template]))
    # The kubelet plugin must outlive every prepared claim: no finalizer removal, no template deletion yet.
    assert waiting.writes == []
    [status] = waiting.statuses
    assert status.reason == DELETING and status.state == "notReady"
    assert "2 pod(s) holding devices" in status.message
    assert "team-a/train (claim train-gpu-x1)" in status.message and "team-b/worker" in status.message
    assert "team-c" not in status.message
    assert [e.reason for e in waiting.events] == ["DrainingClaimConsumers"]
    assert waiting.requeue == 5.0
    # Once released (reservedFor empty), our templates go, then the finalizer.
    released = [{**c, "status": {**c["status"], "reservedFor": []}} for c in claims]
    done = plan(observed(deleting, owned=rest, claims=released, templates=[template]))
    assert [type(w) for w in done.writes] == [Delete, RemoveFinalizer]
    assert done.writes[0].obj is template  # type: ignore[union-attr]


def test_deletion_removes_the_labels_it_set_last() -> None:
    deleting = gpucluster(deletionTimestamp="2026-01-01T00:00:00Z")
    nodes = [
        {"kind": "Node", "metadata": {"name": "gpu-1", "labels": {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.deploy.dra-driver": "true",
            "nvidia.com/gpu.deploy.dcgm-exporter": "false",  # an admin's: stays
            "nvidia.com/gpu.deploy.dra-validator": "true",
        }}},
        {"kind": "Node", "metadata": {"name": "cpu-1", "labels": {"kubernetes.io/os": "linux"}}},
    ]  # fmt: skip
    # Pods still hold devices: nothing is unlabelled (the plugin's DaemonSet selects on the label).
    held = plan(observed(deleting, nodes=nodes, claims=[_allocated_claim("a", "c", "p")], namespace_annotations={}))
    assert not [w for w in held.writes if isinstance(w, UnlabelNode | UnlabelNamespace)]
    marked = {ADMIN_ACCESS_MARK: "true"}
    done = plan(observed(deleting, nodes=nodes, namespace_annotations=marked))
    assert [type(w) for w in done.writes] == [UnlabelNode, UnlabelNamespace, RemoveFinalizer]
    unlabel = done.writes[0]
    assert isinstance(unlabel, UnlabelNode) and unlabel.name == "gpu-1"
    assert unlabel.keys == ("nvidia.com/gpu.deploy.dra-driver", "nvidia.com/gpu.deploy.dra-validator")
    # A label we did not set (no mark) stays.
    unmarked = plan(observed(deleting, nodes=nodes, namespace_annotations={}))
    assert [type(w) for w in unmarked.writes] == [UnlabelNode, RemoveFinalizer]


def test_summaries_name_what_changed_within_the_length_limit() -> None:
    assert summarize(["created A"]) == "created A"
    assert summarize(["created A", "created B"]) == "created A; created B"
    long = summarize([f"created object-{i:03d}" for i in range(100)], limit=100)
    assert len(long) <= 100 and long.startswith("created object-000; ") and long.endswith("more")
    shown = long.count("created ")
    assert long.endswith(f"and {100 - shown} more")


def test_nodes_that_cannot_be_labelled_are_named_with_the_error() -> None:
    cached, applied = installed()
    errors = {"gpu-7": (403, 'nodes "gpu-7" is forbidden'), "gpu-3": (500, "boom")}
    out = plan(
        observed(cached=cached, owned=list(cached.values()), applied=applied, unlabelled_nodes=2, label_errors=errors)
    )
    [status] = out.statuses
    assert status.reason == "PermissionDenied" and status.state == "notReady"
    assert (
        status.message
        == 'cannot set the DRA labels of 2 nodes: node gpu-3: boom; node gpu-7: nodes "gpu-7" is forbidden'
    )
    only_500 = plan(
        observed(cached=cached, owned=list(cached.values()), applied=applied, label_errors={"gpu-3": (500, "boom")})
    )
    assert only_500.statuses[0].reason == "ReconcileFailed"


# ------------------------------------------------------------------ plan's steps, one concern each


def test_only_the_other_gpuclusters_not_being_deleted_are_ignored() -> None:
    second, leaving = manifest(), manifest()
    second["metadata"]["name"] = "second"
    leaving["metadata"].update({"name": "leaving", "deletionTimestamp": "2026-01-01T00:00:00Z"})
    statuses = _ignored_clusters([gpucluster(), second, leaving])
    assert [(s.cluster["metadata"]["name"], s.state, s.reason) for s in statuses] == [
        ("second", "disabled", NOT_SINGLETON)
    ]


def test_the_servers_problem_comes_before_a_clusterpolicy() -> None:
    policies = [{"kind": "ClusterPolicy", "metadata": {"name": n}} for n in ("b-policy", "a-policy")]
    assert _prerequisite_problem(Prerequisites(version="v1.34.2"), []) is None
    problem = _prerequisite_problem(Prerequisites(version="v1.34.2"), policies)
    assert problem is not None and problem.startswith("ClusterPolicy a-policy, b-policy exists: ")
    assert _prerequisite_problem(Prerequisites(problem="too old"), policies) == "too old"


def test_a_spec_that_cannot_be_rendered_gives_its_problem_instead_of_operands() -> None:
    rendered = _render(gpucluster(), observed())
    assert isinstance(rendered, list) and all(isinstance(o, OperandObjects) for o in rendered)
    invalid = gpucluster()
    invalid["spec"]["draDriver"]["version"] = "bad tag!"  # refused by validation
    assert _render(invalid, observed(invalid)) == (
        'spec.draDriver.version: Invalid value: "bad tag!": must be an image tag (letters, digits, _ . -; at most '
        "128) or a sha256: digest"
    )
    no_image = manifest(with_driver_image=False)  # valid, but the renderer finds no driver image
    no_image["metadata"]["uid"] = UID
    problem = _render(no_image, observed(no_image))
    assert isinstance(problem, str) and "no image for the DRA driver" in problem


def test_each_rendered_object_is_looked_up_created_left_alone_or_a_conflict() -> None:
    def obj(kind: str, name: str) -> Obj:
        owner = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "name": "gpu-cluster", "uid": UID}
        meta = {"name": name, "namespace": NAMESPACE, "ownerReferences": [{**owner, "controller": True}]}
        return {"apiVersion": "v1", "kind": kind, "metadata": meta}

    unknown, taken, new, same = (
        obj("Service", "unknown"),
        obj("ServiceAccount", "taken"),
        obj("DaemonSet", "new"),
        obj("Deployment", "same"),
    )
    admins = {"kind": "ServiceAccount", "metadata": {"name": "taken", "namespace": NAMESPACE}}
    operands = [OperandObjects("a", [unknown, taken]), OperandObjects("b", [new, same])]
    sync = _sync_operands(
        operands, observed(cached={key_of(taken): admins, key_of(same): with_hash(same)}, looked_up={key_of(new): None})
    )
    assert sync.lookups == [unknown]
    assert sync.conflicts == [f"ServiceAccount {NAMESPACE}/taken"]
    assert [(a.reason, key_of(a.obj)) for a in sync.applies] == [(OPERAND_CREATED, key_of(new))]
    assert sync.desired == {key_of(o) for o in (unknown, taken, new, same)}
    assert sync.workloads == [key_of(new), key_of(same)]


def test_conflicts_are_warned_of_one_event_each_in_name_order() -> None:
    events = _conflict_events(gpucluster(), frozenset({"Service b/y", "ClusterRole x"}))
    assert [(e.type, e.reason) for e in events] == [("Warning", OPERAND_CONFLICT)] * 2
    assert [e.message.split(" exists")[0] for e in events] == ["ClusterRole x", "Service b/y"]


def test_labelling_problems_name_three_nodes_and_count_the_rest() -> None:
    assert _labelling_problem({}, 0) is None
    assert _labelling_problem({}, 4) == (OPERANDS_NOT_READY, "waiting for the DRA labels of 4 nodes to be set")
    errors: dict[str, tuple[int | None, str]] = {f"gpu-{i}": (500, "boom") for i in range(5, 0, -1)}
    reason, message = _labelling_problem(errors, 5) or ("", "")
    assert reason == RECONCILE_FAILED
    assert message == (
        "cannot set the DRA labels of 5 nodes: node gpu-1: boom; node gpu-2: boom; node gpu-3: boom; and 2 more"
    )
    errors["gpu-9"] = (403, "forbidden")
    assert (_labelling_problem(errors, 0) or ("", ""))[0] == PERMISSION_DENIED


def test_a_workload_not_in_the_cache_is_not_ready() -> None:
    [status] = _workload_statuses([PLUGIN], observed())
    assert (status.kind, status.name, status.ready) == ("DaemonSet", PLUGIN[2], False)


def test_readiness_reports_conflicts_before_labels_and_labels_before_workloads() -> None:
    slices = [{"kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1",
               "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}]}}]  # fmt: skip
    seen = observed(label_errors={"gpu-1": (500, "boom")}, slices=slices)
    conflict = _readiness(gpucluster(), seen, ["ServiceAccount x/y"], [PLUGIN])
    assert (conflict.state, conflict.reason) == ("notReady", OPERAND_CONFLICT)
    assert conflict.inventory is not None and conflict.inventory["nodes"] == 1
    labels = _readiness(gpucluster(), seen, [], [PLUGIN])
    assert (labels.reason, labels.message) == (
        RECONCILE_FAILED,
        "cannot set the DRA labels of 1 nodes: node gpu-1: boom",
    )
    workloads = _readiness(gpucluster(), observed(), [], [PLUGIN])
    assert (workloads.state, workloads.reason) == ("notReady", OPERANDS_NOT_READY) and PLUGIN[2] in workloads.message
    assert _readiness(gpucluster(), observed(), [], []).state == "ready"
