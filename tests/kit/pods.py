"""Pods as kube-apiserver hands them to a mutating webhook on CREATE: decoded and defaulted
(SetDefaults_Pod, _PodSpec, _Container: limits copied into missing requests, imagePullPolicy,
terminationMessagePath, ...), after the ServiceAccount admission plugin (the ``kube-api-access-*``
projected volume, mounted in every container) and DefaultTolerationSeconds (NoExecute tolerations
of not-ready and unreachable nodes for 300 s). ``status`` is still empty, and a pod made by a
controller has only ``generateName`` (name and uid come later).

The values are kube-apiserver 1.34's; ``tests/kit/test_kit.py`` checks them against the sandbox's
defaulting (:func:`gpucluster.sandbox.apiserver.builtins.apply_defaults`), which this module does
not import: the webhook's unit tests need not load the sandbox.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

SERVICE_ACCOUNT_VOLUME = "kube-api-access-x7k2p"
SERVICE_ACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
POD_SPEC_DEFAULTS: Mapping[str, Any] = {
    "restartPolicy": "Always",
    "terminationGracePeriodSeconds": 30,
    "dnsPolicy": "ClusterFirst",
    "securityContext": {},
    "schedulerName": "default-scheduler",
    "enableServiceLinks": True,
    "preemptionPolicy": "PreemptLowerPriority",
    "priority": 0,
}
CONTAINER_DEFAULTS: Mapping[str, Any] = {
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
}
DEFAULT_TOLERATIONS = [
    {"key": f"node.kubernetes.io/{condition}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    for condition in ("not-ready", "unreachable")
]


def image_pull_policy(image: str) -> str:
    """Always for an image without a tag or tagged ``latest``, else IfNotPresent (a digest counts as a tag)."""
    last = image.rsplit("/", 1)[-1]
    return "Always" if "@" not in last and (":" not in last or last.endswith(":latest")) else "IfNotPresent"


def service_account_volume(name: str = SERVICE_ACCOUNT_VOLUME) -> dict[str, Any]:
    """The projected volume the ServiceAccount admission plugin adds: token, cluster CA, namespace."""
    namespace_file = {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
    return {
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [namespace_file]}},
            ],
            "defaultMode": 420,
        },
    }


def defaulted_container(
    container: Mapping[str, Any], *, requests_from_limits: bool = True, service_account: bool = True
) -> dict[str, Any]:
    """A copy of ``container`` with the API server's defaults; ``requests_from_limits=False`` leaves
    requests as given (a manifest as written, not as stored), ``service_account=False`` leaves out
    the mount of the service account's volume. Defaulting a defaulted container changes nothing."""
    c = copy.deepcopy(dict(container))
    resources = c.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if requests_from_limits and limits:
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)
    mounts = c.get("volumeMounts") or []
    if service_account and not any(m.get("mountPath") == SERVICE_ACCOUNT_PATH for m in mounts):
        mount = {"name": SERVICE_ACCOUNT_VOLUME, "readOnly": True, "mountPath": SERVICE_ACCOUNT_PATH}
        c["volumeMounts"] = [*mounts, mount]
    for key, value in CONTAINER_DEFAULTS.items():
        c.setdefault(key, value)
    c.setdefault("imagePullPolicy", image_pull_policy(str(c.get("image") or "")))
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")
    return c


def defaulted_pod(
    containers: Iterable[Mapping[str, Any]],
    init_containers: Iterable[Mapping[str, Any]] = (),
    *,
    metadata: Mapping[str, Any] | None = None,
    spec: Mapping[str, Any] | None = None,
    requests_from_limits: bool = True,
    service_account: str | None = "default",
) -> dict[str, Any]:
    """A Pod of ``containers`` (and ``init_containers``) as the API server defaults it.

    ``metadata`` is taken as given (a namespace, labels, ``generateName`` or a name, owners...);
    ``spec`` adds or overrides fields of the spec (restartPolicy, nodeName, resourceClaims,
    tolerations...), which are then defaulted too. ``service_account=None`` leaves out the
    ServiceAccount plugin's volume and mounts (the service account is still "default")."""
    mount = service_account is not None
    pod_spec: dict[str, Any] = {"volumes": [service_account_volume()] if mount else []}
    pod_spec["containers"] = [
        defaulted_container(c, requests_from_limits=requests_from_limits, service_account=mount) for c in containers
    ]
    inits = [
        defaulted_container(c, requests_from_limits=requests_from_limits, service_account=mount)
        for c in init_containers
    ]
    if inits:
        pod_spec["initContainers"] = inits
    for key, value in (spec or {}).items():
        pod_spec[key] = [*pod_spec["volumes"], *value] if key == "volumes" else copy.deepcopy(value)
    if not pod_spec["volumes"]:
        del pod_spec["volumes"]
    for key, value in POD_SPEC_DEFAULTS.items():
        pod_spec.setdefault(key, copy.deepcopy(value))
    pod_spec.setdefault("serviceAccountName", service_account or "default")
    pod_spec.setdefault("serviceAccount", pod_spec["serviceAccountName"])
    tolerations = pod_spec.setdefault("tolerations", [])
    for default in DEFAULT_TOLERATIONS:
        if not any(
            t.get("key") in (default["key"], None, "") and t.get("effect") in ("NoExecute", None, "")
            for t in tolerations
        ):
            tolerations.append(dict(default))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": copy.deepcopy(dict(metadata or {})),
        "spec": pod_spec,
        "status": {},
    }
