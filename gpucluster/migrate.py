"""Rewrite manifests that request GPUs through extended resources into DRA form.

The core of ``gpucluster migrate``: a pure function of a manifest's text (:func:`migrate_text`),
returning the migrated text and a report. The translation is :mod:`gpucluster.translate`, the
webhook's own, so a migrated manifest runs exactly the pods the webhook would have made of it.

Where pod templates are found
-----------------------------
Structurally, in every object of the stream (documents, and the items of a ``List``):

* a ``Pod`` (``apiVersion: v1``): the object itself;
* anywhere below the top of an object, a mapping shaped like a PodTemplateSpec,
  ``{metadata?, spec: {containers: [...]}}``: Deployments, StatefulSets, DaemonSets, ReplicaSets,
  Jobs (``spec.template``), CronJobs (``spec.jobTemplate.spec.template``), ``PodTemplate``, and
  custom resources that embed pod templates (Kubeflow ``PyTorchJob``/``MPIJob``/``TFJob`` replica
  specs, JobSet, LeaderWorkerSet, RayCluster ...). The top level of other kinds is never taken
  for a pod template (a KServe ``ServingRuntime`` has ``spec.containers`` but no pod spec);
* Argo Workflows (``Workflow``, ``WorkflowTemplate``, ``ClusterWorkflowTemplate``,
  ``CronWorkflow``): each entry of ``templates`` is one pod, made of ``container`` or ``script``
  (the ``main`` container), ``containerSet.containers``, ``sidecars`` and ``initContainers``.
  Argo templates have no ``resourceClaims`` field, so the pod's claims go into the template's
  ``podSpecPatch`` (a strategic merge patch Argo applies to the pod spec; an existing patch,
  JSON or YAML, is extended), the containers' ``resources.claims`` stay on the containers, and the
  annotation goes to the template's ``metadata.annotations``. A template whose ``podSpecPatch``
  itself sets GPU requests (typically a count from a parameter) is not migrated: a count known
  only at submit time cannot be a ResourceClaimTemplate;
* KServe ``InferenceService``: ``spec.predictor``, ``spec.transformer`` and ``spec.explainer``
  inline a pod spec; the framework container (``model``, ``pytorch``, ``triton`` ...; named
  ``kserve-container`` by KServe) comes first, then ``containers``; claims go to the component's
  ``resourceClaims``, the annotation to the component's ``annotations`` (KServe copies both to the
  pods). ``predictor.workerSpec`` (multi-node) is its own inline pod spec;
* KServe ``LLMInferenceService``: ``spec.template`` and ``spec.worker`` (decode pods) and
  ``spec.prefill.template``/``spec.prefill.worker`` are PodSpecs without pod metadata, translated
  in place (the original requests cannot be recorded there).

GPU requests anywhere else (``limits``/``requests`` outside these pod specs, such as a
``ServingRuntime``'s containers or a TrainJob's ``resourcesPerNode``, operators' own GPU fields
such as a SparkApplication's ``spec.executor.gpu`` or a VLLMRuntime's ``gpuType``, and manifests
or patches embedded in strings) are reported as not migrated, with where they are. A manifest embedded in a
string is parsed (YAML or JSON) and judged by what it asks for; text that does not parse
(template syntax) is read as text. Zero counts (``nvidia.com/gpu: 0``) ask for nothing, and
capacity limits (a Karpenter ``NodePool``'s ``spec.limits``) are not requests: neither is reported.

What is left alone
------------------
* what the translation itself refuses (request different from limit, fractional or invalid
  quantities, resources it does not know such as ``nvidia.com/gpu.shared``, a pod already
  translated ...): reported as problems, with the translation's own words;
* a pod template that opts out of translation (``opt_out_label`` set to ``"false"`` in its labels
  or annotations, the webhook's opt-out): reported as a note, not as a problem;
* a pod spec that uses YAML anchors, aliases or merge keys: editing a shared node would change
  every place that refers to it, so it is reported as a problem (expand the aliases first).

What the output looks like
--------------------------
* Each pod spec is translated by :func:`gpucluster.translate.translate_pod_spec`; the annotation
  recording the original requests goes on the pod template's metadata (the pods carry it), never
  on the workload's own metadata.
* The ResourceClaimTemplates the pods need are added as new documents, once per output file and
  namespace (their names derive from their content, so equal requests share one), each placed
  immediately *before* the first document that uses it: ``kubectl apply -f`` creates objects in
  file order, so the template exists when the first pod asks for it. A template already in the
  input is not added again. Templates get the namespace of the workload; a workload without
  ``metadata.namespace`` gets templates without one, which ``kubectl apply`` puts in the same
  namespace as the workload (the context's, or ``-n``).
* A cluster-scoped object whose pod templates run in the namespaces of the objects that use it
  (Kubeflow ``ClusterTrainingRuntime``, Argo ``ClusterWorkflowTemplate``, any ``Cluster*`` kind
  without a namespace) gets no template documents: its pod templates are labelled and annotated
  the way the webhook marks a translated pod (``TRANSLATED_LABEL``, ``TEMPLATES_ANNOTATION``), so
  the controller creates the templates in each namespace where the pods start; the report names
  each template and its spec for clusters without the controller.
* A container that qualifies its GPU count with GPU-sharing resources (HAMi's
  ``nvidia.com/gpumem``, ``nvidia.com/gpucores`` ...) is left unchanged and reported: a whole-GPU
  claim beside the qualifiers would split one request across two allocators.
* YAML stays YAML, multi-document streams keep their order, and only documents that change are
  re-serialised (ruamel.yaml round trip, comments and quoting kept, indentation detected per
  document); every other document, separator and comment is copied byte for byte. JSON input
  gives JSON output; a single JSON object that needs templates becomes a ``v1`` ``List`` (templates
  first), a JSON ``List`` gets them as items.
* Migrating twice is migrating once: a migrated pod spec asks for no extended resource any more,
  and an input that needs nothing comes back as the very same text.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, MutableMapping, MutableSequence
from dataclasses import dataclass, field
from datetime import date, datetime
from difflib import SequenceMatcher
from itertools import pairwise
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.scalarstring import LiteralScalarString
from ruamel.yaml.tokens import CommentToken

from gpucluster.errors import InputError
from gpucluster.manifests import check_json_keys, looks_like_json
from gpucluster.translate import (
    DEFAULT_CONFIG,
    PROVISIONED_LABEL,
    TEMPLATES_ANNOTATION,
    TRANSLATED_LABEL,
    Translation,
    TranslationConfig,
    parse_quantity,
    templates_annotation,
    translate_pod_spec,
)

__all__ = ["KSERVE_FRAMEWORKS", "MigrateResult", "Workload", "format_path", "migrate_text"]

Path = tuple[str | int, ...]

ARGO_KINDS = frozenset({"Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"})
KSERVE_COMPONENTS = ("predictor", "transformer", "explainer")
# PredictorSpec/ExplainerSpec "one-of" implementations: each inlines a corev1.Container.
KSERVE_FRAMEWORKS = (
    "model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface",
    "pmml", "lightgbm", "paddle", "alibi", "art",
)  # fmt: skip
KSERVE_CONTAINER = "kserve-container"
LLM_POD_SPECS = ("template", "worker")  # LLMInferenceService (and its prefill): PodSpecs
# Cluster-scoped kinds whose pod templates run in other objects' namespaces: who those are.
CLUSTER_SCOPED_USERS = {
    "ClusterTrainingRuntime": "the TrainJobs whose runtimeRef names it",
    "ClusterWorkflowTemplate": "the Workflows that reference it (workflowTemplateRef, templateRef with clusterScope)",
}
ARGO_MAIN = "main"

_MENTIONS_GPU = re.compile(r"nvidia\.com/(?:gpu|mig-)")
# A GPU count as a key of embedded text that does not parse as YAML (template syntax); the value
# may be a parameter ("{{inputs.parameters.gpus}}"), so anything but a zero follows the colon.
# ``nvidia.com/gpu.product:`` (a node label) does not match.
_EMBEDDED_GPU = re.compile(
    r"nvidia\.com/(?:gpu|mig-[\w.+-]+)[\"']?\s*:[ \t]*(?![\"']?[+]?0+(?:\.0*)?[\"']?[ \t]*(?:[,}#\r\n]|$))[^\s,}]"
)
# Capacity limits, not requests: (API group, kind) -> path of a ``limits`` mapping of GPU totals.
CAPACITY_LIMITS: dict[tuple[str, str], Path] = {
    ("karpenter.sh", "NodePool"): ("spec", "limits"),
}
VLLM_PRODUCTION_STACK = "production-stack.vllm.ai"
# Operators whose own DRA field a manual migration can use: (API group, kind) -> field.
DRA_FIELDS: dict[tuple[str, str], str] = {
    ("apps.nvidia.com", "NIMService"): "spec.draResources (resourceClaimTemplateName)",
}
# KubeAI's resource profiles ("nvidia-gpu-l4:1"): its default NVIDIA profiles ask for nvidia.com/gpu.
_KUBEAI_NVIDIA_PROFILE = re.compile(r"^(nvidia-[\w.-]*):(\d+)$")
# The translation's words for a container whose GPU resources are all zero: nothing to migrate.
_ZERO_PROBLEM = "asks for no device; container left unchanged"


@dataclass
class Workload:
    """One pod template of a manifest, and what migrate did to it."""

    source: str
    document: int  # 1-based, in the input stream
    obj: str  # "Deployment ml/trainer"
    where: str  # path of the pod template in the object: "spec.template", "spec.templates[1]" ...
    devices: dict[str, int] = field(default_factory=dict)  # DeviceClass -> devices per pod
    changes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    templates: list[str] = field(default_factory=list)  # ResourceClaimTemplates the pods use
    migrated: bool = False

    @property
    def gpus(self) -> int:
        return sum(self.devices.values())

    @property
    def label(self) -> str:
        return f"{self.obj} ({self.where})" if self.where else self.obj


@dataclass
class MigrateResult:
    """The migrated text of one input and what happened to it."""

    source: str
    text: str
    changed: bool
    workloads: list[Workload] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # "namespace/name" (or "name") of added templates
    unhandled: list[str] = field(default_factory=list)  # GPU requests outside rewritable pod specs

    @property
    def migrated(self) -> list[Workload]:
        return [w for w in self.workloads if w.migrated]

    @property
    def problems(self) -> list[tuple[Workload, str]]:
        return [(w, p) for w in self.workloads for p in w.problems]

    @property
    def needs_migration(self) -> bool:
        """Anything left asking for GPUs through extended resources (what ``--check`` fails on)."""
        return self.changed or bool(self.problems) or bool(self.unhandled)


# ----------------------------------------------------------------------------- plain values


def plain(value: Any) -> Any:
    """A ruamel.yaml value as plain JSON data (dict, list, str, int, float, bool, None)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _fresh(value: Any, like: Any) -> Any:
    """``value`` (plain) as a node for the tree ``like`` belongs to (round-trip or plain)."""
    if not isinstance(like, CommentedMap | CommentedSeq):
        return plain(value)
    if isinstance(value, Mapping):
        out = CommentedMap()
        for k, v in value.items():
            out[k] = _fresh(v, like)
        return out
    if isinstance(value, list):
        return CommentedSeq([_fresh(v, like) for v in value])
    return value


