"""Pod CREATE (mutating): legacy ``nvidia.com/gpu`` and MIG requests become DRA claims.

The translation itself is :mod:`gpucluster.translate`; this rule decides whether to apply it:
the mode (auto, always, audit, off), opt-outs, pods that already claim the same DeviceClass, and
the native path (a DeviceClass that maps the extended resource, KEP-5004), which ``auto`` leaves
to the scheduler.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from types import MappingProxyType
from typing import Any

import orjson

from gpucluster.clusterstate import ClusterState, metadata
from gpucluster.jsonutil import diff
from gpucluster.translate import DEFAULT_CONFIG, Translation, TranslationConfig, translate_pod_spec
from webhook.review import AdmissionRequest, Verdict, short_warning
from webhook.settings import TRANSLATE_LABEL, Settings

# Only GPU-looking names are reported when they cannot be translated; nvidia.com/ also holds the
# Network Operator's RDMA resources, which are none of our business.
WEBHOOK_CONFIG = replace(DEFAULT_CONFIG, watched_prefixes=("nvidia.com/gpu", "nvidia.com/mig-"))

# The webhook is only called for pods that ask for a GPU-looking resource (see configurations).
MATCH_CONDITION = (
    "[object.spec.containers, has(object.spec.initContainers) ? object.spec.initContainers : []]"
    ".exists(cs, cs.exists(c, has(c.resources) && ("
    "(has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('nvidia.com/gpu') || k.startsWith('nvidia.com/mig-'))) || "
    "(has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('nvidia.com/gpu') || k.startsWith('nvidia.com/mig-')))"
    ")))"
)


def opted_out(pod: Mapping[str, Any], namespace_labels: Mapping[str, str] | None) -> str | None:
    meta = metadata(pod)
    for where, values in (("pod label", meta.get("labels")), ("pod annotation", meta.get("annotations"))):
        if isinstance(values, dict) and str(values.get(TRANSLATE_LABEL, "")).lower() == "false":
            return where
    if namespace_labels and namespace_labels.get(TRANSLATE_LABEL, "").lower() == "false":
        return "namespace label"
    return None


def native_resources(cluster: ClusterState) -> dict[str, str]:
    """Extended resource name -> DeviceClass for classes that map one natively (DRAExtendedResource)."""
    out = {}
    for device_class in cluster.list("DeviceClass"):
        name = (device_class.get("spec") or {}).get("extendedResourceName")
        if isinstance(name, str) and name:
            out[name] = str(metadata(device_class).get("name", ""))
    return out


def _requested_classes(spec: Mapping[str, Any]) -> set[str]:
    classes = set()
    for request in ((spec.get("devices") or {}).get("requests")) or []:
        if not isinstance(request, dict):
            continue
        exactly = request.get("exactly") or {}
        if exactly.get("deviceClassName"):
            classes.add(str(exactly["deviceClassName"]))
        for sub in request.get("firstAvailable") or []:
            if isinstance(sub, dict) and sub.get("deviceClassName"):
                classes.add(str(sub["deviceClassName"]))
    return classes


def existing_claim_classes(pod: Mapping[str, Any], namespace: str, cluster: ClusterState) -> set[str]:
    """DeviceClasses the pod's existing claims ask for, as far as the cluster view knows them."""
    classes: set[str] = set()
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(ref, dict):
            continue
        if ref.get("resourceClaimTemplateName"):
            template = cluster.get("ResourceClaimTemplate", str(ref["resourceClaimTemplateName"]), namespace)
            if template is not None:
                classes |= _requested_classes(((template.get("spec") or {}).get("spec")) or {})
        elif ref.get("resourceClaimName"):
            claim = cluster.get("ResourceClaim", str(ref["resourceClaimName"]), namespace)
            if claim is not None:
                classes |= _requested_classes(claim.get("spec") or {})
    return classes


class _TranslationCache:
    """Translations of pod specs, keyed by content.

    The pods of a Deployment, Job or StatefulSet share one spec, so at scale most reviews repeat a
    translation already made. The key is the spec's exact JSON, the namespace (templates carry it),
    the existing translated-from annotation and the config; values are shared and never modified.
    """

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[Any, ...], tuple[Translation, list[dict[str, Any]]]] = OrderedDict()

    def get(
        self,
        spec: Mapping[str, Any],
        spec_key: bytes,
        namespace: str,
        marker: str | None,
        config: TranslationConfig,
        config_key: Any,
    ) -> tuple[Translation, list[dict[str, Any]]]:
        key = (spec_key, namespace, marker, config_key)
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            return found
        annotations = {config.annotation: marker} if marker is not None else None
        translation = translate_pod_spec(spec, namespace=namespace, existing_annotations=annotations, config=config)
        entry = (translation, diff(spec, translation.pod_spec, "/spec") if translation.changed else [])
        self._entries[key] = entry
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return entry


_CACHE = _TranslationCache()


@lru_cache(maxsize=64)
def _native_config(native: frozenset[tuple[str, str]]) -> TranslationConfig:
    return _config_without(WEBHOOK_CONFIG, dict(native))


