"""The GPUCluster reconciler: observe the cache, :func:`controller.plan.plan`, execute (I/O).

Reads come from the informer cache (:class:`ClusterState`); writes go through :class:`Api`
with server-side apply (field manager ``gpucluster``). One reconcile plans, performs the
lookups and writes the plan asks for, and plans again on the updated cache, until a plan has
nothing left to write (at most a few rounds); that plan's status and events are reported. A
steady state plans no writes, so it issues none; what was changed is recorded as one Normal
event per kind of change on the GPUCluster. The decisions (ownership, drift, pruning, status)
are in controller/plan.py and are unit-tested on plain data.

The :class:`Reconciler` executes; what it keeps is held by one object per concern: the API it
talks through (:class:`Api`), what the server serves (controller/prerequisites.py), what the
node labeller and the provisioner report (:class:`Peers`), what it remembers of the operands
between reconciles (:class:`OperandMemory`), when the status is written (:class:`StatusWrites`)
and what the reconcile under way changed (:class:`ChangeLog`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpucluster import timestamps
from gpucluster.api.gpucluster import SINGLETON_NAME
from gpucluster.clusterstate import ADMIN_ACCESS_LABEL, ClusterState, KubeObject, metadata
from gpucluster.controller.drift import project
from gpucluster.controller.events import COMPONENT, KubeSink
from gpucluster.controller.operands import MANAGED_BY
from gpucluster.controller.plan import (
    ADMIN_ACCESS_MARK,
    FINALIZER,
    HASH_ANNOTATION,
    AddFinalizer,
    Apply,
    Delete,
    Key,
    LabelNamespace,
    Observed,
    Plan,
    Prerequisites,
    RemoveFinalizer,
    UnlabelNamespace,
    UnlabelNode,
    Write,
    content_hash,
    key_of,
    plan,
    summarize,
)
from gpucluster.controller.prerequisites import PrerequisiteCheck
from gpucluster.controller.status import (
    OPERAND_CONFLICT,
    OPERANDS_NOT_READY,
    RECONCILE_FAILED,
    desired_status,
    inventory,
)
from gpucluster.controller.transforms import transform_for
from gpucluster.kube.client import Kube, KubeError
from gpucluster.kube.events import EventRecorder
from gpucluster.kube.paths import collection_path, object_path
from gpucluster.kube.reflector import Resource

__all__ = [
    "FINALIZER",
    "OWNED",
    "OWNED_KINDS",
    "Api",
    "ChangeLog",
    "OperandMemory",
    "Peers",
    "Reconciler",
    "StatusWrites",
    "owned_resources",
]

log = logging.getLogger("gpucluster.controller")

FIELD_MANAGER = "gpucluster"
GPUCLUSTER_PATH = "/apis/nvidia.com/v1alpha1/gpuclusters"
MAX_ROUNDS = 4  # plan/execute rounds of one reconcile (lookups, then writes, then the status)

# Kinds the operands render, watched with the managed-by label so that pruning sees them.
OWNED: tuple[tuple[str, str], ...] = (
    ("v1", "ServiceAccount"),
    ("v1", "Service"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
    ("resource.k8s.io/v1", "DeviceClass"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "Deployment"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
)
OWNED_KINDS = {kind for _, kind in OWNED}


def owned_resources(namespace: str) -> list[Resource]:
    """Reflector resources for the kinds we own, narrowed by our label.

    Every namespaced operand object lives in the operator namespace, so namespaced kinds are
    watched there only: that is what the chart's namespaced Role grants, and a cluster-wide
    list of Services or Roles would be refused (403) on a real cluster.
    """
    selector = f"app.kubernetes.io/managed-by={MANAGED_BY}"
    return [
        Resource(kind, collection_path(api_version, kind, namespace), label_selector=selector)
        for api_version, kind in OWNED
    ]


def _now() -> str:
    return timestamps.rfc3339()


def _strip_times(status: Mapping[str, Any] | None) -> Any:
    if not status:
        return None
    out = dict(status)
    out["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in out.get("conditions") or []]
    return out


def _without_inventory(status: Any) -> Any:
    if not isinstance(status, dict):
        return status
    return {k: v for k, v in status.items() if k != "inventory"}


def _identity(write: Write) -> tuple[str, Key, str]:
    """What makes two planned writes the same write (an apply: of the same content)."""
    if isinstance(write, Apply):
        return "Apply", key_of(write.obj), str((metadata(write.obj).get("annotations") or {}).get(HASH_ANNOTATION))
    if isinstance(write, Delete):
        return "Delete", key_of(write.obj), write.propagation
    if isinstance(write, LabelNamespace | UnlabelNamespace):
        return type(write).__name__, ("Namespace", "", write.name), ""
    if isinstance(write, UnlabelNode):
        return "UnlabelNode", ("Node", "", write.name), ",".join(write.keys)
    return type(write).__name__, key_of(write.cluster), ""


@dataclass
class Api:
    """How the reconciler talks to the API server: live reads, and writes, counted (the writes
    metric) and logged; Events through one recorder, aggregated as client-go's recorder does."""

    kube: Kube
    now: Callable[[], str] = _now  # the timestamps written (events, status conditions)
    writes: int = 0
    _recorder: EventRecorder | None = None

    async def write(self, method: str, path: str, **kwargs: Any) -> KubeObject:
        self.writes += 1
        log.debug("write method=%s path=%s", method, path)
        return await self.kube.request(method, path, **kwargs)

    async def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on ``obj``."""
        if self._recorder is None:
            self._recorder = EventRecorder(KubeSink(self.write), COMPONENT, now=self.now)
        await self._recorder.record(obj, type_, reason, message)

    async def lookup(self, obj: Mapping[str, Any]) -> KubeObject | None:
        """The live object when the cache cannot say (our watches see only objects with our label)."""
        try:
            live = await self.kube.get(object_path(obj))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        live.setdefault("kind", obj.get("kind"))
        return live


@dataclass
class Peers:
    """What the other reconcilers report, read into each plan's observation."""

    # GPU nodes the node reconciler has not labelled yet (the GPUCluster is not ready until it has).
    unlabelled_nodes: Callable[[], int] = lambda: 0
    label_errors: Callable[[], Mapping[str, tuple[int | None, str]]] = lambda: {}
    # The ResourceClaimTemplates created for translated pods (controller/provision.py): deleted
    # before the finalizer goes.
    provisioned_templates: Callable[[], Sequence[KubeObject]] = lambda: ()