def _mapping(value: Any) -> MutableMapping[str, Any] | None:
    return value if isinstance(value, MutableMapping) else None


def _seq(value: Any) -> MutableSequence[Any] | None:
    return value if isinstance(value, MutableSequence) and not isinstance(value, str) else None


def format_path(path: Path) -> str:
    """``spec.templates[0].container``: a path in an object, as the report writes it."""
    return _fmt(path)


def _fmt(path: Path) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][\w-]*", part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


# ----------------------------------------------------------------------------- comment-aware edits
#
# ruamel.yaml keeps a comment that follows an entry (and the blank lines after it) on the deepest
# last scalar before it. Editing a tree naively moves such lines: a blank line that separated two
# blocks ends up inside the first one. The helpers below move the "lines after" of a block to
# wherever the block ends after the edit.


def _is_flow(node: Any) -> bool:
    fa = getattr(node, "fa", None)
    return bool(fa is not None and fa.flow_style())


def _last(node: Any) -> Any:
    return next(reversed(node)) if isinstance(node, Mapping) else len(node) - 1


def _deepest(node: Any, key: Any) -> tuple[Any, Any]:
    while True:
        value = node[key]
        if isinstance(value, CommentedMap | CommentedSeq) and len(value) and not _is_flow(value):
            node, key = value, _last(value)
        else:
            return node, key


def _post_token(node: Any, key: Any, *, create: bool = False) -> CommentToken | None:
    if not isinstance(node, CommentedMap | CommentedSeq):
        return None
    slot = 2 if isinstance(node, CommentedMap) else 0
    entry = node.ca.items.get(key)
    if entry is None:
        if not create:
            return None
        entry = [None, None, None, None] if isinstance(node, CommentedMap) else [None, None]
        node.ca.items[key] = entry
    token = entry[slot]
    if token is None and create:
        token = CommentToken("\n", CommentMark(0), None)
        entry[slot] = token
    return token if isinstance(token, CommentToken) else None


def _take_following(node: Any, key: Any) -> str:
    """Remove and return the lines after the entry ``key`` (its end-of-line comment stays)."""
    deep, deep_key = _deepest(node, key)
    token = _post_token(deep, deep_key)
    if token is None or not isinstance(token.value, str):
        return ""
    head, sep, rest = token.value.partition("\n")
    if not rest:
        return ""
    token.value = head + sep
    return rest


def _give_following(node: Any, key: Any, text: str) -> None:
    deep, deep_key = _deepest(node, key)
    token = _post_token(deep, deep_key, create=True)
    if token is None:
        return
    value = token.value if isinstance(token.value, str) else "\n"
    token.value = (value if value.endswith("\n") else value + "\n") + text


def _take_tail(node: Any) -> str:
    if not isinstance(node, CommentedMap | CommentedSeq) or not len(node) or _is_flow(node):
        return ""
    return _take_following(node, _last(node))


def _give_tail(node: Any, text: str) -> None:
    if text and isinstance(node, CommentedMap | CommentedSeq) and len(node) and not _is_flow(node):
        _give_following(node, _last(node), text)


def _remove(node: Any, key: Any) -> None:
    keys = list(node.keys()) if isinstance(node, Mapping) else list(range(len(node)))
    position = keys.index(key)
    following = _take_following(node, key) if position < len(keys) - 1 else ""
    del node[key]
    if following and position > 0:
        _give_following(node, keys[position - 1], following)


def sync(node: Any, new: Any) -> None:
    """Edit ``node`` (a mapping or list, round-trip or plain) in place until it equals ``new``.

    Entries that stay equal are not touched (their comments and formatting stay), removed keys
    go, new keys are appended; the lines after a block stay after it.
    """
    if plain(node) == new:
        return
    tail = _take_tail(node)
    if isinstance(node, MutableMapping) and isinstance(new, Mapping):
        for key in [k for k in node if k not in new]:
            _remove(node, key)
        for key, value in new.items():
            if key in node:
                _sync_entry(node, key, value)
            else:
                node[key] = _fresh(value, node)
    elif isinstance(node, MutableSequence) and isinstance(new, list):
        for index in range(min(len(node), len(new))):
            _sync_entry(node, index, new[index])
        while len(node) > len(new):
            _remove(node, len(node) - 1)
        for value in new[len(node) :]:
            node.append(_fresh(value, node))
    else:  # pragma: no cover - callers hand matching kinds
        raise TypeError(f"cannot sync {type(node).__name__} with {type(new).__name__}")
    _give_tail(node, tail)


def _sync_entry(node: Any, key: Any, value: Any) -> None:
    current = node[key]
    if plain(current) == value:
        return
    if (isinstance(current, MutableMapping) and isinstance(value, Mapping)) or (
        _seq(current) is not None and isinstance(value, list)
    ):
        sync(current, value)
    else:
        node[key] = _fresh(value, node)


def _insert(mapping: MutableMapping[str, Any], key: str, value: Any, *, before: str) -> None:
    """Add ``key`` right before the existing key ``before``."""
    keys = list(mapping)
    position = keys.index(before)
    if isinstance(mapping, CommentedMap):
        mapping.insert(position, key, value)
        return
    rest = [(k, mapping.pop(k)) for k in keys[position:]]
    mapping[key] = value
    mapping.update(rest)


