"""Which rule answers which review, and how a failing rule is answered.

The HTTP server, ``gpucluster admit`` and the audit (:mod:`gpucluster.webhook.audit`) all go through
:func:`admit_request`, so offline answers are exactly the server's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from gpucluster.clusterstate import ClusterState
from gpucluster.policy import TRANSLATE_LABEL, Settings
from gpucluster.webhook.review import AdmissionRequest, Verdict, build_response, decode_review
from gpucluster.webhook.rules.claims import validate_claim_request
from gpucluster.webhook.rules.gpu_models import validate_clusterpolicy_request, validate_gpucluster_request
from gpucluster.webhook.rules.nvidiadriver import mutate_nvidiadriver_request, validate_nvidiadriver_request
from gpucluster.webhook.rules.pods import MATCH_CONDITION, mutate_pod_request

log = logging.getLogger("gpucluster.webhook")

Rule = Callable[[AdmissionRequest, ClusterState, Settings], Verdict]
FailurePolicy = Literal["Fail", "Ignore"]
Path = Literal["validate", "mutate"]


@dataclass(frozen=True)
class Hook:
    """One webhook of our configurations: its name, what it matches and how it fails."""

    name: str
    path: Path
    group: str
    version: str
    resource: str
    kind: str
    operations: tuple[str, ...]
    rule: Rule
    failure_policy: FailurePolicy
    why: str  # why this failure policy; rendered into the chart's comments and the README
    namespaced: bool = False
    timeout_seconds: int = 10
    side_effects: Literal["None", "NoneOnDryRun"] = "None"
    reinvocation: Literal["Never", "IfNeeded"] = "Never"
    match_conditions: tuple[tuple[str, str], ...] = ()  # (name, CEL expression)
    # Not called for the operator's own requests (when the configuration knows its identity).
    skip_operator: bool = False
    object_selector: dict[str, Any] | None = None


# Deleting must never need a fail-closed webhook: the finalizer removal and any write to an object
# being deleted are UPDATEs, and so are metadata-only writes (finalizers, labels). Only creates
# and spec changes of live objects are sent; the singleton and coexistence rules are CREATE rules
# (a name cannot change on UPDATE), so they still hold.
SPEC_CHANGE_CONDITION = (
    "spec-change-of-a-live-object",
    "request.operation == 'CREATE' || (!has(object.metadata.deletionTimestamp) && "
    "(has(object.spec) != has(oldObject.spec) || (has(object.spec) && object.spec != oldObject.spec)))",
)

# A claim kube-controller-manager makes from a pod's template (one per pod) was checked as the
# template when that was created: the API server does not call the webhook for it, which keeps a
# round trip off the path from a pod's creation to its claim.
TEMPLATE_CLAIM_CONDITION = (
    "not-a-claim-made-from-a-pods-template",
    "!(has(object.metadata.annotations) && 'resource.kubernetes.io/pod-claim-name' in object.metadata.annotations"
    " && request.userInfo.username in ['system:serviceaccount:kube-system:resource-claim-controller',"
    " 'system:kube-controller-manager'])",
)

HOOKS: tuple[Hook, ...] = (
    Hook(
        "gpuclusters.validate.gpucluster.nvidia.com", "validate", "nvidia.com", "v1alpha1", "gpuclusters",
        "GPUCluster", ("CREATE", "UPDATE"), validate_gpucluster_request, "Fail",
        "a second GPU management model must never slip in while the webhook is down; GPUCluster writes are rare",
        match_conditions=(SPEC_CHANGE_CONDITION,),
    ),
    Hook(
        "clusterpolicies.validate.gpucluster.nvidia.com", "validate", "nvidia.com", "v1", "clusterpolicies",
        "ClusterPolicy", ("CREATE",), validate_clusterpolicy_request, "Fail",
        "same reason as GPUCluster: one GPU management model per cluster",
    ),
    Hook(
        "nvidiadrivers.validate.gpucluster.nvidia.com", "validate", "nvidia.com", "v1alpha1", "nvidiadrivers",
        "NVIDIADriver", ("CREATE", "UPDATE"), validate_nvidiadriver_request, "Fail",
        "an auto-upgrading driver would restart under running DRA workloads; NVIDIADriver writes are rare",
        match_conditions=(SPEC_CHANGE_CONDITION,),
    ),
    Hook(
        "nvidiadrivers.mutate.gpucluster.nvidia.com", "mutate", "nvidia.com", "v1alpha1", "nvidiadrivers",
        "NVIDIADriver", ("CREATE", "UPDATE"), mutate_nvidiadriver_request, "Fail",
        "the validating webhook would refuse the object anyway; failing early says why",
        match_conditions=(SPEC_CHANGE_CONDITION,),
    ),
    Hook(
        "resourceclaims.validate.gpucluster.nvidia.com", "validate", "resource.k8s.io", "v1", "resourceclaims",
        "ResourceClaim", ("CREATE",), validate_claim_request, "Ignore",
        "the API server validates claims itself; ours adds clearer messages and warnings, never a new dependency",
        namespaced=True, match_conditions=(TEMPLATE_CLAIM_CONDITION,),
    ),
    Hook(
        "resourceclaimtemplates.validate.gpucluster.nvidia.com", "validate", "resource.k8s.io", "v1",
        "resourceclaimtemplates", "ResourceClaimTemplate", ("CREATE",), validate_claim_request, "Ignore",
        "same as ResourceClaim", namespaced=True, skip_operator=True,
    ),
    Hook(
        "pods.mutate.gpucluster.nvidia.com", "mutate", "", "v1", "pods", "Pod", ("CREATE",),
        mutate_pod_request, "Ignore",
        "pod creation must never depend on this webhook: when it is down, legacy pods are stored "
        "untranslated (and wait for nvidia.com/gpu capacity) instead of failing",
        namespaced=True, timeout_seconds=5, side_effects="None", reinvocation="IfNeeded",
        match_conditions=(("requests-nvidia-gpus", MATCH_CONDITION),),
        object_selector={"matchExpressions": [{"key": TRANSLATE_LABEL, "operator": "NotIn", "values": ["false"]}]},
    ),
)  # fmt: skip


def hooks(path: Path) -> dict[tuple[str, str], Hook]:
    """The hooks served on ``path``, keyed by (group, kind)."""
    return {(h.group, h.kind): h for h in HOOKS if h.path == path}


# hooks(path) as last made, with the HOOKS it was made of: every review looks its hook up here.
_SERVED: dict[Path, tuple[tuple[Hook, ...], dict[tuple[str, str], Hook]]] = {}


def _served(path: Path) -> dict[tuple[str, str], Hook]:
    made = _SERVED.get(path)
    if made is None or made[0] is not HOOKS:  # HOOKS replaced (tests do): made again
        made = _SERVED[path] = (HOOKS, hooks(path))
    return made[1]


@dataclass
class Admission:
    """What one review produced: the response, and for offline use the patched object and ``creates``
    (the objects it refers to that the controller provisions once it exists; nothing is created here)."""

    response: dict[str, Any]
    request: AdmissionRequest
    verdict: Verdict
    hook: Hook | None = None
    creates: list[dict[str, Any]] = field(default_factory=list)

    @property
    def rule(self) -> str:
        return self.hook.name if self.hook else "none"


def _failed(hook: Hook, request: AdmissionRequest, exc: Exception) -> Verdict:
    log.error(
        "rule failed hook=%s uid=%s kind=%s namespace=%s name=%s error=%r",
        hook.name, request.uid, request.kind, request.namespace, request.name, exc,
    )  # fmt: skip
    if hook.failure_policy == "Ignore":
        return Verdict(warnings=[f"gpucluster webhook error (uid {request.uid}); request not checked"], outcome="error")
    verdict = Verdict.deny(
        f"internal error in {hook.name} (uid {request.uid}); the webhook logs have the details, retry later",
        code=500,
        reason="InternalError",
    )
    verdict.outcome = "error"
    return verdict


def admit_request(request: AdmissionRequest, *, path: Path, cluster: ClusterState, settings: Settings) -> Admission:
    """Answer a decoded request on ``path`` with the matching rule."""
    hook = _served(path).get((request.group, request.kind))
    if hook is None or request.sub_resource:
        verdict = Verdict.allow(outcome="skipped")
    else:
        try:
            verdict = hook.rule(request, cluster, settings)
        except Exception as exc:  # a rule bug must not become an HTTP 500
            verdict = _failed(hook, request, exc)
    response = build_response(request, verdict, mutating=path == "mutate")
    # What the controller will provision once the object exists; a dryRun object never exists.
    return Admission(response, request, verdict, hook, [] if request.dry_run else list(verdict.creates))


def admit(body: bytes | str, *, path: Path, cluster: ClusterState, settings: Settings) -> Admission:
    """Decode ``body`` (raises ReviewDecodeError) and answer it."""
    return admit_request(decode_review(body), path=path, cluster=cluster, settings=settings)
