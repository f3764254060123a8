"""Validating and MutatingWebhookConfiguration manifests for our hooks (pure).

The chart and the sandbox install these; ``caBundle`` is injected by the certificate manager.
The namespace selector keeps kube-system and the operator's own namespace out of the webhook's
path, so that a broken webhook can never block the components that would repair it.
"""

from __future__ import annotations

import base64
from typing import Any

from gpucluster.webhook.admission import HOOKS, Hook

VALIDATING_NAME = "gpucluster-validating-webhook"
MUTATING_NAME = "gpucluster-mutating-webhook"
# The CA-injection label marks the configurations whose caBundle the operator keeps (certs/inject.py).
MANAGED_LABELS = {
    "app.kubernetes.io/name": "gpucluster",
    "app.kubernetes.io/managed-by": "gpucluster",
    "gpucluster.nvidia.com/inject-ca-bundle": "true",
}


def _client_config(
    hook: Hook, *, service: str | None, namespace: str, url: str | None, ca_bundle: bytes | None
) -> dict[str, Any]:
    config: dict[str, Any]
    if url is not None:
        config = {"url": url.rstrip("/") + f"/{hook.path}"}
    else:
        config = {"service": {"name": service, "namespace": namespace, "path": f"/{hook.path}", "port": 443}}
    if ca_bundle:
        config["caBundle"] = base64.b64encode(ca_bundle).decode()
    return config


def operator_condition(operator: str) -> tuple[str, str]:
    """The matchCondition that keeps ``operator``'s own requests (a username) away from a hook: the
    claim templates the controller creates are a translation's by construction, and their review
    would cost a feasibility check per template that nobody reads."""
    return ("not-the-operators-own", f"request.userInfo.username != '{operator}'")


def _webhook(
    hook: Hook,
    *,
    service: str | None,
    namespace: str,
    url: str | None,
    ca_bundle: bytes | None,
    operator: str | None = None,
) -> dict[str, Any]:
    webhook: dict[str, Any] = {
        "name": hook.name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": _client_config(hook, service=service, namespace=namespace, url=url, ca_bundle=ca_bundle),
        "rules": [
            {
                "apiGroups": [hook.group],
                "apiVersions": [hook.version],
                "resources": [hook.resource],
                "operations": list(hook.operations),
                "scope": "Namespaced" if hook.namespaced else "Cluster",
            }
        ],
        "failurePolicy": hook.failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": hook.side_effects,
        "timeoutSeconds": hook.timeout_seconds,
    }
    if hook.namespaced:
        webhook["namespaceSelector"] = {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": sorted({"kube-system", namespace}),
                }
            ]
        }
    if hook.object_selector:
        webhook["objectSelector"] = hook.object_selector
    conditions = [*hook.match_conditions, *([operator_condition(operator)] if hook.skip_operator and operator else [])]
    if conditions:
        webhook["matchConditions"] = [{"name": n, "expression": e} for n, e in conditions]
    if hook.path == "mutate":
        webhook["reinvocationPolicy"] = hook.reinvocation
    return webhook


def webhook_configurations(
    *,
    namespace: str = "gpu-operator",
    service: str | None = "gpucluster-webhook",
    url: str | None = None,
    ca_bundle: bytes | None = None,
    annotations: dict[str, str] | None = None,
    operator: str | None = None,
) -> list[dict[str, Any]]:
    """The two configurations: reach the webhook through ``service`` in ``namespace``, or at ``url``.
    ``operator``: the username the operator's controller runs as (the chart's ServiceAccount), whose
    own requests the hooks marked ``skip_operator`` never see."""
    out = []
    for kind, name, path in (
        ("ValidatingWebhookConfiguration", VALIDATING_NAME, "validate"),
        ("MutatingWebhookConfiguration", MUTATING_NAME, "mutate"),
    ):
        metadata: dict[str, Any] = {"name": name, "labels": dict(MANAGED_LABELS)}
        if annotations:
            metadata["annotations"] = dict(annotations)
        hooks = [
            _webhook(h, service=service, namespace=namespace, url=url, ca_bundle=ca_bundle, operator=operator)
            for h in HOOKS
            if h.path == path
        ]
        out.append(
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": metadata, "webhooks": hooks}
        )
    return out
