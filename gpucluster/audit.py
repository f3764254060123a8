"""Find the workloads of a live cluster that still request GPUs through extended resources.

The core of ``gpucluster audit``: a pure function of the objects listed from the cluster
(:func:`audit`), returning one :class:`Finding` per workload.

What counts
-----------
An object is *legacy* when its pod spec (a Pod's ``spec``; the pod template of a ReplicaSet,
Deployment, StatefulSet, DaemonSet or Job; a CronJob's job template) asks for a GPU-looking
extended resource (``nvidia.com/gpu*``, ``nvidia.com/mig-*``, the names the webhook looks at) in
any container's limits or requests. A workload's template counts even when it runs no pod (a
Deployment scaled to 0 comes back with legacy pods when scaled up).

Owner chains and grouping
-------------------------
Owners are followed through ``metadata.ownerReferences`` (the controller reference, else the
first), Pod -> ReplicaSet -> Deployment, Pod -> Job -> CronJob, Pod -> StatefulSet ... An owner
that was not listed (a custom resource: PyTorchJob, Workflow, ...) ends the chain. Legacy objects
are reported under the highest legacy object of their chain, so a Deployment, its ReplicaSets and
their pods are one finding. An owner whose template is already migrated stops the climb: its
legacy ReplicaSet (a rollout in progress) is reported on its own, or not at all when it runs no
pod (an old revision kept for rollbacks). Pods whose owner was not listed are reported under that
owner.

What the webhook would do
-------------------------
The webhook only acts when a pod is created. For each finding a Pod is synthesised from the
workload's pod template (a live pod's metadata and spec for bare pods and custom-resource owners)
and handed to ``decide``, which answers ``(action, reason)``: ``translate`` (new pods get DRA
claims), ``warn`` (audit mode: only warnings) or ``skip``. The core never imports a shell, so
the webhook's own admission code is passed in: :func:`webhook.audit.decider` runs the pod through
it with the cluster's Namespaces, DeviceClasses, ResourceClaimTemplates and ResourceClaims.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpucluster.clusterstate import ClusterState, metadata
from gpucluster.jsonutil import clone
from gpucluster.migrate import KSERVE_FRAMEWORKS, format_path
from gpucluster.policy import WEBHOOK_CONFIG
from gpucluster.translate import parse_quantity

__all__ = [
    "CUSTOM_KINDS",
    "WORKLOAD_KINDS",
    "Decide",
    "Finding",
    "Ref",
    "audit",
    "custom_pod_templates",
    "is_custom_workload",
    "pod_template",
    "requested_gpus",
]

# What the webhook does when this pod (synthesised from a workload) is created in this namespace of
# this cluster view: (action, reason), action one of translate, warn, skip.
Decide = Callable[[dict[str, Any], str, ClusterState], tuple[str, str]]

# Kinds whose pod spec the audit reads, and where their pod template is.
WORKLOAD_KINDS: Mapping[str, tuple[str, ...]] = {
    "Pod": (),
    "ReplicaSet": ("spec", "template"),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
# Custom resources that carry pod templates (the kinds ``gpucluster migrate`` rewrites), by API
# group: listed directly, so a suspended job, a RayCluster scaled to zero or a TrainingRuntime no
# TrainJob has started yet is seen before any pod exists.
CUSTOM_KINDS: Mapping[str, frozenset[str]] = {
    "kubeflow.org": frozenset({"PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob", "Notebook"}),
    "trainer.kubeflow.org": frozenset({"TrainingRuntime", "ClusterTrainingRuntime"}),
    "ray.io": frozenset({"RayCluster", "RayJob", "RayService"}),
    "jobset.x-k8s.io": frozenset({"JobSet"}),
    "leaderworkerset.x-k8s.io": frozenset({"LeaderWorkerSet"}),
    "argoproj.io": frozenset({"Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"}),
    "serving.kserve.io": frozenset(
        {"InferenceService", "LLMInferenceService", "ServingRuntime", "ClusterServingRuntime"}
    ),
    "batch.volcano.sh": frozenset({"Job"}),
}
# KServe predictor/explainer framework fields: each inlines the main container.
_KSERVE_FRAMEWORKS = frozenset(KSERVE_FRAMEWORKS)
_KIND_ORDER = {kind: i for i, kind in enumerate(("Pod", "ReplicaSet", "Job", "Deployment", "StatefulSet", "DaemonSet"))}


@dataclass(frozen=True)
class Ref:
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name}


@dataclass
class Finding:
    """A workload that still requests GPUs through extended resources."""

    namespace: str
    kind: str
    name: str
    chain: list[Ref]  # from the lowest object (a pod when one runs) up to the root owner
    pods: int  # live pods that still hold extended-resource GPU requests
    translated_pods: int  # live pods the webhook already translated
    gpus: dict[str, str]  # resource -> quantity per pod
    action: str  # translate | warn | skip
    reason: str
    notes: list[str] = field(default_factory=list)

    @property
    def workload(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def chain_kinds(self) -> str:
        return " -> ".join(ref.kind for ref in self.chain)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "kind": self.kind,
            "name": self.name,
            "chain": [ref.to_json() for ref in self.chain],
            "pods": self.pods,
            "translatedPods": self.translated_pods,
            "gpus": dict(self.gpus),
            "webhook": {"action": self.action, "reason": self.reason},
            "notes": list(self.notes),
        }


# ----------------------------------------------------------------------------- helpers


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def is_custom_workload(obj: Mapping[str, Any]) -> bool:
    """A custom resource of a kind in :data:`CUSTOM_KINDS` (group and kind)."""
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    return str(obj.get("kind")) in CUSTOM_KINDS.get(group, frozenset())


def _containers(node: Mapping[str, Any]) -> list[Any]:
    found = [c for c in _list(node.get("containers")) if isinstance(c, Mapping)]
    for key in ("container", "script"):  # Argo templates: the main container
        if isinstance(node.get(key), Mapping):
            found.insert(0, node[key])
    found[:0] = [v for k, v in node.items() if k in _KSERVE_FRAMEWORKS and isinstance(v, Mapping)]
    return found


def custom_pod_templates(obj: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(path, {metadata, spec})`` of every pod template in a custom resource, found by shape:
    a PodTemplateSpec (``{metadata?, spec: {containers}}``), or a pod spec inlined in a component
    (``containers``; an Argo template's ``container``/``script``; a KServe framework container)."""
    found: list[tuple[str, Mapping[str, Any]]] = []

    def walk(node: Any, path: tuple[str | int, ...]) -> None:
        if isinstance(node, Mapping):
            spec = node.get("spec")
            if path and isinstance(spec, Mapping) and isinstance(spec.get("containers"), list):
                found.append((format_path(path), node))
                return
            containers = _containers(node) if path else []
            if containers:
                pod_spec = {**{k: v for k, v in node.items() if k in ("initContainers", "resourceClaims")}}
                found.append(
                    (
                        format_path(path),
                        {"metadata": _dict(node.get("metadata")), "spec": {**pod_spec, "containers": containers}},
                    )
                )
            for key, value in node.items():
                if key not in ("status", "metadata") and not (
                    containers and key in ("containers", "container", "script")
                ):
                    walk(value, (*path, str(key)))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, (*path, index))

    walk(obj, ())
    return found


