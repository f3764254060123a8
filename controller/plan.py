"""What a GPUCluster reconcile should do, decided from what was observed (pure).

:func:`plan` takes an :class:`Observed` snapshot (the GPUClusters, ClusterPolicies, what the
server serves, the live copies of the objects the operands render, the objects we own, the
nodes' labelling progress, the inventory) and returns a :class:`Plan`: objects whose live copy
must be read first (our watches see only objects with our label, so an admin's object with an
operand's name is looked up before the first write), writes (finalizer, namespace label,
server-side applies, deletes), the status to report, events, and when to look again. The
executor in controller/reconcile.py performs the lookups and writes and plans again on the
updated observation until a plan has no writes left; only that plan's status is reported.

Ownership: an existing object is written or deleted only when it is ours (a controller
ownerReference to a GPUCluster, or, cluster-scoped, our managed-by label). Drift: an object
is re-applied when its applied-content hash differs, or when the live values of the fields we
apply differ from those seen right after our last apply (controller/drift.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from gpucluster.api.gpucluster import SINGLETON_MESSAGE, SINGLETON_NAME, GPUCluster
from gpucluster.api.validation import problems_from
from gpucluster.clusterstate import ADMIN_ACCESS_LABEL, KubeObject, metadata
from gpucluster.controller.drift import matches, project
from gpucluster.controller.holders import claim_holders, pod_count
from gpucluster.controller.holders import describe as describe_holders
from gpucluster.controller.nodes import DEPLOY_LABELS
from gpucluster.controller.operands import (
    MANAGED_BY,
    STATE_LABEL,
    ClusterFacts,
    OperandObjects,
    RenderError,
    render_operands,
)
from gpucluster.controller.status import (
    DELETING,
    NOT_SINGLETON,
    OPERAND_CONFLICT,
    OPERANDS_NOT_READY,
    PERMISSION_DENIED,
    PREREQUISITE_NOT_MET,
    RECONCILE_FAILED,
    WorkloadStatus,
    inventory,
    not_ready_message,
    workload_status,
)

FINALIZER = "gpucluster.nvidia.com/dra-resourceclaim"
# On our namespace when we set its admin-access label (so that deletion removes only a label we set).
ADMIN_ACCESS_MARK = "gpucluster.nvidia.com/set-admin-access-label"
HASH_ANNOTATION = "gpucluster.nvidia.com/applied-hash"

# Normal events on the GPUCluster for what a reconcile did to its operands.
OPERAND_CREATED = "OperandCreated"
OPERAND_UPDATED = "OperandUpdated"
OPERAND_PRUNED = "OperandPruned"
DRAINING = "DrainingClaimConsumers"

Key = tuple[str, str, str]  # kind, namespace, name


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = metadata(obj)
    return (str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))


def content_hash(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid and ref.get("controller") for ref in metadata(obj).get("ownerReferences") or [])


def is_ours(obj: Mapping[str, Any]) -> bool:
    """Whether we may write ``obj``: a GPUCluster is its controller, or it is cluster-scoped and carries
    our managed-by label (how an admin hands a cluster-scoped object over)."""
    meta = metadata(obj)
    for ref in meta.get("ownerReferences") or []:
        group = str(ref.get("apiVersion") or "").split("/")[0]
        if ref.get("controller") and ref.get("kind") == "GPUCluster" and group == "nvidia.com":
            return True
    labels = meta.get("labels") or {}
    return not meta.get("namespace") and labels.get("app.kubernetes.io/managed-by") == MANAGED_BY


def describe(obj: Mapping[str, Any]) -> str:
    meta = metadata(obj)
    where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def with_hash(obj: Mapping[str, Any]) -> KubeObject:
    """``obj`` annotated with the hash of its rendered content (what a later pass compares)."""
    desired = dict(obj)
    meta = dict(metadata(desired))
    meta["annotations"] = {**(meta.get("annotations") or {}), HASH_ANNOTATION: content_hash(obj)}
    desired["metadata"] = meta
    return desired


# ------------------------------------------------------------------------------------ actions


@dataclass(frozen=True)
class AddFinalizer:
    cluster: KubeObject


@dataclass(frozen=True)
class RemoveFinalizer:
    cluster: KubeObject


@dataclass(frozen=True)
class LabelNamespace:
    """Set the admin-access label on our namespace, marked (annotation) as set by us."""

    name: str


@dataclass(frozen=True)
class UnlabelNamespace:
    """Remove the admin-access label we set, and its mark."""

    name: str


@dataclass(frozen=True)
class UnlabelNode:
    """Remove the deploy labels we set on a GPU node."""

    name: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class Apply:
    obj: KubeObject  # with its hash annotation
    reason: str  # OPERAND_CREATED or OPERAND_UPDATED
    message: str
    drift: bool = False


@dataclass(frozen=True)
class Delete:
    obj: KubeObject
    propagation: str = "Background"
    reason: str = ""  # a Normal event on the GPUCluster when set
    message: str = ""


Write = AddFinalizer | RemoveFinalizer | LabelNamespace | UnlabelNamespace | UnlabelNode | Apply | Delete


@dataclass(frozen=True)
class Status:
    cluster: KubeObject
    state: str
    reason: str
    message: str
    inventory: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Event:
    obj: KubeObject
    type: str
    reason: str
    message: str


@dataclass
class Plan:
    lookups: list[KubeObject] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    statuses: list[Status] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue: float = 60.0
    conflicts: frozenset[str] = frozenset()
    active: bool = False  # the operands rendered: GPU nodes should be labelled


# ------------------------------------------------------------------------------------ observed


@dataclass(frozen=True)
class Prerequisites:
    """What the cluster serves (``problem``: why GPUCluster cannot work here)."""

    problem: str | None = None
    version: str | None = None
    service_monitor: bool = False


@dataclass
class Observed:
    clusters: Sequence[KubeObject]
    namespace: str
    policies: Sequence[KubeObject] = ()
    prerequisites: Prerequisites = field(default_factory=Prerequisites)
    namespace_labels: Mapping[str, str] | None = None
    namespace_annotations: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    # Live copies by key: from the cache, or looked up (None: looked up, absent). A key that is
    # neither in ``cached`` nor in ``looked_up`` has not been looked for yet.
    cached: Mapping[Key, KubeObject] = field(default_factory=dict)
    looked_up: Mapping[Key, KubeObject | None] = field(default_factory=dict)
    owned: Sequence[KubeObject] = ()  # every cached object of the kinds we own (pruning)
    applied: Mapping[Key, str] = field(default_factory=dict)  # projection hashes after our last applies
    nodes: Sequence[KubeObject] = ()
    unlabelled_nodes: int = 0  # nodes whose labels the node reconciler has not yet set (or removed)
    label_errors: Mapping[str, tuple[int | None, str]] = field(default_factory=dict)  # node -> (status, error)
    slices: Sequence[KubeObject] = ()
    claims: Sequence[KubeObject] = ()
    # The inventory of ``slices`` and ``claims`` when the caller keeps it (controller/reconcile.py
    # does, until a slice or claim changes: a pass while 65,000 nodes are labelled must not count
    # half a million devices again); None: counted here.
    stock: Mapping[str, Any] | None = None
    templates: Sequence[KubeObject] = ()  # the ResourceClaimTemplates we created for translated pods
    previous_conflicts: frozenset[str] = frozenset()

    def live(self, key: Key) -> tuple[bool, KubeObject | None]:
        """(known, object): whether the live copy is known, and it (None when absent)."""
        if key in self.cached:
            return True, self.cached[key]
        if key in self.looked_up:
            return True, self.looked_up[key]
        return False, None


# ------------------------------------------------------------------------------------ planning


def plan(observed: Observed) -> Plan:
    out = Plan(statuses=_ignored_clusters(observed.clusters))
    cluster = next((c for c in observed.clusters if metadata(c).get("name") == SINGLETON_NAME), None)
    if cluster is None:
        return out
    if metadata(cluster).get("deletionTimestamp"):
        _plan_deletion(cluster, observed, out)
        return out
    if FINALIZER not in (metadata(cluster).get("finalizers") or []):
        out.writes.append(AddFinalizer(cluster))
    problem = _prerequisite_problem(observed.prerequisites, observed.policies)
    if problem:
        out.statuses.append(Status(cluster, "notReady", PREREQUISITE_NOT_MET, problem))
        out.requeue = 30.0
        return out
    if (observed.namespace_labels or {}).get(ADMIN_ACCESS_LABEL) != "true":
        out.writes.append(LabelNamespace(observed.namespace))
    operands = _render(cluster, observed)
    if isinstance(operands, str):
        out.statuses.append(Status(cluster, "notReady", RECONCILE_FAILED, operands))
        out.requeue = 30.0
        return out
    out.active = True
    sync = _sync_operands(operands, observed)
    out.lookups.extend(sync.lookups)
    out.writes.extend(sync.applies)
    out.writes.extend(_prune(str(metadata(cluster).get("uid") or ""), sync.desired, observed.owned))
    if out.lookups:
        return out  # decide the rest once every live copy is known
    out.conflicts = frozenset(sync.conflicts)
    out.events.extend(_conflict_events(cluster, out.conflicts - observed.previous_conflicts))
    status = _readiness(cluster, observed, sync.conflicts, sync.workloads)
    out.statuses.append(status)
    out.requeue = 60.0 if status.state == "ready" else 5.0
    return out


def _ignored_clusters(clusters: Sequence[KubeObject]) -> list[Status]:
    """A disabled status for every GPUCluster but the singleton (and but those being deleted)."""
    message = f"ignored: {SINGLETON_MESSAGE}; only gpu-cluster is reconciled"
    return [
        Status(other, "disabled", NOT_SINGLETON, message)
        for other in clusters
        if metadata(other).get("name") != SINGLETON_NAME and not metadata(other).get("deletionTimestamp")
    ]


def _prerequisite_problem(prerequisites: Prerequisites, policies: Sequence[KubeObject]) -> str | None:
    """Why GPUCluster cannot work here: what the server lacks, else a ClusterPolicy (one management model)."""
    if prerequisites.problem is not None or not policies:
        return prerequisites.problem
    names = ", ".join(sorted(str(metadata(p).get("name")) for p in policies))
    return (
        f"ClusterPolicy {names} exists: a cluster uses one GPU management model; GPUCluster supports "
        "new installations only, delete the ClusterPolicy and its operands first"
    )


def _render(cluster: KubeObject, observed: Observed) -> list[OperandObjects] | str:
    """Every operand's objects for ``cluster``, or why its spec cannot be rendered."""
    try:
        model = GPUCluster.model_validate(cluster)
        facts = ClusterFacts.from_environ(
            observed.env,
            namespace=observed.namespace,
            owner_uid=str(metadata(cluster).get("uid") or "") or None,
            service_monitor_crd=observed.prerequisites.service_monitor,
            kubernetes_version=observed.prerequisites.version,
        )
        return render_operands(model, facts)
    except ValidationError as exc:
        return "; ".join(str(p) for p in problems_from(exc))
    except RenderError as exc:
        return str(exc)


