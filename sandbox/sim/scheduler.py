"""A scheduler for pods of ``schedulerName: default-scheduler`` that allocates DRA claims with
``gpucluster.dra.allocator`` (the structured-parameters allocator of kube-scheduler).

For a pending pod without ``spec.nodeName`` whose ResourceClaims all exist (generated ones are
named in ``status.resourceClaimStatuses``):

1. nodes are filtered in kube-scheduler's order - the NodeAffinity PreFilter first (a required
   node affinity ``matchFields`` ``metadata.name In [...]``, as daemon pods have, restricts the
   candidates to those nodes; the others count as ``node(s) didn't satisfy plugin(s)
   [NodeAffinity]``), then NodeUnschedulable, TaintToleration,
   NodeAffinity (nodeSelector and required node affinity), NodeResourcesFit for extended
   resources (there is no device plugin: nodes have no ``nvidia.com/gpu`` capacity, so such pods
   stay Pending with ``Insufficient nvidia.com/gpu``), then DynamicResources: claims already
   allocated restrict the pod to their node, the others are allocated together with
   ``explain(claims, nodes + slices + device classes + allocated claims)``;
2. the first node (natural name order) that passes every filter is chosen; each new allocation
   is written to the claim (``status.allocation`` with the device results, the configs from the
   class and the claim, and a ``nodeSelector`` for the node; the finalizer
   ``resource.kubernetes.io/delete-protection``), every claim gets the pod in
   ``status.reservedFor``, and the pod is bound (the ``pods/binding`` subresource's effect:
   ``spec.nodeName`` and a ``PodScheduled`` condition; webhooks matching ``pods/binding`` see
   a CREATE of a Binding) with a ``Scheduled`` event;
3. when no node fits, a ``FailedScheduling`` Warning event in kube-scheduler's words
   (``0/3 nodes are available: 3 cannot allocate all claims. still not schedulable, preemption:
   0/3 nodes are available: 3 Preemption is not helpful for scheduling.``) followed by the
   allocator's reason per node group (``allocator: 3 node(s): request gpu: 8/8 devices usable,
   need 9``) is recorded (repeats bump the event's count, as client-go's event correlator does),
   the pod gets ``PodScheduled=False`` with reason Unschedulable, and the pod is tried again when
   the cluster changes (nodes, slices, device classes, deallocated or deleted claims, deleted
   pods), at most once per second, and every 5 minutes regardless (as kube-scheduler flushes its
   unschedulable queue). A change on one node only wakes the pods that may go there (pods
   pinned to other nodes stay asleep, like kube-scheduler's queueing hints).

Events go through ``events.EventRecorder`` (client-go's correlation: identical events bump
``count``). Slices and allocated claims are indexed by node, so allocating for a pod pinned to
one node looks at that node's devices only.

No preemption, no scoring, no CPU/memory accounting, no pod (anti-)affinity or topology spread.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from gpucluster.dra.allocator import AllocatorInputError, NodeResult, explain
from gpucluster.dra.model import object_ref
from gpucluster.kube import predicates
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.store import ADDED, DELETED, Event, rv_of
from gpucluster.sandbox.sim.base import Controller, Obj, Retry, meta
from gpucluster.sandbox.sim.events import EventRecorder
from gpucluster.sandbox.sim.kubelet import claim_names
from gpucluster.sandbox.sim.resourceclaim import FINALIZER

log = logging.getLogger("sandbox.scheduler")

PODS = ("", "pods")
NODES = ("", "nodes")
EVENTS = ("", "events")
CLAIMS = ("resource.k8s.io", "resourceclaims")
SLICES = ("resource.k8s.io", "resourceslices")
CLASSES = ("resource.k8s.io", "deviceclasses")
SCHEDULER = "default-scheduler"
CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
MAX_MESSAGE = 1024
RETRY_INTERVAL = 1.0
UNSCHEDULABLE_FLUSH = 300.0


def _natural(name: str) -> tuple[str, int, str]:
    head, _, tail = name.rpartition("-")
    return (head, int(tail), "") if tail.isdigit() else (name, -1, name)


def _claim_label(ref: str, multi: bool) -> str:
    return f"claim {ref}, " if multi else ""


def node_reason(result: NodeResult, multi: bool) -> str:
    """One node's allocator answer in a few words: pool notes, then per request usable/needed and
    the most common reasons devices were rejected."""
    parts = list(result.notes)
    for r in result.requests:
        need = f"all {r.count}" if r.mode == "All" else str(r.count)
        text = (
            f"{_claim_label(r.claim, multi)}request {r.request}: {r.usable}/{r.considered} devices usable, need {need}"
        )
        counts = Counter(reason.split(" (", 1)[0] for _, reason in r.rejections)
        if counts:
            text += " (" + ", ".join(f"{n} {why}" for why, n in counts.most_common(3)) + ")"
        parts.append(text)
    if result.error:
        parts.append(result.error)
    return "; ".join(parts) or "does not fit"


def explanation_line(results: Sequence[NodeResult], multi: bool) -> str:
    """Group nodes that failed for the same reason: ``3 node(s): request gpu: 8/8 devices usable, need 9``."""
    groups: dict[str, list[str]] = {}
    for result in results:
        if result.satisfiable:
            continue
        groups.setdefault(node_reason(result, multi), []).append(result.node)
    parts = []
    for reason, nodes in sorted(groups.items(), key=lambda g: (-len(g[1]), _natural(g[1][0]))):
        who = ", ".join(nodes) if len(nodes) <= 3 else f"{len(nodes)} node(s)"
        parts.append(f"{who}: {reason}")
    return "; ".join(parts)


def fit_error(total: int, reasons: Counter[str], prefilter: str = "") -> str:
    """kube-scheduler's FitError text, with its preemption post-filter message."""
    if total == 0:
        return "no nodes available to schedule pods"
    head = f"0/{total} nodes are available:"
    if prefilter:
        head += f" {prefilter}."
    else:
        head += " " + ", ".join(sorted(f"{n} {r}" for r, n in reasons.items())) + "."
    helpless = sum(n for r, n in reasons.items() if not r.startswith("Insufficient ")) if not prefilter else total
    victims = total - helpless
    post = []
    if helpless:
        post.append(f"{helpless} Preemption is not helpful for scheduling")
    if victims:
        post.append(f"{victims} No preemption victims found for incoming pod")
    return f"{head} still not schedulable, preemption: 0/{total} nodes are available: {', '.join(sorted(post))}."


