"""AdmissionReview builders shaped as kube-apiserver sends them (admission/v1)."""

from __future__ import annotations

import copy
import uuid
from typing import Any

_RESOURCES = {
    "GPUCluster": ("nvidia.com", "v1alpha1", "gpuclusters"),
    "ClusterPolicy": ("nvidia.com", "v1", "clusterpolicies"),
    "NVIDIADriver": ("nvidia.com", "v1alpha1", "nvidiadrivers"),
    "Pod": ("", "v1", "pods"),
    "ResourceClaim": ("resource.k8s.io", "v1", "resourceclaims"),
    "ResourceClaimTemplate": ("resource.k8s.io", "v1", "resourceclaimtemplates"),
    "ConfigMap": ("", "v1", "configmaps"),
}


def review(
    obj: dict[str, Any] | None,
    *,
    kind: str | None = None,
    operation: str = "CREATE",
    namespace: str = "",
    name: str | None = None,
    old: dict[str, Any] | None = None,
    dry_run: bool = False,
    sub_resource: str | None = None,
) -> dict[str, Any]:
    kind = kind or (obj or old or {})["kind"]
    group, version, resource = _RESOURCES[kind]
    meta = (obj or old or {}).get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": resource}
    options_kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": meta.get("name", "") if name is None else name,
        "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]},
        "object": copy.deepcopy(obj),
        "oldObject": copy.deepcopy(old),
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind.get(operation, "CreateOptions")},
    }
    if namespace:
        request["namespace"] = namespace
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def gpucluster(name: str = "gpu-cluster", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "metadata": {"name": name}, "spec": spec}


def clusterpolicy(name: str = "cluster-policy") -> dict[str, Any]:
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": name},
        "spec": {"devicePlugin": {"enabled": True}, "driver": {"enabled": True}},
    }


def nvidiadriver(name: str = "default", **spec: Any) -> dict[str, Any]:
    base = {"driverType": "gpu", "repository": "nvcr.io/nvidia", "image": "driver", "version": "580.82.07"}
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": name},
        "spec": {**base, **spec},
    }