@dataclass
class OperandSync:
    """What the rendered operands ask for, object by object, against their live copies."""

    desired: set[Key] = field(default_factory=set)  # every rendered object (what is not is pruned)
    workloads: list[Key] = field(default_factory=list)  # the DaemonSets and Deployments, in render order
    lookups: list[KubeObject] = field(default_factory=list)  # live copy not known yet: read it first
    conflicts: list[str] = field(default_factory=list)  # live objects with an operand's name, not ours
    applies: list[Apply] = field(default_factory=list)


def _sync_operands(operands: Sequence[OperandObjects], observed: Observed) -> OperandSync:
    out = OperandSync()
    for operand in operands:
        for obj in operand.objects:
            key = key_of(obj)
            out.desired.add(key)
            if key[0] in ("DaemonSet", "Deployment"):
                out.workloads.append(key)
            known, live = observed.live(key)
            if not known:
                out.lookups.append(obj)
            elif live is not None and not is_ours(live):
                out.conflicts.append(describe(live))
            elif (action := _apply(obj, live, observed.applied.get(key))) is not None:
                out.applies.append(action)
    return out


def _conflict_events(cluster: KubeObject, new: frozenset[str]) -> list[Event]:
    """One Warning per object newly found in an operand's way (each is reported once)."""
    return [
        Event(
            cluster, "Warning", OPERAND_CONFLICT,
            f"{name} exists and is not managed by this GPUCluster: it is left untouched; "
            "delete it (or, cluster-scoped, label it app.kubernetes.io/managed-by=gpucluster) to hand it over",
        )
        for name in sorted(new)
    ]  # fmt: skip


