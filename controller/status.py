"""Operand readiness and the GPUCluster status (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpucluster.controller.holders import allocation_results
from gpucluster.kube.predicates import daemon_should_run

READY = "Ready"
ERROR = "Error"

# Reasons (CamelCase, as metav1.Condition requires).
RECONCILED = "Reconciled"
OPERANDS_NOT_READY = "OperandsNotReady"
PREREQUISITE_NOT_MET = "PrerequisiteNotMet"
RECONCILE_FAILED = "ReconcileFailed"
NOT_SINGLETON = "NotSingleton"
PERMISSION_DENIED = "PermissionDenied"
OPERAND_CONFLICT = "OperandConflict"
DELETING = "Deleting"
# notReady for these is progress, not an error: Error stays False.
IN_PROGRESS = (OPERANDS_NOT_READY, DELETING)


@dataclass(frozen=True)
class WorkloadStatus:
    kind: str
    name: str
    ready: bool
    detail: str


def workload_status(obj: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]] | None = None) -> WorkloadStatus:
    """Readiness of a DaemonSet or Deployment from its status, as `kubectl rollout status` judges it.

    With ``nodes``, a DaemonSet must also cover every node it should run on: right after the
    operand is created, or after nodes are labelled, its status still counts the old nodes
    (0/0 reads as complete), and that is not ready."""
    kind = str(obj.get("kind"))
    name = str((obj.get("metadata") or {}).get("name"))
    generation = int((obj.get("metadata") or {}).get("generation") or 0)
    status = obj.get("status") or {}
    observed = int(status.get("observedGeneration") or 0)
    if observed < generation:
        return WorkloadStatus(kind, name, False, "update not yet observed")
    if kind == "DaemonSet":
        desired = int(status.get("desiredNumberScheduled") or 0)
        updated = int(status.get("updatedNumberScheduled") or 0)
        available = int(status.get("numberAvailable") or 0)
        ready = updated >= desired and available >= desired
        if nodes is not None:
            template = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
            expected = sum(1 for node in nodes if daemon_should_run(template, node)[0])
            if desired < expected:
                return WorkloadStatus(kind, name, False, f"{desired}/{expected} nodes scheduled")
        return WorkloadStatus(kind, name, ready, f"{available}/{desired} pods available, {updated} updated")
    replicas = int((obj.get("spec") or {}).get("replicas", 1) or 0)
    updated = int(status.get("updatedReplicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    ready = updated >= replicas and available >= replicas
    return WorkloadStatus(kind, name, ready, f"{available}/{replicas} replicas available, {updated} updated")


def not_ready_message(workloads: Iterable[WorkloadStatus]) -> str:
    waiting = [f"{w.kind} {w.name}: {w.detail}" for w in workloads if not w.ready]
    return "waiting for " + "; ".join(waiting) if waiting else ""


def condition(
    previous: Sequence[Mapping[str, Any]],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    generation: int,
    now: str,
) -> dict[str, Any]:
    """A metav1.Condition; ``lastTransitionTime`` moves only when the status changes."""
    value = "True" if status else "False"
    old = next((c for c in previous if c.get("type") == type_), None)
    since = (
        str(old["lastTransitionTime"]) if old and old.get("status") == value and old.get("lastTransitionTime") else now
    )
    return {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }


def desired_status(
    previous: Mapping[str, Any] | None,
    *,
    state: str,
    namespace: str,
    reason: str,
    message: str,
    generation: int,
    now: str,
    inventory: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole status: state ready|notReady|disabled and the Ready and Error conditions."""
    prev = previous or {}
    conditions = list(prev.get("conditions") or [])
    ok = state == "ready"
    error = state == "notReady" and reason not in IN_PROGRESS
    status: dict[str, Any] = {
        "state": state,
        "namespace": namespace,
        "observedGeneration": generation,
        "conditions": [
            condition(conditions, READY, ok, RECONCILED if ok else reason, message, generation, now),
            condition(conditions, ERROR, error, reason if error else READY, message if error else "", generation, now),
            # Conditions others own (the webhook's WebhookCertificateValid) stay as they are.
            *(c for c in conditions if isinstance(c, dict) and c.get("type") not in (READY, ERROR)),
        ],
    }
    if inventory is not None:
        status["inventory"] = dict(inventory)
    return status


def inventory(slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """GPUs the NVIDIA driver publishes: nodes, full GPUs, MIG devices, allocated, per product."""
    nodes: set[str] = set()
    gpus = mig = 0
    products: dict[str, int] = {}
    for resource_slice in slices:
        spec = resource_slice.get("spec") or {}
        if spec.get("driver") != "gpu.nvidia.com":
            continue
        if spec.get("nodeName"):
            nodes.add(str(spec["nodeName"]))
        for device in spec.get("devices") or []:
            attributes = device.get("attributes") or {}
            kind = (attributes.get("type") or {}).get("string")
            product = (attributes.get("productName") or {}).get("string")
            if kind == "gpu":
                gpus += 1
            elif kind == "mig":
                mig += 1
            if product:
                products[str(product)] = products.get(str(product), 0) + 1
    allocated = 0
    for claim in claims:
        for result in allocation_results(claim):
            if result.get("driver") == "gpu.nvidia.com" and not result.get("adminAccess"):
                allocated += 1
    return {
        "nodes": len(nodes),
        "gpus": gpus,
        "migDevices": mig,
        "allocated": allocated,
        "products": [{"productName": p, "count": n} for p, n in sorted(products.items())],
    }