def _set_field(parent: MutableMapping[str, Any], key: str, value: Any, *, before: str | None = None) -> None:
    """Set ``parent[key]`` to the plain ``value``: synced when present, else added before ``before``
    (or at the end, keeping the lines after the block after it)."""
    if key in parent:
        _sync_entry(parent, key, value)
    elif before is not None and before in parent:
        _insert(parent, key, _fresh(value, parent), before=before)
    else:
        tail = _take_tail(parent)
        parent[key] = _fresh(value, parent)
        _give_tail(parent, tail)


def _merge_annotations(holder: MutableMapping[str, Any], annotations: Mapping[str, str]) -> None:
    """Add ``annotations`` to ``holder["annotations"]`` (created when missing)."""
    current = _mapping(holder.get("annotations"))
    if current is None:
        _set_field(holder, "annotations", dict(annotations))
    else:
        sync(current, {**plain(current), **annotations})


def _annotate_template(
    holder: MutableMapping[str, Any],
    annotations: Mapping[str, str],
    *,
    before: str,
    labels: Mapping[str, str] | None = None,
) -> None:
    """Add ``annotations`` (and ``labels``) to ``holder["metadata"]`` (a pod template's metadata)."""
    meta = _mapping(holder.get("metadata"))
    if meta is None:
        _set_field(
            holder,
            "metadata",
            {**({"labels": dict(labels)} if labels else {}), "annotations": dict(annotations)},
            before=before,
        )
        return
    if labels:
        current = _mapping(meta.get("labels"))
        if current is None:
            _set_field(meta, "labels", dict(labels), before="annotations" if "annotations" in meta else None)
        else:
            sync(current, {**plain(current), **labels})
    _merge_annotations(meta, annotations)


# ----------------------------------------------------------------------------- per object


@dataclass
class _Context:
    source: str
    document: int
    config: TranslationConfig
    opt_out: str | None = None
    obj: str = ""
    namespace: str | None = None
    workloads: list[Workload] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)
    unhandled: list[str] = field(default_factory=list)
    covered: list[Path] = field(default_factory=list)
    cluster_scoped: bool = False
    root: Mapping[str, Any] = field(default_factory=dict)  # the object being migrated

    @property
    def labels(self) -> dict[str, str] | None:
        """Labels the pod templates of the current object get besides the translation's annotations."""
        return {TRANSLATED_LABEL: "true"} if self.cluster_scoped else None

    reported: set[Path] = field(default_factory=set)  # strings already reported as problems


def _identity(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    meta = _mapping(obj.get("metadata")) or {}
    kind = str(obj.get("kind") or "object")
    name = meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else "<unnamed>")
    namespace = meta.get("namespace")
    ns = str(namespace) if isinstance(namespace, str) and namespace else None
    return (f"{kind} {ns}/{name}" if ns else f"{kind} {name}"), ns


def _opted_out(ctx: _Context, *holders: tuple[str, Mapping[str, Any] | None]) -> str | None:
    """Where a pod template opts out of translation (label or annotation set to "false"), as the webhook reads it."""
    if ctx.opt_out is None:
        return None
    for what, holder in holders:
        for field_name in ("labels", "annotations"):
            values = _mapping((holder or {}).get(field_name)) or {}
            if str(values.get(ctx.opt_out, "")).lower() == "false":
                return f"{what} {field_name[:-1]}"
    return None


def _annotations_of(holder: Mapping[str, Any] | None) -> dict[str, str]:
    values = _mapping((holder or {}).get("annotations"))
    return {str(k): str(v) for k, v in (values or {}).items()}


def _anchored(node: Any) -> bool:
    """Whether ``node`` itself is shared (an anchor) or merges another node."""
    anchor = getattr(node, "anchor", None)
    return bool(getattr(anchor, "value", None)) or bool(isinstance(node, CommentedMap) and node.merge)


def _uses_aliases(*nodes: Any) -> bool:
    """Whether YAML anchors, aliases or merge keys are used inside ``nodes`` (editing a shared node
    would change every place that refers to it)."""
    seen: set[int] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if not isinstance(node, CommentedMap | CommentedSeq):
            continue
        if id(node) in seen or _anchored(node):
            return True
        seen.add(id(node))
        stack.extend(node.values() if isinstance(node, CommentedMap) else node)
    return False


def _translate(
    ctx: _Context,
    where: Path,
    pod_spec: dict[str, Any],
    annotations: Mapping[str, str],
    apply: Callable[[Translation], None],
    opted_out: str | None = None,
    aliased: bool = False,
) -> Workload | None:
    """Translate one (possibly synthesised) pod spec; record it when it asks for GPUs."""
    if opted_out:
        if _requests_gpus(pod_spec, ctx.config):
            note = f"opted out ({opted_out} {ctx.opt_out}=false); left as it is"
            ctx.workloads.append(Workload(ctx.source, ctx.document, ctx.obj, _fmt(where), notes=[note]))
        return None
    # Containers whose GPU count GPU-sharing resources qualify are left alone by the translation
    # itself (gpucluster.translate decides it, for the webhook too); their reasons come first.
    translation = translate_pod_spec(
        pod_spec, namespace=ctx.namespace, existing_annotations=annotations, config=ctx.config
    )
    asked = [p for p in translation.problems if not p.endswith(_ZERO_PROBLEM)]  # zero asks for nothing
    if not translation.changed and not asked:
        return None
    sharing = [shared.problem for shared in translation.shared]
    problems = [*sharing, *(p for p in asked if p not in sharing)]
    workload = Workload(ctx.source, ctx.document, ctx.obj, _fmt(where), problems=problems)
    ctx.workloads.append(workload)
    if translation.changed and aliased:
        workload.problems.append("uses YAML anchors, aliases or merge keys; expand them, then migrate")
    elif translation.changed:
        if ctx.cluster_scoped:
            # The pods run in the namespaces of whoever uses this object: the controller creates
            # the templates there, from the record the webhook would have written.
            translation.annotations[TEMPLATES_ANNOTATION] = templates_annotation(translation.templates)
        apply(translation)
        workload.migrated = True
        workload.devices = dict(translation.devices)
        workload.changes = list(translation.changes)
        workload.templates = [str(t["metadata"]["name"]) for t in translation.templates]
        if ctx.cluster_scoped:
            workload.notes.append(_cluster_scoped_note(ctx, translation.templates))
        else:
            ctx.templates.extend(translation.templates)
    return workload


def _cluster_scoped_note(ctx: _Context, templates: list[dict[str, Any]]) -> str:
    kind = ctx.obj.split(" ", 1)[0]
    users = CLUSTER_SCOPED_USERS.get(kind, f"the namespaced objects that use this {kind}")
    what = "; ".join(
        f"ResourceClaimTemplate {t['metadata']['name']} with spec {json.dumps(t['spec'], sort_keys=True)}"
        for t in templates
    )
    return (
        f"cluster-scoped: its pods run in the namespaces of {users}, so no ResourceClaimTemplate is added "
        f"here; the pod template is labelled {TRANSLATED_LABEL}=true and records the templates in "
        f"{TEMPLATES_ANNOTATION}, so the gpucluster controller creates them in each namespace where its pods "
        f"start. Without the controller, create in every such namespace (kubectl apply -n NAMESPACE): {what}"
    )


def _pod_template(ctx: _Context, holder: MutableMapping[str, Any], where: Path) -> None:
    """``{metadata?, spec: PodSpec}``: the spec is translated as a whole, annotations on metadata."""
    spec = holder["spec"]
    ctx.covered.append((*where, "spec"))
    meta = _mapping(holder.get("metadata"))

    def apply(translation: Translation) -> None:
        sync(spec, translation.pod_spec)
        _annotate_template(holder, translation.annotations, before="spec", labels=ctx.labels)

    aliased = _uses_aliases(spec) or (
        _uses_aliases(meta.get("annotations")) if meta is not None and "annotations" in meta else _anchored(meta)
    )
    _translate(ctx, where, plain(spec), _annotations_of(meta), apply, _opted_out(ctx, ("pod", meta)), aliased)


def _is_pod_template(node: Mapping[str, Any]) -> bool:
    spec = _mapping(node.get("spec"))
    if spec is None:
        return False
    containers = _seq(spec.get("containers"))
    return containers is not None and all(isinstance(c, Mapping) for c in containers)