def _readiness(cluster: KubeObject, observed: Observed, conflicts: Sequence[str], workloads: Sequence[Key]) -> Status:
    """The status once every live copy is known: conflicts first, then the nodes' labels, then the workloads."""
    stock = dict(observed.stock) if observed.stock is not None else inventory(observed.slices, observed.claims)
    if conflicts:
        message = f"objects with operand names exist and are not ours, left untouched: {', '.join(conflicts)}"
        return Status(cluster, "notReady", OPERAND_CONFLICT, message, stock)
    labelling = _labelling_problem(observed.label_errors, observed.unlabelled_nodes)
    if labelling is not None:
        reason, message = labelling
        return Status(cluster, "notReady", reason, message, stock)
    # The workloads' coverage is checked only once the nodes are labelled (it costs a pass over the
    # nodes per DaemonSet, and the labels change what each must cover).
    statuses = _workload_statuses(workloads, observed)
    if all(s.ready for s in statuses):
        return Status(cluster, "ready", "Reconciled", "all operands are ready", stock)
    return Status(cluster, "notReady", OPERANDS_NOT_READY, not_ready_message(statuses), stock)


def _labelling_problem(
    label_errors: Mapping[str, tuple[int | None, str]], unlabelled_nodes: int
) -> tuple[str, str] | None:
    """(reason, message) while the node reconciler cannot set, or has not yet set, the nodes' DRA labels."""
    if label_errors:
        failing = sorted(label_errors.items())
        forbidden = any(code == 403 for _, (code, _) in failing)
        shown = "; ".join(f"node {name}: {error}" for name, (_, error) in failing[:3])
        more = f"; and {len(failing) - 3} more" if len(failing) > 3 else ""
        reason = PERMISSION_DENIED if forbidden else RECONCILE_FAILED
        return reason, f"cannot set the DRA labels of {len(failing)} nodes: {shown}{more}"
    if unlabelled_nodes:
        # Not ready until the nodes are labelled.
        return OPERANDS_NOT_READY, f"waiting for the DRA labels of {unlabelled_nodes} nodes to be set"
    return None


