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
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from gpucluster.clusterstate import ClusterState, KubeObject, metadata
from gpucluster.kube.client import Kube, KubeError
from gpucluster.kube.paths import collection_path, object_path
from gpucluster.kube.reflector import Reflector, Resource
from gpucluster.translate import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PROVISIONED_LABEL,
    RESOURCE_API_VERSION,
    TRANSLATED_LABEL,
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
CONFLICT_REASON = "ClaimTemplateConflict"
REFUSED_REASON = "ClaimTemplateRefused"
FIELD_MANAGER = "gpucluster"

Key = tuple[str, str]  # (namespace, name)


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


@dataclass
class Plan:
    """What one pass should do."""

    create: dict[Key, KubeObject] = field(default_factory=dict)  # missing templates, with a pod wanting each
    wanted_by: dict[Key, list[KubeObject]] = field(default_factory=dict)  # pods per missing template
    refused: list[tuple[KubeObject, str]] = field(default_factory=list)  # pods whose annotation we refuse
    referenced: set[Key] = field(default_factory=set)  # templates some live pod refers to


def wanted_templates(pod: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The templates a translated pod refers to and records: ``{name: spec}``, and refusals (why)."""
    meta = metadata(pod)
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    specs = templates_from_annotation(annotations or {})
    if specs is None:
        return {}, ["its claim-templates annotation is missing or not a JSON object of template specs"]
    out: dict[str, dict[str, Any]] = {}
    problems = []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = ref.get("resourceClaimTemplateName") if isinstance(ref, dict) else None
        if not isinstance(name, str) or name not in specs:
            continue  # the user's own template: not ours to provision
        spec = specs[name]
        why = template_spec_problem(spec)
        if why is None and not template_name_matches(name, spec):
            why = "the name is not the one a translation gives this spec"
        if why is not None:
            problems.append(f"template {name}: {why}")
            continue
        out[name] = spec
    return out, problems


def plan(pods: list[KubeObject], existing: Callable[[str, str], KubeObject | None], satisfied: set[Key]) -> Plan:
    """Which templates to create for ``pods`` (the translated pods), given what exists.

    ``existing(namespace, name)`` is our cached template; ``satisfied`` holds names found to exist
    as someone else's object with the same spec (nothing to do for those).
    """
    result = Plan()
    for pod in sorted(pods, key=lambda p: str(metadata(p).get("creationTimestamp") or "")):
        if _terminal(pod):
            continue
        namespace = str(metadata(pod).get("namespace") or "")
        specs, problems = wanted_templates(pod)
        if problems:
            result.refused.append((pod, "; ".join(problems)))
        for name, spec in specs.items():
            key = (namespace, name)
            result.referenced.add(key)
            if existing(namespace, name) is not None or key in satisfied:
                continue
            result.create.setdefault(key, template_object(namespace, name, spec))
            result.wanted_by.setdefault(key, []).append(pod)
    return result


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
        when = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
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
        self.owned = Gauge(
            "gpucluster_controller_claim_templates", "ResourceClaimTemplates the controller created.", registry=registry
        )


EventSink = Callable[[Mapping[str, Any], str, str, str], Any]  # (object, type, reason, message) -> awaitable


class Provisioner:
    """Runs the reflectors of translated pods and our templates, and a pass after every change."""

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
    ) -> None:
        self.kube = kube
        self.event = event
        self.leads = leads
        self.accepting = accepting
        self.grace_period = grace_period
        self.min_interval = min_interval
        self.clock = clock
        self.state = ClusterState()
        self.metrics = ProvisionMetrics(registry or CollectorRegistry())
        self.dirty = asyncio.Event()
        self.reflectors = [
            Reflector(kube, r, self.state, on_event=self._on_event) for r in (TRANSLATED_PODS, PROVISIONED_TEMPLATES)
        ]
        self.unreferenced_since: dict[Key, float] = {}
        self.satisfied: set[Key] = set()  # someone else's template with our spec
        self._reported: dict[str, str] = {}  # pod uid -> last message posted
        self.passes = 0

    def _on_event(self, kind: str, obj: KubeObject) -> None:
        self.dirty.set()

    def synced(self) -> bool:
        return self.state.synced(["Pod", "ResourceClaimTemplate"])

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.create_task(r.run()) for r in self.reflectors]
        try:
            while not stop.is_set():
                # Wake on any change, and at least every few seconds for the grace-period clock.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.dirty.wait(), min(5.0, max(self.grace_period / 4, 0.05)))
                if stop.is_set():
                    return
                self.dirty.clear()
                if not self.synced() or not self.leads():
                    continue
                started = self.clock()
                try:
                    await self.reconcile()
                except (KubeError, OSError, TimeoutError) as exc:
                    log.warning("claim template pass failed error=%s", exc)
                    self.dirty.set()
                    await asyncio.sleep(1.0)
                await asyncio.sleep(max(0.0, self.min_interval - (self.clock() - started)))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _ours(self, namespace: str, name: str) -> KubeObject | None:
        return self.state.get("ResourceClaimTemplate", name, namespace)

    async def reconcile(self) -> None:
        """One pass: create what live pods need, report refusals and conflicts, collect the unneeded."""
        self.passes += 1
        pods = self.state.list("Pod")
        result = plan(pods, self._ours, self.satisfied)
        self.satisfied &= result.referenced
        live_uids = {str(metadata(p).get("uid")) for p in pods}
        for pod, why in result.refused:
            await self._report(pod, "Warning", REFUSED_REASON, f"gpucluster provisions no claim template: {why}")
        if self.accepting():
            for key, template in result.create.items():
                await self._create(key, template, result.wanted_by[key])
        templates = self.state.list("ResourceClaimTemplate")
        for template in collectable(
            templates, result.referenced, self.unreferenced_since, self.clock(), self.grace_period
        ):
            await self._collect(template)
        self.metrics.owned.set(len(self.state.list("ResourceClaimTemplate")))
        for uid in set(self._reported) - live_uids:
            del self._reported[uid]

    async def _create(self, key: Key, template: KubeObject, pods: list[KubeObject]) -> None:
        namespace, name = key
        path = collection_path(RESOURCE_API_VERSION, "ResourceClaimTemplate", namespace)
        try:
            created = await self.kube.request("POST", path, body=template, query=[("fieldManager", FIELD_MANAGER)])
        except KubeError as exc:
            if exc.status in (403, 404, 422):
                # The namespace is going away (403/404), or the API server refuses the object:
                # retrying every pass cannot help; say so on the pods, once.
                for pod in pods:
                    await self._report(
                        pod, "Warning", REFUSED_REASON, f"cannot create ResourceClaimTemplate {name}: {exc}"
                    )
                return
            if exc.status != 409:
                raise
            live = await self._get(template)
            if live is None:
                self.dirty.set()  # deleted meanwhile: try again
                return
            if (metadata(live).get("labels") or {}).get(PROVISIONED_LABEL) == "true":
                live.setdefault("kind", "ResourceClaimTemplate")
                self.state.upsert("ResourceClaimTemplate", live)  # ours, the watch is behind
                return
            if live.get("spec") == template["spec"]:
                self.satisfied.add(key)  # someone else's, same content: the pod's claims work
                return
            self.metrics.conflicts.inc()
            for pod in pods:
                await self._report(
                    pod, "Warning", CONFLICT_REASON,
                    f"ResourceClaimTemplate {namespace}/{name} exists with another spec and was not created by "
                    "gpucluster; the pod's claims cannot be made from it: delete that template or recreate the pod",
                )  # fmt: skip
            return
        created.setdefault("kind", "ResourceClaimTemplate")
        self.state.upsert("ResourceClaimTemplate", created)
        self.metrics.created.inc()
        log.info("created claim template namespace=%s name=%s for=%s", namespace, name, metadata(pods[0]).get("name"))

    async def _get(self, template: KubeObject) -> KubeObject | None:
        try:
            return await self.kube.get(object_path(template))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def _collect(self, template: KubeObject) -> None:
        meta = metadata(template)
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
        self.unreferenced_since.pop((str(meta.get("namespace") or ""), str(meta.get("name"))), None)
        self.metrics.collected.inc()
        log.info("deleted unreferenced claim template namespace=%s name=%s", meta.get("namespace"), meta.get("name"))

    async def _report(self, pod: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """One event per pod and message, not one per pass."""
        uid = str(metadata(pod).get("uid"))
        if self._reported.get(uid) == message:
            return
        self._reported[uid] = message
        pod = {"apiVersion": "v1", "kind": "Pod", **pod}
        await self.event(pod, type_, reason, message)