def _truncate(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def allocated_node(claim: Obj) -> str | None:
    """The one node an allocated claim is bound to (its allocation's ``metadata.name In [node]``), else None."""
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector")
    if not selector:
        return None
    names = predicates.required_node_names(
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}}}
    )
    return next(iter(names)) if names is not None and len(names) == 1 else None


Key = tuple[str, str]


class Scheduler(Controller):
    name = "scheduler"
    username = "system:kube-scheduler"
    field_manager = "kube-scheduler"
    backoff_max = 10.0

    def __init__(self, *args: Any, kubernetes_version: str = "1.34", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kubernetes_version = kubernetes_version  # the structured allocator's semantics
        self.unschedulable: dict[Key, float] = {}  # pod -> when it last failed
        self._pins: dict[Key, frozenset[str] | None] = {}  # unschedulable pod -> the nodes it may go to
        self._waiting_on: dict[str, set[Key]] = {}  # node -> unschedulable pods pinned to it
        self._unpinned: set[Key] = set()
        self._flush_pending = False
        self._flush_all = False
        self._flush_nodes: set[str] = set()
        self._slices: dict[str | None, set[str]] = {}  # node (None: not node-local) -> slice names
        self._allocated: dict[str | None, set[Key]] = {}  # node (None: not one node) -> allocated claims
        self._claim_node: dict[Key, str | None] = {}
        self.events = EventRecorder(self.core, SCHEDULER, self.context)
        self.attempts = 0

    def initial_keys(self) -> Iterable[Hashable]:
        for s in self.core.store.iter(SLICES):
            self._index_slice(s, present=True)
        for c in self.core.store.iter(CLAIMS):
            self._index_claim(c)
        out = []
        for pod in self.core.store.iter(PODS):
            if self._pending(pod):
                out.append((meta(pod).get("namespace"), meta(pod).get("name")))
        return out

    # ------------------------------------------------------------ indexes

    def _index_slice(self, s: Obj, *, present: bool) -> str | None:
        node = (s.get("spec") or {}).get("nodeName") or None
        names = self._slices.setdefault(node, set())
        if present:
            names.add(str(meta(s)["name"]))
        else:
            names.discard(str(meta(s)["name"]))
        return str(node) if node else None

    def _index_claim(self, claim: Obj | None, key: Key | None = None) -> None:
        if key is None:
            assert claim is not None
            key = (str(meta(claim).get("namespace")), str(meta(claim).get("name")))
        if key in self._claim_node:
            before = self._claim_node.pop(key)
            self._allocated.get(before, set()).discard(key)
        if claim is not None and (claim.get("status") or {}).get("allocation"):
            node = allocated_node(claim)
            self._claim_node[key] = node
            self._allocated.setdefault(node, set()).add(key)

    def _forget(self, key: Key) -> None:
        self.unschedulable.pop(key, None)
        pins = self._pins.pop(key, None)
        self._unpinned.discard(key)
        for node in pins or ():
            waiting = self._waiting_on.get(node)
            if waiting is not None:
                waiting.discard(key)
                if not waiting:
                    del self._waiting_on[node]

    @staticmethod
    def _pending(pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        return (
            not spec.get("nodeName")
            and (spec.get("schedulerName") or SCHEDULER) == SCHEDULER
            and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
            and not meta(pod).get("deletionTimestamp")
            and not spec.get("schedulingGates")
        )

    # ------------------------------------------------------------ events

    def on_event(self, event: Event) -> None:
        resource, obj, old = event.resource, event.obj, event.old
        if resource == PODS:
            key = (str(meta(obj).get("namespace")), str(meta(obj).get("name")))
            if event.type == DELETED:
                self._forget(key)
                node = (obj.get("spec") or {}).get("nodeName")
                if node:
                    self._cluster_changed(str(node))
                return
            if not self._pending(obj):
                self._forget(key)
                return
            if old is None or not self._pending(old):
                self.enqueue(key)
                return
            before, after = old.get("status") or {}, obj.get("status") or {}
            if (old.get("spec") or {}) != (obj.get("spec") or {}) or before.get("resourceClaimStatuses") != after.get(
                "resourceClaimStatuses"
            ):
                self._forget(key)
                self.enqueue(key)
        elif resource == NODES:
            if event.type != DELETED and not predicates.node_changed(old, obj):
                return
            self._cluster_changed(str(meta(obj).get("name")))
        elif resource == SLICES:
            if old is not None:
                self._index_slice(old, present=False)
            self._cluster_changed(self._index_slice(obj, present=event.type != DELETED))
        elif resource == CLASSES:
            self._cluster_changed(None)
        elif resource == CLAIMS:
            ns = str(meta(obj).get("namespace"))
            self._index_claim(None if event.type == DELETED else obj, (ns, str(meta(obj).get("name"))))
            if event.type == ADDED:
                for pod in self._pods_of(obj):
                    self.enqueue((ns, pod))
                return
            was = bool(((old or {}).get("status") or {}).get("allocation"))
            now = bool((obj.get("status") or {}).get("allocation")) and event.type != DELETED
            if was and not now:
                self._cluster_changed(allocated_node(old or {}))  # devices freed

    def _pods_of(self, claim: Obj) -> list[str]:
        owners = [r.get("name") for r in meta(claim).get("ownerReferences") or [] if r.get("kind") == "Pod"]
        return [str(o) for o in owners if o]

    def _cluster_changed(self, node: str | None) -> None:
        """Something changed on ``node`` (None: anywhere): retry the unschedulable pods it may help."""
        if not self.unschedulable:
            return
        if node is None:
            self._flush_all = True
        else:
            self._flush_nodes.add(node)
        if self._flush_pending:
            return
        self._flush_pending = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._flush_pending = False
            return
        loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        keys: Iterable[Key]
        if self._flush_all:
            keys = list(self.unschedulable)
        else:
            wake = set(self._unpinned)
            for node in self._flush_nodes:
                wake |= self._waiting_on.get(node, set())
            keys = wake
        self._flush_all = False
        self._flush_nodes = set()
        now = time.monotonic()
        for key in keys:
            failed_at = self.unschedulable.get(key)
            if failed_at is not None:
                self.enqueue_after(key, failed_at + RETRY_INTERVAL - now)

    # ------------------------------------------------------------ one pod

    async def sync(self, key: Any) -> None:
        ns, name = str(key[0]), str(key[1])
        pod = self.core.store.get(PODS, ns, name)
        if pod is None or not self._pending(pod):
            self._forget((ns, name))
            return
        names = claim_names(pod)
        if names is None:
            return  # waiting for the resourceclaim controller (PreEnqueue: no event)
        claims: list[Obj] = []
        for claim_name in names:
            claim = self.core.store.get(CLAIMS, ns, claim_name)
            if claim is None or meta(claim).get("deletionTimestamp"):
                return  # waiting for the claim (PreEnqueue: no event); its ADDED event wakes us
            claims.append(claim)
        self.attempts += 1
        spec = pod.get("spec") or {}
        total = self.core.store.count(NODES)
        pins = predicates.required_node_names(spec)
        reasons: Counter[str] = Counter()
        prefilter = ""
        if pins is None:
            nodes = list(self.core.store.iter(NODES))
        else:
            nodes = [n for name in pins if (n := self.core.store.get(NODES, "", name)) is not None]
            if not pins:
                prefilter = predicates.AFFINITY_CONFLICT
            elif total > len(nodes):
                reasons[predicates.NOT_IN_PREFILTER] += total - len(nodes)
        nodes.sort(key=lambda n: _natural(str(meta(n)["name"])))
        eligible: list[Obj] = []
        for node in nodes:
            why = predicates.filter_node(spec, node)
            if why is None:
                why = self._allocated_elsewhere(claims, node)
            if why is not None:
                reasons[why] += 1
            else:
                eligible.append(node)
        to_allocate = [c for c in claims if not (c.get("status") or {}).get("allocation")]
        chosen: Obj | None = None
        allocation: dict[str, list[Any]] = {}
        detail = ""
        if prefilter:
            eligible = []
        if eligible and to_allocate:
            outcome = self._allocate(to_allocate, eligible)
            if isinstance(outcome, str):
                prefilter = outcome
            else:
                results = {r.node: r for r in outcome}
                for node in eligible:
                    result = results.get(str(meta(node)["name"]))
                    if result is not None and result.satisfiable:
                        chosen = node
                        for a in result.allocation:
                            allocation.setdefault(a.claim, []).append(a)
                        break
                if chosen is None:
                    reasons[CANNOT_ALLOCATE] += len(eligible)
                    detail = explanation_line(outcome, len(to_allocate) > 1)
        elif eligible:
            chosen = eligible[0]
        if chosen is None:
            message = fit_error(total, reasons, prefilter)
            if detail:
                message += f" allocator: {detail}"
            await self._unschedulable(pod, _truncate(message), pins)
            return
        await self._bind(pod, claims, allocation, chosen)

    @staticmethod
    def _allocated_elsewhere(claims: Sequence[Obj], node: Obj) -> str | None:
        for claim in claims:
            selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector")
            if selector is not None and not predicates.node_selector_terms_match(selector, node):
                return NOT_AVAILABLE
        return None

    def _allocate(self, claims: list[Obj], nodes: list[Obj]) -> list[NodeResult] | str:
        """``explain`` over ``nodes``: their slices and the slices of no single node, the device
        classes, and the claims allocated on those nodes or on no single node (the others hold
        devices of other nodes' pools only)."""
        where: list[str | None] = [str(meta(n)["name"]) for n in nodes]
        where.append(None)
        own = {object_ref(c) for c in claims}
        cluster: list[Obj] = list(nodes)
        for node in where:
            for name in sorted(self._slices.get(node, ())):
                s = self.core.store.get(SLICES, "", name)
                if s is not None:
                    cluster.append(s)
        cluster.extend(self.core.store.iter(CLASSES))
        for node in where:
            for ns, name in sorted(self._allocated.get(node, ())):
                c = self.core.store.get(CLAIMS, ns, name)
                if c is not None and (c.get("status") or {}).get("allocation") and object_ref(c) not in own:
                    cluster.append(c)
        try:
            result = explain(claims, cluster, kubernetes_version=self.kubernetes_version)
        except AllocatorInputError as exc:
            return str(exc)
        if result.errors:
            return "; ".join(result.errors)
        return result.nodes

    # ------------------------------------------------------------ outcomes

    async def _bind(self, pod: Obj, claims: list[Obj], allocation: dict[str, list[Any]], node: Obj) -> None:
        md = meta(pod)
        ns, name, uid = str(md["namespace"]), str(md["name"]), str(md["uid"])
        node_name = str(meta(node)["name"])
        claims_rt = self.rt("resource.k8s.io", "v1", "resourceclaims")
        ctx = self.context()
        for claim in claims:
            cmd = meta(claim)
            status = dict(claim.get("status") or {})
            ref = object_ref(claim)
            if ref in allocation:
                if FINALIZER not in (cmd.get("finalizers") or []):
                    body = {**claim, "metadata": {**cmd, "finalizers": [*(cmd.get("finalizers") or []), FINALIZER]}}
                    claim = await self.core.update(claims_rt, ns, str(cmd["name"]), body, ctx)
                status["allocation"] = self._allocation(claim, allocation[ref], node_name)
            reserved = list(status.get("reservedFor") or [])
            if not any(r.get("uid") == uid for r in reserved):
                reserved.append({"resource": "pods", "name": name, "uid": uid})
            status["reservedFor"] = reserved
            if status != (claim.get("status") or {}):
                await self.core.update(
                    claims_rt, ns, str(cmd["name"]), {**claim, "status": status}, ctx, subresource="status"
                )
        await self._binding(pod, node_name)
        self._forget((ns, name))
        await self._event(pod, "Normal", "Scheduled", f"Successfully assigned {ns}/{name} to {node_name}")

    def _allocation(self, claim: Obj, devices: list[Any], node: str) -> Obj:
        spec = claim.get("spec") or {}
        requests = [str(r.get("name")) for r in (spec.get("devices") or {}).get("requests") or []]
        config: list[Obj] = []
        classes: dict[str, list[str]] = {}
        for request in (spec.get("devices") or {}).get("requests") or []:
            alternatives = [request.get("exactly")] if request.get("exactly") else request.get("firstAvailable") or []
            for alt in alternatives:
                if isinstance(alt, dict) and alt.get("deviceClassName"):
                    classes.setdefault(str(alt["deviceClassName"]), []).append(str(request.get("name")))
        for class_name, reqs in classes.items():
            device_class = self.core.store.get(CLASSES, "", class_name) or {}
            for entry in (device_class.get("spec") or {}).get("config") or []:
                config.append({"source": "FromClass", "requests": reqs, **entry})
        for entry in (spec.get("devices") or {}).get("config") or []:
            config.append({"source": "FromClaim", "requests": entry.get("requests") or requests, **entry})
        admin: set[str] = set()  # requests (``request`` or ``request/subrequest``) with adminAccess
        for request in (spec.get("devices") or {}).get("requests") or []:
            exactly = request.get("exactly") or {}
            if exactly.get("adminAccess") is True:
                admin.add(str(request.get("name")))
            for sub in request.get("firstAvailable") or []:
                if isinstance(sub, dict) and sub.get("adminAccess") is True:
                    admin.add(f"{request.get('name')}/{sub.get('name')}")
        results = []
        for d in devices:
            result: Obj = d.as_result()
            if result["request"] in admin:
                result["adminAccess"] = True  # the device is not taken from other claims
            if d.shared:
                result["shareID"] = str(uuid.uuid4())  # one of several allocations of the device
            results.append(result)
        out: Obj = {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        }
        if config:
            out["devices"]["config"] = config
        return out

    async def _binding(self, pod: Obj, node: str) -> None:
        """What POST pods/<name>/binding does: admission of the Binding, then nodeName and PodScheduled."""
        from gpucluster.sandbox.apiserver.core import Attributes

        md = meta(pod)
        rt = self.rt("", "v1", "pods")
        binding = {
            "kind": "Binding",
            "apiVersion": "v1",
            "metadata": {"name": md["name"], "namespace": md["namespace"], "uid": md["uid"]},
            "target": {"kind": "Node", "name": node},
        }
        ctx = self.context()
        attrs = Attributes(
            "CREATE",
            rt,
            "binding",
            str(md["namespace"]),
            str(md["name"]),
            binding,
            None,
            False,
            {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
            ctx.user,
            ctx.warnings,
        )
        await self.core.admission.mutate(attrs)
        await self.core.admission.validate(attrs)
        now = self.core.now()
        status = dict(pod.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now})
        status["conditions"] = conditions
        new = {**pod, "metadata": dict(md), "spec": {**(pod.get("spec") or {}), "nodeName": node}, "status": status}
        current = self.core.store.get(PODS, str(md["namespace"]), str(md["name"]))
        if current is None or meta(current).get("uid") != md.get("uid"):
            raise Retry("pod gone")
        if (current.get("spec") or {}).get("nodeName"):
            raise ApiError(
                409, "Conflict", f'pod {md["name"]} is already assigned to node "{current["spec"]["nodeName"]}"'
            )
        self.core.store.update(PODS, new, expected_rv=rv_of(pod))

    async def _unschedulable(self, pod: Obj, message: str, pins: frozenset[str] | None) -> None:
        md = meta(pod)
        key = (str(md["namespace"]), str(md["name"]))
        self._forget(key)
        self.unschedulable[key] = time.monotonic()
        self._pins[key] = pins
        if pins is None:
            self._unpinned.add(key)
        for node in pins or ():
            self._waiting_on.setdefault(node, set()).add(key)
        self.enqueue_after(key, UNSCHEDULABLE_FLUSH)  # podMaxInUnschedulablePodsDuration
        await self._event(pod, "Warning", "FailedScheduling", message)
        status = dict(pod.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        before: Obj = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
        if before.get("status") == "False" and before.get("message") == message:
            return
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": before.get("lastTransitionTime")
                if before.get("status") == "False"
                else self.core.now(),
                "reason": "Unschedulable",
                "message": message,
            }
        )
        status["conditions"] = conditions
        rt = self.rt("", "v1", "pods")
        try:
            await self.core.update(rt, key[0], key[1], {**pod, "status": status}, self.context(), subresource="status")
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise

    async def _event(self, pod: Obj, type_: str, reason: str, message: str) -> None:
        """Record a core/v1 Event about the pod (an identical one gets its count bumped)."""
        await self.events.event(pod, "Pod", "v1", type_, reason, message)
