"""What the webhook does with a pod, as ``gpucluster audit`` reports it.

:func:`decider` is the :data:`gpucluster.audit.Decide` the audit command passes to the pure
audit: the pod goes through the webhook's own admission code (:func:`webhook.admission.admit_request`)
as a dryRun CREATE, and the verdict becomes ``(action, reason)``. A skipped pod's reason is found
in the webhook's order: translation off, operator namespace, opt-out label or annotation (pod or
namespace), native mapping by a DeviceClass ``extendedResourceName`` (DRAExtendedResource), then
the translation's own reasons (requests it cannot translate, pod already translated, pod already
claiming the same DeviceClass).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucluster.audit import Decide, requested_gpus
from gpucluster.clusterstate import ClusterState
from gpucluster.policy import TRANSLATE_LABEL, WEBHOOK_CONFIG, Settings, native_resources, opted_out
from gpucluster.translate import translate_pod_spec
from gpucluster.webhook.admission import admit_request
from gpucluster.webhook.review import AdmissionRequest


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def decider(settings: Settings | None = None) -> Decide:
    """The webhook's decision for pods under ``settings`` (the defaults when None)."""
    chosen = settings or Settings()

    def decide(pod: dict[str, Any], namespace: str, cluster: ClusterState) -> tuple[str, str]:
        return webhook_decision(pod, namespace, cluster, chosen)

    return decide


def webhook_decision(pod: dict[str, Any], namespace: str, cluster: ClusterState, settings: Settings) -> tuple[str, str]:
    """(action, reason): what the webhook does when this pod is created."""
    request = AdmissionRequest(
        uid="gpucluster-audit",
        group="",
        version="v1",
        kind="Pod",
        resource="pods",
        sub_resource="",
        operation="CREATE",
        name="",
        namespace=namespace,
        obj=pod,
        old_obj=None,
        dry_run=True,
        user="gpucluster-audit",
    )
    verdict = admit_request(request, path="mutate", cluster=cluster, settings=settings).verdict
    warnings = [w for w in verdict.warnings if w]
    if verdict.outcome == "mutated":
        devices: dict[str, int] = {}
        for template in verdict.creates:
            requests = _dict(_dict(_dict(template.get("spec")).get("spec")).get("devices")).get("requests")
            for req in requests if isinstance(requests, list) else []:
                exactly = _dict(_dict(req).get("exactly"))
                cls = str(exactly.get("deviceClassName"))
                devices[cls] = devices.get(cls, 0) + int(exactly.get("count") or 0)
        claims = ", ".join(f"{cls}={n}" for cls, n in sorted(devices.items()))
        reason = f"new pods get DRA claims ({claims})" if claims else "new pods get DRA claims"
        return "translate", "; ".join([reason, *warnings])
    if any(w.startswith("audit: would translate") for w in warnings):
        return "warn", "webhook in audit mode: it warns, new pods keep extended resources"
    return "skip", _skip_reason(pod, namespace, cluster, settings, warnings)


def _skip_reason(
    pod: Mapping[str, Any], namespace: str, cluster: ClusterState, settings: Settings, warnings: list[str]
) -> str:
    """Why the webhook left the pod alone, checked in the webhook's own order."""
    if settings.translation_mode == "off":
        return "webhook translation is off"
    if namespace == settings.operator_namespace:
        return f"operator namespace {namespace} is never translated"
    where = opted_out(pod, cluster.namespace_labels(namespace))
    if where is not None:
        return f"opted out ({where} {TRANSLATE_LABEL}=false)"
    native = native_resources(cluster)
    asked = set(requested_gpus(_dict(pod.get("spec"))))
    mapped = sorted(asked & set(native))
    if (
        settings.translation_mode in ("auto", "audit")
        and mapped
        and all(r in native or WEBHOOK_CONFIG.resolve(r) is None for r in asked)
    ):
        how = ", ".join(f"{r} by DeviceClass {native[r]}" for r in mapped)
        return f"native mapping: the scheduler allocates {how} (DRAExtendedResource)"
    # Containers left alone for GPU sharing (HAMi ...): the whole reason, which the webhook's
    # warning has to shorten.
    shared = translate_pod_spec(_dict(pod.get("spec")), namespace=namespace, config=WEBHOOK_CONFIG).shared
    reasons = [s.problem for s in shared]
    reasons += [w.removeprefix("not translated: ") for w in warnings if not any(s.reason in w for s in shared)]
    if reasons:
        return "; ".join(reasons)
    return "nothing the webhook translates"