@dataclass
class OperandMemory:
    """What the reconciler remembers of the operands from one reconcile to the next."""

    # (kind, namespace, name) -> hash of the projection of the live object right after our apply.
    applied: dict[Key, str] = field(default_factory=dict)
    conflicts: frozenset[str] = frozenset()  # objects in an operand's way, reported already
    active: bool = False  # the last reconcile rendered operands (GPU nodes should then be labelled)
    drifts: int = 0  # operands re-applied after someone else changed them


@dataclass
class StatusWrites:
    """When the GPUCluster status is written. A change of state or conditions is written at once. A
    status that differs only in its inventory (nodes and GPUs came or went) is written at once when
    our last write is ``inventory_quiet`` seconds old and nothing is held back: one node's change
    shows at once. Otherwise it is held back until the inventory has not moved for
    ``inventory_quiet`` seconds: 200 nodes leaving is one more write however long their removal
    takes (on a large cluster it takes longer; a fixed interval made it a write every 5 s), and at
    most ``inventory_max_hold`` seconds after the first change held back, so that steady churn still
    shows. ``due``: when a held-back inventory must be written."""

    inventory_quiet: float = 5.0
    inventory_max_hold: float = 60.0
    clock: Callable[[], float] = time.monotonic
    writes: int = 0
    written: dict[str, tuple[float, Any]] = field(default_factory=dict)  # name -> (when, status without times)
    # name -> (first held back, last moved, the inventory held back)
    held: dict[str, tuple[float, float, Any]] = field(default_factory=dict)
    due: float | None = None
    last_reasons: dict[str, str] = field(default_factory=dict)  # name -> the reason last written

    def hold_back(self, name: str, now: float, current: Any, new: Any) -> bool:
        """Whether the change from ``current`` to ``new`` (without their times) is held back: only
        the inventory moved since our last write, and it is not yet due."""
        written_at, written = self.written.get(name, (None, None))
        if (
            written_at is None
            or _without_inventory(written) != _without_inventory(new)
            or _without_inventory(current) != _without_inventory(written)
        ):
            self.held.pop(name, None)
            return False  # not ours to hold: written at once
        stock = new.get("inventory") if isinstance(new, dict) else None
        held = self.held.get(name)
        if held is None:
            if now - written_at >= self.inventory_quiet:
                return False  # the first change after a quiet while
            held = (now, now, stock)
        elif held[2] != stock:
            held = (held[0], now, stock)  # still moving
        self.held[name] = held
        due = min(held[1] + self.inventory_quiet, held[0] + self.inventory_max_hold)
        if now >= due:
            return False
        self.due = due  # the latest: a change moves it later (only the singleton's status is written)
        return True

    def settled(self, name: str) -> None:
        """The status is as it should be (an inventory came back as written): nothing is held back."""
        self.held.pop(name, None)

    def wrote(self, name: str, now: float, new: Any) -> None:
        self.writes += 1
        self.written[name] = (now, new)
        self.held.pop(name, None)
        if name == SINGLETON_NAME:
            self.due = None


