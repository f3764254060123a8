"""Explain pods pending on GPU claims: run the allocator over the cached slices, post an Event.

A pod that waits for its ResourceClaims to be allocated gets one Event (on the pod and on each
unallocated claim), once it has been unschedulable for ``settle`` seconds, with a one-line
reason, such as ``0/24 devices usable for request gpu on 3 nodes, need 2 on one node: 16
selector #0 false (productName == "NVIDIA B200"), 8 in use``; a new Event only when the reason
changes, and at most one per pod per ``min_interval`` seconds.

While devices are allocated, a claim that does not fit now is checked again as if every node
were empty, so that "busy now" (``...; would fit once devices are freed``: wait) reads
differently from "never fits" (``...; does not fit even on an empty node: <why, on empty nodes>``:
fix the claim). Either way the first part is what holds now, devices in use counted as in use.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpucluster import timestamps
from gpucluster.clusterstate import ClusterState, metadata
from gpucluster.dra.worker import AllocatorWorker, shared_worker

REASON = "ClaimUnsatisfiable"


def pod_claims(pod: Mapping[str, Any], state: ClusterState) -> list[dict[str, Any]] | None:
    """The pod's ResourceClaims, or None while any of them does not exist yet."""
    namespace = str(metadata(pod).get("namespace") or "")
    generated = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if isinstance(s, dict)
    }
    claims = []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = ref.get("resourceClaimName") or generated.get(ref.get("name"))
        if not name:
            return None
        claim = state.get("ResourceClaim", str(name), namespace)
        if claim is None:
            return None
        claims.append(claim)
    return claims


def claim_users(claim: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """``namespace/name`` of the pods among ``pods`` that use ``claim``: made for them (owner), reserved
    for them, or named by them (``resourceClaimName``, or the claim made from their template)."""
    meta = metadata(claim)
    namespace, name = str(meta.get("namespace") or ""), meta.get("name")
    names = {
        str(o.get("name")) for o in meta.get("ownerReferences") or [] if isinstance(o, dict) and o.get("kind") == "Pod"
    }
    status = claim.get("status") if isinstance(claim.get("status"), dict) else {}
    names |= {
        str(r.get("name"))
        for r in (status or {}).get("reservedFor") or []
        if isinstance(r, dict) and r.get("resource") == "pods"
    }
    for pod in pods:
        pod_meta = metadata(pod)
        if pod_meta.get("namespace") != namespace or pod_meta.get("name") in names:
            continue
        refs = [
            r.get("resourceClaimName")
            for r in (pod.get("spec") or {}).get("resourceClaims") or []
            if isinstance(r, dict)
        ]
        made = [
            s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
            if isinstance(s, dict)
        ]
        if name in refs or name in made:
            names.add(str(pod_meta.get("name")))
    return [f"{namespace}/{n}" for n in sorted(names)]


def unschedulable_since(pod: Mapping[str, Any]) -> float | None:
    """When kube-scheduler last found the pod unschedulable (its PodScheduled=False condition's
    lastTransitionTime, seconds since the epoch); None when it does not say or cannot be read."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "PodScheduled" and isinstance(c.get("lastTransitionTime"), str):
            try:
                return timestamps.parse(c["lastTransitionTime"]).timestamp()
            except ValueError:
                return None
    return None


def pending_on_claims(pod: Mapping[str, Any]) -> bool:
    """A pod with claims that kube-scheduler has tried and found unschedulable.

    Pods the scheduler has not judged yet are left to it: explaining every pending pod would
    repeat the scheduler's work for pods that are about to be placed.
    """
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    if status.get("phase", "Pending") != "Pending" or spec.get("nodeName") or not spec.get("resourceClaims"):
        return False
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )


Explained = tuple[dict[str, Any], list[dict[str, Any]], str]  # (pod, its unallocated claims, reason)


@dataclass
class Explainer:
    """Explains one pending pod at a time (the controller's ``pods`` work queue keys them). The
    allocator runs in the worker process with its deadline, never on the event loop; a pod is
    checked at most once per ``min_interval`` seconds, and an Event is posted only when its
    reason changes."""

    state: ClusterState
    min_interval: float = 60.0
    clock: Callable[[], float] = time.monotonic
    # A pod is explained once it has been unschedulable this long: kube-scheduler's own event is
    # there at once, and in a burst of new pods the allocator runs and events for pods found
    # unschedulable a moment ago would compete with the burst (the ResourceClaims of the pods
    # behind them) for the API server. As cluster-autoscaler leaves pods younger than its
    # new-pod-scale-up-delay alone. ``wall`` reads the condition's time (the API server's clock).
    settle: float = 2.0
    wall: Callable[[], float] = time.time
    worker: AllocatorWorker | None = None
    # What the allocator follows: kubernetes_version and feature_gates (the controller sets
    # the server's version and the --feature-gates overrides).
    allocator_options: dict[str, Any] = field(default_factory=dict)
    _last: dict[str, tuple[str, float]] = field(default_factory=dict)  # key -> (reason posted, when)

    def _cluster(self) -> list[dict[str, Any]]:
        return [
            *self.state.list("ResourceSlice"),
            *self.state.list("DeviceClass"),
            *self.state.list("Node"),
            *(c for c in self.state.list("ResourceClaim") if (c.get("status") or {}).get("allocation")),
        ]

    async def explain(self, pod: Mapping[str, Any] | None, key: str) -> tuple[Explained | None, float | None]:
        """For one pod (cached under ``key``; None: gone): the (pod, unallocated claims, reason) to post
        when its claims do not fit (None when they do, or the reason was posted before), and the
        seconds after which to look again when it was explained too recently to run the allocator.
        A check past the worker's deadline gives "feasibility check cut short after Xs" as the
        reason, never a late answer."""
        if pod is None or not pending_on_claims(pod):
            self._last.pop(key, None)
            return None, None
        since = unschedulable_since(pod)
        if since is not None and (young := since + self.settle - self.wall()) > 0:
            return None, young
        last = self._last.get(key)
        now = self.clock()
        if last is not None and now - last[1] < self.min_interval:
            return None, self.min_interval - (now - last[1])
        claims = pod_claims(pod, self.state)
        waiting = [c for c in claims or [] if not (c.get("status") or {}).get("allocation")]
        if not waiting:
            return None, None  # a claim not created yet, or all allocated: their events bring the pod back
        worker = self.worker or shared_worker()
        reason = await _fit_offloaded(worker, waiting, self._cluster(), self.allocator_options)
        if not reason:
            return None, None  # satisfiable: the scheduler will get to it
        self._last[key] = (reason, self.clock())
        if last is not None and last[0] == reason:
            return None, None  # same reason as the event already posted
        return (dict(pod), waiting, reason), None


async def _fit_offloaded(
    worker: AllocatorWorker,
    claims: list[dict[str, Any]],
    cluster: list[dict[str, Any]],
    options: Mapping[str, Any],
) -> str | None:
    """Why ``claims`` do not fit now (None: they do), and whether they would fit on empty nodes
    (the worker's two answers in the words of ``allocator.Fit.one_line``)."""
    now = await worker.check_async(claims, cluster, **options)
    if now.incomplete or not now.reason or not any(obj.get("kind") == "ResourceClaim" for obj in cluster):
        return now.incomplete or now.reason
    empty = await worker.check_async(claims, cluster, **options, assume_empty=True)
    if empty.incomplete:
        return f"{now.reason}; on empty nodes: {empty.incomplete}"
    if empty.reason is None:
        return f"{now.reason}; would fit once devices are freed"
    return f"{now.reason}; does not fit even on an empty node: {empty.reason}"