def _workload_statuses(workloads: Sequence[Key], observed: Observed) -> list[WorkloadStatus]:
    """Each workload's readiness from its cached copy (one not in the cache yet has observed nothing)."""
    statuses = []
    for kind, namespace, name in workloads:
        live = observed.cached.get((kind, namespace, name))
        if live is not None:
            statuses.append(workload_status(live, observed.nodes))
        else:
            statuses.append(workload_status({"kind": kind, "metadata": {"name": name, "generation": 1}}))
    return statuses


def _apply(obj: KubeObject, live: KubeObject | None, applied: str | None) -> Apply | None:
    desired = with_hash(obj)
    if live is None:
        return Apply(desired, OPERAND_CREATED, f"created {describe(obj)}")
    digest = metadata(desired)["annotations"][HASH_ANNOTATION]
    if (metadata(live).get("annotations") or {}).get(HASH_ANNOTATION) != digest:
        return Apply(desired, OPERAND_UPDATED, f"updated {describe(obj)} to the desired spec")
    if applied == content_hash(project(desired, live)) or (applied is None and matches(desired, live)):
        return None
    return Apply(desired, OPERAND_UPDATED, f"reverted a change to {describe(obj)} made by someone else", drift=True)


def _prune(uid: str, desired: set[Key], owned: Sequence[KubeObject]) -> list[Delete]:
    """Objects this GPUCluster controls that no operand renders any more (and only those)."""
    if not uid:
        return []
    out = []
    for obj in owned:
        meta = metadata(obj)
        labels = meta.get("labels") or {}
        if key_of(obj) in desired or labels.get("app.kubernetes.io/managed-by") != MANAGED_BY:
            continue
        if not owned_by(obj, uid) or STATE_LABEL not in labels or meta.get("deletionTimestamp"):
            continue
        out.append(Delete(obj, reason=OPERAND_PRUNED, message=f"deleted {describe(obj)}: its operand is disabled"))
    return out


