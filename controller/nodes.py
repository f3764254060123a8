"""Which labels a node needs for the DRA model (pure).

GPU nodes are those node-feature-discovery marks with ``feature.node.kubernetes.io/pci-10de.present``
(NVIDIA's PCI vendor id) or that carry ``nvidia.com/gpu.present``. They get
``nvidia.com/gpu.present=true`` and, when ``DEFAULT_GPU_ALLOCATION_MODE=dra``, the deploy labels
that the operand DaemonSets select on. A value an admin already set (for example ``false`` to keep
an operand off a node) is honoured. When a node stops being a GPU node, our labels go, except the
DRA driver's while pods on the node still hold gpu.nvidia.com claims: removing it would take the
kubelet plugin away from devices in use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpucluster.controller.holders import allocated_devices

GPU_PRESENT = "nvidia.com/gpu.present"
NFD_NVIDIA = "feature.node.kubernetes.io/pci-10de.present"
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
DRA_DRIVER_LABEL = DEPLOY_PREFIX + "dra-driver"
DEPLOY_LABELS = (
    DRA_DRIVER_LABEL,
    DEPLOY_PREFIX + "dra-validator",
    DEPLOY_PREFIX + "dcgm-exporter",
    DEPLOY_PREFIX + "dcgm",
)
GPU_DRIVER = "gpu.nvidia.com"


def is_gpu_node(labels: Mapping[str, str]) -> bool:
    return labels.get(NFD_NVIDIA) == "true" or labels.get(GPU_PRESENT) == "true"


def label_patch(node: Mapping[str, Any], allocation_mode: str | None, claims_in_use: bool) -> dict[str, str | None]:
    """Labels to set (value) or remove (None) on ``node``; empty when it is as it should be.

    ``claims_in_use``: pods on the node hold allocated gpu.nvidia.com claims.
    """
    labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
    patch: dict[str, str | None] = {}
    if is_gpu_node(labels):
        if labels.get(GPU_PRESENT) != "true":
            patch[GPU_PRESENT] = "true"
        if allocation_mode == "dra":
            for key in DEPLOY_LABELS:
                if not labels.get(key):  # missing or empty; an admin's value is kept
                    patch[key] = "true"
        return patch
    for key in DEPLOY_LABELS:
        if labels.get(key) == "true":
            if key == DRA_DRIVER_LABEL and claims_in_use:
                continue
            patch[key] = None
    return patch


def claim_nodes(claim: Mapping[str, Any]) -> set[str]:
    """The nodes (pools) whose gpu.nvidia.com devices ``claim`` is allocated."""
    return device_nodes(allocated_devices(claim))


def device_nodes(devices: Iterable[tuple[str, str, str]]) -> set[str]:
    """The nodes (pools) of the gpu.nvidia.com devices among ``devices`` (:func:`allocated_devices`)."""
    return {pool for driver, pool, _ in devices if driver == GPU_DRIVER and pool}


def nodes_with_claims(claims: Iterable[Mapping[str, Any]]) -> set[str]:
    """Nodes whose gpu.nvidia.com devices are allocated to claims that pods hold (pool = node name)."""
    nodes: set[str] = set()
    for claim in claims:
        if (claim.get("status") or {}).get("reservedFor"):
            nodes |= claim_nodes(claim)
    return nodes