def _config_without(config: TranslationConfig, native: Mapping[str, str]) -> TranslationConfig:
    mapping = {k: v for k, v in config.mapping.items() if k not in native}
    mig_prefix = config.mig_prefix
    if mig_prefix and any(name.startswith(mig_prefix) for name in native):
        mig_prefix = None  # a natively mapped MIG name: leave every MIG name to the native path
    return replace(config, mapping=MappingProxyType(mapping), mig_prefix=mig_prefix)


def _spec_well_formed(spec: Any) -> bool:
    """The shape the API server guarantees for a decoded PodSpec; anything else is not ours to judge."""
    if not isinstance(spec, dict):
        return False
    for key in ("containers", "initContainers", "resourceClaims"):
        items = spec.get(key, [])
        if items is not None and (not isinstance(items, list) or not all(isinstance(i, dict) for i in items)):
            return False
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = c.get("resources", {})
        if resources is not None and not isinstance(resources, dict):
            return False
        for section in ("limits", "requests", "claims"):
            value = (resources or {}).get(section)
            if value is not None and not isinstance(value, dict if section != "claims" else list):
                return False
    return True


def _meta_well_formed(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata", {})
    if not isinstance(meta, dict):
        return False
    return all(meta.get(k) is None or isinstance(meta.get(k), dict) for k in ("labels", "annotations"))


@lru_cache(maxsize=4096)
def _spec_gpu_resources(spec_key: bytes) -> frozenset[str] | None:
    """GPU-looking resource names a pod spec asks for; None for a malformed spec. Keyed by the
    spec's JSON: the pods of one workload share it, so this runs once per workload."""
    spec = orjson.loads(spec_key)
    if not _spec_well_formed(spec):
        return None
    return frozenset(_gpu_resource_names(spec, WEBHOOK_CONFIG))


def mutate_pod_request(request: AdmissionRequest, cluster: ClusterState, settings: Settings) -> Verdict:
    if request.operation != "CREATE" or request.obj is None or settings.translation_mode == "off":
        return Verdict.allow(outcome="skipped")
    pod = request.obj
    if not _meta_well_formed(pod) or not isinstance(pod.get("spec"), dict):
        return Verdict.allow(outcome="skipped")
    spec_key = orjson.dumps(pod["spec"])
    wanted = _spec_gpu_resources(spec_key)
    if not wanted:  # no GPU asked for, or a malformed spec
        return Verdict.allow(outcome="skipped")
    namespace = request.namespace or str(metadata(pod).get("namespace") or "")
    if namespace == settings.operator_namespace:
        return Verdict.allow(outcome="skipped")
    config = WEBHOOK_CONFIG
    if opted_out(pod, cluster.namespace_labels(namespace)):
        return Verdict.allow(outcome="skipped")
    native = native_resources(cluster)
    config_key: Any = None
    if settings.translation_mode in ("auto", "audit") and native:
        config_key = frozenset(native.items())
        config = _native_config(config_key)
        if all(config.resolve(r) is None for r in wanted):
            return Verdict.allow(outcome="skipped")  # the scheduler allocates these natively
    meta = metadata(pod)
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    marker = annotations.get(config.annotation) if annotations else None
    translation, spec_ops = _CACHE.get(pod["spec"], spec_key, namespace, marker, config, config_key)
    warnings = [short_warning(f"not translated: {p}") for p in translation.problems]
    if not translation.changed:
        return Verdict.allow(*warnings, outcome="skipped")
    overlap = existing_claim_classes(pod, namespace, cluster) & set(translation.devices)
    if overlap:
        classes = ", ".join(sorted(overlap))
        return Verdict.allow(
            short_warning(f"pod already claims {classes} through DRA; its extended-resource requests are left as is")
        )
    if (pod.get("spec") or {}).get("nodeName"):
        warnings.append(
            short_warning(
                "spec.nodeName is set: the scheduler is bypassed, so the pod's GPU claims are never allocated"
            )
        )
    if settings.translation_mode == "audit":
        audit = [short_warning(f"audit: would translate {change}") for change in translation.changes]
        return Verdict.allow(*audit, *warnings)
    new_meta = {**meta, "annotations": {**(annotations or {}), **translation.annotations}}
    patched = {**pod, "metadata": new_meta, "spec": translation.pod_spec}
    ops = (diff(pod["metadata"], new_meta, "/metadata") if "metadata" in pod else [
        {"op": "add", "path": "/metadata", "value": new_meta}
    ]) + spec_ops  # fmt: skip
    return Verdict(
        patched=patched, patch=ops, creates=list(translation.templates), warnings=warnings, outcome="mutated"
    )


def _gpu_resource_names(spec: Mapping[str, Any], config: TranslationConfig) -> set[str]:
    """The GPU-looking resources any container of a pod spec asks for, translatable or not."""
    names: set[str] = set()
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            resources = container.get("resources") if isinstance(container, dict) else None
            for section in ("limits", "requests"):
                values = (resources or {}).get(section)
                if isinstance(values, dict):
                    names |= {str(k) for k in values if config.watched(str(k)) or config.resolve(str(k))}
    return names
