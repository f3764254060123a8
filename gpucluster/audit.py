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

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpucluster.clusterstate import ClusterState, metadata
from gpucluster.jsonutil import clone
from gpucluster.migrate import KSERVE_FRAMEWORKS, format_path
from gpucluster.policy import WEBHOOK_CONFIG
from gpucluster.translate import TEMPLATES_ANNOTATION, TRANSLATED_LABEL, parse_quantity

__all__ = [
    "CUSTOM_KINDS",
    "WORKLOAD_KINDS",
    "Decide",
    "Finding",
    "Ref",
    "audit",
    "custom_pod_templates",
    "dedupe",
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
# Templates are found by shape (:func:`custom_pod_templates`), as ``gpucluster migrate`` finds them:
# Katib's Experiment (``spec.trialTemplate.trialSpec``, a Job or training job) and Trial
# (``spec.runSpec``), AIBrix's StormService and RoleSet (``roles[].template``), RayClusterFleet and
# RayClusterReplicaSet (a RayCluster spec under ``spec.template.spec``), KAITO's Workspace
# (``inference.template``).
CUSTOM_KINDS: Mapping[str, frozenset[str]] = {
    "kubeflow.org": frozenset(
        {"PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob", "Notebook", "Experiment", "Trial"}
    ),
    "trainer.kubeflow.org": frozenset({"TrainingRuntime", "ClusterTrainingRuntime"}),
    "ray.io": frozenset({"RayCluster", "RayJob", "RayService"}),
    "jobset.x-k8s.io": frozenset({"JobSet"}),
    "leaderworkerset.x-k8s.io": frozenset({"LeaderWorkerSet"}),
    "argoproj.io": frozenset({"Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"}),
    "serving.kserve.io": frozenset(
        {"InferenceService", "LLMInferenceService", "ServingRuntime", "ClusterServingRuntime"}
    ),
    "batch.volcano.sh": frozenset({"Job"}),
    "orchestration.aibrix.ai": frozenset({"StormService", "RoleSet", "RayClusterFleet", "RayClusterReplicaSet"}),
    "kaito.sh": frozenset({"Workspace"}),
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
    translated_pods: int  # live pods the webhook translated when they were created (they rely on it)
    gpus: dict[str, str]  # resource -> quantity per pod
    action: str  # translate | warn | skip
    reason: str
    notes: list[str] = field(default_factory=list)

    @property
    def workload(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def running_pods(self) -> int:
        """Live pods of the workload: those still holding extended resources and those translated."""
        return self.pods + self.translated_pods

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
            "runningPods": self.running_pods,
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


# ----------------------------------------------------------------------------- translated pods


def _translated_by_webhook(pod: Mapping[str, Any]) -> bool:
    """A live pod the webhook translated at admission: it carries the webhook's label and record
    (a migrated manifest's pods carry the record only, except for cluster-scoped templates, whose
    owner chain shows the migrated template)."""
    meta = metadata(pod)
    labels, annotations = _dict(meta.get("labels")), _dict(meta.get("annotations"))
    return labels.get(TRANSLATED_LABEL) == "true" and WEBHOOK_CONFIG.annotation in annotations


def _recorded(pod: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The original GPU requests a translated pod records, by container (empty when unreadable)."""
    raw = _dict(metadata(pod).get("annotations")).get(WEBHOOK_CONFIG.annotation)
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return {}
    containers = _dict(_dict(value).get("containers"))
    return {str(name): {str(k): str(v) for k, v in _dict(res).items()} for name, res in containers.items()}


def _untranslated(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod as its manifest wrote it, before the webhook translated it: the recorded requests
    back in the limits, the webhook's claims, label and annotations gone."""
    meta = metadata(pod)
    spec = clone(dict(_dict(pod.get("spec"))))
    annotations = {k: v for k, v in _dict(meta.get("annotations")).items()}
    templates = annotations.get(TEMPLATES_ANNOTATION)
    try:
        ours = set(_dict(json.loads(templates))) if isinstance(templates, str) else set()
    except ValueError:
        ours = set()
    claims = [c for c in _list(spec.get("resourceClaims")) if isinstance(c, Mapping)]
    webhook_claims = {
        str(c.get("name"))
        for c in claims
        if c.get("resourceClaimTemplateName") in ours
        or str(c.get("name")).startswith(f"{WEBHOOK_CONFIG.claim_prefix}-")
    }
    kept = [c for c in claims if str(c.get("name")) not in webhook_claims]
    if kept:
        spec["resourceClaims"] = kept
    else:
        spec.pop("resourceClaims", None)
    record = _recorded(pod)
    for key in ("containers", "initContainers"):
        for container in _list(spec.get(key)):
            if not isinstance(container, dict):
                continue
            resources: dict[str, Any] = container["resources"] if isinstance(container.get("resources"), dict) else {}
            own = [c for c in _list(resources.get("claims")) if _dict(c).get("name") not in webhook_claims]
            if own:
                resources["claims"] = own
            else:
                resources.pop("claims", None)
            asked = record.get(str(container.get("name")))
            if asked:
                resources["limits"] = {**_dict(resources.get("limits")), **asked}
            if resources:
                container["resources"] = resources
    labels = {k: v for k, v in _dict(meta.get("labels")).items() if k != TRANSLATED_LABEL}
    for key in (WEBHOOK_CONFIG.annotation, TEMPLATES_ANNOTATION):
        annotations.pop(key, None)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**meta, "labels": labels, "annotations": annotations},
        "spec": spec,
    }


# ----------------------------------------------------------------------------- audit


def _dedupe_key(obj: Mapping[str, Any]) -> tuple[str, ...]:
    meta = metadata(obj)
    if meta.get("uid"):
        return ("uid", str(meta["uid"]))
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    return ("name", str(meta.get("namespace") or ""), group, str(obj.get("kind")), str(meta.get("name") or ""))


def dedupe(objects: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Each object once: the same custom resource listed under several served versions of its
    group is one object (by ``metadata.uid``, else namespace, group, kind and name); the first seen is kept."""
    seen: set[tuple[str, ...]] = set()
    out: list[Mapping[str, Any]] = []
    for obj in objects:
        key = _dedupe_key(obj)
        if key not in seen:
            seen.add(key)
            out.append(obj)
    return out


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _advice(action: str, pods: int) -> str | None:
    """What to do about live pods still holding extended resources, from the webhook's decision."""
    if not pods:
        return None
    these = _plural(pods, "live pod")
    if action == "translate":
        return (
            f"{these} admitted without translation (created before the webhook served, or while it was "
            "unavailable): recreate them to get DRA claims"
        )
    if action == "skip":
        return (
            f"{these} {'keeps' if pods == 1 else 'keep'} extended resources because the webhook declines "
            f"{'it' if pods == 1 else 'them'} on purpose (the reason given); recreating would not change that"
        )
    return f"{these} {'keeps' if pods == 1 else 'keep'} extended resources (the webhook only warns)"


def audit(objects: Iterable[Mapping[str, Any]], *, decide: Decide) -> list[Finding]:
    """Findings for the listed objects (Pods, ReplicaSets, Deployments, StatefulSets, DaemonSets,
    Jobs, CronJobs, custom resources of :data:`CUSTOM_KINDS`, plus the Namespaces, DeviceClasses,
    ResourceSlices, ResourceClaimTemplates and ResourceClaims the webhook reads), sorted by
    namespace, kind and name; ``decide`` says what the webhook would do.

    A finding is a workload whose pod template still asks for GPUs through extended resources, or
    whose live pods rely on the webhook's translation (translated at admission while no listed owner
    has a migrated template: a bare pod, a pod of an owner not listed). Objects seen twice (a custom
    resource under two served versions) count once."""
    objects = dedupe(objects)
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

    def climb(
        obj: Mapping[str, Any], namespace: str, limit: int = 16
    ) -> Iterator[tuple[Ref, Mapping[str, Any] | None]]:
        """Up ``obj``'s owner chain: each owner's reference and the owner when listed (the climb
        ends after an owner that is not), at most ``limit`` steps."""
        current: Mapping[str, Any] | None = obj
        for _ in range(limit):
            up = owner(current, namespace) if current is not None else None
            if up is None:
                return
            yield up
            current = up[1]

    def chain(obj: Mapping[str, Any], namespace: str) -> list[Ref]:
        return [_ref(obj), *(ref for ref, _ in climb(obj, namespace, limit=15))]

    # The finding each legacy object belongs to: its highest legacy ancestor, or an owner not listed.
    anchors: dict[_Key, _Key] = {}
    migrated_owner: dict[_Key, Ref] = {}
    for key, obj in legacy.items():
        namespace = key[0]
        current_key = key
        for ref, found in climb(obj, namespace):
            if found is None:
                current_key = _key(namespace, ref)
                break
            found_key = _key(namespace, _ref(found))
            if found_key not in legacy:
                migrated_owner[current_key] = ref
                break
            current_key = found_key
        anchors[key] = current_key

    members: dict[_Key, list[_Key]] = {}
    for key, anchor in anchors.items():
        members.setdefault(anchor, []).append(key)

    # Pods the webhook translated, by the finding they belong to: up their owner chain (by uid) to
    # the first listed owner with a pod template (legacy: its finding; migrated: nothing relies on
    # translation), else to the first owner not listed, else the pod itself.
    translated: dict[_Key, list[_Key]] = {}
    for key, obj in by_key.items():
        annotations = _dict(metadata(obj).get("annotations"))
        if key[1] != "Pod" or key in legacy or WEBHOOK_CONFIG.annotation not in annotations:
            continue
        namespace = key[0]
        target: _Key | None = key
        under_legacy = False
        for ref, found in climb(obj, namespace):
            if found is None:
                target = _key(namespace, ref)
                break
            found_key = _key(namespace, _ref(found))
            if found_key in legacy:
                target, under_legacy = anchors.get(found_key, found_key), True
                break
            if pod_template(found) is not None:
                target = None  # its owner's template is migrated: the next pods need no translation
                break
        # Without a legacy owner only the webhook's own label tells translation from a migrated manifest.
        if target is not None and (under_legacy or _translated_by_webhook(obj)):
            translated.setdefault(target, []).append(key)

    findings: list[Finding] = []
    for anchor in sorted({*members, *translated}):
        keys = members.get(anchor, [])
        namespace = anchor[0]
        pods = sorted((k for k in keys if k[1] == "Pod"), key=lambda k: k[2])
        relying = sorted(translated.get(anchor, []), key=lambda k: k[2])
        anchor_obj = legacy.get(anchor)
        old_revision = anchor in migrated_owner
        if old_revision and not pods and not relying:
            continue  # an old revision kept for rollbacks runs nothing
        notes: list[str] = []
        if keys:
            # The lowest member shows the chain: a pod when one runs, else the deepest object.
            if pods or not relying:
                lowest = pods[0] if pods else min(keys, key=lambda k: (_KIND_ORDER.get(k[1], 99), k[2]))
                refs = chain(legacy[lowest], namespace)
            else:
                refs = chain(by_key[relying[0]], namespace)  # a translated pod shows the chain
            source: Mapping[str, Any] = anchor_obj if anchor_obj is not None else legacy[pods[0]]
            pod = _synthesise_pod(source, namespace)
        else:
            # Only pods the webhook translated: decide on the pod their manifest asked for.
            refs = chain(by_key[relying[0]], namespace)
            pod = _synthesise_pod(_untranslated(by_key[relying[0]]), namespace)
        action, reason = decide(pod, namespace, cluster)
        if old_revision:
            notes.append(f"owner {migrated_owner[anchor]} is already migrated; these pods are from an older revision")
        if anchor_obj is not None and is_custom_workload(anchor_obj):
            notes.extend(_custom_template(anchor_obj)[1])
        if anchor_obj is None and (anchor[1], anchor[2]) != (refs[0].kind, refs[0].name):
            where = f"pod {pods[0][2]}" if pods else f"the translated pod {relying[0][2]}"
            notes.append(f"owner {anchor[1]}/{anchor[2]} was not listed; decision from {where}")
        advice = _advice(action, len(pods))
        if advice:
            notes.append(advice)
        if relying:
            one = len(relying) == 1
            notes.append(
                f"{_plural(len(relying), 'live pod')} translated by the webhook when created: "
                f"{'it relies' if one else 'they rely'} on translation until the manifest is migrated "
                "(gpucluster migrate)"
            )
        findings.append(
            Finding(
                namespace=namespace,
                kind=anchor[1],
                name=anchor[2],
                chain=refs,
                pods=len(pods),
                translated_pods=len(relying),
                gpus=requested_gpus(_dict(pod.get("spec"))),
                action=action,
                reason=reason,
                notes=notes,
            )
        )
    return sorted(findings, key=lambda f: (f.namespace, f.kind, f.name))
