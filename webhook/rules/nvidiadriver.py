"""NVIDIADriver on a DRA cluster: automatic driver upgrades are not supported for DRA nodes.

The NVIDIADriver CRD keeps the switch at ``spec.upgradePolicy.autoUpgrade`` (default true); the
product documentation writes it ``spec.driver.upgradePolicy.autoUpgrade``. Both are checked.
Note the API server applies the CRD's default (true) inside an ``upgradePolicy`` that is present
before admission, so only a wholly missing ``upgradePolicy`` can be defaulted to false here.
"""

from __future__ import annotations

import copy
from typing import Any

from gpucluster.api.validation import validate_model
from gpucluster.api.views import NVIDIADriver
from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.webhook.review import AdmissionRequest, Patch, Verdict

_PATHS: tuple[tuple[str, ...], ...] = (("spec", "upgradePolicy"), ("spec", "driver", "upgradePolicy"))


def _get(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = obj
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join((*path, "autoUpgrade"))


def _applies(request: AdmissionRequest, cluster: ClusterState) -> bool:
    return request.operation in ("CREATE", "UPDATE") and request.obj is not None and bool(cluster.list("GPUCluster"))


def validate_nvidiadriver_request(request: AdmissionRequest, cluster: ClusterState, settings: Settings) -> Verdict:
    """Deny ``autoUpgrade: true`` while a GPUCluster exists; type-check the fields we know."""
    if not _applies(request, cluster) or request.obj is None:
        return Verdict.allow(outcome="skipped")
    _, problems = validate_model(NVIDIADriver, request.obj)
    if problems:
        return Verdict.invalid(f'NVIDIADriver "{request.name}" is invalid: ' + "; ".join(map(str, problems)))
    for path in _PATHS:
        policy = _get(request.obj, path)
        if isinstance(policy, dict) and policy.get("autoUpgrade") is True:
            return Verdict.deny(
                f"{_dotted(path)}: automatic driver upgrades are not supported for DRA nodes while a "
                f"GPUCluster exists; set {_dotted(path)} to false and upgrade drivers node by node"
            )
    return Verdict.allow()


def mutate_nvidiadriver_request(request: AdmissionRequest, cluster: ClusterState, settings: Settings) -> Verdict:
    """Default a missing ``spec.upgradePolicy.autoUpgrade`` to false, with a warning."""
    if not _applies(request, cluster) or request.obj is None:
        return Verdict.allow(outcome="skipped")
    spec = request.obj.get("spec")
    if not isinstance(spec, dict):
        return Verdict.allow(outcome="skipped")
    if any(isinstance(_get(request.obj, p), dict) and "autoUpgrade" in _get(request.obj, p) for p in _PATHS):
        return Verdict.allow(outcome="skipped")
    policy = spec.get("upgradePolicy")
    if policy is not None and not isinstance(policy, dict):
        return Verdict.allow(outcome="skipped")  # the validating rule reports the type error
    patched = copy.deepcopy(request.obj)
    patched["spec"].setdefault("upgradePolicy", {})["autoUpgrade"] = False
    return Verdict(
        patch=Patch.between(request.obj, patched),
        warnings=["spec.upgradePolicy.autoUpgrade set to false: auto-upgrade is not supported on DRA nodes"],
        outcome="mutated",
    )