def _walk_templates(ctx: _Context, node: Any, where: Path) -> None:
    if any(where[: len(c)] == c for c in ctx.covered):
        return
    mapping = _mapping(node)
    if mapping is not None:
        if where and _is_pod_template(mapping):
            _pod_template(ctx, mapping, where)
            return
        for key, value in list(mapping.items()):
            _walk_templates(ctx, value, (*where, str(key)))
        return
    items = _seq(node)
    if items is not None:
        for index, value in enumerate(items):
            _walk_templates(ctx, value, (*where, index))


class _Parts:
    """A pod spec assembled from containers that live in different places of an object."""

    def __init__(self) -> None:
        self.spec: dict[str, Any] = {}
        self.nodes: dict[str, list[tuple[MutableMapping[str, Any], str | None]]] = {}

    def add(self, field_name: str, node: Any, default_name: str | None = None) -> None:
        container = _mapping(node)
        if container is None:
            return
        copy = plain(container)
        injected = None
        if default_name is not None and not copy.get("name"):
            copy["name"] = default_name
            injected = "name"
        self.spec.setdefault(field_name, []).append(copy)
        self.nodes.setdefault(field_name, []).append((container, injected))

    @property
    def empty(self) -> bool:
        return not self.nodes

    def apply(self, translated: Mapping[str, Any]) -> None:
        for field_name, nodes in self.nodes.items():
            for (node, injected), new in zip(nodes, translated[field_name], strict=True):
                value = dict(new)
                if injected:
                    value.pop(injected, None)
                sync(node, value)


def _kserve(ctx: _Context, obj: MutableMapping[str, Any]) -> None:
    spec = _mapping(obj.get("spec"))
    if spec is None:
        return
    for component in KSERVE_COMPONENTS:
        comp = _mapping(spec.get(component))
        if comp is None:
            continue
        where: Path = ("spec", component)
        ctx.covered.append(where)
        parts = _Parts()
        for name in KSERVE_FRAMEWORKS:
            if _mapping(comp.get(name)) is not None:
                parts.add("containers", comp[name], KSERVE_CONTAINER)
        for container in _seq(comp.get("containers")) or []:
            parts.add("containers", container)
        for container in _seq(comp.get("initContainers")) or []:
            parts.add("initContainers", container)
        if not parts.empty:
            pod_spec = dict(parts.spec)
            claims = _seq(comp.get("resourceClaims"))
            if claims is not None:
                pod_spec["resourceClaims"] = plain(claims)

            def apply(translation: Translation, comp: MutableMapping[str, Any] = comp, parts: _Parts = parts) -> None:
                parts.apply(translation.pod_spec)
                _set_field(comp, "resourceClaims", translation.pod_spec["resourceClaims"])
                _merge_annotations(comp, translation.annotations)

            meta = _mapping(obj.get("metadata"))
            annotations = {**_annotations_of(meta), **_annotations_of(comp)}
            opted_out = _opted_out(ctx, ("component", comp), ("InferenceService", meta))
            _translate(ctx, where, pod_spec, annotations, apply, opted_out, _uses_aliases(comp))
        _bare_pod_spec(ctx, comp.get("workerSpec"), (*where, "workerSpec"))


def _bare_pod_spec(ctx: _Context, node: Any, where: Path) -> None:
    """A PodSpec inlined without pod metadata (KServe ``workerSpec``, LLMInferenceService
    ``template``): translated in place; there is nowhere to record the original requests."""
    spec = _mapping(node)
    if spec is None or _seq(spec.get("containers")) is None:
        return
    ctx.covered.append(where)

    def apply(translation: Translation) -> None:
        sync(spec, translation.pod_spec)

    found = _translate(ctx, where, plain(spec), {}, apply, aliased=_uses_aliases(spec))
    if found is not None and found.migrated:
        found.notes.append(f"{where[-1]} has no pod annotations: the original requests are not recorded")


def _llm_inference_service(ctx: _Context, obj: MutableMapping[str, Any]) -> None:
    """KServe LLMInferenceService: ``template`` and ``worker`` (multi-node) are PodSpecs, for the
    decode pods at the top of ``spec`` and for the prefill pods under ``spec.prefill``."""
    spec = _mapping(obj.get("spec"))
    if spec is None:
        return
    for base, holder in ((("spec",), spec), (("spec", "prefill"), _mapping(spec.get("prefill")))):
        for key in LLM_POD_SPECS:
            if holder is not None:
                _bare_pod_spec(ctx, holder.get(key), (*base, key))


