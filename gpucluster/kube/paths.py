"""REST paths of the kinds this project reads and writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# (apiVersion, kind) -> (plural, namespaced)
_KINDS: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "Node"): ("nodes", False),
    ("v1", "Pod"): ("pods", True),
    ("v1", "Service"): ("services", True),
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Secret"): ("secrets", True),
    ("v1", "Event"): ("events", True),
    ("apps/v1", "DaemonSet"): ("daemonsets", True),
    ("apps/v1", "Deployment"): ("deployments", True),
    ("apps/v1", "ReplicaSet"): ("replicasets", True),
    ("apps/v1", "StatefulSet"): ("statefulsets", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("batch/v1", "CronJob"): ("cronjobs", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("clusterroles", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("rbac.authorization.k8s.io/v1", "Role"): ("roles", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("rolebindings", True),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): ("validatingwebhookconfigurations", False),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): ("mutatingwebhookconfigurations", False),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): ("validatingadmissionpolicies", False),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (
        "validatingadmissionpolicybindings",
        False,
    ),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): ("customresourcedefinitions", False),
    ("coordination.k8s.io/v1", "Lease"): ("leases", True),
    ("events.k8s.io/v1", "Event"): ("events", True),
    ("resource.k8s.io/v1", "DeviceClass"): ("deviceclasses", False),
    ("resource.k8s.io/v1", "ResourceSlice"): ("resourceslices", False),
    ("resource.k8s.io/v1", "ResourceClaim"): ("resourceclaims", True),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): ("resourceclaimtemplates", True),
    ("nvidia.com/v1alpha1", "GPUCluster"): ("gpuclusters", False),
    ("nvidia.com/v1alpha1", "NVIDIADriver"): ("nvidiadrivers", False),
    ("nvidia.com/v1", "ClusterPolicy"): ("clusterpolicies", False),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ("servicemonitors", True),
}


class UnknownKind(ValueError):
    pass


def plural(api_version: str, kind: str) -> tuple[str, bool]:
    """(plural, namespaced) for a kind this project knows."""
    try:
        return _KINDS[(api_version, kind)]
    except KeyError:
        raise UnknownKind(f"no REST mapping for {api_version} {kind}") from None


def collection_path(api_version: str, kind: str, namespace: str | None = None) -> str:
    name, namespaced = plural(api_version, kind)
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced:
        if not namespace:
            raise UnknownKind(f"{kind} is namespaced: a namespace is needed")
        return f"{prefix}/namespaces/{namespace}/{name}"
    return f"{prefix}/{name}"


def object_path(obj: Mapping[str, Any], *, namespace: str | None = None) -> str:
    """The path of ``obj`` itself (collection path + name)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace") or namespace
    return f"{collection_path(str(obj.get('apiVersion')), str(obj.get('kind')), ns)}/{meta.get('name')}"
