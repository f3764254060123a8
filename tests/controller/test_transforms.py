"""What the controller caches (controller/transforms.py): the readers give the same answers on the
trimmed objects as on the objects the API server serves, and what no reader needs is gone.

Each test runs the controller's pure readers of one kind - the labeller's decisions, the
inventory, the published MIG profiles, which pods an event concerns, stranded and declined pods,
the provisioner's templates, an explanation - on the full objects and on their trimmed copies. A
reader that starts reading a field the transforms drop fails here; add the field to the transform
(and to its docstring).
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

from gpucluster.claimtemplates import published
from gpucluster.clusterstate import ClusterState, KubeObject
from gpucluster.controller.affected import pods_for_class_change, pods_for_slice_change, requested_classes
from gpucluster.controller.affected import spec_fingerprint as fingerprint
from gpucluster.controller.explain import claim_users, pending_on_claims, pod_claims
from gpucluster.controller.holders import allocated_devices, claim_holders
from gpucluster.controller.nodes import label_patch, nodes_with_claims
from gpucluster.controller.provision import Provisioner, wanted_templates
from gpucluster.controller.runtime import Controller
from gpucluster.controller.status import inventory
from gpucluster.controller.stranded import controller_uid, declined, stranded_resources
from gpucluster.controller.transforms import node_unchanged, transform_for, trim_node
from gpucluster.dra.allocator import explain
from gpucluster.dra.model import node_from_object
from gpucluster.kube.compact import Compactor
from gpucluster.policy import opted_out
from gpucluster.sandbox.sim.gpunodes import node_object, node_slices
from tests.controller.test_provision import stranded_pod, translated
from tests.fixtures import load_fixture
from tests.kit.fakekube import FakeKube

MANAGED = [{"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
GPU_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
             "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}  # fmt: skip
MIG_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "mig.nvidia.com"},
             "spec": {"selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].type == 'mig'"}}]}}  # fmt: skip
UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/4 nodes"}


def served(obj: Mapping[str, Any], n: int) -> KubeObject:
    """``obj`` as the API server serves it: uid, resourceVersion, managedFields and what else it carries."""
    out = copy.deepcopy(dict(obj))
    meta = out.setdefault("metadata", {})
    meta.setdefault("uid", f"00000000-0000-4000-8000-{n:012d}")
    meta.setdefault("resourceVersion", str(1000 + n))
    meta.setdefault("creationTimestamp", "2025-10-01T00:00:00Z")
    meta["managedFields"] = MANAGED
    meta.setdefault("annotations", {})[LAST_APPLIED] = json.dumps(obj)
    return out


def trimmed(objects: list[KubeObject]) -> list[KubeObject]:
    return [transform_for(str(o["kind"]))(copy.deepcopy(o)) for o in objects]


def nodes() -> list[KubeObject]:
    gpu = node_object("gpu-a")
    gpu["spec"] = {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}], "providerID": "aws:///i-1"}
    gpu["status"]["images"] = [{"names": ["nvcr.io/nvidia/cuda:12"], "sizeBytes": 1 << 30}]
    fresh = node_object("gpu-b", extra_labels={"nvidia.com/gpu.present": "false"})
    fresh["metadata"]["labels"].pop("nvidia.com/gpu.present", None)
    cpu = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-a", "labels": {
        "kubernetes.io/hostname": "cpu-a", "nvidia.com/gpu.deploy.dra-driver": "true",
        "nvidia.com/gpu.deploy.dcgm": "true", "nvidia.com/gpu.deploy.dcgm-exporter": "false"}},
        "status": {"capacity": {"cpu": "8", "nvidia.com/gpu": "0"}}}  # fmt: skip
    return [served(n, i) for i, n in enumerate([gpu, fresh, cpu, *load_fixture("nodes")])]


def slices() -> list[KubeObject]:
    found = [o for name in ("h100-node", "a100-mig-node", "gb200-node", "l4-node") for o in load_fixture(name)]
    out = []
    for i, o in enumerate(o for o in found if o.get("kind") == "ResourceSlice"):
        o = served(o, 100 + i)
        o["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]
        out.append(o)
    return out


def allocated_claim(resource_slice: Mapping[str, Any], pod: str) -> KubeObject:
    spec = resource_slice["spec"]
    device = spec["devices"][0]["name"]
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": f"{pod}-gpu", "namespace": "ml", "finalizers": ["resource.kubernetes.io/delete-protection"],
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": f"uid-{pod}"}]},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {
            "allocation": {"devices": {"results": [{"request": "gpu", "driver": spec["driver"],
                                                     "pool": spec["pool"]["name"], "device": device}]},
                           "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                               {"key": "metadata.name", "operator": "In", "values": [spec["nodeName"]]}]}]}},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}],
            "devices": [{"driver": spec["driver"], "pool": spec["pool"]["name"], "device": device,
                         "conditions": [{"type": "Ready", "status": "True"}], "data": {"big": "x" * 1000}}],
        },
    }  # fmt: skip
    return served(claim, 300)


def waiting_claim(name: str, product: str, *, count: int = 1) -> KubeObject:
    selector = {"cel": {"expression": f'device.attributes["gpu.nvidia.com"].productName == "{product}"'}}
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count, "selectors": [selector]}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": name, "namespace": "ml",
                          "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": f"{name}-pod", "uid": "u"}]},
             "spec": {"devices": {"requests": [request]}}, "status": {}}  # fmt: skip
    return served(claim, 400)


def noisy_pod(pod: Mapping[str, Any], n: int) -> KubeObject:
    """A pod as served: images, env, mounts, volumes, container statuses, IPs and times."""
    out = served(pod, 500 + n)
    spec = out.setdefault("spec", {})
    for c in spec.get("containers") or []:
        c.update(image="nvcr.io/nvidia/pytorch:25.01-py3", env=[{"name": "A", "value": "b" * 200}],
                 volumeMounts=[{"name": "data", "mountPath": "/data"}], imagePullPolicy="IfNotPresent")  # fmt: skip
    spec.update(volumes=[{"name": "data", "emptyDir": {}}], serviceAccountName="default", schedulerName="default-scheduler",
                tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}])  # fmt: skip
    status = out.setdefault("status", {"phase": "Pending"})
    status.update(qosClass="BestEffort", startTime="2025-10-01T00:00:00Z", hostIP="10.0.0.1",
                  containerStatuses=[{"name": "c", "ready": False, "restartCount": 0, "image": "x"}])  # fmt: skip
    return out


def pods(waiting: list[KubeObject]) -> list[KubeObject]:
    claimed = []
    for claim in waiting:
        name = claim["metadata"]["ownerReferences"][0]["name"]
        claimed.append({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "c"}], "resourceClaims": [{"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}]},
            "status": {"phase": "Pending", "conditions": [UNSCHEDULABLE]},
        })  # fmt: skip
    templated = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tpl", "namespace": "ml", "uid": "uid-tpl"},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
        "status": {"phase": "Pending", "conditions": [UNSCHEDULABLE],
                   "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "tpl-gpu-x1"}]},
    }  # fmt: skip
    too_many = stranded_pod("too-many", owned=True)
    too_many["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "100"
    mig = stranded_pod("mig")
    mig["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-7g.80gb": "1"}}
    sidecar = stranded_pod("sidecar", owned=True)
    sidecar["spec"]["initContainers"] = [{"name": "s", "restartPolicy": "Always",
                                          "resources": {"limits": {"nvidia.com/gpu": "1"}}}]  # fmt: skip
    everything = [
        *claimed,
        templated,
        stranded_pod("bare"),
        stranded_pod("owned", owned=True),
        too_many,
        mig,
        sidecar,
        stranded_pod("opted", labels={"gpucluster.nvidia.com/translate": "false"}),
        stranded_pod("opted-annotation", annotations={"gpucluster.nvidia.com/translate": "false"}),
        stranded_pod("mirror", annotations={"kubernetes.io/config.mirror": "x"}),
        stranded_pod("deleting", deletionTimestamp="2025-10-01T00:00:00Z"),
        translated("t1"),
        translated("t2", gpus=4),
        translated("t3", gpus=2),
    ]
    return [noisy_pod(p, i) for i, p in enumerate(everything)]


def cluster() -> tuple[list[KubeObject], list[KubeObject]]:
    """(every object as served, the waiting claims among them)."""
    found = slices()
    h100 = next(s for s in found if s["spec"]["driver"] == "gpu.nvidia.com" and s["spec"].get("nodeName"))
    waiting = [
        waiting_claim("b200", "NVIDIA B200"),
        waiting_claim("h100", "NVIDIA H100 80GB HBM3"),
        waiting_claim("h100x8", "NVIDIA H100 80GB HBM3", count=8),
    ]
    classes = [served(GPU_CLASS, 200), served(MIG_CLASS, 201)]
    objects = [*nodes(), *found, *classes, allocated_claim(h100, "holder"), *waiting]
    return [*objects, *pods(waiting)], waiting


def of(objects: list[KubeObject], kind: str) -> list[KubeObject]:
    return [o for o in objects if o["kind"] == kind]


def same(full: list[KubeObject], small: list[KubeObject], answer: Callable[[KubeObject], Any]) -> None:
    assert len(full) == len(small)
    for f, s in zip(full, small, strict=True):
        assert answer(s) == answer(f), f["metadata"]["name"]


def test_the_labeller_and_the_deletion_decide_alike() -> None:
    full = of(cluster()[0], "Node")
    small = trimmed(full)
    for mode in ("dra", None):
        for in_use in (True, False):
            same(full, small, lambda n, mode=mode, in_use=in_use: label_patch(n, mode, in_use))
    same(full, small, lambda n: node_from_object(n, 0))  # what explanations match node selectors on
    assert {label_patch(n, "dra", False).get("nvidia.com/gpu.present") for n in full} == {"true", None}


def test_nodes_keep_name_resource_version_and_labels_only() -> None:
    for node in trimmed(of(cluster()[0], "Node")):
        assert set(node) == {"apiVersion", "kind", "metadata"}
        assert set(node["metadata"]) == {"name", "resourceVersion", "labels"}


def _without_version(node: KubeObject) -> KubeObject:
    return {**node, "metadata": {k: v for k, v in node["metadata"].items() if k != "resourceVersion"}}


def test_a_node_whose_status_alone_changed_is_unchanged_as_kept() -> None:
    """A heartbeat (status, resourceVersion; here annotations and spec too) changes nothing kept; a
    label, a name or a kind does; and node_unchanged agrees with trim_node on every pair."""
    variants = []
    for node in nodes():
        beat = copy.deepcopy(node)
        beat["metadata"]["resourceVersion"] = "99999"
        beat["metadata"]["annotations"] = {"node.alpha.kubernetes.io/ttl": "0"}
        beat["spec"] = {"unschedulable": True}
        beat["status"] = {
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-06T10:00:00Z"}]
        }
        assert node_unchanged(trim_node(copy.deepcopy(node)), beat), node["metadata"]["name"]
        relabelled = copy.deepcopy(beat)
        relabelled["metadata"]["labels"] = {**relabelled["metadata"].get("labels", {}), "nvidia.com/dra": "true"}
        unlabelled = copy.deepcopy(beat)
        unlabelled["metadata"].pop("labels", None)
        renamed = copy.deepcopy(beat)
        renamed["metadata"]["name"] += "-x"
        other_kind = {**copy.deepcopy(beat), "apiVersion": "v2"}
        for changed in (relabelled, renamed, other_kind):
            assert not node_unchanged(trim_node(copy.deepcopy(node)), changed)
        variants += [node, beat, relabelled, unlabelled, renamed, other_kind]
    for a in variants:
        cached = trim_node(copy.deepcopy(a))
        for b in variants:
            same_kept = _without_version(cached) == _without_version(trim_node(copy.deepcopy(b)))
            assert node_unchanged(cached, b) == same_kept


def test_the_inventory_published_profiles_and_slice_fingerprints_are_alike() -> None:
    objects, _ = cluster()
    full, small = of(objects, "ResourceSlice"), trimmed(of(objects, "ResourceSlice"))
    claims, small_claims = of(objects, "ResourceClaim"), trimmed(of(objects, "ResourceClaim"))
    assert inventory(small, small_claims) == inventory(full, claims)
    assert inventory(full, claims)["allocated"] == 1
    mig = published(ClusterState.from_objects(full)).mig_profiles
    assert mig and published(ClusterState.from_objects(small)).mig_profiles == mig
    same(full, small, fingerprint)
    same(full, small, lambda s: s["spec"])
    for s in small:
        assert set(s["metadata"]) == {"name", "resourceVersion"}


def test_an_explanation_is_the_same_on_trimmed_objects() -> None:
    objects, waiting = cluster()
    kinds = ("ResourceSlice", "DeviceClass", "Node")
    held = [c for c in of(objects, "ResourceClaim") if (c.get("status") or {}).get("allocation")]
    full = [o for o in objects if o["kind"] in kinds] + held
    small = trimmed(full)
    answers = []
    for claim in waiting:
        for empty in (False, True):
            expected = explain([claim], full, assume_empty=empty).one_line()
            got = explain(trimmed([claim]), small, assume_empty=empty).one_line()
            assert got == expected
            answers.append(expected)
    assert any("selector #0 false" in a for a in answers)  # some claims do not fit, and say why


def test_stranded_declined_and_claim_readers_decide_alike() -> None:
    objects, _ = cluster()
    full_state = ClusterState.from_objects(objects)
    small_state = ClusterState.from_objects(trimmed(objects))
    full, small = of(objects, "Pod"), trimmed(of(objects, "Pod"))
    readers: list[Callable[[KubeObject, ClusterState], Any]] = [
        lambda p, s: stranded_resources(p, s, "gpu-operator"),
        lambda p, s: declined(p, s),
        lambda p, s: pending_on_claims(p),
        lambda p, s: [c["metadata"]["name"] for c in pod_claims(p, s) or []],
        lambda p, s: wanted_templates(p, s),
        lambda p, s: controller_uid(p),
        lambda p, s: opted_out(p, s.namespace_labels("ml")),
    ]
    for f, s in zip(full, small, strict=True):
        assert [read(s, small_state) for read in readers] == [read(f, full_state) for read in readers]
    by_name = {p["metadata"]["name"]: p for p in full}
    stranded = [p["metadata"]["name"] for p in full if stranded_resources(p, full_state, "gpu-operator")]
    assert stranded == ["bare", "owned", "too-many", "mig", "sidecar"]
    assert declined(by_name["too-many"], full_state) and declined(by_name["mig"], full_state)
    assert not declined(by_name["bare"], full_state)
    assert all(wanted_templates(by_name[name], full_state)[0] for name in ("t1", "t2", "t3"))
    # Which pods a claim, slice or class event concerns.
    claims, small_claims = of(objects, "ResourceClaim"), trimmed(of(objects, "ResourceClaim"))
    for f, s in zip(claims, small_claims, strict=True):
        assert claim_users(s, small) == claim_users(f, full)
        assert requested_classes(s) == requested_classes(f)
        assert allocated_devices(s) == allocated_devices(f)
    assert claim_holders(small_claims) == claim_holders(claims) != []
    assert nodes_with_claims(small_claims) == nodes_with_claims(claims) != set()
    assert list(pods_for_slice_change(small, profiles_changed=False)) == list(
        pods_for_slice_change(full, profiles_changed=False)
    )
    for name in ("gpu.nvidia.com", "mig.nvidia.com"):
        assert list(pods_for_class_change(name, small, small_state)) == list(
            pods_for_class_change(name, full, full_state)
        )


def test_events_name_the_same_object() -> None:
    objects, _ = cluster()
    involved = ("namespace", "name", "uid", "resourceVersion")
    for kind in ("Pod", "ResourceClaim"):
        full = of(objects, kind)
        same(full, trimmed(full), lambda o: (o["apiVersion"], o["kind"], *(o["metadata"].get(k) for k in involved)))


def test_pods_drop_what_no_reader_needs() -> None:
    pod = trimmed([noisy_pod(translated("t"), 0)])[0]
    assert set(pod["metadata"]["annotations"]) == {
        "gpucluster.nvidia.com/translated-from",
        "gpucluster.nvidia.com/claim-templates",
    }
    assert "managedFields" not in pod["metadata"]
    assert set(pod["spec"]) == {"containers", "resourceClaims"}
    assert set(pod["spec"]["containers"][0]) == {"name", "resources"}
    assert set(pod["status"]) == {"phase"}


def test_claims_drop_device_status() -> None:
    claim = trimmed([c for c in cluster()[0] if c["kind"] == "ResourceClaim"][:1])[0]
    assert set(claim["status"]) == {"allocation", "reservedFor"}
    assert set(claim["metadata"]) == {"name", "namespace", "uid", "resourceVersion", "ownerReferences"}


def test_other_kinds_only_lose_managed_fields() -> None:
    device_class = transform_for("DeviceClass")(served(GPU_CLASS, 1))
    assert "managedFields" not in device_class["metadata"] and device_class["metadata"]["annotations"]


# ------------------------------------------------------------------------------ compaction


def test_repeated_strings_and_small_maps_are_held_once() -> None:
    first, second = trimmed([served(node_slices(name, "H100", 8)[0], 0) for name in ("gpu-a", "gpu-b")])
    a, b = first["spec"]["devices"][0], second["spec"]["devices"][0]
    assert a["attributes"]["type"] is b["attributes"]["type"]  # one {"string": "gpu"}
    assert a["attributes"]["productName"]["string"] is sys.intern("NVIDIA H100 80GB HBM3")
    assert type(a["attributes"]) is dict and type(a["attributes"]["type"]) is dict  # plain maps, as readers expect
    assert a["attributes"] is not b["attributes"]  # larger maps are the object's own


def test_compaction_keeps_values_and_their_types() -> None:
    c = Compactor()
    value = {"a": [{"int": 1}, {"bool": True}, {"float": 1.0}, {"int": True}, {"x": {"y": "z"}}, {"l": [1]}], "n": None}
    out = c(copy.deepcopy(value))
    assert out == value
    assert [type(next(iter(m.values()))) for m in out["a"][:4]] == [int, bool, float, bool]
    assert c({"x": {"y": "z"}}) is out["a"][4] and c({"l": [1]}) is not out["a"][5]


def test_shared_maps_no_object_holds_are_dropped() -> None:
    c = Compactor(prune_at=10)
    kept = [c({"uuid": {"string": f"GPU-{i}"}}) for i in range(3)]
    for i in range(100):
        c({"uuid": {"string": f"gone-{i}"}})  # held by nothing once compacted
    assert len(c) < 30
    c.prune()
    assert len(c) == 6  # the three kept maps and the three they hold
    assert [c({"uuid": {"string": f"GPU-{i}"}}) for i in range(3)] == kept
    assert all(c({"uuid": {"string": f"GPU-{i}"}}) is kept[i] for i in range(3))


# ------------------------------------------------------------------------------ the caches


async def test_the_controller_caches_trimmed_objects_and_the_provisioner_reads_its_slices() -> None:
    objects, _ = cluster()
    # No pod waits on claims here: nothing starts the allocator's worker process.
    kube = FakeKube([o for o in objects if o["kind"] in ("Node", "ResourceSlice") or o["metadata"]["name"] == "t1"])
    controller = Controller(kube, leader_election=False)
    assert isinstance(controller.provisioner, Provisioner)
    assert controller.provisioner.cluster is controller.state
    assert "ResourceSlice" not in {r.resource.kind for r in controller.provisioner.reflectors}
    stop = asyncio.Event()
    task = asyncio.create_task(controller.run(stop))
    async with asyncio.timeout(10):
        while not (controller.state.synced(["Node", "ResourceSlice", "Pod"]) and controller.provisioner.synced()):
            await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 10)
    node = controller.state.get("Node", "gpu-a")
    assert node is not None and set(node["metadata"]) == {"name", "resourceVersion", "labels"}
    assert "status" not in node
    for s in controller.state.list("ResourceSlice"):
        assert set(s["metadata"]) == {"name", "resourceVersion"}
    pod = controller.provisioner.state.get("Pod", "t1", "ml")
    assert pod is not None and LAST_APPLIED not in pod["metadata"]["annotations"]


async def test_a_node_heartbeat_costs_the_controller_no_cache_write_and_queues_no_work() -> None:
    """Its Node reflector drops a status-only update before trimming (controller/transforms.py
    ``node_unchanged``): no handler runs, no key is queued, and the cached node is the same object."""
    node = nodes()[0]
    kube = FakeKube([node])
    controller = Controller(kube, leader_election=False)
    told: list[tuple[str, KubeObject]] = []
    on_event = controller._on_event
    controller._on_event = lambda type_, obj: (told.append((type_, obj)), on_event(type_, obj))[1]  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(controller.run(stop))
    name = node["metadata"]["name"]
    async with asyncio.timeout(10):
        while not controller.state.synced(["Node"]):
            await asyncio.sleep(0.01)
        cached, generation = controller.state.get("Node", name), controller.state.kind_generation("Node")
        beat = copy.deepcopy(node)
        beat["status"]["conditions"] = [
            {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-06T10:00:00Z"}
        ]
        kube.put(beat)
        node_reflector = next(r for r in controller.reflectors if r.resource.kind == "Node")
        while not node_reflector.skipped:
            await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert told == [] and controller.state.get("Node", name) is cached
    assert controller.state.kind_generation("Node") == generation
    assert set(controller.nodes.keys()) == set() and controller.labeller.pending == set()