def _parse_patch(text: str) -> tuple[Any, str]:
    """An Argo podSpecPatch as data, and its format ("json" or "yaml"); raises ValueError."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            return json.loads(stripped), "json"
        except json.JSONDecodeError:
            pass
    try:
        return YAML(typ="rt").load(text), "yaml"
    except YAMLError as exc:
        raise ValueError(str(exc).splitlines()[0] if str(exc) else "invalid YAML") from None


def _dump_patch(data: Any, style: str, original: str) -> str:
    if style == "json":
        return json.dumps(plain(data))
    out = io.StringIO()
    _yaml(_guess_style(original)).dump(data, out)
    return out.getvalue()


def _requests_gpus(spec: Any, config: TranslationConfig) -> list[str]:
    found: list[str] = []
    mapping = _mapping(spec) or {}
    for key in ("initContainers", "containers"):
        for container in _seq(mapping.get(key)) or []:
            resources = _mapping((_mapping(container) or {}).get("resources")) or {}
            for section in ("limits", "requests"):
                found.extend(_gpu_names(_mapping(resources.get(section)), config))
    return sorted(set(found))


def _argo(ctx: _Context, obj: MutableMapping[str, Any]) -> None:
    spec = _mapping(obj.get("spec"))
    base: Path = ("spec",)
    if spec is not None and obj.get("kind") == "CronWorkflow":
        spec, base = _mapping(spec.get("workflowSpec")), ("spec", "workflowSpec")
    if spec is None:
        return
    for index, template in enumerate(_seq(spec.get("templates")) or []):
        tmpl = _mapping(template)
        if tmpl is not None:
            where: Path = (*base, "templates", index)
            ctx.covered.append(where)
            _argo_template(ctx, tmpl, where)


def _argo_template(ctx: _Context, tmpl: MutableMapping[str, Any], where: Path) -> None:
    parts = _Parts()
    for key in ("container", "script"):
        if _mapping(tmpl.get(key)) is not None:
            parts.add("containers", tmpl[key], ARGO_MAIN)
            break
    container_set = _mapping(tmpl.get("containerSet")) or {}
    for container in _seq(container_set.get("containers")) or []:
        parts.add("containers", container)
    for container in _seq(tmpl.get("sidecars")) or []:
        parts.add("containers", container)
    for container in _seq(tmpl.get("initContainers")) or []:
        parts.add("initContainers", container)
    if parts.empty:
        return
    label = f"{_fmt(where)} ({tmpl['name']})" if isinstance(tmpl.get("name"), str) else _fmt(where)
    pod_spec = dict(parts.spec)
    patch_text = tmpl.get("podSpecPatch")
    patch: Any = None
    style = "json"
    blocker: str | None = None
    if isinstance(patch_text, str) and patch_text.strip():
        try:
            patch, style = _parse_patch(patch_text)
        except ValueError as exc:
            blocker = f"podSpecPatch is not JSON or YAML ({exc}); add the claims by hand"
        if blocker is None and not isinstance(patch, MutableMapping):
            blocker = "podSpecPatch is not an object; add the claims by hand"
        if blocker is None and (gpus := _requests_gpus(patch, ctx.config)):
            blocker = (
                f"podSpecPatch sets {', '.join(gpus)} (a count chosen at submit time cannot be a "
                "ResourceClaimTemplate); template left unchanged"
            )
    if blocker is not None:
        ctx.reported.add((*where, "podSpecPatch"))
        if _requests_gpus(pod_spec, ctx.config) or _MENTIONS_GPU.search(str(patch_text)):
            ctx.workloads.append(Workload(ctx.source, ctx.document, ctx.obj, label, problems=[blocker]))
        return
    if isinstance(patch, Mapping) and _seq(patch.get("resourceClaims")) is not None:
        pod_spec["resourceClaims"] = plain(patch["resourceClaims"])

    def apply(translation: Translation) -> None:
        parts.apply(translation.pod_spec)
        new_patch = patch if isinstance(patch, MutableMapping) else {}
        _set_field(new_patch, "resourceClaims", translation.pod_spec["resourceClaims"])
        text = _dump_patch(new_patch, style, patch_text if isinstance(patch_text, str) else "")
        if "podSpecPatch" in tmpl:
            tmpl["podSpecPatch"] = (
                LiteralScalarString(text) if style == "yaml" and isinstance(tmpl, CommentedMap) else text
            )
        else:
            _set_field(tmpl, "podSpecPatch", text)
        body = next((k for k in tmpl if k in ("container", "script", "containerSet")), "container")
        _annotate_template(tmpl, translation.annotations, before=body, labels=ctx.labels)

    meta = _mapping(tmpl.get("metadata"))
    opted_out = _opted_out(ctx, ("template", meta))
    workload = _translate(ctx, where, pod_spec, _annotations_of(meta), apply, opted_out, _uses_aliases(tmpl))
    if workload is not None:
        workload.where = label
        if workload.migrated:
            workload.notes.append("claims added to podSpecPatch (Argo templates have no resourceClaims field)")


def _is_zero(value: Any) -> bool:
    """Whether a quantity is zero (``0``, ``"0"``, ``"0.0"`` ...): it asks for nothing."""
    try:
        return parse_quantity(value) == 0
    except ValueError:
        return False


def _is_gpu(name: Any, config: TranslationConfig) -> bool:
    return isinstance(name, str) and (config.watched(name) or config.resolve(name) is not None)


def _gpu_names(values: Mapping[str, Any] | None, config: TranslationConfig) -> list[str]:
    """The GPU resources ``values`` (a ``limits`` or ``requests`` mapping) asks for; zero is not asking."""
    return sorted(str(k) for k, v in (values or {}).items() if _is_gpu(str(k), config) and not _is_zero(v))


def _capacity(obj: Mapping[str, Any], where: Path) -> bool:
    """Whether ``where`` in ``obj`` is a capacity limit (a Karpenter NodePool's ``spec.limits``)."""
    group = str(obj.get("apiVersion") or "").partition("/")[0]
    return CAPACITY_LIMITS.get((group, str(obj.get("kind") or ""))) == where


def _scan_unhandled(ctx: _Context, node: Any, where: Path, *, inside: bool = False) -> None:
    """GPU requests (and manifests embedded in strings) outside the pod specs handled above.

    Inside a pod spec handled above (``inside``) only strings are looked at: its requests were
    migrated or reported by the translation, but text embedded in it (an Argo ``resource.manifest``)
    was not. A container's limits and requests are one entry.
    """
    if where in ctx.reported:
        return
    inside = inside or any(where[: len(c)] == c for c in ctx.covered)
    mapping = _mapping(node)
    if mapping is not None:
        if not inside:
            ctx.unhandled.extend(_operator_fields(ctx, mapping, where))
            found = {
                s: _gpu_names(_mapping(mapping.get(s)), ctx.config)
                for s in ("limits", "requests")
                if not _capacity(ctx.root, (*where, s))
            }
            sections = [s for s, names in found.items() if names]
            if sections:
                names = sorted({n for s in sections for n in found[s]})
                at = _fmt((*where, sections[0])) if len(sections) == 1 else f"{_fmt(where)} (limits and requests)"
                group = str(ctx.root.get("apiVersion") or "").partition("/")[0]
                dra = (
                    DRA_FIELDS.get((group, str(ctx.root.get("kind") or ""))) if where == ("spec", "resources") else None
                )
                hint = f"; the operator's DRA form is {dra}: migrate it by hand" if dra else ""
                ctx.unhandled.append(
                    f"{ctx.obj} {at}: {', '.join(names)} outside a pod template gpucluster can rewrite; "
                    f"left as it is{hint}"
                )
        for key, value in mapping.items():
            # Annotations hold copies (last-applied-configuration, ours); status reports, not requests.
            if key != "annotations" and not (key == "status" and not where):
                _scan_unhandled(ctx, value, (*where, str(key)), inside=inside)
        return
    items = _seq(node)
    if items is not None:
        for index, value in enumerate(items):
            _scan_unhandled(ctx, value, (*where, index), inside=inside)
        return
    if isinstance(node, str) and _MENTIONS_GPU.search(node):
        inner = _embedded_requests(node, ctx.config)
        if inner is None:  # not YAML or JSON objects (template syntax): only the text can tell
            if not _EMBEDDED_GPU.search(node):
                return
            inner = []
        elif not inner:  # parsed, and asks for nothing (zero, capacity limits, labels)
            return
        what = "; ".join(inner) if inner else "requests GPUs through extended resources"
        ctx.unhandled.append(
            f"{ctx.obj} {_fmt(where)}: text embedded in a string (a manifest or patch gpucluster does not "
            f"rewrite): {what}; migrate it by hand"
        )


def _operator_fields(ctx: _Context, mapping: Mapping[str, Any], where: Path) -> list[str]:
    """GPU requests in an operator's own fields, from which the operator makes pods that ask for
    the extended resource. None of these operators has a DRA form for them: each is reported,
    with its path, for manual migration (zero counts ask for nothing).

    * ``{name: nvidia.com/gpu, quantity: N}``: the Spark operator's GPUSpec (SparkApplication
      ``spec.driver.gpu``, ``spec.executor.gpu``), and any field of that shape;
    * ``{gpuType: nvidia.com/gpu, gpu: N}``: the vLLM production stack's VLLMRuntime
      (``spec.deploymentConfig.resources``, ``sidecarConfig.resources``); its operator asks for
      nvidia.com/gpu when ``gpuType`` is unset, and for nothing when ``gpu`` is;
    * KubeAI ``Model`` ``spec.resourceProfile: nvidia-...:N``: KubeAI's NVIDIA profiles;
    * ``{resourceType|type: nvidia.com/gpu, resourceCount|count: N}``: an accelerator request (a
      Kubeflow pipeline's executor); profiles and limits with other counts are not requests;
    * SparkApplication ``sparkConf`` ``spark.<role>.resource.<name>.amount`` with the vendor
      ``nvidia.com``, unless the role's ``gpu`` field says the same;
    * KAITO ``Workspace`` ``inference.preset`` / ``tuning.preset``: KAITO asks for the preset's GPU
      count on the pods it creates (a ``template`` is a pod template, migrated as such).
    """
    found: list[str] = []
    manual = "the operator adds it to the pods it creates and has no DRA form for it; migrate it by hand"
    name, quantity = mapping.get("name"), mapping.get("quantity")
    if _is_gpu(name, ctx.config) and "quantity" in mapping and not _is_zero(quantity):
        found.append(f"{ctx.obj} {_fmt(where)}: {name} {plain(quantity)} (operator field); {manual}")
    for type_key, count_key in (("resourceType", "resourceCount"), ("type", "count")):
        kind, amount = mapping.get(type_key), mapping.get(count_key)
        if _is_gpu(kind, ctx.config) and count_key in mapping and not _is_zero(amount):
            found.append(
                f"{ctx.obj} {_fmt(where)}: {kind} {plain(amount)} ({type_key}/{count_key}, an accelerator "
                f"request such as a Kubeflow pipeline's); {manual}"
            )
            break
    group = str(ctx.root.get("apiVersion") or "").partition("/")[0]
    if group == "sparkoperator.k8s.io" and where in (("spec",), ("spec", "template")):
        found.extend(_spark_conf(ctx, mapping, where, manual))
    # The production stack asks for ``gpu`` of ``gpuType`` (nvidia.com/gpu when unset), and only
    # when ``gpu`` is set.
    gpu_type, count = mapping.get("gpuType"), mapping.get("gpu")
    asks = count is not None and str(count).strip() != "" and not _is_zero(count)
    if asks and _is_gpu(gpu_type, ctx.config):
        found.append(
            f"{ctx.obj} {_fmt((*where, 'gpuType'))}: {gpu_type}, {_fmt((*where, 'gpu'))}: {plain(count)} "
            f"(operator field); {manual}"
        )
    elif asks and gpu_type is None and group == VLLM_PRODUCTION_STACK and where[-1:] == ("resources",):
        found.append(
            f"{ctx.obj} {_fmt((*where, 'gpu'))}: {plain(count)} (operator field; gpuType unset: nvidia.com/gpu); "
            f"{manual}"
        )
    if not where and group == "kaito.sh" and ctx.root.get("kind") == "Workspace":
        for section in ("inference", "tuning"):
            preset = (_mapping(mapping.get(section)) or {}).get("preset")
            if _mapping(preset) is not None:
                found.append(
                    f"{ctx.obj} {section}.preset: the preset's GPU count of nvidia.com/gpu (nvidia.com/mig-<profile> "
                    f"with resource.partition), chosen by KAITO for resource.instanceType; {manual}"
                )
    profile = mapping.get("resourceProfile")
    if where == ("spec",) and group == "kubeai.org" and isinstance(profile, str):
        match = _KUBEAI_NVIDIA_PROFILE.match(profile.strip())
        if match and int(match.group(2)) > 0:
            found.append(
                f"{ctx.obj} spec.resourceProfile: {profile} (KubeAI's {match.group(1)} profile asks for "
                f"nvidia.com/gpu in its default configuration); {manual}"
            )
    return found


_SPARK_AMOUNT = re.compile(r"^spark\.(driver|executor)\.resource\.([\w-]+)\.amount$")


def _spark_conf(ctx: _Context, spec: Mapping[str, Any], where: Path, manual: str) -> list[str]:
    """Spark's own resource settings (``sparkConf``): ``spark.executor.resource.gpu.amount`` with
    ``spark.executor.resource.gpu.vendor: nvidia.com`` makes Spark ask for ``nvidia.com/gpu`` on
    the executor pods. Not reported again when the role's ``gpu`` field (reported) sets it too."""
    conf = _mapping(spec.get("sparkConf")) or {}
    found: list[str] = []
    for key, amount in conf.items():
        match = _SPARK_AMOUNT.match(str(key))
        if match is None or _is_zero(amount):
            continue
        role, name = match.groups()
        vendor = conf.get(f"spark.{role}.resource.{name}.vendor")
        resource = f"{vendor}/{name}" if isinstance(vendor, str) else None
        gpu_field = _mapping((_mapping(spec.get(role)) or {}).get("gpu")) or {}
        if resource is None or not _is_gpu(resource, ctx.config) or _is_gpu(gpu_field.get("name"), ctx.config):
            continue
        found.append(f"{ctx.obj} {_fmt((*where, 'sparkConf', str(key)))}: {resource} {plain(amount)}; {manual}")
    return found


def _embedded_requests(text: str, config: TranslationConfig) -> list[str] | None:
    """Where the text of an embedded manifest (YAML or JSON, one document or a stream) asks for
    GPUs: ``"Job train spec.template.spec.containers[0].resources: nvidia.com/gpu"``; zero counts
    and capacity limits ask for nothing. ``None`` when it does not parse (template syntax) or holds
    no object (a script, a command line): then only its text can tell."""
    try:
        docs = list(YAML(typ="safe", pure=True).load_all(text))
    except (YAMLError, ValueError, TypeError, RecursionError):
        return None
    if not any(isinstance(doc, Mapping) for doc in docs):
        return None
    found: list[str] = []

    def walk(node: Any, path: Path, obj: str, root: Mapping[str, Any]) -> None:
        if isinstance(node, Mapping):
            names = sorted(
                {
                    n
                    for s in ("limits", "requests")
                    if not _capacity(root, (*path, s))
                    for n in _gpu_names(_mapping(node.get(s)), config)
                }
            )
            if names:
                found.append(f"{obj}{_fmt(path) or '.'}: {', '.join(names)}".strip())
            for key, value in node.items():
                walk(value, (*path, str(key)), obj, root)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, (*path, index), obj, root)

    try:
        for doc in docs:
            if isinstance(doc, Mapping):
                meta = _mapping(doc.get("metadata")) or {}
                name = meta.get("name") or meta.get("generateName") or ""
                obj = " ".join(str(p) for p in (doc.get("kind"), name) if p)
                walk(doc, (), f"{obj} " if obj else "", doc)
    except RecursionError:  # an alias that contains itself, or nesting too deep: read as text
        return None
    return found


