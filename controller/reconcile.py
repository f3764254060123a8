"""Level-triggered reconcile of the GPUCluster singleton into its operands.

Reads come from the informer cache (:class:`ClusterState`); writes go through :class:`Kube`.
Every desired object carries a hash of its rendered content; an object whose live copy carries
the same hash and whose applied fields still hold the applied values (see controller/drift.py)
is not written, so a steady state issues no writes at all, and a hand edit is reverted on the
watch event that shows it. Objects are applied with server-side apply (field manager
``gpucluster``), but only objects that are ours: a controller owner reference to a GPUCluster,
or, cluster-scoped, our managed-by label. Anything else with an operand's name is never written
or deleted; the GPUCluster reports it (``OperandConflict``). Objects this GPUCluster owns that
are no longer desired (a disabled operand) are deleted, and nothing else is.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from controller.drift import matches, project
from controller.events import EventRecorder
from controller.nodes import label_patch, nodes_with_claims
from controller.operands import MANAGED_BY, STATE_LABEL, ClusterFacts, RenderError, render_operands
from controller.status import (
    DELETING,
    NOT_SINGLETON,
    OPERAND_CONFLICT,
    OPERANDS_NOT_READY,
    PREREQUISITE_NOT_MET,
    RECONCILE_FAILED,
    desired_status,
    inventory,
    not_ready_message,
    workload_status,
)
from gpucluster.api.gpucluster import SINGLETON_MESSAGE, SINGLETON_NAME, GPUCluster
from gpucluster.api.validation import problems_from
from gpucluster.clusterstate import ADMIN_ACCESS_LABEL, ClusterState, KubeObject, metadata
from gpucluster.dra.semver import Semver, SemverError
from gpucluster.kube.client import Kube, KubeError
from gpucluster.kube.paths import collection_path, object_path
from gpucluster.kube.reflector import Resource

log = logging.getLogger("gpucluster.controller")

FINALIZER = "gpucluster.nvidia.com/dra-resourceclaim"
HASH_ANNOTATION = "gpucluster.nvidia.com/applied-hash"
FIELD_MANAGER = "gpucluster"
MIN_VERSION = (1, 34, 2)
GPUCLUSTER_PATH = "/apis/nvidia.com/v1alpha1/gpuclusters"

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

# Normal events on the GPUCluster for what a pass did to its operands (aggregated by the recorder).
OPERAND_CREATED = "OperandCreated"
OPERAND_UPDATED = "OperandUpdated"
OPERAND_PRUNED = "OperandPruned"


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


def content_hash(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
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


class OperandConflict(Exception):
    """An object with an operand's name exists and is not ours: it is left alone."""

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj = obj
        super().__init__(describe(obj))


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


@dataclass
class Prerequisites:
    """What the cluster serves, looked up at most once a minute."""

    checked_at: float = 0.0
    problem: str | None = None
    version: str | None = None
    service_monitor: bool = False


