"""Pod CREATE (mutating): legacy ``nvidia.com/gpu`` and MIG requests become DRA claims.

The translation itself is :mod:`gpucluster.translate`; this rule decides whether to apply it:
the mode (auto, always, audit, off), opt-outs, pods that already claim the same DeviceClass, and
the native path (a DeviceClass that maps the extended resource, KEP-5004), which ``auto`` leaves
to the scheduler.

The answer is a pure function of the review and the cluster view: nothing is created. A
translated pod is labelled ``gpucluster.nvidia.com/translated=true`` and its annotation
``gpucluster.nvidia.com/claim-templates`` records the specs of the ResourceClaimTemplates it
refers to (content-addressed names; another name when the view shows one taken by another spec).
The controller creates the missing templates once the pod exists (``controller/provision.py``);
a pod naming a template the view does not show gets the scheduling gate
``gpucluster.nvidia.com/claim-templates``, which the controller removes once every template it
names exists with the spec it asked for (never while a name is taken by another spec). So a
dryRun pod, a pod refused by a later admission step and a forged review leave nothing behind.
What may be requested is bounded: the NVIDIA DeviceClasses and MIG profiles the view publishes
(when it knows any) and at most :data:`MAX_DEVICES_PER_POD` devices per pod. Mirror pods are never
translated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import orjson

from gpucluster.claimtemplates import (  # noqa: F401 (re-exported: the webhook's bounds)
    MAX_DEVICES_PER_POD,
    NVIDIA_GPU_DRIVER,
    Published,
    bound_problems,
    dra_model_absent,
    gate_ops,
    published,
)
from gpucluster.clusterstate import ClusterState, metadata
from gpucluster.jsonutil import diff
from gpucluster.lru import LRU
from gpucluster.policy import TRANSLATE_LABEL, WEBHOOK_CONFIG, Settings, native_resources, opted_out
from gpucluster.translate import (
    MAX_TEMPLATES_ANNOTATION_BYTES,
    TEMPLATES_ANNOTATION,
    TRANSLATED_LABEL,
    Translation,
    TranslationConfig,
    template_name_candidates,
    templates_annotation,
    translate_pod_spec,
    translated_part,
)
from gpucluster.webhook.review import AdmissionRequest, Patch, Verdict, short_warning

# The kubelet marks the mirror pods of static pods with this annotation.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

# The labels and annotations this rule reads (opt-outs, the mirror annotation, the translated-from
# marker) or its patch writes: a pod's answer depends on these of them alone.
LABELS_READ = (TRANSLATE_LABEL, TRANSLATED_LABEL)
ANNOTATIONS_READ = (TRANSLATE_LABEL, MIRROR_ANNOTATION, WEBHOOK_CONFIG.annotation, TEMPLATES_ANNOTATION)

# The webhook is only called for pods that ask for a GPU-looking resource (see configurations).
MATCH_CONDITION = (
    "[object.spec.containers, has(object.spec.initContainers) ? object.spec.initContainers : []]"
    ".exists(cs, cs.exists(c, has(c.resources) && ("
    "(has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith('nvidia.com/gpu') || k.startsWith('nvidia.com/mig-'))) || "
    "(has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith('nvidia.com/gpu') || k.startsWith('nvidia.com/mig-')))"
    ")))"
)


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


@dataclass
class _SpecMemo:
    """What the pod rule learnt about pod specs, by content: a function of the key alone, so it is
    kept on the cluster view for the view's life (:func:`_spec_memo`), not per generation.

    The pods of a Deployment, Job or StatefulSet share one spec, or differ only in what a
    translation never reads (env, args, images: see :func:`translated_part`), so at scale most
    reviews repeat a translation already made, in any namespace. A translation's key is the exact
    JSON of the part of the spec it reads, the existing translated-from annotation and the native
    mappings; values are shared and never modified.
    """

    translations: LRU[tuple[Any, ...], tuple[Translation, list[dict[str, Any]]]] = field(
        default_factory=lambda: LRU(1024)
    )
    gpu_resources: LRU[bytes, frozenset[str]] = field(default_factory=lambda: LRU(4096))


def _spec_memo(cluster: ClusterState) -> _SpecMemo:
    return cluster.derived("pod-rule-specs", lambda _: _SpecMemo(), kinds=())


def _translate(
    memo: _SpecMemo, part: Mapping[str, Any], part_key: bytes, marker: str | None, native: _Native
) -> tuple[Translation, list[dict[str, Any]]]:
    """The translation of a spec's :func:`translated_part` (``part_key`` its JSON) and its patch
    operations (the spec's own: the part keeps the spec's paths), made once per key for every
    namespace (its templates name none: what a namespace holds is read after, by the rule)."""
    config, native_key = native
    key = (part_key, marker, native_key)
    found = memo.translations.get(key)
    if found is not None:
        return found
    annotations = {config.annotation: marker} if marker is not None else None
    translation = translate_pod_spec(part, namespace=None, existing_annotations=annotations, config=config, share=True)
    entry = (translation, diff(part, translation.pod_spec, "/spec") if translation.changed else [])
    memo.translations.put(key, entry)
    return entry


# The translation config with the natively mapped names taken out, and those names (the key of
# the translations made with it).
_Native = tuple[TranslationConfig, frozenset[tuple[str, str]]]


def _native_config(cluster: ClusterState) -> _Native:
    """:data:`WEBHOOK_CONFIG` without what the view's DeviceClasses map natively, kept on the view
    until its DeviceClasses change."""

    def build(view: ClusterState) -> _Native:
        native = native_resources(view)
        if not native:
            return WEBHOOK_CONFIG, frozenset()
        return _config_without(WEBHOOK_CONFIG, native), frozenset(native.items())

    return cluster.derived("pod-rule-native-config", build, kinds=("DeviceClass",))


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


def _not_a_string(pod: Mapping[str, Any]) -> str | None:
    """The first label or annotation the rule reads whose value is not a string, as kube-apiserver
    admits only strings there (a review made by hand may hold anything)."""
    meta = metadata(pod)
    for field_name, keys in (("labels", LABELS_READ), ("annotations", ANNOTATIONS_READ)):
        entries = meta.get(field_name) or {}
        for key in keys:
            if key in entries and not isinstance(entries[key], str):
                return f"metadata.{field_name}[{key!r}]"
    return None


def _meta_well_formed(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata", {})
    if not isinstance(meta, dict):
        return False
    return all(meta.get(k) is None or isinstance(meta.get(k), dict) for k in ("labels", "annotations"))


def _spec_gpu_resources(memo: _SpecMemo, part: dict[str, Any], part_key: bytes) -> frozenset[str]:
    """GPU-looking resource names a pod spec asks for (none for a malformed spec), from its
    :func:`translated_part` (the containers' resources; ``part_key`` its JSON, the key): the pods
    of one workload share it, so this runs once per workload."""
    found = memo.gpu_resources.get(part_key)
    if found is None:
        names = _gpu_resource_names(part, WEBHOOK_CONFIG) if _spec_well_formed(part) else ()
        found = frozenset(names)
        memo.gpu_resources.put(part_key, found)
    return found


def _problem_warning(problem: str) -> str:
    """``not translated: <container>: <reason>`` with the reason whole (the container part shortens)."""
    if problem.startswith(_CONTAINER_LABELS) and ": " in problem:
        where, why = problem.split(": ", 1)
        return short_warning(why, prefix=f"not translated: {where}:")
    return short_warning(problem, prefix="not translated:")


_CONTAINER_LABELS = ("container ", "init container ", "sidecar ")


def mirror_pod(request: AdmissionRequest, pod: Mapping[str, Any]) -> bool:
    """A kubelet's mirror of a static pod: the annotation, or a node creating it."""
    annotations = metadata(pod).get("annotations")
    return (isinstance(annotations, dict) and MIRROR_ANNOTATION in annotations) or request.user.startswith(
        "system:node:"
    )


def mutate_pod_request(request: AdmissionRequest, cluster: ClusterState, settings: Settings) -> Verdict:
    """The pod rule. Its answer depends, besides the cluster view and the settings, only on the
    pod's translated part of the spec, nodeName and schedulingGates, the label and annotation keys
    in LABELS_READ and ANNOTATIONS_READ, the namespace, whether the pod has metadata and whether a
    node sends it: the server keeps answers under those (webhook.cached_answers)."""
    if request.operation != "CREATE" or request.obj is None or settings.translation_mode == "off":
        return Verdict.allow(outcome="skipped")
    pod = request.obj
    if not _meta_well_formed(pod) or not isinstance(pod.get("spec"), dict):
        return Verdict.allow(outcome="skipped")
    # What a translation reads of the spec (the rule itself reads nodeName besides): the pods of a
    # workload that differ in env, args or images share it, and so what is learnt from it.
    part = translated_part(pod["spec"])
    part_key = orjson.dumps(part)
    memo = _spec_memo(cluster)
    wanted = _spec_gpu_resources(memo, part, part_key)
    if not wanted:  # no GPU asked for, or a malformed spec
        return Verdict.allow(outcome="skipped")
    malformed = _not_a_string(pod)
    if malformed is not None:
        return Verdict.allow(short_warning(f"not translated: {malformed} is not a string"))
    namespace = request.namespace or str(metadata(pod).get("namespace") or "")
    if namespace == settings.operator_namespace:
        return Verdict.allow(outcome="skipped")
    if mirror_pod(request, pod):
        # The API server and NodeRestriction refuse mirror pods that reference ResourceClaims
        # (kubernetes/kubernetes#131844): translating would make the kubelet's mirror pod fail.
        return Verdict.allow(
            short_warning("not translated: mirror (static) pods cannot reference ResourceClaims; use a DaemonSet")
        )
    if opted_out(pod, cluster.namespace_labels(namespace)):
        return Verdict.allow(outcome="skipped")
    native: _Native = (WEBHOOK_CONFIG, frozenset())
    if settings.translation_mode in ("auto", "audit"):
        native = _native_config(cluster)
        if native[1] and all(native[0].resolve(r) is None for r in wanted):
            return Verdict.allow(outcome="skipped")  # the scheduler allocates these natively
    # Audit mode changes nothing: it says what would be translated once the DRA model serves.
    absent = dra_model_absent(cluster) if settings.translation_mode != "audit" else None
    if absent is not None:
        return Verdict.allow(short_warning(f"not translated: {absent}"))
    config = native[0]
    meta = metadata(pod)
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    marker = annotations.get(config.annotation) if annotations else None
    translation, spec_ops = _translate(memo, part, part_key, marker, native)
    # A container left alone for GPU sharing gets the short form of its reason (the long one
    # does not fit in a warning).
    sharing = {shared.problem: shared for shared in translation.shared}
    warnings = [
        short_warning(sharing[p].reason, prefix=f"not translated: {sharing[p].container}:")
        if p in sharing
        else _problem_warning(p)
        for p in translation.problems
    ]
    if not translation.changed:
        return Verdict.allow(*warnings, outcome="skipped")
    bounds = bound_problems(translation, cluster, config)
    if bounds:
        return Verdict.allow(*warnings, *(_problem_warning(p) for p in bounds))
    templates, spec, renamed = free_template_names(translation, namespace, cluster)
    if templates is None:
        return Verdict.allow(*warnings, _problem_warning(renamed))
    if renamed:
        spec_ops = diff(part, spec, "/spec")
    record = templates_annotation(templates)
    if len(record) > MAX_TEMPLATES_ANNOTATION_BYTES:
        return Verdict.allow(*warnings, _problem_warning(f"the claim templates need {len(record)} bytes of annotation"))
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
    if any(cluster.get("ResourceClaimTemplate", str(t["metadata"]["name"]), namespace) is None for t in templates):
        # The controller creates what the view does not show; until it has (with the spec asked
        # for), the pod is not scheduled (see CLAIM_TEMPLATES_GATE).
        spec_ops = [*spec_ops, *gate_ops(pod["spec"])]
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    new_meta = {
        **meta,
        "labels": {**(labels or {}), TRANSLATED_LABEL: "true"},
        "annotations": {**(annotations or {}), **translation.annotations, TEMPLATES_ANNOTATION: record},
    }
    # The metadata diffed as a member of the pod, so a pod without metadata gets it added whole;
    # the members the translation leaves are the same objects on both sides, skipped at once.
    ops = diff({"metadata": pod["metadata"]} if "metadata" in pod else {}, {"metadata": new_meta}) + spec_ops
    if namespace:  # the shared translation's templates name none
        templates = [{**t, "metadata": {**t["metadata"], "namespace": namespace}} for t in templates]
    # creates: what the controller provisions once the pod exists (admit_request empties it for a
    # dryRun review: that pod never exists).
    return Verdict(patch=Patch(tuple(ops)), creates=templates, warnings=warnings, outcome="mutated")


# ----------------------------------------------------------------------------- bounds and names


def free_template_names(
    translation: Translation, namespace: str, cluster: ClusterState
) -> tuple[list[dict[str, Any]] | None, dict[str, Any], str]:
    """The templates under names not taken by another spec, the translated spec (or part of one)
    that refers to them, and whether any was renamed (``templates`` None: no free name; the third
    item says why)."""
    renames: dict[str, str] = {}
    templates = []
    for template in translation.templates:
        name = str(template["metadata"]["name"])
        live = cluster.get("ResourceClaimTemplate", name, namespace)
        if live is None or live.get("spec") == template["spec"]:
            templates.append(template)  # the usual case: free, or the same content (shared)
            continue
        for candidate in template_name_candidates(name, template["spec"]):
            live = cluster.get("ResourceClaimTemplate", candidate, namespace)
            if live is None or live.get("spec") == template["spec"]:
                break
        else:
            return None, translation.pod_spec, f"template names {name} and its alternatives are taken by other specs"
        if candidate != name:
            renames[name] = candidate
            template = {**template, "metadata": {**template["metadata"], "name": candidate}}
        templates.append(template)
    if not renames:
        return templates, translation.pod_spec, ""
    spec = dict(translation.pod_spec)
    spec["resourceClaims"] = [
        {
            **rc,
            "resourceClaimTemplateName": renames.get(
                rc.get("resourceClaimTemplateName"), rc.get("resourceClaimTemplateName")
            ),
        }
        for rc in spec.get("resourceClaims") or []
    ]
    return templates, spec, "renamed"


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