def _custom_template(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, list[str]]:
    """The pod template of a custom resource the audit decides on (the first asking for GPUs),
    and a note naming every template that asks for GPUs when there are several."""
    templates = custom_pod_templates(obj)
    legacy = [(path, t) for path, t in templates if requested_gpus(_dict(t.get("spec")))]
    notes = []
    if len(legacy) > 1:
        notes.append(
            "pod templates asking for GPUs: "
            + ", ".join(
                f"{path} ({','.join(f'{k}={v}' for k, v in requested_gpus(_dict(t.get('spec'))).items())})"
                for path, t in legacy
            )
        )
    chosen = legacy[0][1] if legacy else templates[0][1] if templates else None
    return chosen, notes


def pod_template(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``{metadata, spec}`` of the pods ``obj`` makes (the pod itself for a Pod); None when absent."""
    path = WORKLOAD_KINDS.get(str(obj.get("kind")))
    if path is None or (path and is_custom_workload(obj)):
        return _custom_template(obj)[0] if is_custom_workload(obj) else None
    node: Any = obj
    for key in path:
        node = _dict(node).get(key)
    return node if isinstance(node, Mapping) and isinstance(node.get("spec"), Mapping) else None


def _watched(resource: str) -> bool:
    return WEBHOOK_CONFIG.watched(resource) or WEBHOOK_CONFIG.resolve(resource) is not None


def requested_gpus(spec: Mapping[str, Any]) -> dict[str, str]:
    """GPU-looking extended resources a pod spec asks for, per pod: about Kubernetes' effective
    request, the larger of the sum over regular containers and sidecars and the largest init container."""
    regular: dict[str, Fraction] = {}
    init: dict[str, Fraction] = {}
    written: dict[str, str] = {}
    for key in ("containers", "initContainers"):
        for container in _list(spec.get(key)):
            resources = _dict(_dict(container).get("resources"))
            limits, requests = _dict(resources.get("limits")), _dict(resources.get("requests"))
            for name in sorted({*limits, *requests}):
                if not _watched(str(name)):
                    continue
                value = limits.get(name, requests.get(name))
                try:
                    amount = parse_quantity(value)
                except ValueError:
                    written[str(name)] = str(value)
                    continue
                if key == "containers" or _dict(container).get("restartPolicy") == "Always":  # sidecars too
                    regular[str(name)] = regular.get(str(name), Fraction(0)) + amount
                else:
                    init[str(name)] = max(init.get(str(name), Fraction(0)), amount)
    out: dict[str, str] = {}
    for name in sorted({*regular, *init, *written}):
        if name in written and name not in regular and name not in init:
            out[name] = written[name]
            continue
        amount = max(regular.get(name, Fraction(0)), init.get(name, Fraction(0)))
        out[name] = str(amount.numerator) if amount.denominator == 1 else str(float(amount))
    return out


def _uid_index(objects: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {str(metadata(o)["uid"]): o for o in objects if metadata(o).get("uid")}


def _owner_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = [r for r in _list(metadata(obj).get("ownerReferences")) if isinstance(r, Mapping)]
    for ref in refs:
        if ref.get("controller") is True:
            return ref
    return refs[0] if refs else None


def _ref(obj: Mapping[str, Any]) -> Ref:
    return Ref(str(obj.get("kind")), str(metadata(obj).get("name") or ""))


_Key = tuple[str, str, str]  # namespace, kind, name


def _key(namespace: str, ref: Ref) -> _Key:
    return (namespace, ref.kind, ref.name)


# ----------------------------------------------------------------------------- webhook decision


def _synthesise_pod(obj: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """The Pod the workload would create now, as the webhook would receive it."""
    template = pod_template(obj) or {}
    meta = _dict(template.get("metadata"))
    spec = clone(dict(_dict(template.get("spec"))))
    if obj.get("kind") == "Pod":
        spec.pop("nodeName", None)  # set by the scheduler on a live pod; a new pod has none
    pod_meta: dict[str, Any] = {"generateName": f"{metadata(obj).get('name', 'audit')}-", "namespace": namespace}
    for key in ("labels", "annotations"):
        if isinstance(meta.get(key), Mapping):
            pod_meta[key] = dict(meta[key])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


# ----------------------------------------------------------------------------- audit


def audit(objects: Iterable[Mapping[str, Any]], *, decide: Decide) -> list[Finding]:
    """Findings for the listed objects (Pods, ReplicaSets, Deployments, StatefulSets, DaemonSets,
    Jobs, CronJobs, plus the Namespaces, DeviceClasses, ResourceClaimTemplates and ResourceClaims the
    webhook reads), sorted by namespace, kind and name; ``decide`` says what the webhook would do."""
    objects = list(objects)
    cluster = ClusterState.from_objects(objects)
    workloads = [o for o in objects if str(o.get("kind")) in WORKLOAD_KINDS or is_custom_workload(o)]
    by_uid = _uid_index(workloads)
    by_key: dict[_Key, Mapping[str, Any]] = {
        _key(str(metadata(o).get("namespace") or ""), _ref(o)): o for o in workloads
    }
    legacy: dict[_Key, Mapping[str, Any]] = {}
    for key, obj in by_key.items():
        template = pod_template(obj)
        if template is not None and requested_gpus(_dict(template.get("spec"))):
            legacy[key] = obj

    def owner(obj: Mapping[str, Any], namespace: str) -> tuple[Ref, Mapping[str, Any] | None] | None:
        ref = _owner_ref(obj)
        if ref is None:
            return None
        found = by_uid.get(str(ref.get("uid") or ""))
        if found is None:
            found = by_key.get((namespace, str(ref.get("kind")), str(ref.get("name"))))
        return Ref(str(ref.get("kind")), str(ref.get("name"))), found

    def chain(obj: Mapping[str, Any], namespace: str) -> list[Ref]:
        refs = [_ref(obj)]
        current: Mapping[str, Any] | None = obj
        while current is not None and len(refs) < 16:
            up = owner(current, namespace)
            if up is None:
                break
            refs.append(up[0])
            current = up[1]
        return refs

    # The finding each legacy object belongs to: its highest legacy ancestor, or an owner not listed.
    anchors: dict[_Key, _Key] = {}
    migrated_owner: dict[_Key, Ref] = {}
    for key, obj in legacy.items():
        namespace = key[0]
        current_key, current = key, obj
        for _ in range(16):
            up = owner(current, namespace)
            if up is None:
                break
            ref, found = up
            if found is None:
                current_key = _key(namespace, ref)
                break
            found_key = _key(namespace, _ref(found))
            if found_key not in legacy:
                migrated_owner[current_key] = ref
                break
            current_key, current = found_key, found
        anchors[key] = current_key

    members: dict[_Key, list[_Key]] = {}
    for key, anchor in anchors.items():
        members.setdefault(anchor, []).append(key)

    translated: dict[_Key, int] = {}
    for key, obj in by_key.items():
        if key[1] != "Pod" or key in legacy:
            continue
        annotations = _dict(metadata(obj).get("annotations"))
        if WEBHOOK_CONFIG.annotation not in annotations:
            continue
        up = owner(obj, key[0])
        if up is None:
            continue
        ref, found = up
        owner_key = _key(key[0], _ref(found) if found is not None else ref)
        anchor = anchors.get(owner_key, owner_key)
        translated[anchor] = translated.get(anchor, 0) + 1

    findings: list[Finding] = []
    for anchor, keys in members.items():
        namespace = anchor[0]
        pods = sorted((k for k in keys if k[1] == "Pod"), key=lambda k: k[2])
        anchor_obj = legacy.get(anchor)
        old_revision = anchor in migrated_owner
        if old_revision and not pods:
            continue  # an old revision kept for rollbacks runs nothing
        # The lowest member shows the chain: a pod when one runs, else the deepest object.
        lowest = pods[0] if pods else min(keys, key=lambda k: (_KIND_ORDER.get(k[1], 99), k[2]))
        refs = chain(legacy[lowest], namespace)
        source = anchor_obj if anchor_obj is not None else legacy[pods[0]]
        pod = _synthesise_pod(source, namespace)
        action, reason = decide(pod, namespace, cluster)
        notes: list[str] = []
        if old_revision:
            notes.append(f"owner {migrated_owner[anchor]} is already migrated; these pods are from an older revision")
        if anchor_obj is not None and is_custom_workload(anchor_obj):
            notes.extend(_custom_template(anchor_obj)[1])
        if anchor_obj is None:
            notes.append(f"owner {anchor[1]}/{anchor[2]} was not listed; decision from pod {pods[0][2]}")
        findings.append(
            Finding(
                namespace=namespace,
                kind=anchor[1],
                name=anchor[2],
                chain=refs,
                pods=len(pods),
                translated_pods=translated.get(anchor, 0),
                gpus=requested_gpus(_dict(pod.get("spec"))),
                action=action,
                reason=reason,
                notes=notes,
            )
        )
    return sorted(findings, key=lambda f: (f.namespace, f.kind, f.name))
