"""One GPU management model per cluster: the GPUCluster singleton and its coexistence with ClusterPolicy."""

from __future__ import annotations

from typing import Any

from gpucluster.api.validation import validate_gpucluster
from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.webhook.review import AdmissionRequest, Verdict

_ONE_MODEL = (
    "a cluster uses one GPU management model, either the device-plugin model (ClusterPolicy) "
    "or the DRA model (GPUCluster)"
)


def _names(objects: list[dict[str, Any]]) -> str:
    return ", ".join(sorted(f'"{(o.get("metadata") or {}).get("name", "")}"' for o in objects))


def validate_gpucluster_request(request: AdmissionRequest, cluster: ClusterState, settings: Settings) -> Verdict:
    """GPUCluster CREATE/UPDATE: the singleton, no ClusterPolicy beside it, and a valid spec."""
    if request.operation not in ("CREATE", "UPDATE") or request.obj is None:
        return Verdict.allow(outcome="skipped")
    if request.operation == "CREATE":
        policies = cluster.list("ClusterPolicy")
        if policies:
            return Verdict.deny(
                f"ClusterPolicy {_names(policies)} exists: {_ONE_MODEL}. GPUCluster supports new "
                "installations only and there is no in-place migration from ClusterPolicy; uninstall "
                "the device-plugin model first, or keep using it."
            )
    result = validate_gpucluster(request.obj)
    if result.problems:
        name = (request.obj.get("metadata") or {}).get("name") or request.name
        details = "; ".join(str(p) for p in result.problems)
        return Verdict.invalid(f'GPUCluster "{name}" is invalid: {details}')
    return Verdict.allow(*result.warnings)


def validate_clusterpolicy_request(request: AdmissionRequest, cluster: ClusterState, settings: Settings) -> Verdict:
    """ClusterPolicy CREATE: refused while a GPUCluster exists."""
    if request.operation != "CREATE":
        return Verdict.allow(outcome="skipped")
    clusters = cluster.list("GPUCluster")
    if clusters:
        return Verdict.deny(
            f"GPUCluster {_names(clusters)} exists: {_ONE_MODEL}. The DRA model serves every GPU node "
            "and there is no in-place migration between the two; delete the GPUCluster first, or keep "
            "using the DRA model."
        )
    return Verdict.allow()