@dataclass
class ChangeLog:
    """What one reconcile did, told on the GPUCluster when it ends: one Normal event per kind of
    change to the operands, then the warnings met on the way."""

    changes: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # reason -> (rank, message)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (reason, message)

    def changed(self, write: Apply | Delete) -> None:
        # Workloads first: a summary cut at its length limit still names them.
        rank = {"DaemonSet": 0, "Deployment": 0, "DeviceClass": 1}.get(str(write.obj.get("kind")), 2)
        self.changes.setdefault(write.reason, []).append((rank, write.message))

    def events(self) -> list[tuple[str, str, str]]:
        """(type, reason, message) of each event to record."""
        told = []
        for reason, messages in self.changes.items():
            ordered = [message for _, message in sorted(messages, key=lambda m: m[0])]
            told.append(("Normal", reason, summarize(ordered)))
        return told + [("Warning", reason, message) for reason, message in self.warnings]


@dataclass
class Reconciler:
    """Executes each :func:`plan` (the writes it asks for, then its status and events) and keeps
    the cache in step with what it wrote."""

    api: Api
    state: ClusterState
    namespace: str = "gpu-operator"
    env: Mapping[str, str] = field(default_factory=dict)
    peers: Peers = field(default_factory=Peers)
    served: PrerequisiteCheck = field(default_factory=PrerequisiteCheck)
    operands: OperandMemory = field(default_factory=OperandMemory)
    status: StatusWrites = field(default_factory=StatusWrites)
    changes: ChangeLog = field(default_factory=ChangeLog)  # of the reconcile under way

    # ------------------------------------------------------------------ writes

    async def _apply(self, action: Apply) -> None:
        desired = action.obj
        result = await self.api.write(
            "PATCH",
            object_path(desired),
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            body=desired,
            content_type="application/apply-patch+yaml",
        )
        result.setdefault("kind", desired["kind"])
        self.operands.applied[key_of(desired)] = content_hash(project(desired, result))
        self.state.upsert(str(desired["kind"]), result)
        if action.drift:
            self.operands.drifts += 1
            log.info("drift: %s %s/%s was changed by someone else; re-applied", *key_of(desired))
        if (desired.get("spec") or {}).get("extendedResourceName") and not (result.get("spec") or {}).get(
            "extendedResourceName"
        ):
            self.changes.warnings.append((
                "ExtendedResourceNotServed",
                f"the API server dropped spec.extendedResourceName of DeviceClass {metadata(desired).get('name')}: "
                "enable the DRAExtendedResource feature gate; until then the admission webhook translates "
                f"{(desired.get('spec') or {}).get('extendedResourceName')} requests",
            ))  # fmt: skip

    async def delete(self, obj: Mapping[str, Any], propagation: str = "Background") -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        try:
            result = await self.api.write("DELETE", object_path(obj), body=body)
        except KubeError as exc:
            if exc.status != 404:
                raise
            result = {}
        if metadata(result).get("deletionTimestamp") and metadata(result).get("finalizers"):
            result.setdefault("kind", obj.get("kind"))
            kind = str(obj.get("kind"))
            self.state.upsert(kind, transform_for(kind)(result))  # still there, deleting (foreground)
        else:
            self.state.delete(str(obj.get("kind")), obj)

    async def _set_finalizers(self, cluster: Mapping[str, Any], finalizers: list[str]) -> None:
        meta = metadata(cluster)
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}}
        result = await self.api.write(
            "PATCH", f"{GPUCLUSTER_PATH}/{meta.get('name')}", body=body, content_type="application/merge-patch+json"
        )
        result.setdefault("kind", "GPUCluster")
        self.state.upsert("GPUCluster", result)

    async def _execute(self, write: Write) -> None:
        if isinstance(write, Apply):
            await self._apply(write)
        elif isinstance(write, Delete):
            if write.reason:
                log.info("deleting %s: %s", key_of(write.obj), write.message)
            await self.delete(write.obj, write.propagation)
        elif isinstance(write, AddFinalizer):
            await self._set_finalizers(write.cluster, [*(metadata(write.cluster).get("finalizers") or []), FINALIZER])
        elif isinstance(write, RemoveFinalizer):
            kept = [f for f in metadata(write.cluster).get("finalizers") or [] if f != FINALIZER]
            await self._set_finalizers(write.cluster, kept)
        elif isinstance(write, LabelNamespace | UnlabelNamespace):
            add = isinstance(write, LabelNamespace)
            body = {
                "metadata": {
                    "labels": {ADMIN_ACCESS_LABEL: "true" if add else None},
                    "annotations": {ADMIN_ACCESS_MARK: "true" if add else None},
                }
            }
            result = await self.api.write(
                "PATCH", f"/api/v1/namespaces/{write.name}", body=body, content_type="application/merge-patch+json"
            )
            result.setdefault("kind", "Namespace")
            self.state.upsert("Namespace", result)
        elif isinstance(write, UnlabelNode):
            body = {"metadata": {"labels": dict.fromkeys(write.keys)}}
            try:
                result = await self.api.write(
                    "PATCH", f"/api/v1/nodes/{write.name}", body=body, content_type="application/merge-patch+json"
                )
            except KubeError as exc:
                if exc.status != 404:
                    raise
            else:
                result.setdefault("kind", "Node")
                self.state.upsert("Node", transform_for("Node")(result))
        if isinstance(write, Apply | Delete) and write.reason:
            self.changes.changed(write)

    # ------------------------------------------------------------------ status

    async def set_status(self, cluster: Mapping[str, Any], **kwargs: Any) -> None:
        meta = metadata(cluster)
        generation = int(meta.get("generation") or 0)
        current = cluster.get("status") if isinstance(cluster.get("status"), dict) else None
        new = desired_status(current, namespace=self.namespace, generation=generation, now=self.api.now(), **kwargs)
        name = str(meta.get("name"))
        if _strip_times(current) == _strip_times(new):
            self.status.settled(name)
            return
        now = self.status.clock()
        if self.status.hold_back(name, now, _strip_times(current), _strip_times(new)):
            return  # only the inventory moved since our last write: written when due
        reason = kwargs.get("reason", "")
        result = await self.api.write(
            "PATCH",
            f"{GPUCLUSTER_PATH}/{meta.get('name')}/status",
            body={"status": new},
            content_type="application/merge-patch+json",
        )
        result.setdefault("kind", "GPUCluster")
        self.state.upsert("GPUCluster", result)
        self.status.wrote(name, now, _strip_times(new))
        changed = self.status.last_reasons.get(name) != reason
        if changed and kwargs.get("state") == "notReady" and reason not in (OPERANDS_NOT_READY, OPERAND_CONFLICT):
            await self.api.event(cluster, "Warning", reason, kwargs.get("message", ""))
        self.status.last_reasons[name] = reason

    async def report_failure(self, error: Exception, failures: int) -> None:
        """After repeated failed passes, say so on the GPUCluster (Ready=False, Error=True); best effort."""
        cluster = self.state.get("GPUCluster", SINGLETON_NAME)
        if cluster is None or metadata(cluster).get("deletionTimestamp"):
            return
        # No running count in the message: a status that changes on every failed pass would be
        # written on every pass (and read back as a change).
        message = f"reconcile passes keep failing; last error: {error}"
        previous = cluster.get("status") if isinstance(cluster.get("status"), dict) else None
        try:
            await self.set_status(
                cluster, state="notReady", reason=RECONCILE_FAILED, message=message,
                inventory=(previous or {}).get("inventory"),
            )  # fmt: skip
        except (KubeError, OSError, TimeoutError) as exc:
            log.warning("cannot report the failures on the GPUCluster error=%s", exc)

    # ------------------------------------------------------------------ reconcile

    def observe(self, prerequisites: Prerequisites, looked_up: Mapping[Key, KubeObject | None]) -> Observed:
        """The snapshot :func:`plan` decides on, from the cache."""
        state = self.state
        owned = [obj for kind in sorted(OWNED_KINDS) for obj in state.list(kind)]
        namespace = state.get("Namespace", self.namespace)
        return Observed(
            clusters=state.list("GPUCluster"),
            namespace=self.namespace,
            policies=state.list("ClusterPolicy"),
            prerequisites=prerequisites,
            namespace_labels=(metadata(namespace).get("labels") or {}) if namespace is not None else None,
            namespace_annotations=(metadata(namespace).get("annotations") or {}) if namespace is not None else {},
            env=self.env,
            cached={key_of(obj): obj for obj in owned},
            looked_up=looked_up,
            owned=owned,
            applied=self.operands.applied,
            nodes=state.list("Node"),
            unlabelled_nodes=self.peers.unlabelled_nodes(),
            label_errors=dict(self.peers.label_errors()),
            slices=state.list("ResourceSlice"),
            claims=state.list("ResourceClaim"),
            stock=state.derived(
                "gpucluster-inventory",
                lambda s: inventory(s.list("ResourceSlice"), s.list("ResourceClaim")),
                ["ResourceSlice", "ResourceClaim"],
            ),
            templates=list(self.peers.provisioned_templates()),
            previous_conflicts=self.operands.conflicts,
        )

    async def reconcile(self) -> float:
        """One reconcile; returns seconds until the next (5 while not ready, 60 when ready, sooner
        when an inventory update is held back)."""
        self.changes = ChangeLog()
        self.status.due = None  # set again by set_status while an inventory update is still held back
        try:
            requeue = await self._reconcile()
        finally:
            await self._record_changes()
        if self.status.due is not None:
            requeue = max(0.0, min(requeue, self.status.due - self.status.clock()))
        return requeue

    async def _reconcile(self) -> float:
        looked_up: dict[Key, KubeObject | None] = {}
        cluster = self.state.get("GPUCluster", SINGLETON_NAME)
        live = cluster is not None and not metadata(cluster).get("deletionTimestamp")
        prerequisites = await self.served.check(self.api.kube) if live else Prerequisites()
        decided: Plan | None = None
        done: set[tuple[str, Key, str]] = set()  # a write is made at most once per reconcile
        for _ in range(MAX_ROUNDS):
            decided = plan(self.observe(prerequisites, looked_up))
            if decided.lookups:
                for obj in decided.lookups:
                    looked_up[key_of(obj)] = await self.api.lookup(obj)
                continue
            decided.writes = [w for w in decided.writes if _identity(w) not in done]
            if not decided.writes:
                break
            for write in decided.writes:
                done.add(_identity(write))
                await self._execute(write)
        assert decided is not None
        if decided.writes or decided.lookups:
            # Still changing after MAX_ROUNDS (someone keeps rewriting an operand): look again soon.
            log.info("operands still changing after %d rounds; reconciling again", MAX_ROUNDS)
            return 1.0
        self.operands.active = decided.active
        self.operands.conflicts = decided.conflicts
        for status in decided.statuses:
            await self.set_status(
                status.cluster, state=status.state, reason=status.reason, message=status.message,
                **({"inventory": status.inventory} if status.inventory is not None else {}),
            )  # fmt: skip
        for event in decided.events:
            await self.api.event(event.obj, event.type, event.reason, event.message)
        return decided.requeue

    async def _record_changes(self) -> None:
        told, self.changes = self.changes, ChangeLog()
        cluster = self.state.get("GPUCluster", SINGLETON_NAME)
        if cluster is None:
            return
        for type_, reason, message in told.events():
            await self.api.event(cluster, type_, reason, message)
