"""Which pods hold devices of the NVIDIA DRA drivers (pure).

A pod holds a device while a ResourceClaim allocated from it lists the pod in
``status.reservedFor``: the resourceclaim controller removes the reservation only once the pod
is gone or terminal, which is also when the kubelet unprepares the claim through the driver's
kubelet plugin. So until no claim of these drivers is reserved, the kubelet plugin must keep
running: without it a deleted pod hangs in Terminating (kubernetes/kubernetes#129402). The
GPUCluster's finalizer and ``gpucluster cleanup`` (the chart's pre-delete hook) both decide on
this.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpucluster.clusterstate import metadata

# The drivers whose kubelet plugins the GPUCluster deploys.
NVIDIA_DRIVERS = frozenset({"gpu.nvidia.com", "compute-domain.nvidia.com"})


@dataclass(frozen=True, order=True)
class Holder:
    """A pod reserving an allocated claim of an NVIDIA driver."""

    namespace: str
    pod: str
    claim: str
    uid: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod} (claim {self.claim})"


def allocation_results(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The device results of a claim's allocation (empty when it is not allocated or malformed)."""
    status = claim.get("status")
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    return [r for r in results if isinstance(r, Mapping)] if isinstance(results, list) else []


def allocated_devices(claim: Mapping[str, Any]) -> frozenset[tuple[str, str, str]]:
    """(driver, pool, device) of each device allocated to ``claim``: what it takes from everyone else."""
    return frozenset(
        (str(r.get("driver")), str(r.get("pool") or ""), str(r.get("device"))) for r in allocation_results(claim)
    )


def _allocated_by(claim: Mapping[str, Any], drivers: frozenset[str]) -> bool:
    return any(r.get("driver") in drivers for r in allocation_results(claim))


def claim_holders(claims: Iterable[Mapping[str, Any]], drivers: frozenset[str] = NVIDIA_DRIVERS) -> list[Holder]:
    """Every (pod, claim) reservation of a claim allocated devices of ``drivers``, sorted."""
    out: set[Holder] = set()
    for claim in claims:
        if not _allocated_by(claim, drivers):
            continue
        meta = metadata(claim)
        namespace = str(meta.get("namespace") or "")
        name = str(meta.get("name") or "")
        for ref in (claim.get("status") or {}).get("reservedFor") or []:
            if isinstance(ref, Mapping) and ref.get("resource") == "pods" and not ref.get("apiGroup"):
                out.add(Holder(namespace, str(ref.get("name") or ""), name, str(ref.get("uid") or "")))
    return sorted(out)


def describe(holders: list[Holder], limit: int = 10) -> str:
    """``ns/a (claim c), ns/b (claim d) and 3 more``: the pods, each once, at most ``limit`` shown."""
    pods: dict[tuple[str, str], list[str]] = {}
    for h in holders:
        pods.setdefault((h.namespace, h.pod), []).append(h.claim)
    shown = [
        f"{ns}/{pod} (claim{'s' if len(c) > 1 else ''} {', '.join(c)})" for (ns, pod), c in list(pods.items())[:limit]
    ]
    more = len(pods) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


def pod_count(holders: list[Holder]) -> int:
    return len({(h.namespace, h.pod) for h in holders})
