"""The default RBAC policy kube-apiserver bootstraps and that clients rely on
(plugin/pkg/auth/authorizer/rbac/bootstrappolicy), trimmed to the kinds the sandbox serves:
cluster-admin, system:discovery, system:basic-user, system:public-info-viewer, the aggregated
admin/edit/view with their system:aggregate-to-* roles, and upstream's bindings of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucluster.sandbox.apiserver.auth import ADMIN
from gpucluster.sandbox.apiserver.context import Context, Semantics

Obj = dict[str, Any]
GROUP = "rbac.authorization.k8s.io"


_BOOTSTRAP_LABELS = {"kubernetes.io/bootstrapping": "rbac-defaults"}
_AUTOUPDATE = {"rbac.authorization.kubernetes.io/autoupdate": "true"}
_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]


def _cluster_role(name: str, rules: list[Obj], labels: Mapping[str, str] | None = None, **extra: Any) -> Obj:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {**_BOOTSTRAP_LABELS, **(labels or {})}, "annotations": dict(_AUTOUPDATE)},
        "rules": rules,
        **extra,
    }


def _binding(name: str, role: str, groups: list[str]) -> Obj:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": dict(_BOOTSTRAP_LABELS), "annotations": dict(_AUTOUPDATE)},
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": g} for g in groups],
    }


def _aggregate(to: str) -> Obj:
    return {"clusterRoleSelectors": [{"matchLabels": {f"rbac.authorization.k8s.io/aggregate-to-{to}": "true"}}]}


def bootstrap_objects() -> list[tuple[str, Obj]]:
    """(plural, object) for the default policy kube-apiserver bootstraps that clients rely on
    (plugin/pkg/auth/authorizer/rbac/bootstrappolicy), trimmed to the kinds the sandbox serves."""
    core_read = [
        "configmaps",
        "endpoints",
        "persistentvolumeclaims",
        "pods",
        "replicationcontrollers",
        "serviceaccounts",
        "services",
    ]
    view_rules: list[Obj] = [
        {
            "apiGroups": [""],
            "resources": [
                *core_read,
                "persistentvolumeclaims/status",
                "replicationcontrollers/scale",
                "services/status",
            ],
            "verbs": _READ,
        },
        {
            "apiGroups": [""],
            "resources": [
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
            "verbs": _READ,
        },
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": _READ},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": _READ},
        {
            "apiGroups": ["apps"],
            "resources": [
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            "verbs": _READ,
        },
        {
            "apiGroups": ["autoscaling"],
            "resources": ["horizontalpodautoscalers", "horizontalpodautoscalers/status"],
            "verbs": _READ,
        },
        {"apiGroups": ["batch"], "resources": ["cronjobs", "cronjobs/status", "jobs", "jobs/status"], "verbs": _READ},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets", "poddisruptionbudgets/status"], "verbs": _READ},
        {
            "apiGroups": ["networking.k8s.io"],
            "resources": ["ingresses", "ingresses/status", "networkpolicies"],
            "verbs": _READ,
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims", "resourceclaims/status", "resourceclaimtemplates"],
            "verbs": _READ,
        },
    ]
    edit_rules: list[Obj] = [
        {
            "apiGroups": [""],
            "resources": ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"],
            "verbs": _READ,
        },
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
        {
            "apiGroups": [""],
            "resources": ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"],
            "verbs": _WRITE,
        },
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": [
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            "verbs": _WRITE,
        },
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
        {
            "apiGroups": ["apps"],
            "resources": [
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
            "verbs": _WRITE,
        },
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": _WRITE},
        {"apiGroups": ["batch"], "resources": ["cronjobs", "jobs"], "verbs": _WRITE},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": _WRITE},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"], "verbs": _WRITE},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": [*_READ, *_WRITE]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims", "resourceclaimtemplates"], "verbs": _WRITE},
    ]
    admin_rules: list[Obj] = [
        {"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"], "verbs": ["create"]},
        {"apiGroups": [GROUP], "resources": ["rolebindings", "roles"], "verbs": [*_READ, *_WRITE]},
    ]
    roles = [
        _cluster_role(
            "cluster-admin",
            [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["*"]}],
            {},
        ),
        _cluster_role(
            "system:discovery",
            [
                {
                    "nonResourceURLs": [
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/healthz",
                        "/livez",
                        "/openapi",
                        "/openapi/*",
                        "/readyz",
                        "/version",
                        "/version/",
                    ],
                    "verbs": ["get"],
                }
            ],
        ),
        _cluster_role(
            "system:basic-user",
            [
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
                {
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    "verbs": ["create"],
                },
            ],
        ),
        _cluster_role(
            "system:public-info-viewer",
            [{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}],
        ),
        _cluster_role("admin", [], {}, aggregationRule=_aggregate("admin")),
        _cluster_role(
            "edit", [], {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}, aggregationRule=_aggregate("edit")
        ),
        _cluster_role(
            "view",
            [],
            {
                "rbac.authorization.k8s.io/aggregate-to-admin": "true",
                "rbac.authorization.k8s.io/aggregate-to-edit": "true",
            },
            aggregationRule=_aggregate("view"),
        ),
        _cluster_role(
            "system:aggregate-to-admin", admin_rules, {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}
        ),
        _cluster_role("system:aggregate-to-edit", edit_rules, {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}),
        _cluster_role("system:aggregate-to-view", view_rules, {"rbac.authorization.k8s.io/aggregate-to-view": "true"}),
    ]
    bindings = [
        _binding("cluster-admin", "cluster-admin", ["system:masters"]),
        _binding("system:discovery", "system:discovery", ["system:authenticated"]),
        _binding("system:basic-user", "system:basic-user", ["system:authenticated"]),
        _binding(
            "system:public-info-viewer", "system:public-info-viewer", ["system:authenticated", "system:unauthenticated"]
        ),
    ]
    return [("clusterroles", r) for r in roles] + [("clusterrolebindings", b) for b in bindings]


async def seed(core: Semantics) -> None:
    """Create the bootstrap policy objects that are missing (as kube-apiserver's post-start hook)."""
    for plural, obj in bootstrap_objects():
        rt = core.registry.get(GROUP, "v1", plural)
        if rt is None or core.store.get(rt.key, "", obj["metadata"]["name"]) is not None:
            continue
        await core.create(rt, "", obj, Context(user=ADMIN.to_obj(), field_manager="kube-apiserver"))
