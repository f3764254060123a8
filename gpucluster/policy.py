"""When a pod's extended-resource GPU requests are translated, besides the translation itself.

Pure rules shared by the webhook's pod rule (``webhook/rules/pods.py``), the audit
(:mod:`gpucluster.audit`), ``gpucluster migrate`` and the controller: what an operator configures
(:class:`Settings`), the opt-out label, which resource names count as GPUs, and the DeviceClasses
that map an extended resource natively (DRAExtendedResource). They live in the core so that the
offline tools decide exactly as the webhook does without importing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from gpucluster.clusterstate import ClusterState, metadata
from gpucluster.translate import DEFAULT_CONFIG

TranslationMode = Literal["auto", "always", "audit", "off"]
TRANSLATION_MODES: tuple[TranslationMode, ...] = ("auto", "always", "audit", "off")

# A pod, or every pod of a namespace, opts out of translation with this label (or annotation) set to "false".
TRANSLATE_LABEL = "gpucluster.nvidia.com/translate"

# Only GPU-looking names are reported when they cannot be translated; nvidia.com/ also holds the
# Network Operator's RDMA resources, which are none of our business.
WEBHOOK_CONFIG = replace(DEFAULT_CONFIG, watched_prefixes=("nvidia.com/gpu", "nvidia.com/mig-"))


@dataclass(frozen=True)
class Settings:
    """What an operator configures about admission (flags, Helm values). ``operator_namespace`` is
    excluded from translation.

    ``kubernetes_version`` and ``feature_gates`` (overrides of that version's DRA gate defaults,
    :mod:`gpucluster.dra.gates`) are what the claim feasibility check allocates with.
    """

    translation_mode: TranslationMode = "auto"
    operator_namespace: str = "gpu-operator"
    kubernetes_version: str = "1.34"
    feature_gates: tuple[tuple[str, bool], ...] = ()


def opted_out(pod: Mapping[str, Any], namespace_labels: Mapping[str, str] | None) -> str | None:
    """Where the pod opts out of translation (``pod label``, ``pod annotation``, ``namespace label``), or None."""
    meta = metadata(pod)
    for where, values in (("pod label", meta.get("labels")), ("pod annotation", meta.get("annotations"))):
        if isinstance(values, dict) and str(values.get(TRANSLATE_LABEL, "")).lower() == "false":
            return where
    if namespace_labels and namespace_labels.get(TRANSLATE_LABEL, "").lower() == "false":
        return "namespace label"
    return None


def _native_resources(cluster: ClusterState) -> dict[str, str]:
    out = {}
    for device_class in cluster.list("DeviceClass"):
        name = (device_class.get("spec") or {}).get("extendedResourceName")
        if isinstance(name, str) and name:
            out[name] = str(metadata(device_class).get("name", ""))
    return out


def native_resources(cluster: ClusterState) -> Mapping[str, str]:
    """Extended resource name -> DeviceClass for classes that map one natively (DRAExtendedResource);
    kept on the view until its DeviceClasses change. Shared: do not modify."""
    return cluster.derived("native-extended-resources", _native_resources, kinds=("DeviceClass",))
