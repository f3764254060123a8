"""Pods as the API server hands them to a mutating webhook: defaulted, limits copied into requests."""

from __future__ import annotations

from typing import Any

from tests.kit.pods import defaulted_container, defaulted_pod


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
        "resources": {"limits": limits} if limits else {},
    }
    if restart:
        c["restartPolicy"] = restart
    return defaulted_container(c)


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
    spec: dict[str, Any] = {"restartPolicy": "Never"}
    if node_name:
        spec["nodeName"] = node_name
    return defaulted_pod(containers, init or (), metadata=meta, spec=spec)
