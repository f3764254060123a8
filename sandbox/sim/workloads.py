"""The DaemonSet, Deployment and ReplicaSet controllers (kube-controller-manager's
``pkg/controller/daemon``, ``deployment`` and ``replicaset``): they create and delete real pods,
which the simulated scheduler binds and the simulated kubelet starts, and compute their status
from those pods.

DaemonSet (``Workloads._sync_daemonset``):

* A node should run a daemon pod when the template's nodeSelector and required node affinity
  match it and its taints are tolerated (the template's tolerations plus the controller's
  defaults: ``predicates.daemon_should_run``); a pod on a node that no longer matches, or whose
  NoExecute taint is not tolerated, is deleted (a new NoSchedule taint only stops new pods and
  counts the running one as misscheduled), as are pods for nodes that are gone.
* Pods are ``<ds>-<5 random>`` from ``spec.template`` with the labels ``controller-revision-hash``
  (a hash of the template) and ``pod-template-generation``, the default daemon tolerations, an
  ownerReference (``controller``, ``blockOwnerDeletion``) and, instead of ``spec.nodeName``, a
  required node affinity ``matchFields metadata.name In [<node>]`` replacing the template's
  required node affinity - so they go through the resourceclaim controller and the scheduler
  like any pod (claims from ``resourceClaimTemplateName`` get allocated there).
* A failed pod is deleted (``FailedDaemonPod``) and replaced, with a per-node backoff of 1 s
  doubling to 5 min; of several pods on one node the oldest stays.
* Rollouts: a pod is updated when its ``controller-revision-hash`` (or its
  ``pod-template-generation``) is the current one. ``RollingUpdate`` deletes old pods that are
  not available at once and available ones while fewer than ``maxUnavailable`` (default 1,
  percentages of the desired count rounded up) are unavailable, and creates the new pod in the
  same sync; ``maxSurge`` is not modelled. ``OnDelete`` never deletes old pods.
* Status: ``desiredNumberScheduled`` (nodes that should run it), ``currentNumberScheduled``
  (those with a pod: bound there, or pending with the node affinity for it),
  ``numberMisscheduled``, ``numberReady``/``numberAvailable`` (the node's oldest pod is Ready;
  ``minReadySeconds`` is not modelled), ``updatedNumberScheduled``, ``numberUnavailable``,
  ``observedGeneration``; zero counts that upstream omits are omitted.

Deployment (``_sync_deployment``): the ReplicaSet of the current template is
``<deploy>-<pod-template-hash>`` (labels, selector and template get ``pod-template-hash``;
annotations ``deployment.kubernetes.io/revision``, ``desired-replicas``, ``max-replicas``;
owned by the Deployment). ``RollingUpdate`` scales the new ReplicaSet up within
``replicas + maxSurge`` pods and the old ones down while at least ``replicas - maxUnavailable``
pods stay available (unavailable old pods first); ``Recreate`` scales the old ones to 0 and the
new one up once their pods are gone. ``paused`` stops scaling. Old ReplicaSets beyond
``revisionHistoryLimit`` are deleted. Status (replicas, updated/ready/available/unavailable,
conditions Available and Progressing) comes from the ReplicaSets, whose status comes from their
pods. ``ScalingReplicaSet`` events.

ReplicaSet (``_sync_replicaset``): ``<rs>-<5 random>`` pods from its template until ``replicas``
active pods exist; surplus pods go unscheduled first, then pending, not ready, newest.
Orphaned pods that match a selector are not adopted. ReplicaSets are served
(``apps/v1 replicasets``, short name ``rs``) when this controller runs: ``ensure_replicasets``.

Events (``SuccessfulCreate``/``SuccessfulDelete`` ``Created pod: <name>`` ...) go through
``events.EventRecorder``, so a thousand-node DaemonSet leaves a handful of events, as upstream.

Cost: pod changes mark their owner for a sync that runs at most every ``BATCH_DELAY`` seconds
(``idle()`` counts a marked owner as work), so a thousand pods becoming ready cause a few syncs,
not a thousand; whether a DaemonSet should run on a node is cached per template generation and
node resourceVersion.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from gpucluster.kube import predicates
from gpucluster.sandbox.apiserver.core import Context
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.resources import Registry, ResourceType
from gpucluster.sandbox.apiserver.store import ADDED, DELETED, Event
from gpucluster.sandbox.sim.base import Controller, Obj, Retry, meta
from gpucluster.sandbox.sim.events import EventRecorder

NODES = ("", "nodes")
PODS = ("", "pods")
DAEMONSETS = ("apps", "daemonsets")
DEPLOYMENTS = ("apps", "deployments")
REPLICASETS = ("apps", "replicasets")
DAEMONSET, DEPLOYMENT, REPLICASET = "DaemonSet", "Deployment", "ReplicaSet"
RESOURCE_OF = {DAEMONSET: DAEMONSETS, DEPLOYMENT: DEPLOYMENTS, REPLICASET: REPLICASETS}
KIND_OF = {v: k for k, v in RESOURCE_OF.items()}

REVISION_HASH = "controller-revision-hash"
TEMPLATE_GENERATION = "pod-template-generation"
POD_TEMPLATE_HASH = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
MAX_GENERATE_BASE = 58  # 63 minus the 5 random characters
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery rand.SafeEncodeString
BATCH_DELAY = 0.005  # pod-triggered syncs wait at least this long, collecting more changes
BATCH_COST_RATIO = 9.0  # ... and 9 times as long as the last sync took (<= 10% of the time)
YIELD_EVERY = 50
FAILED_BACKOFF = (1.0, 300.0)
_TIME_KEYS = ("lastUpdateTime", "lastTransitionTime")

Key = tuple[str, str, str]  # (kind, namespace, name)


def replicaset_type() -> ResourceType:
    return ResourceType(
        "apps",
        "v1",
        "replicasets",
        REPLICASET,
        True,
        short_names=("rs",),
        categories=("all",),
        subresources=("status",),
        generation=True,
        status_on_create=False,
    )


def ensure_replicasets(registry: Registry) -> None:
    """Serve ``apps/v1 replicasets`` (the sandbox's built-in kinds do not include them)."""
    if registry.get("apps", "v1", "replicasets") is None:
        registry.add(replicaset_type())


def compute_hash(template: Any, collision_count: int | None = None) -> str:
    """A pod-template-hash / controller-revision-hash: a 32-bit hash of the template written
    with rand.SafeEncodeString's alphabet, as the controllers' ``ComputeHash`` does (the
    value differs from upstream's: the template is hashed as canonical JSON)."""
    raw = json.dumps(template, sort_keys=True, separators=(",", ":"))
    if collision_count:
        raw += str(collision_count)
    value = int.from_bytes(hashlib.sha256(raw.encode()).digest()[:4], "big")
    return "".join(SAFE_ALPHABET[ord(c) % len(SAFE_ALPHABET)] for c in str(value))


def scaled(value: Any, total: int, *, round_up: bool, default: int = 0) -> int:
    """intstr.GetScaledValueFromIntOrPercent: an int, or a percentage of ``total``."""
    if value is None:
        return default
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            return default
        exact = percent * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    try:
        return int(text)
    except ValueError:
        return default


def controller_ref(obj: Obj) -> Obj | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owner_ref(owner: Obj, kind: str) -> Obj:
    md = meta(owner)
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": md.get("name"),
        "uid": md.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def generate_name(owner: str) -> str:
    return f"{owner}-"[:MAX_GENERATE_BASE]


def _terminating(pod: Obj) -> bool:
    return bool(meta(pod).get("deletionTimestamp"))


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _active(pod: Obj) -> bool:
    return not _terminating(pod) and _phase(pod) not in ("Succeeded", "Failed")


def _strip_times(status: Any) -> Any:
    if not isinstance(status, dict):
        return status
    out = dict(status)
    if "conditions" in out:
        out["conditions"] = [{k: v for k, v in c.items() if k not in _TIME_KEYS} for c in out["conditions"] or []]
    return out


def _omit_zero(status: Obj, *keys: str) -> Obj:
    for key in keys:
        if not status.get(key):
            status.pop(key, None)
    return status


@dataclass(frozen=True, slots=True)
class DaemonPod:
    """What the DaemonSet controller needs of one of its pods, kept up to date from pod events
    (so a sync does not read a thousand pods)."""

    name: str
    node: str | None
    bound: bool
    created: str
    phase: str
    ready: bool
    terminating: bool
    revision: str | None
    generation: str | None

    @staticmethod
    def of(pod: Obj) -> DaemonPod:
        md = meta(pod)
        labels = predicates.labels_of(pod)
        return DaemonPod(
            name=str(md.get("name")),
            node=predicates.target_node(pod),
            bound=bool((pod.get("spec") or {}).get("nodeName")),
            created=str(md.get("creationTimestamp") or ""),
            phase=_phase(pod),
            ready=predicates.pod_ready(pod),
            terminating=_terminating(pod),
            revision=labels.get(REVISION_HASH),
            generation=labels.get(TEMPLATE_GENERATION),
        )

    def updated(self, hash_: str, generation: int) -> bool:
        return self.revision == hash_ or self.generation == str(generation)

    def order(self) -> tuple[bool, str, str]:
        """Bound pods first, then by creation time and name (podByCreationTimestampAndPhase)."""
        return (not self.bound, self.created, self.name)


# ---------------------------------------------------------------------------------- status


def daemonset_status(
    ds: Obj, decisions: dict[str, tuple[bool, bool]], pods_by_node: dict[str, list[DaemonPod]], hash_: str
) -> Obj:
    """DaemonSet status from its pods (updateDaemonSetStatus)."""
    generation = int(meta(ds).get("generation") or 1)
    desired = current = misscheduled = ready = available = updated = 0
    for node, (run, _) in decisions.items():
        pods = pods_by_node.get(node)
        if run:
            desired += 1
            if pods:
                current += 1
                pod = pods[0] if len(pods) == 1 else min(pods, key=DaemonPod.order)
                if pod.ready:
                    ready += 1
                    available += 1
                if pod.updated(hash_, generation):
                    updated += 1
        elif pods:
            misscheduled += 1
    status: Obj = {
        "currentNumberScheduled": current,
        "desiredNumberScheduled": desired,
        "numberMisscheduled": misscheduled,
        "numberReady": ready,
        "observedGeneration": generation,
        "updatedNumberScheduled": updated,
        "numberAvailable": available,
        "numberUnavailable": max(desired - available, 0),
    }
    return _omit_zero(status, "updatedNumberScheduled", "numberAvailable", "numberUnavailable")


def replicaset_status(rs: Obj, pods: Iterable[Obj]) -> Obj:
    """ReplicaSet status from its active pods (calculateStatus)."""
    selector_labels = ((rs.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
    active = [p for p in pods if _active(p)]
    labelled = sum(1 for p in active if all(predicates.labels_of(p).get(k) == v for k, v in selector_labels.items()))
    ready = sum(1 for p in active if predicates.pod_ready(p))
    status: Obj = {
        "replicas": len(active),
        "fullyLabeledReplicas": labelled,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": int(meta(rs).get("generation") or 1),
    }
    return _omit_zero(status, "fullyLabeledReplicas", "readyReplicas", "availableReplicas")


def _replicas(obj: Obj) -> int:
    value = (obj.get("spec") or {}).get("replicas", 1)
    return int(value) if value is not None else 1


def _rs_status(rs: Obj, key: str) -> int:
    return int((rs.get("status") or {}).get(key) or 0)


def max_surge_unavailable(deploy: Obj) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) of a RollingUpdate Deployment (ResolveFenceposts)."""
    replicas = _replicas(deploy)
    rolling = ((deploy.get("spec") or {}).get("strategy") or {}).get("rollingUpdate") or {}
    surge = scaled(rolling.get("maxSurge", "25%"), replicas, round_up=True)
    unavailable = scaled(rolling.get("maxUnavailable", "25%"), replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def deployment_status(deploy: Obj, new_rs: Obj | None, all_rs: list[Obj], old: Obj | None, now: str) -> Obj:
    """Deployment status from its ReplicaSets (calculateStatus plus the Available and
    Progressing conditions; the progress deadline is not modelled)."""
    replicas = _replicas(deploy)
    strategy = ((deploy.get("spec") or {}).get("strategy") or {}).get("type") or "RollingUpdate"
    max_unavailable = max_surge_unavailable(deploy)[1] if strategy == "RollingUpdate" else 0
    available = sum(_rs_status(rs, "availableReplicas") for rs in all_rs)
    total = sum(_replicas(rs) for rs in all_rs)
    actual = sum(_rs_status(rs, "replicas") for rs in all_rs)
    updated = _rs_status(new_rs, "replicas") if new_rs is not None else 0
    generation = int(meta(deploy).get("generation") or 1)
    status: Obj = {
        "observedGeneration": generation,
        "replicas": actual,
        "updatedReplicas": updated,
        "readyReplicas": sum(_rs_status(rs, "readyReplicas") for rs in all_rs),
        "availableReplicas": available,
        "unavailableReplicas": max(total - available, 0),
    }
    _omit_zero(status, "replicas", "updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas")
    if (old or {}).get("collisionCount") is not None:
        status["collisionCount"] = (old or {})["collisionCount"]
    rs_name = str(meta(new_rs).get("name")) if new_rs is not None else ""
    if available >= replicas - max_unavailable:
        available_cond = ("True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
    else:
        available_cond = ("False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
    complete = updated == replicas and actual == replicas and available == replicas
    if complete and new_rs is not None:
        progressing = ("True", "NewReplicaSetAvailable", f'ReplicaSet "{rs_name}" has successfully progressed.')
    else:
        progressing = ("True", "ReplicaSetUpdated", f'ReplicaSet "{rs_name}" is progressing.')
    previous = {c.get("type"): c for c in (old or {}).get("conditions") or []}
    conditions = []
    for ctype, (cstatus, reason, message) in (("Available", available_cond), ("Progressing", progressing)):
        before = previous.get(ctype) or {}
        same = before.get("status") == cstatus and before.get("reason") == reason and before.get("message") == message
        transition = before.get("lastTransitionTime") if before.get("status") == cstatus else None
        conditions.append(
            {
                "type": ctype,
                "status": cstatus,
                "lastUpdateTime": before.get("lastUpdateTime") if same else now,
                "lastTransitionTime": transition or now,
                "reason": reason,
                "message": message,
            }
        )
    status["conditions"] = conditions
    return status


# ---------------------------------------------------------------------------------- controller


class Workloads(Controller):
    """DaemonSets, Deployments and ReplicaSets: pods, rollouts, status (see the module docstring)."""

    name = "workloads"
    username = "system:serviceaccount:kube-system:daemon-set-controller"
    field_manager = "kube-controller-manager"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._soon: dict[Key, None] = {}
        self._soon_timer: asyncio.TimerHandle | None = None
        self._quiet_until = 0.0
        self._daemon_pods: dict[str, dict[str, DaemonPod]] = {}  # DaemonSet uid -> pod name -> pod
        self._daemon_owner: dict[tuple[str, str], str] = {}  # pod -> DaemonSet uid
        # DaemonSet uid -> (generation, node -> (node resourceVersion, (should run, should continue)))
        self._decisions: dict[str, tuple[int, dict[str, tuple[str, tuple[bool, bool]]]]] = {}
        self._decided: dict[str, tuple[int, int, dict[str, tuple[bool, bool]]]] = {}  # uid -> (gen, nodes, result)
        self._nodes_version = 0  # bumped by every node change that can change where pods run
        self._failed: dict[tuple[str, str], tuple[int, float]] = {}  # (ds uid, node) -> (failures, next try)
        self._recorders: dict[str, EventRecorder] = {}
        self.pods_created = 0
        self.pods_deleted = 0

    # ------------------------------------------------------------ queue

    def idle(self) -> bool:
        return super().idle() and not self._soon

    async def stop(self) -> None:
        if self._soon_timer is not None:
            self._soon_timer.cancel()
            self._soon_timer = None
        await super().stop()

    def soon(self, key: Key) -> None:
        """Sync ``key`` a little later, together with whatever else changes meanwhile: after
        ``BATCH_DELAY`` and after ``BATCH_COST_RATIO`` times the duration of the last sync."""
        self._soon[key] = None
        if self._soon_timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            delay = max(BATCH_DELAY, self._quiet_until - loop.time())
            self._soon_timer = loop.call_later(delay, self._release)

    def _release(self) -> None:
        self._soon_timer = None
        keys, self._soon = self._soon, {}
        for key in keys:
            self.enqueue(key)

    def initial_keys(self) -> Iterable[Hashable]:
        for pod in self.core.store.iter(PODS):
            self._index_pod(pod, present=True)
        out: list[Key] = []
        for kind, resource in RESOURCE_OF.items():
            for obj in self.core.store.iter(resource):
                out.append((kind, str(meta(obj).get("namespace")), str(meta(obj).get("name"))))
        return out

    def on_event(self, event: Event) -> None:
        resource, obj, old = event.resource, event.obj, event.old
        if resource == PODS:
            self._index_pod(obj, present=event.type != DELETED)
            ref = controller_ref(obj)
            if ref is None or ref.get("kind") not in (DAEMONSET, REPLICASET):
                return
            if event.type not in (ADDED, DELETED) and old is not None and self._pod_view(old) == self._pod_view(obj):
                return
            self.soon((str(ref["kind"]), str(meta(obj).get("namespace")), str(ref.get("name"))))
        elif resource in KIND_OF:
            kind = KIND_OF[resource]
            key = (kind, str(meta(obj).get("namespace")), str(meta(obj).get("name")))
            if event.type == DELETED:
                if kind == DAEMONSET:
                    self._decisions.pop(str(meta(obj).get("uid")), None)
                    self._decided.pop(str(meta(obj).get("uid")), None)
                if kind == REPLICASET:
                    self._touch_owner(obj)
                return
            if old is not None and event.type != ADDED:
                same_spec = (old.get("spec") or {}) == (obj.get("spec") or {})
                same_deletion = bool(meta(old).get("deletionTimestamp")) == bool(meta(obj).get("deletionTimestamp"))
                if kind == REPLICASET and (old.get("status") or {}) != (obj.get("status") or {}):
                    self._touch_owner(obj)
                if same_spec and same_deletion:
                    return  # status or metadata only
            self.enqueue(key)
        elif resource == NODES:
            if event.type != DELETED and not predicates.node_changed(old, obj):
                return
            self._nodes_version += 1
            for ds in self.core.store.iter(DAEMONSETS):
                self.soon((DAEMONSET, str(meta(ds).get("namespace")), str(meta(ds).get("name"))))

    @staticmethod
    def _pod_view(pod: Obj) -> tuple[Any, ...]:
        spec = pod.get("spec") or {}
        return (
            _phase(pod),
            predicates.pod_ready(pod),
            spec.get("nodeName"),
            bool(meta(pod).get("deletionTimestamp")),
            tuple(sorted(predicates.labels_of(pod).items())),
        )

    def _index_pod(self, pod: Obj, *, present: bool) -> None:
        md = meta(pod)
        key = (str(md.get("namespace")), str(md.get("name")))
        ref = controller_ref(pod) if present else None
        owner = str(ref.get("uid")) if ref is not None and ref.get("kind") == DAEMONSET else None
        before = self._daemon_owner.pop(key, None)
        if before is not None and before != owner:
            pods = self._daemon_pods.get(before)
            if pods is not None:
                pods.pop(key[1], None)
                if not pods:
                    del self._daemon_pods[before]
        if owner is not None:
            self._daemon_owner[key] = owner
            self._daemon_pods.setdefault(owner, {})[key[1]] = DaemonPod.of(pod)

    def _touch_owner(self, rs: Obj) -> None:
        ref = controller_ref(rs)
        if ref is not None and ref.get("kind") == DEPLOYMENT:
            self.soon((DEPLOYMENT, str(meta(rs).get("namespace")), str(ref.get("name"))))

    async def sync(self, key: Any) -> None:
        kind, ns, name = key
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            if kind == DAEMONSET:
                await self._sync_daemonset(str(ns), str(name))
            elif kind == DEPLOYMENT:
                await self._sync_deployment(str(ns), str(name))
            elif kind == REPLICASET:
                await self._sync_replicaset(str(ns), str(name))
        finally:
            now = loop.time()
            self._quiet_until = max(self._quiet_until, now + BATCH_COST_RATIO * (now - started))

    # ------------------------------------------------------------ helpers

    def _ctx(self, component: str) -> Context:
        return Context(
            user={"username": f"system:serviceaccount:kube-system:{component}", "groups": ["system:authenticated"]},
            field_manager=self.field_manager,
        )

    def _recorder(self, component: str) -> EventRecorder:
        recorder = self._recorders.get(component)
        if recorder is None:
            recorder = self._recorders[component] = EventRecorder(self.core, component, lambda: self._ctx(component))
        return recorder

    def _owned(self, owner: Obj, resource: tuple[str, str]) -> list[Obj]:
        uid = meta(owner).get("uid")
        out = []
        for res, obj in self.core.store.dependents(str(uid)):
            if res == resource and (controller_ref(obj) or {}).get("uid") == uid:
                out.append(obj)
        return out

    async def _create_pod(self, owner: Obj, kind: str, component: str, body: Obj) -> Obj | None:
        md = meta(owner)
        rt = self.rt("", "v1", "pods")
        try:
            pod = await self.core.create(rt, str(md["namespace"]), body, self._ctx(component), managed=False)
        except ApiError as exc:
            await self._recorder(component).event(
                owner, kind, "apps/v1", "Warning", "FailedCreate", f"Error creating: {exc.message}"
            )
            if exc.code in (403, 404):  # namespace terminating or gone: nothing to retry
                return None
            raise
        self.pods_created += 1
        await self._recorder(component).event(
            owner, kind, "apps/v1", "Normal", "SuccessfulCreate", f"Created pod: {meta(pod).get('name')}"
        )
        if self.pods_created % YIELD_EVERY == 0:
            await asyncio.sleep(0)  # let the API server answer clients between batches
        return pod

    async def _delete_pod(self, owner: Obj, kind: str, component: str, name: str) -> None:
        rt = self.rt("", "v1", "pods")
        ns = str(meta(owner)["namespace"])
        try:
            await self.core.delete(rt, ns, name, {}, self._ctx(component))
        except ApiError as exc:
            if exc.code == 404:
                return
            await self._recorder(component).event(
                owner, kind, "apps/v1", "Warning", "FailedDelete", f"Error deleting: {exc.message}"
            )
            raise
        self.pods_deleted += 1
        await self._recorder(component).event(
            owner, kind, "apps/v1", "Normal", "SuccessfulDelete", f"Deleted pod: {name}"
        )
        if self.pods_deleted % YIELD_EVERY == 0:
            await asyncio.sleep(0)

    async def _write_status(self, resource: str, obj: Obj, status: Obj, component: str) -> Obj:
        """Replace the status (keeping ``collisionCount`` and ``conditions`` we do not compute)."""
        current = obj.get("status") or {}
        status = dict(status)
        for kept in ("collisionCount", "conditions"):
            if kept in current and kept not in status:
                status[kept] = current[kept]
        if _strip_times(status) == _strip_times(current):
            return obj
        md = meta(obj)
        rt = self.rt("apps", "v1", resource)
        body = {**obj, "status": status}
        written: Obj = await self.core.update(
            rt, str(md["namespace"]), str(md["name"]), body, self._ctx(component), subresource="status"
        )
        return written

    # ------------------------------------------------------------ DaemonSet

    def _should_run(self, ds: Obj, template_spec: Obj) -> dict[str, tuple[bool, bool]]:
        """Node name -> (should run, should continue running), in node name order; recomputed
        only for nodes that changed since the last sync of the same generation."""
        md = meta(ds)
        uid, generation = str(md.get("uid")), int(md.get("generation") or 1)
        decided = self._decided.get(uid)
        if decided is not None and decided[:2] == (generation, self._nodes_version):
            return decided[2]
        version = self._nodes_version
        nodes = self.core.store.iter(NODES)
        cached = self._decisions.get(uid)
        cache: dict[str, tuple[str, tuple[bool, bool]]] = cached[1] if cached and cached[0] == generation else {}
        out: dict[str, tuple[bool, bool]] = {}
        fresh: dict[str, tuple[str, tuple[bool, bool]]] = {}
        for node in nodes:
            nmd = meta(node)
            name, rv = str(nmd.get("name")), str(nmd.get("resourceVersion"))
            hit = cache.get(name)
            decision = hit[1] if hit is not None and hit[0] == rv else predicates.daemon_should_run(template_spec, node)
            fresh[name] = (rv, decision)
            out[name] = decision
        self._decisions[uid] = (generation, fresh)
        self._decided[uid] = (generation, version, out)
        return out

    def _daemon_pod(self, ds: Obj, node: str, hash_: str) -> Obj:
        md = meta(ds)
        template = (ds.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        labels = {
            **(tmeta.get("labels") or {}),
            TEMPLATE_GENERATION: str(md.get("generation") or 1),
            REVISION_HASH: hash_,
        }
        pod_meta: Obj = {
            "generateName": generate_name(str(md["name"])),
            "namespace": md["namespace"],
            "labels": labels,
            "ownerReferences": [owner_ref(ds, DAEMONSET)],
        }
        if tmeta.get("annotations"):
            pod_meta["annotations"] = dict(tmeta["annotations"])
        spec = predicates.pin_to_node(predicates.with_daemon_tolerations(template.get("spec") or {}), node)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}

    def _pods_by_node(self, uid: str) -> tuple[dict[str, list[DaemonPod]], list[DaemonPod]]:
        """The DaemonSet's pods by target node (all, terminating ones included), and those without one."""
        by_node: dict[str, list[DaemonPod]] = {}
        lost: list[DaemonPod] = []
        for pod in (self._daemon_pods.get(uid) or {}).values():
            if pod.node is None:
                lost.append(pod)
            else:
                by_node.setdefault(pod.node, []).append(pod)
        return by_node, lost

    def _failed_backoff(self, uid: str, node: str) -> float:
        """Seconds until a failed pod on ``node`` may be replaced again (0: now; the try is counted)."""
        now = time.monotonic()
        failures, not_before = self._failed.get((uid, node), (0, 0.0))
        if now < not_before:
            return not_before - now
        base, limit = FAILED_BACKOFF
        self._failed[(uid, node)] = (failures + 1, now + min(base * 2**failures, limit))
        return 0.0

    async def _sync_daemonset(self, ns: str, name: str) -> None:
        ds = self.core.store.get(DAEMONSETS, ns, name)
        if ds is None or meta(ds).get("deletionTimestamp"):
            return
        md = meta(ds)
        uid, generation = str(md.get("uid")), int(md.get("generation") or 1)
        spec = ds.get("spec") or {}
        template = spec.get("template") or {}
        hash_ = compute_hash(template, (ds.get("status") or {}).get("collisionCount"))
        decisions = self._should_run(ds, template.get("spec") or {})
        by_node, lost = self._pods_by_node(uid)
        create: list[str] = []
        delete: list[str] = [p.name for p in lost if not p.terminating]
        retry_in = 0.0
        component = "daemonset-controller"
        recorder = self._recorder(component)
        for node, (run, keep) in decisions.items():
            pods = [p for p in by_node.get(node) or () if not p.terminating]
            if run:
                running: list[DaemonPod] = []
                for pod in pods:
                    if pod.phase != "Failed":
                        running.append(pod)
                        continue
                    wait = self._failed_backoff(uid, node)
                    if wait:
                        retry_in = min(retry_in or wait, wait)
                        continue
                    await recorder.event(
                        ds,
                        DAEMONSET,
                        "apps/v1",
                        "Warning",
                        "FailedDaemonPod",
                        f"Found failed daemon pod {ns}/{pod.name} on node {node}, will try to kill it",
                    )
                    delete.append(pod.name)
                if not running and not any(p.terminating for p in by_node.get(node) or ()):
                    create.append(node)  # upstream waits until a terminating pod is gone
                elif len(running) > 1:
                    delete.extend(p.name for p in sorted(running, key=DaemonPod.order)[1:])
            elif not keep:
                delete.extend(p.name for p in pods)
        for node, pods in by_node.items():
            if node not in decisions:  # the node is gone
                delete.extend(p.name for p in pods if not p.terminating)
        strategy = spec.get("updateStrategy") or {}
        if (strategy.get("type") or "RollingUpdate") == "RollingUpdate":
            for pod in self._rolling_update(ds, decisions, by_node, hash_, generation, set(delete)):
                delete.append(pod.name)
                if self.core.pod_grace_period is None:  # deleted at once: replace it in this sync
                    create.append(str(pod.node))
        for pod_name in delete:
            await self._delete_pod(ds, DAEMONSET, component, pod_name)
        for node in create:
            await self._create_pod(ds, DAEMONSET, component, self._daemon_pod(ds, node, hash_))
        if delete or create:
            by_node, _ = self._pods_by_node(uid)
        current = self.core.store.get(DAEMONSETS, ns, name)
        if current is None or meta(current).get("uid") != uid:
            return
        status = daemonset_status(current, decisions, by_node, hash_)
        await self._write_status("daemonsets", current, status, component)
        if retry_in:
            self.enqueue_after((DAEMONSET, ns, name), retry_in)

    def _rolling_update(
        self,
        ds: Obj,
        decisions: dict[str, tuple[bool, bool]],
        by_node: dict[str, list[DaemonPod]],
        hash_: str,
        generation: int,
        doomed: set[str],
    ) -> list[DaemonPod]:
        """Old pods to replace now: unavailable ones, then available ones within maxUnavailable."""
        desired = sum(1 for run, _ in decisions.values() if run)
        rolling = ((ds.get("spec") or {}).get("updateStrategy") or {}).get("rollingUpdate") or {}
        max_unavailable = max(scaled(rolling.get("maxUnavailable", 1), desired, round_up=True), 1)
        unavailable = 0
        broken: list[DaemonPod] = []
        candidates: list[DaemonPod] = []
        for node, (run, _) in decisions.items():
            if not run:
                continue
            pods = [
                p for p in by_node.get(node) or () if not p.terminating and p.name not in doomed and p.phase != "Failed"
            ]
            if len(pods) != 1:
                unavailable += 1  # being created, or being reduced to one: the manage part handles it
                continue
            pod = pods[0]
            if pod.updated(hash_, generation):
                if not pod.ready:
                    unavailable += 1
            elif not pod.ready:
                broken.append(pod)
            else:
                candidates.append(pod)
        room = max(max_unavailable - unavailable, 0)
        return broken + candidates[:room]

    # ------------------------------------------------------------ ReplicaSet

    def _replica_pod(self, rs: Obj) -> Obj:
        md = meta(rs)
        template = (rs.get("spec") or {}).get("template") or {}
        tmeta = template.get("metadata") or {}
        pod_meta: Obj = {
            "generateName": generate_name(str(md["name"])),
            "namespace": md["namespace"],
            "labels": dict(tmeta.get("labels") or {}),
            "ownerReferences": [owner_ref(rs, REPLICASET)],
        }
        if tmeta.get("annotations"):
            pod_meta["annotations"] = dict(tmeta["annotations"])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec") or {}}

    async def _sync_replicaset(self, ns: str, name: str) -> None:
        rs = self.core.store.get(REPLICASETS, ns, name)
        if rs is None or meta(rs).get("deletionTimestamp"):
            return
        uid = meta(rs).get("uid")
        component = "replicaset-controller"
        active = [p for p in self._owned(rs, PODS) if _active(p)]
        diff = len(active) - _replicas(rs)
        if diff < 0:
            for _ in range(-diff):
                await self._create_pod(rs, REPLICASET, component, self._replica_pod(rs))
        elif diff > 0:
            for pod in self._deletion_order(active)[:diff]:
                await self._delete_pod(rs, REPLICASET, component, str(meta(pod)["name"]))
        current = self.core.store.get(REPLICASETS, ns, name)
        if current is None or meta(current).get("uid") != uid:
            return
        status = replicaset_status(current, self._owned(current, PODS))
        await self._write_status("replicasets", current, status, component)

    @staticmethod
    def _deletion_order(pods: list[Obj]) -> list[Obj]:
        """Pods to delete first (ActivePodsWithRanks, roughly): unscheduled, pending, not ready, newest."""
        rank = {"Pending": 0, "Unknown": 1, "Running": 2}
        newest_first = sorted(pods, key=lambda p: str(meta(p).get("creationTimestamp") or ""), reverse=True)
        return sorted(
            newest_first,
            key=lambda p: (
                bool((p.get("spec") or {}).get("nodeName")),
                rank.get(_phase(p), 0),
                predicates.pod_ready(p),
            ),
        )

    # ------------------------------------------------------------ Deployment

    def _new_replicaset(self, deploy: Obj, hash_: str, replicas: int, revision: int) -> Obj:
        md = meta(deploy)
        spec = deploy.get("spec") or {}
        template = spec.get("template") or {}
        tmeta = template.get("metadata") or {}
        labels = {**(tmeta.get("labels") or {}), POD_TEMPLATE_HASH: hash_}
        selector = dict(spec.get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), POD_TEMPLATE_HASH: hash_}
        surge = max_surge_unavailable(deploy)[0] if (spec.get("strategy") or {}).get("type") != "Recreate" else 0
        rs_spec: Obj = {
            "replicas": replicas,
            "selector": selector,
            "template": {**template, "metadata": {**tmeta, "labels": labels}},
        }
        if spec.get("minReadySeconds"):
            rs_spec["minReadySeconds"] = spec["minReadySeconds"]
        return {
            "apiVersion": "apps/v1",
            "kind": REPLICASET,
            "metadata": {
                "name": f"{md['name']}-{hash_}",
                "namespace": md["namespace"],
                "labels": labels,
                "annotations": {
                    REVISION: str(revision),
                    DESIRED_REPLICAS: str(_replicas(deploy)),
                    MAX_REPLICAS: str(_replicas(deploy) + surge),
                },
                "ownerReferences": [owner_ref(deploy, DEPLOYMENT)],
            },
            "spec": rs_spec,
        }

    @staticmethod
    def _same_template(rs: Obj, deploy: Obj) -> bool:
        """EqualIgnoreHash: the templates are equal once pod-template-hash is dropped."""

        def strip(template: Obj) -> Obj:
            tmeta = dict(template.get("metadata") or {})
            labels = {k: v for k, v in (tmeta.get("labels") or {}).items() if k != POD_TEMPLATE_HASH}
            if labels:
                tmeta["labels"] = labels
            else:
                tmeta.pop("labels", None)
            return {**template, "metadata": tmeta}

        rs_template = (rs.get("spec") or {}).get("template") or {}
        return strip(rs_template) == strip((deploy.get("spec") or {}).get("template") or {})

    async def _scale(self, deploy: Obj, rs: Obj, replicas: int) -> Obj:
        before = _replicas(rs)
        md = meta(rs)
        annotations = dict(md.get("annotations") or {})
        wanted = {DESIRED_REPLICAS: str(_replicas(deploy))}
        if before == replicas and all(annotations.get(k) == v for k, v in wanted.items()):
            return rs
        annotations.update(wanted)
        body = {
            **rs,
            "metadata": {**md, "annotations": annotations},
            "spec": {**(rs.get("spec") or {}), "replicas": replicas},
        }
        rt = self.rt("apps", "v1", "replicasets")
        updated: Obj = await self.core.update(
            rt, str(md["namespace"]), str(md["name"]), body, self._ctx("deployment-controller")
        )
        if before != replicas:
            direction = "up" if replicas > before else "down"
            await self._recorder("deployment-controller").event(
                deploy,
                DEPLOYMENT,
                "apps/v1",
                "Normal",
                "ScalingReplicaSet",
                f"Scaled {direction} replica set {md['name']} from {before} to {replicas}",
            )
        return updated

    async def _sync_deployment(self, ns: str, name: str) -> None:
        deploy = self.core.store.get(DEPLOYMENTS, ns, name)
        if deploy is None or meta(deploy).get("deletionTimestamp"):
            return
        md = meta(deploy)
        spec = deploy.get("spec") or {}
        replicas = _replicas(deploy)
        collisions = (deploy.get("status") or {}).get("collisionCount")
        hash_ = compute_hash(spec.get("template") or {}, collisions)
        owned = self._owned(deploy, REPLICASETS)
        new_rs = next(
            (rs for rs in owned if predicates.labels_of(rs).get(POD_TEMPLATE_HASH) and self._same_template(rs, deploy)),
            None,
        )
        olds = [rs for rs in owned if rs is not new_rs]
        olds.sort(key=lambda rs: int((meta(rs).get("annotations") or {}).get(REVISION) or 0))
        revision = max((int((meta(rs).get("annotations") or {}).get(REVISION) or 0) for rs in owned), default=0)
        recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
        paused = bool(spec.get("paused"))
        if new_rs is None and not paused:
            rs_name = f"{md['name']}-{hash_}"
            clash = self.core.store.get(REPLICASETS, ns, rs_name)
            if clash is not None:  # a hash collision: count it and try the next hash
                status = {**(deploy.get("status") or {}), "collisionCount": int(collisions or 0) + 1}
                await self._write_status("deployments", deploy, status, "deployment-controller")
                raise Retry("pod-template-hash collision")
            initial = 0 if recreate and any(_replicas(rs) or _rs_status(rs, "replicas") for rs in olds) else replicas
            if not recreate and olds:
                surge = max_surge_unavailable(deploy)[0]
                total = sum(_replicas(rs) for rs in olds)
                initial = max(min(replicas, replicas + surge - total), 0)
            body = self._new_replicaset(deploy, hash_, initial, revision + 1)
            rt = self.rt("apps", "v1", "replicasets")
            new_rs = await self.core.create(rt, ns, body, self._ctx("deployment-controller"))
            if initial:
                await self._recorder("deployment-controller").event(
                    deploy,
                    DEPLOYMENT,
                    "apps/v1",
                    "Normal",
                    "ScalingReplicaSet",
                    f"Scaled up replica set {meta(new_rs)['name']} from 0 to {initial}",
                )
        elif (
            new_rs is not None
            and not paused
            and olds
            and revision > int((meta(new_rs).get("annotations") or {}).get(REVISION) or 0)
        ):
            annotations = {**(meta(new_rs).get("annotations") or {}), REVISION: str(revision + 1)}
            body = {**new_rs, "metadata": {**meta(new_rs), "annotations": annotations}}
            rt = self.rt("apps", "v1", "replicasets")
            new_rs = await self.core.update(rt, ns, str(meta(new_rs)["name"]), body, self._ctx("deployment-controller"))
        if new_rs is not None and not paused:
            if recreate:
                await self._recreate(deploy, new_rs, olds)
            else:
                await self._roll(deploy, new_rs, olds)
            await self._clean_history(deploy)
        await self._annotate_revision(deploy, new_rs)
        current = self.core.store.get(DEPLOYMENTS, ns, name)
        if current is None or meta(current).get("uid") != md.get("uid"):
            return
        all_rs = self._owned(current, REPLICASETS)
        fresh_new = next(
            (rs for rs in all_rs if new_rs is not None and meta(rs).get("uid") == meta(new_rs).get("uid")), None
        )
        old_status = current.get("status") or {}
        status = deployment_status(current, fresh_new, all_rs, old_status, self.core.now())
        await self._write_status("deployments", current, status, "deployment-controller")

    async def _recreate(self, deploy: Obj, new_rs: Obj, olds: list[Obj]) -> None:
        for rs in olds:
            if _replicas(rs):
                await self._scale(deploy, rs, 0)
        for rs in olds:
            if any(not _terminating(p) for p in self._owned(rs, PODS)):
                return  # wait for the old pods to go
        await self._scale(deploy, new_rs, _replicas(deploy))

    async def _roll(self, deploy: Obj, new_rs: Obj, olds: list[Obj]) -> None:
        replicas = _replicas(deploy)
        surge, max_unavailable = max_surge_unavailable(deploy)
        live_olds = [rs for rs in olds if _replicas(rs)]
        if not live_olds:
            await self._scale(deploy, new_rs, replicas)
            return
        total = _replicas(new_rs) + sum(_replicas(rs) for rs in live_olds)
        target = _replicas(new_rs)
        if target < replicas and total < replicas + surge:
            target = min(replicas, target + replicas + surge - total)
        elif target > replicas:
            target = replicas
        new_rs = await self._scale(deploy, new_rs, target)
        # scale old ReplicaSets down while enough pods stay available (unavailable ones first)
        min_available = replicas - max_unavailable
        all_pods = _replicas(new_rs) + sum(_replicas(rs) for rs in live_olds)
        new_unavailable = max(_replicas(new_rs) - _rs_status(new_rs, "availableReplicas"), 0)
        budget = all_pods - min_available - new_unavailable
        if budget <= 0:
            return
        sizes = {id(rs): _replicas(rs) for rs in live_olds}
        for rs in live_olds:
            unhealthy = max(sizes[id(rs)] - _rs_status(rs, "availableReplicas"), 0)
            cut = min(unhealthy, budget)
            sizes[id(rs)] -= cut
            budget -= cut
        available = _rs_status(new_rs, "availableReplicas") + sum(
            min(_rs_status(rs, "availableReplicas"), sizes[id(rs)]) for rs in live_olds
        )
        room = max(min(available - min_available, budget), 0)
        for rs in live_olds:
            cut = min(sizes[id(rs)], room)
            sizes[id(rs)] -= cut
            room -= cut
        for rs in live_olds:
            if sizes[id(rs)] != _replicas(rs):
                await self._scale(deploy, rs, sizes[id(rs)])

    async def _clean_history(self, deploy: Obj) -> None:
        limit = (deploy.get("spec") or {}).get("revisionHistoryLimit", 10)
        limit = 10 if limit is None else int(limit)
        owned = self._owned(deploy, REPLICASETS)
        template_hash = compute_hash((deploy.get("spec") or {}).get("template") or {})
        idle = [
            rs
            for rs in owned
            if not _replicas(rs)
            and not _rs_status(rs, "replicas")
            and predicates.labels_of(rs).get(POD_TEMPLATE_HASH) != template_hash
            and not self._same_template(rs, deploy)
        ]
        idle.sort(key=lambda rs: int((meta(rs).get("annotations") or {}).get(REVISION) or 0))
        rt = self.rt("apps", "v1", "replicasets")
        for rs in idle[: max(len(idle) - limit, 0)]:
            try:
                await self.core.delete(
                    rt, str(meta(rs)["namespace"]), str(meta(rs)["name"]), {}, self._ctx("deployment-controller")
                )
            except ApiError as exc:
                if exc.code != 404:
                    raise

    async def _annotate_revision(self, deploy: Obj, new_rs: Obj | None) -> None:
        if new_rs is None:
            return
        current = self.core.store.get(DEPLOYMENTS, str(meta(deploy)["namespace"]), str(meta(deploy)["name"]))
        if current is None:
            return
        revision = (meta(new_rs).get("annotations") or {}).get(REVISION)
        annotations = dict(meta(current).get("annotations") or {})
        if not revision or annotations.get(REVISION) == revision:
            return
        annotations[REVISION] = revision
        body = {**current, "metadata": {**meta(current), "annotations": annotations}}
        rt = self.rt("apps", "v1", "deployments")
        await self.core.update(
            rt, str(meta(current)["namespace"]), str(meta(current)["name"]), body, self._ctx("deployment-controller")
        )