def _cluster_scoped(obj: Mapping[str, Any]) -> bool:
    """A cluster-scoped object whose pod templates are used from any namespace (Kubeflow's
    ClusterTrainingRuntime, Argo's ClusterWorkflowTemplate; by convention any ``Cluster*`` kind
    without a namespace)."""
    kind = str(obj.get("kind") or "")
    meta = _mapping(obj.get("metadata")) or {}
    return kind in CLUSTER_SCOPED_USERS or (kind.startswith("Cluster") and not meta.get("namespace"))


def _migrate_object(ctx: _Context, obj: MutableMapping[str, Any]) -> None:
    ctx.obj, ctx.namespace = _identity(obj)
    ctx.covered = []
    ctx.cluster_scoped = _cluster_scoped(obj)
    ctx.reported = set()
    ctx.root = obj
    api_version = str(obj.get("apiVersion") or "")
    kind = obj.get("kind")
    if kind == "Pod" and api_version == "v1" and _is_pod_template(obj):
        _pod_template(ctx, obj, ())
        ctx.covered.append(())
    elif kind in ARGO_KINDS and api_version.startswith("argoproj.io/"):
        _argo(ctx, obj)
    elif kind == "InferenceService" and api_version.startswith("serving.kserve.io/"):
        _kserve(ctx, obj)
    elif kind == "LLMInferenceService" and api_version.startswith("serving.kserve.io/"):
        _llm_inference_service(ctx, obj)
    _walk_templates(ctx, obj, ())
    _scan_unhandled(ctx, obj, ())


def _objects(doc: Any) -> Iterator[MutableMapping[str, Any]]:
    """The objects of a document: itself, or the items of a ``List``."""
    mapping = _mapping(doc)
    if mapping is None:
        return
    items = _list_items(mapping)
    if items is not None:
        for item in items:
            if _mapping(item) is not None:
                yield item
    else:
        yield mapping


def _list_items(mapping: Mapping[str, Any]) -> MutableSequence[Any] | None:
    """The items of a ``List`` document (kind ``...List`` with a list of items), else None."""
    kind = mapping.get("kind")
    items = _seq(mapping.get("items"))
    return items if isinstance(kind, str) and kind.endswith("List") else None


def _asks_for_gpus(value: Any) -> bool:
    """Whether ``value`` holds a mapping key that is a GPU resource (``nvidia.com/gpu``,
    ``nvidia.com/mig-...``): what a request or limit is keyed by, not a label such as
    ``nvidia.com/gpu.product`` or a comment."""
    stack = [value]
    while stack:
        item = stack.pop()
        if (mapping := _mapping(item)) is not None:
            for key, child in mapping.items():
                if isinstance(key, str) and (key == "nvidia.com/gpu" or key.startswith("nvidia.com/mig-")):
                    return True
                stack.append(child)
        elif (sequence := _seq(item)) is not None:
            stack.extend(sequence)
    return False


def _check_objects(doc: Any, source: str, document: int) -> None:
    """Refuse a document that is not an object, or a ``List`` with an item that is not, when it
    holds a GPU resource key: passed over, its GPU requests would go unreported (kubectl and the
    other commands refuse such documents). Without one it is left alone, as any other YAML a
    manifest tree may hold (an Ansible playbook is a list)."""
    mapping = _mapping(doc)
    if mapping is None:
        what = f"is a {'list' if _seq(doc) is not None else 'scalar'}, expected a Kubernetes object"
    else:
        items = _list_items(mapping) or ()
        position = next((i for i, item in enumerate(items) if _mapping(item) is None), None)
        if position is None:
            return
        what = f"({mapping['kind']}): items[{position}] is not an object"
    if _asks_for_gpus(doc):
        raise InputError(f"{source}: document {document} {what} (it holds a GPU resource request)")


def _template_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = _mapping(obj.get("metadata")) or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _template_label(key: tuple[str, str]) -> str:
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


# ----------------------------------------------------------------------------- YAML streams


@dataclass(frozen=True)
class _Style:
    mapping: int = 2
    offset: int = 0
    null: str = ""  # how the text spells null: "" (an empty value), "null" or "~"

    @property
    def sequence(self) -> int:
        return self.offset + 2


