"""Pods as the API server hands them to a mutating webhook: defaulted, limits copied into requests."""

from __future__ import annotations

from typing import Any


def container(
    name: str, gpus: dict[str, str] | None = None, *, cpu: str | None = "500m", restart: str | None = None
) -> dict[str, Any]:
    limits: dict[str, str] = {}
    if cpu:
        limits["cpu"] = cpu
        limits["memory"] = "1Gi"
    limits.update(gpus or {})
    c: dict[str, Any] = {
        "name": name,
        "image": "nvcr.io/nvidia/cuda:12.6.2-base-ubi9",
        "command": ["nvidia-smi", "-L"],
        "resources": {"limits": dict(limits), "requests": dict(limits)} if limits else {},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "volumeMounts": [
            {
                "name": "kube-api-access-x7k2p",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        ],
    }
    if restart:
        c["restartPolicy"] = restart
    return c


def pod(
    *containers: dict[str, Any],
    init: list[dict[str, Any]] | None = None,
    name: str | None = "cuda-job",
    namespace: str | None = "ml",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node_name: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels or {"app": "cuda"}}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = "cuda-job-"
    if namespace:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {
        "volumes": [
            {
                "name": "kube-api-access-x7k2p",
                "projected": {
                    "defaultMode": 420,
                    "sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}],
                },
            }
        ],
        "containers": list(containers),
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if init:
        spec["initContainers"] = init
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {}}