@dataclass
class Reconciler:
    kube: Kube
    state: ClusterState
    namespace: str = "gpu-operator"
    env: Mapping[str, str] = field(default_factory=dict)
    now: Callable[[], str] = _now
    prerequisite_ttl: float = 60.0
    writes: int = 0
    last_reasons: dict[str, str] = field(default_factory=dict)
    drifts: int = 0
    _prereq: Prerequisites = field(default_factory=Prerequisites)
    # (kind, namespace, name) -> hash of the projection of the live object right after our apply.
    _applied: dict[tuple[str, str, str], str] = field(default_factory=dict)
    _conflicts: set[str] = field(default_factory=set)
    _recorder: EventRecorder | None = None
    # A status that differs only in its inventory is written at most every ``inventory_interval``
    # seconds (200 nodes leaving is a handful of status writes, not 200); a change of state or
    # conditions is written at once. ``_status_due``: when a held-back inventory must be written.
    inventory_interval: float = 5.0
    clock: Callable[[], float] = time.monotonic
    status_writes: int = 0
    _status_written: dict[str, tuple[float, Any]] = field(default_factory=dict)
    _status_due: float | None = None
    # What this pass did to operands: (reason, message), recorded as Normal events on the GPUCluster.
    _changes: list[tuple[str, str]] = field(default_factory=list)

    # ------------------------------------------------------------------ writes

    async def _write(self, method: str, path: str, **kwargs: Any) -> KubeObject:
        self.writes += 1
        log.debug("write method=%s path=%s", method, path)
        return await self.kube.request(method, path, **kwargs)

    async def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on ``obj``, aggregated: a repeat bumps count and lastTimestamp."""
        if self._recorder is None:
            self._recorder = EventRecorder(self._write, self.now)
        await self._recorder.record(obj, type_, reason, message)

    async def _lookup(self, obj: Mapping[str, Any]) -> KubeObject | None:
        """The live object when the cache cannot say (our watches see only objects with our label)."""
        try:
            live = await self.kube.get(object_path(obj))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        live.setdefault("kind", obj.get("kind"))
        return live

    async def apply(self, obj: KubeObject) -> bool:
        """Server-side apply ``obj`` unless its live copy is up to date; raises :class:`OperandConflict`
        when an object of that name exists and is not ours."""
        desired = dict(obj)
        meta = dict(metadata(desired))
        digest = content_hash(obj)
        meta["annotations"] = {**(meta.get("annotations") or {}), HASH_ANNOTATION: digest}
        desired["metadata"] = meta
        key = (str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"]))
        live = self.state.get(key[0], key[2], key[1])
        if live is None:
            live = await self._lookup(desired)
        change = (OPERAND_CREATED, f"created {describe(obj)}")
        if live is not None:
            if not is_ours(live):
                raise OperandConflict(live)
            change = (OPERAND_UPDATED, f"updated {describe(obj)} to the desired spec")
            if (metadata(live).get("annotations") or {}).get(HASH_ANNOTATION) == digest:
                applied = self._applied.get(key)
                if applied == content_hash(project(desired, live)) or (applied is None and matches(desired, live)):
                    return False
                self.drifts += 1
                log.info("drift: %s %s/%s was changed by someone else; re-applying", *key)
                change = (OPERAND_UPDATED, f"reverted a change to {describe(obj)} made by someone else")
        result = await self._write(
            "PATCH",
            object_path(desired),
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            body=desired,
            content_type="application/apply-patch+yaml",
        )
        result.setdefault("kind", obj["kind"])
        self._applied[key] = content_hash(project(desired, result))
        self.state.upsert(str(obj["kind"]), result)
        self._changes.append(change)
        return True

    async def delete(self, obj: Mapping[str, Any], propagation: str = "Background") -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        try:
            await self._write("DELETE", object_path(obj), body=body)
        except KubeError as exc:
            if exc.status != 404:
                raise
        if propagation == "Background":
            self.state.delete(str(obj.get("kind")), obj)

    # ------------------------------------------------------------------ checks

    async def prerequisites(self) -> Prerequisites:
        """DeviceClass API served (resource.k8s.io/v1), server >= v1.34.2; ServiceMonitor CRD served?"""
        if time.monotonic() - self._prereq.checked_at < self.prerequisite_ttl:
            return self._prereq
        problem = None
        version = None
        try:
            group = await self.kube.get("/apis/resource.k8s.io")
            versions = {v.get("version") for v in group.get("versions") or []}
            if "v1" not in versions:
                problem = (
                    "the resource.k8s.io/v1 API (DeviceClass) is not served: DRA needs Kubernetes v1.34.2 or later "
                    "with resource.k8s.io/v1 enabled"
                )
        except KubeError as exc:
            if exc.status != 404:
                raise
            problem = "the resource.k8s.io API group is not served: DRA needs Kubernetes v1.34.2 or later"
        info = await self.kube.get("/version")
        version = str(info.get("gitVersion") or "")
        try:
            parsed = Semver.parse(version.split("+")[0].split("-")[0], normalize=True)
            if (parsed.major, parsed.minor, parsed.patch) < MIN_VERSION:
                problem = problem or f"Kubernetes {version} is too old: DRA with GPUCluster needs v1.34.2 or later"
        except SemverError:
            log.warning("cannot parse the server version %r; assuming it is recent enough", version)
        try:
            await self.kube.get("/apis/monitoring.coreos.com/v1")
            service_monitor = True
        except KubeError:
            service_monitor = False
        self._prereq = Prerequisites(time.monotonic(), problem, version, service_monitor)
        return self._prereq

    # ------------------------------------------------------------------ status

    async def set_status(self, cluster: Mapping[str, Any], **kwargs: Any) -> None:
        meta = metadata(cluster)
        generation = int(meta.get("generation") or 0)
        current = cluster.get("status") if isinstance(cluster.get("status"), dict) else None
        new = desired_status(current, namespace=self.namespace, generation=generation, now=self.now(), **kwargs)
        if _strip_times(current) == _strip_times(new):
            return
        name = str(meta.get("name"))
        now = self.clock()
        written_at, written = self._status_written.get(name, (None, None))
        if (
            written_at is not None
            and now - written_at < self.inventory_interval
            and _without_inventory(written) == _without_inventory(_strip_times(new))
            and _without_inventory(_strip_times(current)) == _without_inventory(written)
        ):
            # Only the inventory moved since our last write: hold it back, write it when due.
            due = written_at + self.inventory_interval
            self._status_due = due if self._status_due is None else min(self._status_due, due)
            return
        reason = kwargs.get("reason", "")
        result = await self._write(
            "PATCH",
            f"{GPUCLUSTER_PATH}/{meta.get('name')}/status",
            body={"status": new},
            content_type="application/merge-patch+json",
        )
        result.setdefault("kind", "GPUCluster")
        self.state.upsert("GPUCluster", result)
        self.status_writes += 1
        self._status_written[name] = (now, _strip_times(new))
        if name == SINGLETON_NAME:
            self._status_due = None
        changed = self.last_reasons.get(str(meta.get("name"))) != reason
        if changed and kwargs.get("state") == "notReady" and reason not in (OPERANDS_NOT_READY, OPERAND_CONFLICT):
            await self.event(cluster, "Warning", reason, kwargs.get("message", ""))
        self.last_reasons[str(meta.get("name"))] = reason

    async def report_failure(self, error: Exception, failures: int) -> None:
        """After repeated failed passes, say so on the GPUCluster (Ready=False, Error=True); best effort."""
        cluster = self.state.get("GPUCluster", SINGLETON_NAME)
        if cluster is None or metadata(cluster).get("deletionTimestamp"):
            return
        message = f"{failures} reconcile passes in a row failed; last error: {error}"
        previous = cluster.get("status") if isinstance(cluster.get("status"), dict) else None
        try:
            await self.set_status(
                cluster, state="notReady", reason=RECONCILE_FAILED, message=message,
                inventory=(previous or {}).get("inventory"),
            )  # fmt: skip
        except (KubeError, OSError, TimeoutError) as exc:
            log.warning("cannot report the failures on the GPUCluster error=%s", exc)

    # ------------------------------------------------------------------ reconcile

    async def reconcile(self) -> float:
        """One pass; returns seconds until the next pass (5 while not ready, 60 when ready, sooner when
        an inventory update is held back)."""
        self._changes = []
        self._status_due = None  # set again by set_status while an inventory update is still held back
        try:
            requeue = await self._reconcile()
        finally:
            await self._record_changes()
        if self._status_due is not None:
            requeue = max(0.0, min(requeue, self._status_due - self.clock()))
        return requeue

    async def _record_changes(self) -> None:
        changes, self._changes = self._changes, []
        cluster = self.state.get("GPUCluster", SINGLETON_NAME)
        if cluster is None:
            return
        for reason, message in changes:
            await self.event(cluster, "Normal", reason, message)

    async def _reconcile(self) -> float:
        for other in self.state.list("GPUCluster"):
            if metadata(other).get("name") != SINGLETON_NAME and not metadata(other).get("deletionTimestamp"):
                await self.set_status(
                    other, state="disabled", reason=NOT_SINGLETON,
                    message=f"ignored: {SINGLETON_MESSAGE}; only gpu-cluster is reconciled",
                )  # fmt: skip
        cluster = self.state.get("GPUCluster", SINGLETON_NAME)
        if cluster is None:
            return 60.0
        if metadata(cluster).get("deletionTimestamp"):
            return await self.finalize(cluster)
        if FINALIZER not in (metadata(cluster).get("finalizers") or []):
            await self._add_finalizer(cluster)
            cluster = self.state.get("GPUCluster", SINGLETON_NAME) or cluster

        prereq = await self.prerequisites()
        policies = self.state.list("ClusterPolicy")
        problem = prereq.problem
        if policies and problem is None:
            names = ", ".join(sorted(str(metadata(p).get("name")) for p in policies))
            problem = (
                f"ClusterPolicy {names} exists: a cluster uses one GPU management model; GPUCluster supports "
                "new installations only, delete the ClusterPolicy and its operands first"
            )
        if problem:
            await self.set_status(cluster, state="notReady", reason=PREREQUISITE_NOT_MET, message=problem)
            return 30.0

        await self._label_namespace()
        try:
            model = GPUCluster.model_validate(cluster)
        except ValidationError as exc:
            detail = "; ".join(str(p) for p in problems_from(exc))
            await self.set_status(cluster, state="notReady", reason=RECONCILE_FAILED, message=detail)
            return 30.0
        facts = ClusterFacts.from_environ(
            self.env,
            namespace=self.namespace,
            owner_uid=str(metadata(cluster).get("uid") or "") or None,
            service_monitor_crd=prereq.service_monitor,
            kubernetes_version=prereq.version,
        )
        try:
            operands = render_operands(model, facts)
        except RenderError as exc:
            await self.set_status(cluster, state="notReady", reason=RECONCILE_FAILED, message=str(exc))
            return 30.0

        desired_keys: set[tuple[str, str, str]] = set()
        workloads = []
        conflicts: list[str] = []
        for operand in operands:
            for obj in operand.objects:
                meta = metadata(obj)
                desired_keys.add((str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"])))
                try:
                    applied = await self.apply(obj)
                except OperandConflict as conflict:
                    conflicts.append(str(conflict))
                    continue
                if applied and (obj.get("spec") or {}).get("extendedResourceName"):
                    await self._check_extended_resource(cluster, obj)
                if obj["kind"] in ("DaemonSet", "Deployment"):
                    workloads.append((str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"])))
        await self.prune(str(metadata(cluster).get("uid") or ""), desired_keys)
        relabelled = await self.label_nodes()
        if conflicts:
            for name in sorted(set(conflicts) - self._conflicts):
                await self.event(
                    cluster, "Warning", OPERAND_CONFLICT,
                    f"{name} exists and is not managed by this GPUCluster: it is left untouched; "
                    "delete it (or, cluster-scoped, label it app.kubernetes.io/managed-by=gpucluster) to hand it over",
                )  # fmt: skip
            self._conflicts = set(conflicts)
            await self.set_status(
                cluster, state="notReady", reason=OPERAND_CONFLICT,
                message=f"objects with operand names exist and are not ours, left untouched: {', '.join(conflicts)}",
                inventory=inventory(self.state.list("ResourceSlice"), self.state.list("ResourceClaim")),
            )  # fmt: skip
            return 5.0
        self._conflicts = set()

        statuses = []
        nodes = self.state.list("Node")
        for kind, namespace, name in workloads:
            live = self.state.get(kind, name, namespace)
            if live is not None:
                statuses.append(workload_status(live, nodes))
            else:
                statuses.append(workload_status({"kind": kind, "metadata": {"name": name, "generation": 1}}))
        # Nodes labelled in this pass are not yet in the DaemonSets' status: not ready until they are.
        ready = all(s.ready for s in statuses) and not relabelled
        stock = inventory(self.state.list("ResourceSlice"), self.state.list("ResourceClaim"))
        if ready:
            await self.set_status(
                cluster, state="ready", reason="Reconciled", message="all operands are ready", inventory=stock
            )
            return 60.0
        message = (
            not_ready_message(statuses) or f"waiting for the operands to schedule on {relabelled} newly labelled nodes"
        )
        await self.set_status(cluster, state="notReady", reason=OPERANDS_NOT_READY, message=message, inventory=stock)
        return 1.0 if relabelled else 5.0

    async def _check_extended_resource(self, cluster: Mapping[str, Any], device_class: Mapping[str, Any]) -> None:
        """An API server without DRAExtendedResource drops the field: say so, the webhook translates instead."""
        live = self.state.get("DeviceClass", str(metadata(device_class).get("name"))) or {}
        if not (live.get("spec") or {}).get("extendedResourceName"):
            await self.event(
                cluster, "Warning", "ExtendedResourceNotServed",
                f"the API server dropped spec.extendedResourceName of DeviceClass {metadata(device_class).get('name')}: "
                "enable the DRAExtendedResource feature gate; until then the admission webhook translates "
                f"{(device_class.get('spec') or {}).get('extendedResourceName')} requests",
            )  # fmt: skip

    async def _add_finalizer(self, cluster: Mapping[str, Any]) -> None:
        meta = metadata(cluster)
        finalizers = [*(meta.get("finalizers") or []), FINALIZER]
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}}
        result = await self._write(
            "PATCH", f"{GPUCLUSTER_PATH}/{meta.get('name')}", body=body, content_type="application/merge-patch+json"
        )
        result.setdefault("kind", "GPUCluster")
        self.state.upsert("GPUCluster", result)

    async def _label_namespace(self) -> None:
        ns = self.state.get("Namespace", self.namespace)
        if ns is not None and (metadata(ns).get("labels") or {}).get(ADMIN_ACCESS_LABEL) == "true":
            return
        body = {"metadata": {"labels": {ADMIN_ACCESS_LABEL: "true"}}}
        result = await self._write(
            "PATCH", f"/api/v1/namespaces/{self.namespace}", body=body, content_type="application/merge-patch+json"
        )
        result.setdefault("kind", "Namespace")
        self.state.upsert("Namespace", result)

    async def prune(self, uid: str, desired: set[tuple[str, str, str]]) -> None:
        """Delete objects this GPUCluster controls that no operand renders any more (and only those)."""
        if not uid:
            return
        for kind in OWNED_KINDS:
            for obj in self.state.list(kind):
                meta = metadata(obj)
                key = (kind, str(meta.get("namespace") or ""), str(meta.get("name")))
                labels = meta.get("labels") or {}
                if key in desired or labels.get("app.kubernetes.io/managed-by") != MANAGED_BY:
                    continue
                if not _owned_by(obj, uid) or STATE_LABEL not in labels or meta.get("deletionTimestamp"):
                    continue
                log.info("deleting %s %s/%s: its operand is disabled", kind, key[1], key[2])
                await self.delete(obj)
                self._changes.append((OPERAND_PRUNED, f"deleted {describe(obj)}: its operand is disabled"))

    async def label_nodes(self) -> int:
        """Label GPU nodes; returns how many nodes were patched."""
        patched = 0
        mode = self.env.get("DEFAULT_GPU_ALLOCATION_MODE")
        busy = nodes_with_claims(self.state.list("ResourceClaim"))
        for node in self.state.list("Node"):
            name = str(metadata(node).get("name"))
            patch = label_patch(node, mode, name in busy)
            if not patch:
                continue
            result = await self._write(
                "PATCH",
                f"/api/v1/nodes/{name}",
                body={"metadata": {"labels": patch}},
                content_type="application/merge-patch+json",
            )
            result.setdefault("kind", "Node")
            self.state.upsert("Node", result)
            patched += 1
        return patched

    async def finalize(self, cluster: Mapping[str, Any]) -> float:
        """Foreground-delete the claim-consuming DaemonSets, wait for them, then drop the finalizer."""
        meta = metadata(cluster)
        if FINALIZER not in (meta.get("finalizers") or []):
            return 60.0
        uid = str(meta.get("uid") or "")
        draining = []
        for ds in self.state.list("DaemonSet"):
            template = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
            if not _owned_by(ds, uid) or not template.get("resourceClaims"):
                continue
            draining.append(str(metadata(ds).get("name")))
            if not metadata(ds).get("deletionTimestamp"):
                await self.delete(ds, propagation="Foreground")
        if draining:
            message = f"Waiting for ResourceClaim-consuming DaemonSet(s) to terminate: {', '.join(sorted(draining))}"
            await self.set_status(cluster, state="notReady", reason=DELETING, message=f"deleting: {message}")
            await self.event(cluster, "Normal", "DrainingClaimConsumers", message)
            return 5.0
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}}
        await self._write(
            "PATCH", f"{GPUCLUSTER_PATH}/{meta.get('name')}", body=body, content_type="application/merge-patch+json"
        )
        return 60.0
