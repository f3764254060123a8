"""ResourceClaimTemplates for translated pods: created once a pod exists, collected once none needs them.

The admission webhook creates nothing (its answer is a pure function of the review): it labels a
translated pod ``gpucluster.nvidia.com/translated=true`` and records the specs of the templates
the pod refers to in ``gpucluster.nvidia.com/claim-templates``. This module watches such pods
cluster-wide (label selector) and the templates it created (label
``gpucluster.nvidia.com/provisioned=true``), and per pass:

* creates every template a live, non-terminal pod refers to that does not exist, labelled as
  ours. The resourceclaim controller retries the pod's claims meanwhile, so a pod waits only
  for the watch event and one POST. Only specs a translation makes are accepted, under the
  content-addressed names a translation gives them: anyone who may create a pod can write the
  annotation, and the operator's own rights must not make more of it than a translation would;
* never overwrites an object it did not create: a template of that name with another spec (a
  collision after admission) gets a Warning event on the pod naming it, once per pod;
* deletes templates it created that no live pod has referred to for ``grace_period`` seconds
  (and that are at least that old), with a UID precondition so a recreated one is never hit.

:func:`plan` is the pure part; :class:`Provisioner` does the I/O.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from gpucluster import timestamps
from gpucluster.claimtemplates import (
    CLAIM_TEMPLATES_GATE,
    container_shapes,
    expected_templates,
    gated,
    scheduling_gates,
    ungate_ops,
)
from gpucluster.clusterstate import ClusterState, KubeObject, metadata
from gpucluster.controller.transforms import transform_for
from gpucluster.kube.client import Kube, KubeError
from gpucluster.kube.paths import collection_path, object_path
from gpucluster.kube.reflector import Reflector, Resource
from gpucluster.policy import WEBHOOK_CONFIG
from gpucluster.translate import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PROVISIONED_LABEL,
    RESOURCE_API_VERSION,
    TEMPLATES_ANNOTATION,
    TRANSLATED_LABEL,
    template_name_candidates,
    template_name_matches,
    template_spec_problem,
    templates_from_annotation,
)

log = logging.getLogger("gpucluster.controller.provision")

DEFAULT_GRACE_PERIOD = 600.0  # seconds an unreferenced template of ours is kept
TRANSLATED_PODS = Resource("Pod", "/api/v1/pods", label_selector=f"{TRANSLATED_LABEL}=true")
PROVISIONED_TEMPLATES = Resource(
    "ResourceClaimTemplate",
    "/apis/resource.k8s.io/v1/resourceclaimtemplates",
    label_selector=f"{PROVISIONED_LABEL}=true",
)
RESOURCE_SLICES = Resource("ResourceSlice", "/apis/resource.k8s.io/v1/resourceslices")
CONFLICT_REASON = "ClaimTemplateConflict"
REFUSED_REASON = "ClaimTemplateRefused"
FIELD_MANAGER = "gpucluster"

Key = tuple[str, str]  # (namespace, name)
_HASH_LEN = 10  # the digest at the end of a translated template's name (gpucluster.translate)


def _terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or bool(
        metadata(pod).get("deletionTimestamp")
    )


def template_object(namespace: str, name: str, spec: Mapping[str, Any]) -> KubeObject:
    """The ResourceClaimTemplate we create: our labels, the annotated spec, nothing else."""
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, PROVISIONED_LABEL: "true"},
        },
        "spec": dict(spec),
    }


@dataclass(frozen=True)
class Want:
    """A template a pod may have: the spec the translation of its recorded requests gives, under
    the name the pod refers to, and the names the webhook tries before that one (each must be
    taken by another spec for this name to be the webhook's choice)."""

    name: str
    spec: dict[str, Any]
    earlier: tuple[str, ...] = ()


@dataclass
class Plan:
    """What one pass should do."""

    create: dict[Key, KubeObject] = field(default_factory=dict)  # missing templates, with a pod wanting each
    wanted_by: dict[Key, list[KubeObject]] = field(default_factory=dict)  # pods per missing template
    earlier: dict[Key, tuple[str, ...]] = field(default_factory=dict)  # names that must be taken first
    refused: list[tuple[KubeObject, str]] = field(default_factory=list)  # pods whose templates we refuse
    conflicts: list[tuple[KubeObject, Key, KubeObject]] = field(default_factory=list)  # (pod, key, other template)
    referenced: set[Key] = field(default_factory=set)  # templates some live pod refers to
    ungate: list[KubeObject] = field(default_factory=list)  # gated pods whose templates all exist as asked


def _referenced_names(pod: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = ref.get("resourceClaimTemplateName") if isinstance(ref, dict) else None
        if isinstance(name, str) and name not in names:
            names.append(name)
    return names


def translation_inputs(pod: Mapping[str, Any]) -> bytes | None:
    """All that :func:`wanted_templates` reads of ``pod``, as one key: the record of its original
    requests and the templates annotation, its containers' names (and whether an init container
    is a sidecar) and the templates it refers to. Pods equal in these get one answer, in any
    namespace (the names and specs do not depend on it); what a pod's life changes (status,
    gates, node, labels, images) is not among them. None when the pod holds something JSON cannot
    key (no API server returns such a pod)."""
    meta = metadata(pod)
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    if any(not isinstance((spec or {}).get(key) or [], list) for key in ("initContainers", "containers")):
        return None
    try:
        return orjson.dumps(
            (
                (annotations or {}).get(WEBHOOK_CONFIG.annotation),
                (annotations or {}).get(TEMPLATES_ANNOTATION),
                container_shapes(spec or {}),
                _referenced_names(pod),
            )
        )
    except TypeError:
        return None


def pass_fingerprint(pod: Mapping[str, Any]) -> int:
    """A digest of what a pass reads of ``pod`` that can change during its life: whether it is
    terminal or being deleted, its scheduling gates, and :func:`translation_inputs`. Its status
    otherwise (conditions, the node's reports, its claims' names) is not read."""
    gates = tuple(str(g.get("name")) if isinstance(g, dict) else repr(g) for g in scheduling_gates(pod))
    return hash((_terminal(pod), gates, translation_inputs(pod)))


def wanted_templates(pod: Mapping[str, Any], cluster: ClusterState | None = None) -> tuple[dict[str, Want], list[str]]:
    """The templates of a translated pod that gpucluster provisions: ``{name: Want}``, and refusals (why).

    What the pod's annotations say about specs is never used: the specs are re-derived from the
    recorded original requests (:func:`gpucluster.claimtemplates.expected_templates`) with the
    webhook's bounds and ``cluster``'s published MIG profiles. A template the pod refers to is
    provisioned only when its name is the one the webhook gives that spec (or an alternative,
    see :class:`Want`), one name per spec. Other templates the pod refers to are the user's own.
    """
    meta = metadata(pod)
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    recorded = templates_from_annotation(annotations or {}) or {}
    refs = _referenced_names(pod)
    expected, why = expected_templates(pod, cluster if cluster is not None else ClusterState())
    if why is not None:
        return {}, [why]
    out: dict[str, Want] = {}
    names_of: dict[str, list[str]] = {}
    problems: list[str] = []
    for ref in refs:
        found: Want | None = None
        base = ""
        if ref in expected:
            found, base = Want(ref, expected[ref]), ref
        else:
            for name, spec in expected.items():
                if ref[:-_HASH_LEN] != name[:-_HASH_LEN]:
                    continue
                candidates = list(template_name_candidates(name, spec))
                if ref in candidates:
                    found, base = Want(ref, spec, tuple(candidates[: candidates.index(ref)])), name
                    break
        if found is None:
            if ref in recorded:
                problems.append(
                    f"template {ref}: not a template the translation of the pod's recorded GPU requests gives"
                )
            continue  # the user's own template: not ours to provision
        names_of.setdefault(base, []).append(ref)
        out[ref] = found
    for names in names_of.values():
        if len(names) > 1:
            problems.append(f"templates {', '.join(names)}: one translated spec under {len(names)} names")
            for name in names:
                out.pop(name, None)
    return out, problems


Wants = Callable[[KubeObject, ClusterState], tuple[dict[str, Want], list[str]]]


def plan(
    pods: list[KubeObject],
    existing: Callable[[str, str], KubeObject | None],
    satisfied: set[Key],
    cluster: ClusterState | None = None,
    wants_of: Wants = wanted_templates,
    is_spec: Callable[[KubeObject, Want], bool] = lambda live, want: live.get("spec") == want.spec,
) -> Plan:
    """Which templates to create for ``pods`` (the translated pods), given what exists.

    ``existing(namespace, name)`` is our cached template (labelled as ours: it is ours only if its
    spec is the one we would create); ``satisfied`` holds names found to exist as someone else's
    object with the same spec (nothing to do for those). ``cluster`` gives the published MIG
    profiles; ``wants_of`` is :func:`wanted_templates` and ``is_spec`` compares a live template's
    spec with a want (either may be a memo).
    """
    result = Plan()
    view = cluster if cluster is not None else ClusterState()
    for pod in sorted(pods, key=lambda p: str(metadata(p).get("creationTimestamp") or "")):
        if _terminal(pod):
            continue
        namespace = str(metadata(pod).get("namespace") or "")
        wants, problems = wants_of(pod, view)
        if problems:
            result.refused.append((pod, "; ".join(problems)))
        complete = bool(wants) and not problems
        for name, want in wants.items():
            key = (namespace, name)
            result.referenced.add(key)
            live = existing(namespace, name)
            if live is not None:
                if not is_spec(live, want):
                    result.conflicts.append((pod, key, live))  # labelled as ours, but not what we create
                    complete = False
                continue
            if key in satisfied:
                continue
            complete = False
            result.create.setdefault(key, template_object(namespace, name, want.spec))
            result.wanted_by.setdefault(key, []).append(pod)
            result.earlier[key] = want.earlier
        if complete and gated(pod):
            result.ungate.append(pod)
    return result


def owned(template: Mapping[str, Any]) -> bool:
    """Whether a template is one gpucluster created: labelled so, and its spec one a translation
    makes under this very name. A label alone never makes an object ours."""
    meta = metadata(template)
    name = meta.get("name")
    spec = template.get("spec")
    return (
        (meta.get("labels") or {}).get(PROVISIONED_LABEL) == "true"
        and isinstance(name, str)
        and template_spec_problem(spec) is None
        and template_name_matches(name, spec)  # type: ignore[arg-type]
    )


def pods_naming(pods: list[KubeObject]) -> set[str]:
    """The template names any of ``pods`` refers to (translated or not, live or finished)."""
    return {name for pod in pods for name in _referenced_names(pod)}


def collectable(
    templates: list[KubeObject], referenced: set[Key], unreferenced_since: dict[Key, float], now: float, grace: float
) -> list[KubeObject]:
    """Our templates that no live pod has referred to for ``grace`` seconds (updates ``unreferenced_since``)."""
    out = []
    seen: set[Key] = set()
    wall = dt.datetime.now(dt.UTC)
    for template in templates:
        meta = metadata(template)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        seen.add(key)
        if key in referenced or meta.get("deletionTimestamp"):
            unreferenced_since.pop(key, None)
            continue
        since = unreferenced_since.setdefault(key, now)
        if now - since < grace or _age(meta, wall) < grace:
            continue
        out.append(template)
    for key in set(unreferenced_since) - seen:
        del unreferenced_since[key]
    return out


def _age(meta: Mapping[str, Any], now: dt.datetime) -> float:
    created = meta.get("creationTimestamp")
    if not isinstance(created, str):
        return float("inf")
    try:
        when = timestamps.parse(created)
    except ValueError:
        return float("inf")
    return (now - when).total_seconds()


class ProvisionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.created = Counter(
            "gpucluster_controller_claim_templates_created",
            "ResourceClaimTemplates created for translated pods.",
            registry=registry,
        )
        self.collected = Counter(
            "gpucluster_controller_claim_templates_collected",
            "ResourceClaimTemplates deleted after no pod referred to them for the grace period.",
            registry=registry,
        )
        self.conflicts = Counter(
            "gpucluster_controller_claim_template_conflicts",
            "Templates a translated pod needs whose name is taken by an object with another spec.",
            registry=registry,
        )
        self.ungated = Counter(
            "gpucluster_controller_pods_ungated",
            "Translated pods whose claim-templates scheduling gate was removed once their templates existed.",
            registry=registry,
        )
        self.owned = Gauge(
            "gpucluster_controller_claim_templates", "ResourceClaimTemplates the controller created.", registry=registry
        )


EventSink = Callable[[Mapping[str, Any], str, str, str], Any]  # (object, type, reason, message) -> awaitable


def _devices(spec: Any) -> str:
    """What a template's claim asks for, in a few words: ``7 of gpu.nvidia.com``."""
    counts: dict[str, int] = {}
    requests = ((spec or {}).get("spec") or {}).get("devices", {}).get("requests") if isinstance(spec, dict) else None
    for request in requests if isinstance(requests, list) else []:
        exactly = request.get("exactly") if isinstance(request, dict) else None
        if isinstance(exactly, dict):
            device_class = str(exactly.get("deviceClassName"))
            if exactly.get("allocationMode") == "All":
                counts[device_class] = -1
            elif counts.get(device_class, 0) >= 0:
                count_ = exactly.get("count", 1)
                counts[device_class] = counts.get(device_class, 0) + (count_ if isinstance(count_, int) else 1)
        elif isinstance(request, dict) and request.get("firstAvailable"):
            counts["a firstAvailable list"] = counts.get("a firstAvailable list", 0) + 1
    if not counts:
        return "no device"
    return ", ".join(f"{'all' if n < 0 else n} of {c}" for c, n in sorted(counts.items()))


def _claims_from(pod: Mapping[str, Any], template: str) -> list[tuple[str, str | None]]:
    """(pod claim name, ResourceClaim name made for it, if any) for the claims of ``pod`` made from ``template``."""
    made = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if isinstance(s, dict)
    }
    out = []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        if isinstance(ref, dict) and ref.get("resourceClaimTemplateName") == template:
            claim = made.get(str(ref.get("name")))
            out.append((str(ref.get("name")), claim if isinstance(claim, str) else None))
    return out


def conflict_message(pod: Mapping[str, Any], namespace: str, name: str, ours: Any, theirs: Any) -> str:
    """The truth about a pod whose template name is taken by another spec: its claim is (or will be)
    made from that template, so it gets that template's devices, not the ones it asked for."""
    claims = _claims_from(pod, name)
    made = [f"{c} (ResourceClaim {rc})" for c, rc in claims if rc]
    pending = [c for c, rc in claims if not rc]
    parts = []
    if made:
        parts.append(f"the pod's claim {', '.join(made)} was made from it")
    if pending:
        parts.append(f"kube-controller-manager makes the pod's claim {', '.join(pending)} from it")
    which = " and ".join(parts) or "the pod's claims are made from it"
    if gated(pod):
        outcome = (
            f"{which}, with {_devices(theirs)} instead of the {_devices(ours)} it asked for, so the pod stays "
            f"gated ({CLAIM_TEMPLATES_GATE}) and is not scheduled"
        )
    else:
        outcome = f"{which}, so the pod gets {_devices(theirs)} instead of the {_devices(ours)} it asked for"
    return (
        f"ResourceClaimTemplate {namespace}/{name} exists with another spec and was not created by gpucluster; "
        f"{outcome}. Delete the pod: its replacement is translated under another template name"
    )


def refused_message(pod: Mapping[str, Any], why: str) -> str:
    message = f"gpucluster provisions no claim template: {why}"
    if gated(pod):
        message += f"; the pod stays gated ({CLAIM_TEMPLATES_GATE}) and is not scheduled while this holds"
    return message


@dataclass
class _Backoff:
    until: float
    delay: float


BACKOFF_INITIAL = 1.0  # seconds before a refused create is tried again, doubled up to BACKOFF_MAX
BACKOFF_MAX = 300.0
DEFAULT_CONCURRENCY = 64  # templates created at once (requests wait on the API server, not on us)
# Set on a pod once a template it waits for exists: the update makes kube-controller-manager's
# resourceclaim controller sync the pod now (it enqueues a pod on every update) instead of after
# its exponential retry backoff for a pod whose template was missing.
TOUCH_ANNOTATION = "gpucluster.nvidia.com/claim-templates-ready"


class FairQueue:
    """Keys served a namespace at a time, in turn: one namespace's many templates never delay
    another's first one. A key queued twice is served once."""

    def __init__(self) -> None:
        self._queues: dict[str, collections.deque[Key]] = {}  # insertion order: whose turn is next
        self._queued: set[Key] = set()

    def __len__(self) -> int:
        return len(self._queued)

    def push(self, key: Key) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queues.setdefault(key[0], collections.deque()).append(key)

    def pop(self) -> Key | None:
        for namespace in list(self._queues):
            queue = self._queues.pop(namespace)
            key = queue.popleft()
            if queue:
                self._queues[namespace] = queue  # to the back of the line
            self._queued.discard(key)
            return key
        return None


class Provisioner:
    """Runs the reflectors of translated pods, our templates and ResourceSlices (the published MIG
    profiles), and a pass after every change a pass reads (of a pod: :func:`pass_fingerprint`).

    ``cluster``: a cache whose ResourceSlices to read instead (the controller's, so that the
    slices are held once); its owner calls :meth:`slices_changed` on their events."""

    def __init__(
        self,
        kube: Kube,
        *,
        event: EventSink,
        leads: Callable[[], bool] = lambda: True,
        accepting: Callable[[], bool] = lambda: True,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        registry: CollectorRegistry | None = None,
        min_interval: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
        concurrency: int = DEFAULT_CONCURRENCY,
        touch: bool = True,
        cluster: ClusterState | None = None,
    ) -> None:
        self.kube = kube
        self.event = event
        self.leads = leads
        self.accepting = accepting
        self.grace_period = grace_period
        self.min_interval = min_interval
        self.clock = clock
        self.concurrency = max(1, concurrency)
        self.touch = touch
        self.state = ClusterState()
        self.cluster = cluster if cluster is not None else self.state  # where the ResourceSlices are
        self.metrics = ProvisionMetrics(registry or CollectorRegistry())
        self.dirty = asyncio.Event()
        watched = (TRANSLATED_PODS, PROVISIONED_TEMPLATES) + ((RESOURCE_SLICES,) if cluster is None else ())
        self.reflectors = [
            Reflector(
                kube, r, self.state, on_event=self._on_event, on_list=self._on_list, transform=transform_for(r.kind)
            )
            for r in watched
        ]
        self._pod_fingerprints: dict[str, int] = {}  # pod uid -> what a pass reads of it (see _on_event)
        self.unreferenced_since: dict[Key, float] = {}
        self.satisfied: set[Key] = set()  # someone else's template with our spec
        self.backoff: dict[Key, _Backoff] = {}  # refused creates: not before
        self._reported: dict[str, str] = {}  # pod uid -> last message posted
        self._queue = FairQueue()  # templates to create
        self._jobs: dict[Key, tuple[KubeObject, list[KubeObject], tuple[str, ...]]] = {}  # latest want per key
        self._inflight: set[Key] = set()
        self._workers: set[asyncio.Task[None]] = set()
        self._ungates: set[asyncio.Task[None]] = set()  # the run loop's ungates, under way
        self._ungate_slots = asyncio.Semaphore(self.concurrency)
        self._missing: dict[str, set[Key]] = {}  # pod uid -> its templates missing at the last pass
        self._touched: set[str] = set()  # pod uids touched once their templates existed
        self._ungating: set[str] = set()  # pod uids whose ungate is on its way (a worker's and a pass's)
        self._template_answers: dict[tuple[str, str, str], bool] = {}  # (uid, resourceVersion, question)
        self._inputs: dict[str, tuple[Any, bytes | None]] = {}  # pod uid -> (resourceVersion, translation_inputs)
        self._wants: dict[bytes, tuple[int, tuple[dict[str, Want], list[str]]]] = {}  # memo, by inputs
        self.passes = 0

    def _on_event(self, type_: str, obj: KubeObject) -> None:
        # A running pod's status changes (the kubelet's, the scheduler's, its claims') change
        # nothing a pass reads: on a cluster of many translated pods a pass per such event would
        # cost a pass over all of them each time.
        if obj.get("kind") == "Pod":
            uid = str(metadata(obj).get("uid"))
            if type_ == "DELETED":
                self._pod_fingerprints.pop(uid, None)
            else:
                seen = pass_fingerprint(obj)
                if type_ == "MODIFIED" and self._pod_fingerprints.get(uid) == seen:
                    return
                self._pod_fingerprints[uid] = seen
        self.dirty.set()

    def _on_list(self, kind: str) -> None:
        # A (re)list replaced the cache, and what changed meanwhile is unknown: a pass, and the
        # pods' fingerprints taken from the list.
        if kind == "Pod":
            self._pod_fingerprints = {str(metadata(p).get("uid")): pass_fingerprint(p) for p in self.state.list("Pod")}
        self.dirty.set()

    def slices_changed(self) -> None:
        """A ResourceSlice of ``cluster`` was listed, added, changed or deleted."""
        self.dirty.set()

    def synced(self) -> bool:
        return self.state.synced(["Pod", "ResourceClaimTemplate"]) and self.cluster.synced(["ResourceSlice"])

    def owned(self) -> list[KubeObject]:
        """The templates gpucluster created (:func:`owned`): what the collector and the finalizer may delete."""
        return [t for t in self.state.list("ResourceClaimTemplate") if self._memo(t, "owned", owned)]

    # A template's answers are kept for its resourceVersion: a pass over a burst compares every
    # pod's templates, and digests of every template, on every event otherwise.
    def _memo(self, template: KubeObject, what: str, answer: Callable[[KubeObject], bool]) -> bool:
        meta = metadata(template)
        if meta.get("resourceVersion") is None:
            return answer(template)
        key = (str(meta.get("uid")), str(meta.get("resourceVersion")), what)
        found = self._template_answers.get(key)
        if found is None:
            found = self._template_answers[key] = answer(template)
        return found

    def _is_spec(self, live: KubeObject, want: Want) -> bool:
        # One answer per template version: its name binds the spec a translation wants under it.
        return self._memo(live, f"spec:{want.name}", lambda t: t.get("spec") == want.spec)

    def _memo_keep(self) -> None:
        live = {
            (str(metadata(t).get("uid")), str(metadata(t).get("resourceVersion")))
            for t in self.state.list("ResourceClaimTemplate")
        }
        for key in [k for k in self._template_answers if k[:2] not in live]:
            del self._template_answers[key]

    def _wait(self) -> float:
        wait = min(5.0, max(self.grace_period / 4, 0.05))
        if self.backoff:
            wait = min(wait, max(0.05, min(b.until for b in self.backoff.values()) - self.clock()))
        return wait

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.create_task(r.run()) for r in self.reflectors]
        try:
            while not stop.is_set():
                # Wake on any change, at least every few seconds for the grace-period clock, and
                # when a backed-off create is due.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.dirty.wait(), self._wait())
                if stop.is_set():
                    return
                self.dirty.clear()
                if not self.synced() or not self.leads():
                    continue
                started = self.clock()
                try:
                    await self.reconcile(wait=False)
                except (KubeError, OSError, TimeoutError) as exc:
                    log.warning("claim template pass failed error=%s", exc)
                    self.dirty.set()
                    await asyncio.sleep(1.0)
                await asyncio.sleep(max(0.0, self.min_interval - (self.clock() - started)))
        finally:
            for task in [*tasks, *self._workers, *self._ungates]:
                task.cancel()
            await asyncio.gather(*tasks, *self._workers, *self._ungates, return_exceptions=True)

    def _wanted(self, pod: KubeObject, cluster: ClusterState) -> tuple[dict[str, Want], list[str]]:
        """:func:`wanted_templates`, translated again only when what it reads of the pod
        (:func:`translation_inputs`) or the published MIG profiles change. A burst's pod changes
        four or five times (created, ungated, its claim, scheduled, started) and its replicas share
        one shape: translating on every event was most of a pass's time."""
        meta = metadata(pod)
        uid, version = str(meta.get("uid")), meta.get("resourceVersion")
        known = self._inputs.get(uid)
        if known is not None and known[0] == version and version is not None:
            inputs = known[1]
        else:
            inputs = translation_inputs(pod)
            self._inputs[uid] = (version, inputs)
        generation = cluster.kind_generation("ResourceSlice")
        found = self._wants.get(inputs) if inputs is not None else None
        if found is not None and found[0] == generation:
            return found[1]
        result = wanted_templates(pod, cluster)
        if inputs is not None:
            self._wants[inputs] = (generation, result)
        return result

    def _ours(self, namespace: str, name: str) -> KubeObject | None:
        return self.state.get("ResourceClaimTemplate", name, namespace)

    async def reconcile(self, *, wait: bool = True) -> None:
        """One pass: create what live pods need, report refusals and conflicts, collect the unneeded.
        Without ``wait`` the creates and the ungates go on after the pass returns (see
        :meth:`_create_all`, :meth:`_start_ungates`)."""
        self.passes += 1
        pods = self.state.list("Pod")
        self._memo_keep()
        result = plan(pods, self._ours, self.satisfied, self.cluster, self._wanted, self._is_spec)
        self.satisfied &= result.referenced
        for key in set(self.backoff) - set(result.create):
            del self.backoff[key]
        live_uids = {str(metadata(p).get("uid")) for p in pods}
        for pod, why in result.refused:
            await self._report(pod, "Warning", REFUSED_REASON, refused_message(pod, why))
        for pod, (namespace, name), live in result.conflicts:
            want = result_spec(pod, name, self.cluster)
            await self._conflict(pod, namespace, name, want, live.get("spec"))
        if self.accepting():
            await self._create_all(result, wait=wait)
        for template in collectable(
            self.owned(), result.referenced, self.unreferenced_since, self.clock(), self.grace_period
        ):
            await self._collect(template)
        self.metrics.owned.set(len(self.state.list("ResourceClaimTemplate")))
        for uid in set(self._reported) - live_uids:
            del self._reported[uid]
        self._touched &= live_uids
        if wait:
            await self._each(self._ungate, result.ungate)
        else:
            self._start_ungates(result.ungate)
        for uid in set(self._inputs) - live_uids:
            del self._inputs[uid]
        live_inputs = {inputs for _, inputs in self._inputs.values()}
        for inputs in set(self._wants) - live_inputs:
            del self._wants[inputs]

    async def _create_all(self, result: Plan, *, wait: bool = True) -> None:
        """Queue the missing templates that are due and keep up to ``concurrency`` workers creating
        them, namespaces in turn. Each pod that waited is touched as soon as all of its templates
        exist, not when the whole batch is done. With ``wait`` (the tests', and a single pass's
        view) this returns once the queue is empty; the run loop does not wait, so pods that
        arrive meanwhile are queued by the next pass instead of waiting for this one's batch."""
        now = self.clock()
        for key in set(self._jobs) - set(result.create) - self._inflight:
            del self._jobs[key]  # no live pod wants it any more: its queued create is dropped
        self._missing = {}
        for key, pods in result.wanted_by.items():
            for pod in pods:
                self._missing.setdefault(str(metadata(pod).get("uid")), set()).add(key)
        for key in result.create:  # oldest pod's first; the queue takes namespaces in turn
            if key in self.backoff and self.backoff[key].until > now:
                continue
            self._jobs[key] = (result.create[key], result.wanted_by[key], result.earlier.get(key, ()))
            if key not in self._inflight:
                self._queue.push(key)
        self._workers = {w for w in self._workers if not w.done()}
        while len(self._workers) < self.concurrency and len(self._queue) > len(self._workers) - len(self._inflight):
            self._workers.add(asyncio.create_task(self._work()))
        if wait:
            while self._workers:
                await asyncio.gather(*self._workers, return_exceptions=True)
                self._workers = {w for w in self._workers if not w.done()}

    async def _work(self) -> None:
        while (key := self._queue.pop()) is not None:
            job = self._jobs.get(key)
            if job is None:
                continue
            self._inflight.add(key)
            try:
                template, pods, earlier = job
                ready = await self._create(key, template, pods, earlier)
                if ready:
                    # Pods that came to want this template while it was being created are in the latest job.
                    await self._each(self._touch_when_ready, self._jobs.get(key, job)[1])
            except Exception:  # a worker outlives any one template: the next pass tries again
                log.exception("claim template worker failed namespace=%s name=%s", *key)
                self.dirty.set()
            finally:
                self._inflight.discard(key)
                self._jobs.pop(key, None)

    async def _touch_when_ready(self, pod: KubeObject) -> None:
        uid = str(metadata(pod).get("uid"))
        missing = self._missing.get(uid, set())
        if any(self._ours(ns, name) is None and (ns, name) not in self.satisfied for ns, name in missing):
            return  # another of its templates is still missing: touched once that one exists
        if uid in self._touched:
            return
        if gated(pod):
            await self._ungate(pod)  # the pod's update is the resourceclaim controller's cue too
        elif self.touch:
            self._touched.add(uid)
            await self._touch(pod)

    async def _each(self, act: Callable[[KubeObject], Awaitable[None]], pods: list[KubeObject]) -> None:
        """``act`` on each of ``pods``, ``concurrency`` at a time."""
        if not pods:
            return
        limit = asyncio.Semaphore(self.concurrency)

        async def one(pod: KubeObject) -> None:
            async with limit:
                await act(pod)

        await asyncio.gather(*(one(pod) for pod in pods))

    def _start_ungates(self, pods: list[KubeObject]) -> None:
        """Ungate ``pods`` in the background, ``concurrency`` at a time: the run loop's next pass
        does not wait for these PATCHes (under a burst each takes as long as a template's POST),
        so the templates of pods that arrive meanwhile are queued at once."""
        for pod in pods:
            taken = self._take_ungate(pod)  # taken now: the passes before this PATCH ends skip the pod
            if taken is not None:
                task = asyncio.create_task(self._send_taken(pod, *taken, slots=self._ungate_slots))
                self._ungates.add(task)
                task.add_done_callback(self._ungates.discard)

    async def _ungate(self, pod: KubeObject) -> None:
        """Remove :data:`CLAIM_TEMPLATES_GATE`: every template the pod names exists with its spec."""
        taken = self._take_ungate(pod)
        if taken is not None:
            await self._send_taken(pod, *taken)

    def _take_ungate(self, pod: KubeObject) -> tuple[str, list[dict[str, Any]]] | None:
        """The pod's uid and ungate operations, marked as under way; None when it has none, or is
        ungated already or being ungated (a worker's and a pass's ungate are one request)."""
        ops = ungate_ops(pod)
        uid = str(metadata(pod).get("uid"))
        if not ops or uid in self._touched or uid in self._ungating:
            return None
        self._ungating.add(uid)
        return uid, ops

    async def _send_taken(
        self, pod: KubeObject, uid: str, ops: list[dict[str, Any]], *, slots: asyncio.Semaphore | None = None
    ) -> None:
        """Send an ungate :meth:`_take_ungate` took (within ``slots``), and release it."""
        try:
            async with slots if slots is not None else contextlib.nullcontext():
                if uid not in self._touched and await self._send_ungate(pod, ops):
                    self._touched.add(uid)
        finally:
            self._ungating.discard(uid)

    async def _send_ungate(self, pod: KubeObject, ops: list[dict[str, Any]]) -> bool:
        meta = metadata(pod)
        path = object_path({"apiVersion": "v1", "kind": "Pod", **pod})
        try:
            await self.kube.request("PATCH", path, body=ops, content_type="application/json-patch+json")
        except KubeError as exc:  # gone, or its gates changed since it was read
            log.info(
                "could not ungate pod namespace=%s name=%s status=%s",
                meta.get("namespace"),
                meta.get("name"),
                exc.status,
            )
            if exc.status in (409, 422):
                # Its gates changed: the event that says so may have come while this request was
                # on its way (and the pass it woke was turned away): pass again on the cache.
                self.dirty.set()
            return False
        except (OSError, TimeoutError) as exc:
            log.info("could not ungate pod namespace=%s name=%s error=%s", meta.get("namespace"), meta.get("name"), exc)
            self.dirty.set()
            return False
        self.metrics.ungated.inc()
        log.info("ungated pod namespace=%s name=%s", meta.get("namespace"), meta.get("name"))
        return True

    async def _touch(self, pod: KubeObject) -> None:
        """A metadata-only update of ``pod``: the resourceclaim controller syncs it at once."""
        meta = metadata(pod)
        path = object_path({"apiVersion": "v1", "kind": "Pod", **pod})
        stamp = timestamps.rfc3339_micro()
        body = {"metadata": {"annotations": {TOUCH_ANNOTATION: stamp}}}
        try:
            await self.kube.request("PATCH", path, body=body, content_type="application/merge-patch+json")
        except KubeError as exc:  # gone, or not ours to touch: its claims come with upstream's retry
            log.info(
                "could not touch pod namespace=%s name=%s status=%s",
                meta.get("namespace"),
                meta.get("name"),
                exc.status,
            )
        except (OSError, TimeoutError) as exc:
            log.info("could not touch pod namespace=%s name=%s error=%s", meta.get("namespace"), meta.get("name"), exc)

    def _back_off(self, key: Key) -> None:
        previous = self.backoff.get(key)
        delay = min(BACKOFF_MAX, previous.delay * 2) if previous else BACKOFF_INITIAL
        self.backoff[key] = _Backoff(self.clock() + delay, delay)

    async def _earlier_free(self, namespace: str, earlier: tuple[str, ...], spec: Any) -> str | None:
        """The first of ``earlier`` that is not taken by another spec (the webhook would have chosen it)."""
        for name in earlier:
            live = await self._get({"apiVersion": RESOURCE_API_VERSION, "kind": "ResourceClaimTemplate",
                                    "metadata": {"name": name, "namespace": namespace}})  # fmt: skip
            if live is None or live.get("spec") == spec:
                return name
        return None

    async def _create(self, key: Key, template: KubeObject, pods: list[KubeObject], earlier: tuple[str, ...]) -> bool:
        """Create one template; True when a template with our spec exists afterwards."""
        namespace, name = key
        try:
            free = await self._earlier_free(namespace, earlier, template["spec"]) if earlier else None
        except (KubeError, OSError, TimeoutError):
            self._back_off(key)
            return False
        if free is not None:
            for pod in pods:
                await self._report(
                    pod, "Warning", REFUSED_REASON,
                    f"gpucluster provisions no claim template {name}: the webhook names this spec {name} only while "
                    f"{free} is taken by another spec, and it is not; recreate the pod",
                )  # fmt: skip
            self._back_off(key)
            return False
        path = collection_path(RESOURCE_API_VERSION, "ResourceClaimTemplate", namespace)
        try:
            created = await self.kube.request("POST", path, body=template, query=[("fieldManager", FIELD_MANAGER)])
        except (OSError, TimeoutError) as exc:
            log.warning("creating claim template failed namespace=%s name=%s error=%s", namespace, name, exc)
            self._back_off(key)
            return False
        except KubeError as exc:
            if exc.status != 409:
                self._back_off(key)  # not on every pass: a refused create waits, doubling, up to 5 min
                if exc.status in (403, 404, 422):
                    # The namespace is going away (403/404), a quota, or the API server refuses
                    # the object: say so on the pods, once.
                    for pod in pods:
                        await self._report(
                            pod, "Warning", REFUSED_REASON, f"cannot create ResourceClaimTemplate {name}: {exc}"
                        )
                else:
                    log.warning("creating claim template failed namespace=%s name=%s error=%s", namespace, name, exc)
                return False
            return await self._exists(key, template, pods)
        self.backoff.pop(key, None)
        created.setdefault("kind", "ResourceClaimTemplate")
        self.state.upsert("ResourceClaimTemplate", created)
        self.metrics.created.inc()
        log.info("created claim template namespace=%s name=%s for=%s", namespace, name, metadata(pods[0]).get("name"))
        return True

    async def _exists(self, key: Key, template: KubeObject, pods: list[KubeObject]) -> bool:
        """After a 409: a template of that name exists. Ours only if its spec is ours."""
        namespace, name = key
        try:
            live = await self._get(template)
        except (KubeError, OSError, TimeoutError):
            self._back_off(key)
            return False
        if live is None:
            self.dirty.set()  # deleted meanwhile: try again
            return False
        self.backoff.pop(key, None)
        if live.get("spec") == template["spec"]:
            if owned(live):
                live.setdefault("kind", "ResourceClaimTemplate")
                self.state.upsert("ResourceClaimTemplate", live)  # ours, the watch is behind
            else:
                self.satisfied.add(key)  # someone else's, same content: the pod's claims are right
            return True
        for pod in pods:
            await self._conflict(pod, namespace, name, template["spec"], live.get("spec"))
        self._back_off(key)  # not again on every pass; once that template is gone, ours is created
        return False

    async def _conflict(self, pod: KubeObject, namespace: str, name: str, ours: Any, theirs: Any) -> None:
        message = conflict_message(pod, namespace, name, ours, theirs)
        if self._reported.get(str(metadata(pod).get("uid"))) != message:
            self.metrics.conflicts.inc()
        await self._report(pod, "Warning", CONFLICT_REASON, message)

    async def _get(self, template: KubeObject) -> KubeObject | None:
        try:
            return await self.kube.get(object_path(template))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def _users(self, namespace: str) -> set[str] | None:
        """The template names any pod of ``namespace`` refers to (None: could not list them)."""
        names: set[str] = set()
        query: list[tuple[str, str]] = [("limit", "500")]
        try:
            while True:
                page = await self.kube.get(f"/api/v1/namespaces/{namespace}/pods", query=query)
                names |= pods_naming(list(page.get("items") or []))
                more = (page.get("metadata") or {}).get("continue")
                if not more:
                    return names
                query = [("limit", "500"), ("continue", str(more))]
        except (KubeError, OSError, TimeoutError) as exc:
            log.warning("cannot list pods before collecting namespace=%s error=%s", namespace, exc)
            return None

    async def _collect(self, template: KubeObject) -> None:
        meta = metadata(template)
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name"))
        # Any pod that exists is a user, whatever its labels (a migrated Deployment's pods name
        # the template without being translated): ask the API server, not our label-selected cache.
        users = await self._users(namespace)
        if users is None or name in users:
            self.unreferenced_since[(namespace, name)] = self.clock()  # the grace period starts again
            return
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
        }
        try:
            await self.kube.request("DELETE", object_path(template), body=body)
        except KubeError as exc:
            if exc.status not in (404, 409):  # gone, or changed since we looked: the next pass decides
                raise
            return
        self.state.delete("ResourceClaimTemplate", template)
        self.unreferenced_since.pop((namespace, name), None)
        self.metrics.collected.inc()
        log.info("deleted unreferenced claim template namespace=%s name=%s", namespace, name)

    async def _report(self, pod: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """One event per pod and message, not one per pass."""
        uid = str(metadata(pod).get("uid"))
        if self._reported.get(uid) == message:
            return
        self._reported[uid] = message
        pod = {"apiVersion": "v1", "kind": "Pod", **pod}
        await self.event(pod, type_, reason, message)


def result_spec(pod: Mapping[str, Any], name: str, cluster: ClusterState) -> Any:
    """The spec ``pod``'s template ``name`` should have (the re-derived one)."""
    want = wanted_templates(pod, cluster)[0].get(name)
    return want.spec if want is not None else None