class _NullRepresenter(RoundTripRepresenter):
    """Writes null as ``null`` (kubectl's ``creationTimestamp: null``) instead of an empty value."""

    null_text = "null"

    def represent_none(self, data: Any) -> ScalarNode:
        return self.represent_scalar("tag:yaml.org,2002:null", self.null_text)


class _TildeRepresenter(_NullRepresenter):
    null_text = "~"


_NullRepresenter.add_representer(type(None), _NullRepresenter.represent_none)
_TildeRepresenter.add_representer(type(None), _TildeRepresenter.represent_none)


def _yaml(style: _Style) -> YAML:
    yaml = YAML(typ="rt")
    if style.null == "null":
        yaml.Representer = _NullRepresenter
    elif style.null == "~":
        yaml.Representer = _TildeRepresenter
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.default_flow_style = False
    yaml.indent(mapping=style.mapping, sequence=style.sequence, offset=style.offset)
    return yaml


_NULL = re.compile(r"(?m)(?::|^\s*-)[ \t]+(null|Null|NULL|~)[ \t]*(?:#.*)?$")
_CONTENT = re.compile(r"^(\s*)(-\s+)?(\S.*)$")


def _guess_style(text: str) -> _Style:
    """The mapping indent and sequence dash offset a YAML text is written with."""
    steps: Counter[int] = Counter()
    offsets: Counter[int] = Counter()
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    for line, following in pairwise(lines):
        match, after = _CONTENT.match(line), _CONTENT.match(following)
        if match is None or after is None or not re.search(r":\s*(#.*)?$", line) or "{" in line or "[" in line:
            continue
        key_col = len(match.group(1)) + len(match.group(2) or "")
        col = len(after.group(1))
        if after.group(2):
            if col >= key_col:
                offsets[col - key_col] += 1
        elif col > key_col:
            steps[col - key_col] += 1
    mapping = steps.most_common(1)[0][0] if steps else 2
    offset = offsets.most_common(1)[0][0] if offsets else 0
    null = _NULL.search(text)
    return _Style(mapping=mapping, offset=offset, null="~" if null and null.group(1) == "~" else "null" if null else "")


@dataclass
class _Chunk:
    """One document of a stream, as text: separator line, body, trailing comment/blank lines."""

    prefix: str
    body: str
    trailer: str
    line: int  # 0-based line of the body in the whole text
    explicit: bool = False  # the body itself starts with "---" (a separator with content)

    @property
    def text(self) -> str:
        return self.prefix + self.body + self.trailer


_SEPARATOR = re.compile(r"^---(?:[ \t]|$)")
_BARE_SEPARATOR = re.compile(r"^---[ \t]*(?:#.*)?$")
_TRAILING = re.compile(r"^\s*(?:#.*)?$|^\.\.\.(?:\s.*)?$|^%")  # blank, comment, end marker, directive


def _split(text: str) -> list[_Chunk]:
    lines = text.splitlines(keepends=True)
    starts = sorted({0, *(i for i, line in enumerate(lines) if _SEPARATOR.match(line))})
    chunks: list[_Chunk] = []
    for start, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        part = lines[start:end]
        prefix = ""
        explicit = False
        body_start = start
        if part and _SEPARATOR.match(part[0]):
            if _BARE_SEPARATOR.match(part[0].rstrip("\r\n")):
                prefix, part, body_start = part[0], part[1:], start + 1
            else:
                explicit = True
        cut = len(part)
        while cut > 0 and _TRAILING.match(part[cut - 1].rstrip("\r\n")):
            cut -= 1
        chunks.append(_Chunk(prefix, "".join(part[:cut]), "".join(part[cut:]), body_start, explicit))
    return [c for c in chunks if c.text] or [_Chunk("", "", "", 0)]


def _yaml_error(source: str, exc: YAMLError, line_offset: int) -> InputError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f"{source}:{line_offset + mark.line + 1}:{mark.column + 1}" if mark is not None else source
    return InputError(f"{where}: invalid YAML: {problem}")


def _dump(data: Any, style: _Style, *, explicit: bool = False) -> str:
    yaml = _yaml(style)
    yaml.explicit_start = explicit
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _migrate_yaml(text: str, source: str, config: TranslationConfig, opt_out: str | None) -> MigrateResult:
    chunks = _split(text)
    parsed: list[Any] = []
    for chunk in chunks:
        if not chunk.body.strip():
            parsed.append(None)
            continue
        try:
            parsed.append(_yaml(_Style()).load(chunk.body))
        except YAMLError as exc:
            raise _yaml_error(source, exc, chunk.line) from None
        except RecursionError:
            raise InputError(f"{source}:{chunk.line + 1}: invalid YAML: nested too deeply") from None
        except ValueError as exc:  # a value ruamel.yaml cannot construct (a timestamp such as 2001-13-45)
            raise InputError(
                f"{source}:{chunk.line + 1}: invalid YAML (in the document starting here): {exc}"
            ) from None
    for document, doc in enumerate((d for d in parsed if d is not None), 1):
        _check_objects(doc, source, document)
    present = {
        _template_key(obj) for doc in parsed for obj in _objects(doc) if obj.get("kind") == "ResourceClaimTemplate"
    }
    result = MigrateResult(source, text, changed=False)
    out: list[str] = []
    document = 0
    for chunk, doc in zip(chunks, parsed, strict=True):
        if doc is None:
            out.append(chunk.text)
            continue
        document += 1
        ctx = _Context(source, document, config, opt_out)
        style = _guess_style(chunk.body)
        before = plain(doc)
        # Only a document that names a GPU resource can change; its dump before the edit lets the
        # edited dump be mapped back onto the original lines.
        before_dump = _dump(doc, style, explicit=chunk.explicit) if _MENTIONS_GPU.search(chunk.body) else None
        for obj in _objects(doc):
            _migrate_object(ctx, obj)
        result.workloads.extend(ctx.workloads)
        result.unhandled.extend(ctx.unhandled)
        new_templates = _new_templates(ctx.templates, present, result)
        if new_templates:
            if out and not out[-1].endswith("\n"):
                out.append("\n")
            out.extend("---\n" + _dump(_fresh(t, CommentedMap()), style) for t in new_templates)
        if plain(doc) == before:
            body = chunk.body
        else:
            body = _dump(doc, style, explicit=chunk.explicit)
            if before_dump is not None:
                body = _keep_lines(chunk.body, before_dump, body, plain(doc))
            if not chunk.trailer and not chunk.body.endswith("\n"):
                body = body.rstrip("\n")
        prefix = chunk.prefix if chunk.prefix or not new_templates or chunk.explicit else "---\n"
        out.append(prefix + body + chunk.trailer)
    result.text = "".join(out)
    result.changed = result.text != text
    return result


_WORDS = re.compile(r"\s+")
_COMMENT = re.compile(r"^(?P<code>[^#'\"]*(?:(?:'[^']*'|\"(?:[^\"\\]|\\.)*\")[^#'\"]*)*?)(?P<comment>[ \t]+#.*)$")
_CLAIM_LINE = re.compile(r"^\s*-\s+name:\s|\bclaims:\s*[\[{]")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _columns(dumped: str, written: str) -> list[tuple[int, int, bool]]:
    """(column in the dump, shift to the written line, whether a dash is there) of where a line
    starts, and for a sequence entry (``-   name: x``) also of where its content starts: children
    align to that."""
    a, b = re.match(r"^ *- +(?=\S)", dumped), re.match(r"^ *- +(?=\S)", written)
    out = [(_indent(dumped), _indent(written) - _indent(dumped), a is not None)]
    if a and b:
        out.append((a.end(), b.end() - a.end(), False))
    return out


def _shift(enclosing: list[tuple[int, int, bool]], line: str) -> int:
    """The indentation shift of a new dump line: that of the nearest kept line before it at its
    column or left of it. A key is no sibling of a dash at its column (the dump writes sequences
    at their key's column; the original may indent them)."""
    depth = _indent(line)
    dash = line.lstrip().startswith("- ")
    for column, shift, is_dash in reversed(enclosing):
        if column < depth or (column == depth and (dash or not is_dash)):
            return shift
    return 0


