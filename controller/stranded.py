"""Pods admitted untranslated while the webhook was unavailable (fail-open), and stranded for it.

On a DRA-only cluster no node advertises ``nvidia.com/gpu``: such a pod stays Pending on
"Insufficient nvidia.com/gpu" forever, and claims cannot be added to an existing pod. A pod is
stranded when it is Pending and unscheduled, the scheduler found it Unschedulable, it carries no
ResourceClaim, still requests a translatable extended resource (``nvidia.com/gpu``,
``nvidia.com/mig-*``), and nothing says it was left untranslated on purpose (opt-out label or
annotation, the operator namespace or kube-system, a mirror pod, a DeviceClass that maps the resource natively).

A pod the webhook declines on purpose (:func:`declined`: more devices than a claim or a pod may
get, a MIG profile no node publishes, GPU sharing) is not stranded: it gets one Warning saying
why, never "recreate it", and is never deleted.

Each stranded pod gets one Warning event (not one per pass) and is counted in a gauge. A pod created
before the DRA model served the cluster (:func:`created_before_served`) is told so instead of
"while the webhook was unavailable": the webhook was up, and left it alone as it leaves every pod
where no DRA model runs; recreating it helps all the same. With
``delete=True`` (opt-in) a stranded pod that a controller owns (an ownerReference with
``controller: true``) is deleted, so that its ReplicaSet, Job or StatefulSet creates it again
through the webhook; bare pods are only reported. Deletion is per owner, once, then with
back-off: a replacement that is stranded again shows the webhook still cannot translate it, so
deleting it at once would only loop (a Deployment's pod was recreated 948 times in 60 s). The
next deletion for that owner waits ``DELETE_BACKOFF`` seconds, doubling up to ``DELETE_BACKOFF_MAX``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from gpucluster import timestamps
from gpucluster.claimtemplates import bound_problems, dra_model_absent
from gpucluster.clusterstate import ClusterState, metadata
from gpucluster.policy import WEBHOOK_CONFIG, native_resources, opted_out
from gpucluster.translate import DEFAULT_CONFIG, gpu_resources, translate_pod_spec

log = logging.getLogger("gpucluster.controller.stranded")

REASON = "UntranslatedGPURequest"
MESSAGE = (
    "admitted without translation while the webhook was unavailable; recreate it "
    "(it requests {resources} and carries no ResourceClaim, which no DRA node can satisfy)"
)
EARLIER_MESSAGE = (
    "created before the DRA model served NVIDIA GPUs here ({since}), so the gpucluster webhook never saw "
    "it; recreate it (it requests {resources} and carries no ResourceClaim, which no DRA node can satisfy)"
)
DELETED_MESSAGE = (
    "deleted so that its controller recreates it through the gpucluster webhook (it requested {resources})"
)
DECLINED_REASON = "GPURequestNotTranslated"
DECLINED_MESSAGE = (
    "the gpucluster webhook does not translate this pod: {why}. No DRA node can satisfy its {resources} "
    "request as written, and recreating the pod would not change that: change the request"
)
HELD_MESSAGE = (
    "not deleted: a replacement from the same controller was stranded too, so the webhook still cannot "
    "translate it; the next deletion is due in {seconds:.0f}s (it requests {resources})"
)
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
DELETE_BACKOFF = 60.0
DELETE_BACKOFF_MAX = 3600.0


def _unschedulable(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
        if isinstance(c, dict)
    )


def stranded_resources(pod: Mapping[str, Any], state: ClusterState, operator_namespace: str) -> list[str]:
    """The translatable resources a stranded pod requests (empty when the pod is not stranded)."""
    meta = metadata(pod)
    spec = pod.get("spec") or {}
    if not isinstance(spec, dict) or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
        return []
    if spec.get("nodeName") or spec.get("resourceClaims") or meta.get("deletionTimestamp"):
        return []
    # The webhook never sees kube-system or the operator's namespace (its namespaceSelector).
    if meta.get("namespace") in (operator_namespace, "kube-system") or not _unschedulable(pod):
        return []
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    if MIRROR_ANNOTATION in (annotations or {}) or DEFAULT_CONFIG.annotation in (annotations or {}):
        return []
    if dra_model_absent(state) is not None:
        return []  # the device plugin (or nothing) serves nvidia.com/gpu here, as the webhook left it
    wanted = {r for counts in gpu_resources(spec).values() for r in counts}
    wanted -= set(native_resources(state))
    if not wanted or opted_out(pod, state.namespace_labels(str(meta.get("namespace") or ""))):
        return []
    return sorted(wanted)


def served_since(state: ClusterState) -> tuple[dt.datetime, str] | None:
    """Since when the DRA model has served NVIDIA GPUs in ``state``, as its oldest GPUCluster or
    NVIDIA DeviceClass shows, and which object that is; None when neither exists (a DRA driver's
    ResourceSlices alone carry no creation time here) or no creation time can be read."""
    classes = sorted(WEBHOOK_CONFIG.device_classes)
    objects = [*state.list("GPUCluster"), *(c for n in classes if (c := state.get("DeviceClass", n)))]
    found: list[tuple[dt.datetime, str]] = []
    for obj in objects:
        meta = metadata(obj)
        with contextlib.suppress(TypeError, ValueError):
            found.append(
                (timestamps.parse(str(meta.get("creationTimestamp"))), f"{obj.get('kind')} {meta.get('name')}")
            )
    return min(found) if found else None


def created_before_served(pod: Mapping[str, Any], state: ClusterState) -> str | None:
    """``"<kind> <name> since <time>"`` when ``pod`` was created before the DRA model served NVIDIA
    GPUs (:func:`served_since`): the webhook left it alone then, as it leaves every pod where no DRA
    model runs, and it was not unavailable. None when it was not, or nothing tells."""
    since = served_since(state)
    if since is None:
        return None
    try:
        created = timestamps.parse(str(metadata(pod).get("creationTimestamp")))
    except (TypeError, ValueError):
        return None
    # Whole seconds: a pod created in the same second as the model is not known to be earlier.
    if created >= since[0]:
        return None
    return f"{since[1]} since {timestamps.rfc3339(since[0])}"


def declined(pod: Mapping[str, Any], state: ClusterState) -> str | None:
    """Why the webhook declines to translate ``pod`` on purpose (the same translation and bounds it
    runs, on the controller's view), or None: then it would have translated it, and a pod left
    untranslated was never seen by it."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    namespace = str(metadata(pod).get("namespace") or "") or None
    translation = translate_pod_spec(spec or {}, namespace=namespace, config=WEBHOOK_CONFIG)
    if not translation.changed:
        return "; ".join(translation.problems) or None
    return "; ".join(bound_problems(translation, state, WEBHOOK_CONFIG)) or None


def controller_uid(pod: Mapping[str, Any]) -> str | None:
    """The UID of the pod's controller (an ownerReference with ``controller: true``), if any."""
    for ref in metadata(pod).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return str(ref.get("uid") or ref.get("name") or "")
    return None


def controlled(pod: Mapping[str, Any]) -> bool:
    return controller_uid(pod) is not None


@dataclass
class _Deletions:
    """Per controller: how many of its pods were deleted, and when the next deletion may be."""

    count: int = 0
    next_at: float = 0.0


@dataclass
class StrandedPods:
    """Finds stranded pods in the controller's cache of Pending pods; reports each once."""

    state: ClusterState
    operator_namespace: str
    delete: bool = False
    registry: CollectorRegistry | None = None
    clock: Callable[[], float] = time.monotonic
    _reported: set[str] = field(default_factory=set)
    _stranded: set[str] = field(default_factory=set)
    _deleted_pods: dict[str, str] = field(default_factory=dict)  # key -> uid deleted (the cache lags)
    _owners: dict[str, _Deletions] = field(default_factory=dict)
    _held: set[str] = field(default_factory=set)  # pods told they are not deleted

    def __post_init__(self) -> None:
        registry = self.registry or CollectorRegistry()
        self.gauge = Gauge(
            "gpucluster_controller_stranded_pods",
            "Pending pods that request nvidia.com/gpu or nvidia.com/mig-* untranslated and carry no claim.",
            registry=registry,
        )
        self.deleted = Counter(
            "gpucluster_controller_stranded_pods_deleted",
            "Stranded pods deleted so that their controller recreates them through the webhook.",
            registry=registry,
        )

    async def check(
        self,
        pod: Mapping[str, Any] | None,
        key: str,
        event: Callable[[Mapping[str, Any], str, str, str], Awaitable[None]],
        delete: Callable[[Mapping[str, Any]], Awaitable[None]],
    ) -> None:
        """Report (and with ``delete``, delete) the pod cached under ``key`` (namespace/name) if it is
        stranded; ``pod`` None: it is gone (or no longer Pending)."""
        resources = stranded_resources(pod, self.state, self.operator_namespace) if pod is not None else []
        why = declined(pod, self.state) if resources and pod is not None else None
        if why is not None and pod is not None:
            # Declined on purpose: not stranded (it never will be translated), told once why.
            self._stranded.discard(key)
            self.gauge.set(len(self._stranded))
            if key not in self._reported:
                self._reported.add(key)
                obj = {"apiVersion": "v1", "kind": "Pod", **pod}
                message = DECLINED_MESSAGE.format(why=why, resources=", ".join(resources))
                await event(obj, "Warning", DECLINED_REASON, message)
            return
        if not resources or pod is None:
            self._stranded.discard(key)
            self._reported.discard(key)
            self._held.discard(key)
            self._deleted_pods.pop(key, None)
            self.gauge.set(len(self._stranded))
            return
        self._stranded.add(key)
        self.gauge.set(len(self._stranded))
        names = ", ".join(resources)
        obj = {"apiVersion": "v1", "kind": "Pod", **pod}
        if key not in self._reported:
            self._reported.add(key)
            log.warning(
                "stranded pod namespace=%s name=%s resources=%s",
                metadata(pod).get("namespace"), metadata(pod).get("name"), names,
            )  # fmt: skip
            earlier = created_before_served(pod, self.state)
            message = (
                EARLIER_MESSAGE.format(since=earlier, resources=names)
                if earlier is not None
                else MESSAGE.format(resources=names)
            )
            await event(obj, "Warning", REASON, message)
        owner = controller_uid(pod)
        uid = str(metadata(pod).get("uid") or key)
        if not self.delete or owner is None or self._deleted_pods.get(key) == uid:
            return
        now = self.clock()
        # Owners whose back-off ran out long ago start again from one deletion.
        for stale in [o for o, r in self._owners.items() if now > r.next_at + DELETE_BACKOFF_MAX]:
            del self._owners[stale]
        record = self._owners.setdefault(owner, _Deletions())
        if now < record.next_at:
            if key not in self._held:
                self._held.add(key)
                await event(obj, "Normal", REASON, HELD_MESSAGE.format(seconds=record.next_at - now, resources=names))
            return
        await delete(obj)
        self._deleted_pods[key] = uid
        record.count += 1
        record.next_at = now + min(DELETE_BACKOFF * 2 ** (record.count - 1), DELETE_BACKOFF_MAX)
        self.deleted.inc()
        await event(obj, "Normal", REASON, DELETED_MESSAGE.format(resources=names))