def _plan_deletion(cluster: KubeObject, observed: Observed, out: Plan) -> None:
    """Take the stack down in an order that lets the kubelet unprepare every claim first.

    1. Our DeviceClasses go: nothing new is allocated from the NVIDIA drivers.
    2. The claim-consuming DaemonSets (admin-access claims) are foreground-deleted.
    3. Wait while any pod still holds a claim of the NVIDIA drivers: the kubelet plugin, which
       the garbage collector deletes only once the finalizer is gone, must be there to unprepare it.
    4. The claim templates we created for translated pods go.
    5. The finalizer goes; the garbage collector deletes the remaining operands.
    """
    meta = metadata(cluster)
    if FINALIZER not in (meta.get("finalizers") or []):
        return
    uid = str(meta.get("uid") or "")
    draining = []
    for obj in observed.owned:
        if not owned_by(obj, uid) or metadata(obj).get("deletionTimestamp"):
            continue
        if obj.get("kind") == "DeviceClass":
            out.writes.append(Delete(obj))
    for ds in observed.owned:
        if ds.get("kind") != "DaemonSet":
            continue
        template = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        if not owned_by(ds, uid) or not template.get("resourceClaims"):
            continue
        draining.append(str(metadata(ds).get("name")))
        if not metadata(ds).get("deletionTimestamp"):
            out.writes.append(Delete(ds, propagation="Foreground"))
    holding = claim_holders(observed.claims)
    if draining or holding:
        waits = []
        if draining:
            waits.append(f"ResourceClaim-consuming DaemonSet(s) to terminate: {', '.join(sorted(draining))}")
        if holding:
            waits.append(
                f"{pod_count(holding)} pod(s) holding devices of the NVIDIA DRA drivers to end, so that the kubelet "
                f"plugin can release them first: {describe_holders(holding)}"
            )
        message = "Waiting for " + "; and for ".join(waits)
        out.statuses.append(Status(cluster, "notReady", DELETING, f"deleting: {message}"))
        # Every reconcile while it lasts: the recorder bumps one Event's count (kubectl shows how long
        # the drain has been waiting), never a new Event object per pass.
        out.events.append(Event(cluster, "Normal", DRAINING, message))
        out.requeue = 5.0
        return
    templates = [t for t in observed.templates if not metadata(t).get("deletionTimestamp")]
    for template in templates:
        out.writes.append(Delete(template, propagation="Background"))
    # Nothing holds a device any more: the labels that placed the operands can go (a value other
    # than the "true" we set, such as an admin's "false", stays).
    for node in observed.nodes:
        labels = metadata(node).get("labels") or {}
        keys = tuple(k for k in DEPLOY_LABELS if labels.get(k) == "true")
        if keys:
            out.writes.append(UnlabelNode(str(metadata(node).get("name")), keys))
    if observed.namespace_annotations.get(ADMIN_ACCESS_MARK) == "true":
        out.writes.append(UnlabelNamespace(observed.namespace))
    out.writes.append(RemoveFinalizer(cluster))


def summarize(messages: Sequence[str], limit: int = 1000) -> str:
    """One event message for what one reconcile did of one kind (``created A; created B``), at most
    ``limit`` characters (``... and N more``).

    One event per reason per reconcile: ten distinct messages of one reason would be combined by
    the event correlator into "(combined from similar events)", hiding which objects changed.
    """
    shown: list[str] = []
    for i, message in enumerate(messages):
        rest = len(messages) - i - 1
        tail = f"; and {rest} more" if rest else ""
        if shown and len("; ".join([*shown, message])) + len(tail) > limit:
            return "; ".join(shown) + f"; and {len(messages) - len(shown)} more"
        shown.append(message)
    return "; ".join(shown)