def _align(before: list[str], source: list[str]) -> tuple[dict[int, tuple[int, int, int, int]], dict[int, list[str]]]:
    """Dump lines -> original lines, compared without whitespace (ruamel.yaml respaces flow
    collections). One to one where lines are equal; a run of dump lines equal to a run of original
    lines as a whole is one unit (a quoted scalar the original folds over several lines, which the
    dump writes on one): ``line -> (first, end, source first, source end)`` of its unit. Original
    lines the dump lost (whitespace-only lines) go with the dump line before them (-1: the start).
    Runs of as many lines that differ otherwise (an unused anchor the dump drops) pair line by line."""
    units: dict[int, tuple[int, int, int, int]] = {}
    extra: dict[int, list[str]] = {}
    words = [[_WORDS.sub("", x) for x in lines] for lines in (before, source)]
    matcher = SequenceMatcher(None, words[0], words[1], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            for k in range(i2 - i1):
                units[i1 + k] = (i1 + k, i1 + k + 1, j1 + k, j1 + k + 1)
        elif op == "replace" and "".join(words[0][i1:i2]) == "".join(words[1][j1:j2]):
            for k in range(i1, i2):
                units[k] = (i1, i2, j1, j2)
        elif op == "replace" and i2 - i1 == j2 - j1:
            # The same data written differently line by line (an anchor the dump drops, a tag, a
            # quoting style): the original's lines; the read-back check below guards the result.
            for k in range(i2 - i1):
                units[i1 + k] = (i1 + k, i1 + k + 1, j1 + k, j1 + k + 1)
        elif op == "insert" and not "".join(words[1][j1:j2]):
            extra.setdefault(i1 - 1, []).extend(source[j1:j2])
    return units, extra


def _keep_lines(original: str, before_dump: str, after_dump: str, expected: Any) -> str:
    """``after_dump`` with every line the edit did not touch taken from ``original`` byte for byte.

    ruamel.yaml writes one indentation for the whole document; a document that mixes several
    (sequences indented under some keys, not under others) comes back re-indented, and a quoted
    scalar folded over several lines comes back on one. Lines of the dump before the edit are
    matched to the original lines by content (:func:`_align`); lines the edit kept are written as
    they were, new lines are shifted by the indentation difference of the line that encloses them,
    and the trailing comment of a removed GPU line goes to the claim line that replaces it. If the
    result does not read back as the edited document, the plain dump is used.
    """
    source = original.splitlines(keepends=True)
    before = before_dump.splitlines(keepends=True)
    after = after_dump.splitlines(keepends=True)
    units, extra = _align(before, source)
    out: list[str] = list(extra.get(-1, []))
    enclosing: list[tuple[int, int, bool]] = []  # (dump indent, shift, dash) of the kept lines before
    comments: list[str] = []

    def keep(i: int) -> None:
        """Write dump line ``i`` (unchanged by the edit) as the original has it."""
        first, end, j1, j2 = units[i]
        if i != first:
            return
        lines = source[j1:j2]
        enclosing.extend(_columns(before[i], lines[0]))
        out.extend(line if line.endswith("\n") else line + "\n" for line in lines)
        out.extend(extra.get(end - 1, []))

    for op, i1, i2, j1, j2 in SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if op == "equal":
            for i in range(i1, i2):
                unit = units.get(i)
                if unit is not None and unit[0] >= i1 and unit[1] <= i2:
                    keep(i)
                else:
                    enclosing.extend(_columns(before[i], before[i]))
                    out.append(before[i])
            continue
        for i in range(i1, i2):  # removed: keep the comment of a GPU line
            unit = units.get(i)
            line = source[unit[2]] if unit is not None and unit[1] - unit[0] == 1 else before[i]
            match = _COMMENT.match(line.rstrip("\r\n"))
            if match and _MENTIONS_GPU.search(match.group("code")):
                comment = line.rstrip("\r\n")[len(match.group("code").rstrip()) :]
                if comment not in comments:
                    comments.append(comment)
        for j in range(j1, j2):
            line = after[j]
            depth = _indent(line)
            shift = _shift(enclosing, line) if line.strip() else 0
            shifted = " " * max(0, depth + shift) + line[depth:] if shift else line
            enclosing.extend(_columns(line, shifted))
            line = shifted
            if comments and _CLAIM_LINE.search(line) and not _COMMENT.match(line.rstrip("\r\n")):
                end = line[len(line.rstrip("\r\n")) :]
                line = line.rstrip("\r\n") + "".join(comments) + end
                comments = []
            out.append(line)
    text = "".join(out)
    try:
        if plain(_yaml(_Style()).load(text)) == expected:
            return text
    except YAMLError:
        pass
    return after_dump


def _new_templates(
    templates: list[dict[str, Any]], present: set[tuple[str, str]], result: MigrateResult
) -> list[dict[str, Any]]:
    fresh: list[dict[str, Any]] = []
    for template in templates:
        key = _template_key(template)
        if key in present:
            continue
        present.add(key)
        meta = dict(template["metadata"])
        ordered = {k: meta.pop(k) for k in ("name", "namespace") if k in meta}
        # The manifest owns this template, not the controller: "false" also takes over, on
        # kubectl apply, one the controller provisioned for the same pods before migration (the
        # controller then never collects or deletes it).
        meta["labels"] = {**(meta.get("labels") or {}), PROVISIONED_LABEL: "false"}
        fresh.append({**template, "metadata": {**ordered, **meta}})
        result.created.append(_template_label(key))
    return fresh


# ----------------------------------------------------------------------------- JSON


def _json_indent(text: str) -> int | None:
    match = re.search(r"\n([ \t]+)\S", text)
    if match is None:
        return None
    return len(match.group(1).expandtabs(4))


def _json_error(source: str, exc: json.JSONDecodeError) -> InputError:
    return InputError(f"{source}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}")


def _migrate_json(data: Any, text: str, source: str, config: TranslationConfig, opt_out: str | None) -> MigrateResult:
    result = MigrateResult(source, text, changed=False)
    _check_objects(data, source, 1)
    if not isinstance(data, dict):
        return result
    before = plain(data)
    is_list = (
        isinstance(data.get("kind"), str) and data["kind"].endswith("List") and _seq(data.get("items")) is not None
    )
    objects = list(_objects(data))
    present = {_template_key(o) for o in objects if o.get("kind") == "ResourceClaimTemplate"}
    inserts: list[tuple[int, list[dict[str, Any]]]] = []
    for index, obj in enumerate(objects):
        ctx = _Context(source, 1, config, opt_out)
        _migrate_object(ctx, obj)
        result.workloads.extend(ctx.workloads)
        result.unhandled.extend(ctx.unhandled)
        new_templates = _new_templates(ctx.templates, present, result)
        if new_templates:
            inserts.append((index, new_templates))
    if plain(data) == before and not inserts:
        return result
    output: dict[str, Any] = data
    if inserts and is_list:
        items = data["items"]
        for index, templates in reversed(inserts):
            position = next(i for i, item in enumerate(items) if item is objects[index])
            items[position:position] = templates
    elif inserts:
        output = {"apiVersion": "v1", "kind": "List", "items": [*inserts[0][1], data]}
    indent = _json_indent(text)
    dumped = json.dumps(output, indent=indent, ensure_ascii=False)
    result.text = dumped + ("\n" if text.endswith("\n") else "")
    result.changed = result.text != text
    return result


# ----------------------------------------------------------------------------- entry point


def migrate_text(
    text: str,
    source: str = "<stdin>",
    *,
    config: TranslationConfig = DEFAULT_CONFIG,
    opt_out_label: str | None = None,
    json_input: bool | None = None,
) -> MigrateResult:
    """Migrate one manifest text (YAML stream or JSON). Bad input raises InputError naming ``source``.

    ``opt_out_label``: a pod template whose labels or annotations set it to ``"false"`` is left
    alone (reported as a note), as the webhook leaves such pods alone. ``json_input`` forces the
    format (``True`` for a ``.json`` file, whose errors are then JSON errors); by default text
    starting with ``{`` or ``[`` that parses as JSON is JSON.
    """
    if json_input or (json_input is None and looks_like_json(text)):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if json_input:
                raise _json_error(source, exc) from None
        else:
            check_json_keys(text, source)
            return _migrate_json(data, text, source, config, opt_out_label)
    return _migrate_yaml(text, source, config, opt_out_label)
