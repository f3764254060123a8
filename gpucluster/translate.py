"""Translate legacy GPU extended-resource requests into DRA ResourceClaims.

A pure function of plain Kubernetes JSON (dicts), used by the mutating admission webhook (Pod
CREATE) and by ``gpucluster migrate`` (pod templates in workload manifests). No I/O.

What a translation does
-----------------------
``nvidia.com/gpu: N`` becomes an ExactCount request of N devices of DeviceClass ``gpu.nvidia.com``;
``nvidia.com/mig-<profile>: N`` (the device plugin's mixed-strategy names) becomes a request of N
devices of ``mig.nvidia.com`` with the selector
``device.attributes["gpu.nvidia.com"].profile == "<profile>"``. The device plugin spells the ``+``
of a profile such as ``1g.10gb+me`` as ``.`` (``nvidia.com/mig-1g.10gb.me``); the profile is
spelled back the way the DRA driver publishes it. The resources are removed from ``limits`` and
``requests`` of every container (init containers and sidecars included), the pod gets
``spec.resourceClaims`` entries that point at ResourceClaimTemplates, and every container gets
``resources.claims`` entries for exactly the devices it asked for.

Devices across containers (the device plugin's semantics, KEP-753 / KEP-5004)
------------------------------------------------------------------------------
The pod gets as many devices of each resource as Kubernetes' effective request::

    max(sum(regular) + sum(sidecars), max over init i of (init_i + sidecars started before i))

Long-lived containers (regular containers and sidecars, i.e. init containers with
``restartPolicy: Always``) each own their devices. A non-sidecar init container runs alone (after
the sidecars before it have started and before everything after it), so it reuses the devices of
the long-lived containers that start after it and takes the rest from an extra pool sized for the
largest shortfall. Per resource the devices are laid out on a line::

    [extra pool][regular containers in order][sidecars, last one first]

Every long-lived container owns its own segment; init container i takes the prefix of length
``init_i`` of the line. That prefix never reaches a sidecar that starts before i (those are at the
far end), and the extra pool is exactly ``max(0, max_i(init_i - later_i))``. The line is cut at
every segment boundary and prefix end; each piece becomes one device request, and each container
refers to exactly the pieces it covers, so every container sees exactly the number of devices it
asked for and the total is the effective request. Upstream's automatic claim (KEP-5004 since
1.35) reuses long-lived requests whole, so an init container can see more devices than it asked
for; cutting the line avoids that.

Claims, templates and names
---------------------------
Containers that share a piece are grouped into one claim (a connected component); a container
with several GPU resources gets them all in its one claim. Claims are named
``<claim_prefix>-<k>`` (``gpu-0``, ``gpu-1``, ... in the order of the first container of each
claim, init containers first). A claim with a single request is referenced without ``request``;
otherwise each container lists the requests it uses. Requests are named after the resource
(``gpu``, ``mig-1g-10gb``), with ``-<k>`` appended when a resource is cut into several pieces.

Each claim comes from a ResourceClaimTemplate whose name is derived from its content only:
``<template_prefix>-<summary>-<hash>``, e.g. ``gpucluster-gpu-2-1a2b3c4d5e``, where the summary is
``<request base>-<devices>`` per resource and the hash is the first 10 hex digits of the SHA-256
of the canonical JSON of the template's ``spec``. Same shape, same template, shared by all pods of
a namespace; different content never shares a name. Templates (and the claims made from them) are
labelled ``app.kubernetes.io/managed-by: gpucluster``.

Annotation and idempotence
--------------------------
The original requests are recorded in the annotation ``gpucluster.nvidia.com/translated-from``
(``TranslationConfig.annotation``), a JSON object with sorted keys, keyed by container name
(container names are unique across init and regular containers), with the quantity as written::

    {"containers": {"cuda": {"nvidia.com/gpu": "2"}, "warmup": {"nvidia.com/gpu": "1"}}}

A translated pod carries no translatable resource any more, so translating it again changes
nothing. A pod that carries the annotation is never translated a second time: GPU requests that
appear in it later are reported and left alone (our claims are already there).

What is not translated
----------------------
Reported in ``Translation.problems`` and left alone:

* a container whose GPU request Kubernetes would reject or that asks for nothing: a request
  without a limit, a request different from the limit, a quantity that is not a whole number
  (``500m``, ``1.5``), zero, negative or unparsable. The whole container is left unchanged (its
  other GPU resources too);
* resources under ``nvidia.com/`` (``TranslationConfig.watched_prefixes``) that the mapping does
  not know, e.g. ``nvidia.com/gpu.shared``: that resource is left as it is, the container's other
  resources are translated;
* the whole pod when one claim would need more than 32 devices or 32 requests (the ResourceClaim
  limits), or when the pod was already translated;
* a container that qualifies a translatable GPU count with GPU-sharing resources (HAMi's
  ``nvidia.com/gpumem``, ``nvidia.com/gpucores`` ..., see :func:`sharing_resource`): the count
  and its qualifiers are one request to one (sharing) allocator, and a claim of whole devices
  beside the qualifiers would split it across two. The container stays as it is, reported in
  ``Translation.problems`` and ``Translation.shared``; the pod's other containers are translated.

A zero count (``nvidia.com/gpu: 0``) asks for nothing of that resource: it is removed with the
container's other GPU resources, which are translated; a container asking only for zero is left
alone. Claim names the pod already uses are skipped (``gpu-0`` taken: the first claim is ``gpu-1``).

Ephemeral containers cannot have resources and are ignored.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import count, pairwise
from types import MappingProxyType
from typing import Any, Literal

import orjson

from gpucluster.dra.quantity import Quantity, QuantityError
from gpucluster.jsonutil import clone

__all__ = [
    "DEFAULT_CONFIG",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "MAX_NAME_ATTEMPTS",
    "MAX_TEMPLATES_ANNOTATION_BYTES",
    "PROVISIONED_LABEL",
    "RESOURCE_API_VERSION",
    "TEMPLATES_ANNOTATION",
    "TRANSLATED_LABEL",
    "ResourceMapping",
    "SharedGPU",
    "Translation",
    "TranslationConfig",
    "gpu_resources",
    "mig_profile",
    "parse_quantity",
    "sharing_resource",
    "template_name_candidates",
    "template_name_matches",
    "template_spec_problem",
    "templates_annotation",
    "templates_from_annotation",
    "translate_pod",
    "translate_pod_spec",
    "translated_part",
]

RESOURCE_API_VERSION = "resource.k8s.io/v1"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpucluster"
DEFAULT_ANNOTATION = "gpucluster.nvidia.com/translated-from"

# resource.k8s.io/v1: AllocationResultsMaxSize and DeviceRequestsMaxSize.
MAX_DEVICES_PER_CLAIM = 32
MAX_REQUESTS_PER_CLAIM = 32

_DNS_LABEL_MAX = 63
_HASH_LEN = 10
DEFAULT_CONFIG_TEMPLATE_PREFIX = "gpucluster"


@dataclass(frozen=True)
class ResourceMapping:
    """Where an extended resource goes: a DeviceClass and an optional CEL selector."""

    device_class: str
    selector: str | None = None


@dataclass(frozen=True)
class TranslationConfig:
    """Which extended resources are translated, and how results are named.

    ``mapping`` is looked up first; names starting with ``mig_prefix`` (``None`` disables the rule)
    then map to ``mig_device_class`` with a profile selector.
    """

    mapping: Mapping[str, ResourceMapping]
    mig_prefix: str | None = "nvidia.com/mig-"
    mig_device_class: str = "mig.nvidia.com"
    annotation: str = DEFAULT_ANNOTATION
    claim_prefix: str = "gpu"
    template_prefix: str = DEFAULT_CONFIG_TEMPLATE_PREFIX
    watched_prefixes: tuple[str, ...] = ("nvidia.com/",)

    def resolve(self, resource: str) -> ResourceMapping | None:
        """The mapping for ``resource``, or ``None`` when it is not translated."""
        found = self.mapping.get(resource)
        if found is not None:
            return found
        if self.mig_prefix and resource.startswith(self.mig_prefix) and len(resource) > len(self.mig_prefix):
            profile = mig_profile(resource[len(self.mig_prefix) :])
            return ResourceMapping(
                self.mig_device_class,
                f'device.attributes["gpu.nvidia.com"].profile == {_cel_string(profile)}',
            )
        return None

    def watched(self, resource: str) -> bool:
        return resource.startswith(self.watched_prefixes)

    @property
    def device_classes(self) -> frozenset[str]:
        """Every DeviceClass a translation may name: the mapping's and the MIG class."""
        return frozenset({m.device_class for m in self.mapping.values()} | {self.mig_device_class})


DEFAULT_CONFIG = TranslationConfig(mapping=MappingProxyType({"nvidia.com/gpu": ResourceMapping("gpu.nvidia.com")}))


# Fractional-GPU resources of GPU-sharing schedulers that qualify a whole-GPU count in the same
# container: HAMi (nvidia.com/gpumem, gpumem-percentage, gpucores, priority), and the names other
# sharing schedulers use (Volcano vgpu-*, TKE vcuda-*, Alibaba gpu-mem, gpu-memory, gpu-core ...).
HAMI_SHARING_RESOURCES = frozenset(
    {"nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores", "nvidia.com/priority"}
)
_SHARING_PATTERN = re.compile(
    r"^[\w.-]+/(?:gpu-?mem(?:ory)?(?:-percentage|-ratio)?|gpu-?cores?|gpu-?fraction|gpu-?percentage"
    r"|vgpu-[\w-]+|vcuda-[\w-]+|vgpu)$"
)


def sharing_resource(resource: str, config: TranslationConfig = DEFAULT_CONFIG) -> bool:
    """Whether ``resource`` is a GPU-sharing qualifier (a fraction of a GPU: memory, cores, a
    priority) rather than something ``config`` translates."""
    return config.resolve(resource) is None and _sharing_name(resource)


def _sharing_name(resource: str) -> bool:
    """Whether ``resource`` is named like a GPU-sharing qualifier (:func:`sharing_resource` of a
    resource the config does not translate)."""
    return resource in HAMI_SHARING_RESOURCES or _SHARING_PATTERN.match(resource) is not None


@dataclass(frozen=True)
class SharedGPU:
    """A container left untranslated because GPU-sharing resources qualify its GPU count."""

    container: str  # "container cuda", "init container warmup", "sidecar log"
    gpus: tuple[str, ...]  # the translatable resources it asks for, sorted
    qualifiers: tuple[str, ...]  # the sharing resources beside them, sorted

    @property
    def problem(self) -> str:
        return (
            f"{self.container}: {', '.join(self.gpus)} qualified by {', '.join(self.qualifiers)} "
            "(GPU sharing by HAMi or a similar scheduler: a fraction of a GPU, which a DRA claim of whole "
            "devices cannot express); container left unchanged"
        )

    @property
    def reason(self) -> str:
        """The problem's reason in a few words (for a warning under 120 characters)."""
        more = f" +{len(self.qualifiers) - 1}" if len(self.qualifiers) > 1 else ""
        return f"{self.gpus[0]} shared via {self.qualifiers[0]}{more}: a DRA claim is whole GPUs"


@dataclass
class Translation:
    """The result of translating one pod spec."""

    pod_spec: dict[str, Any]
    annotations: dict[str, str] = field(default_factory=dict)
    templates: list[dict[str, Any]] = field(default_factory=list)
    changed: bool = False
    changes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    devices: dict[str, int] = field(default_factory=dict)
    resources: dict[str, int] = field(default_factory=dict)  # translated resource -> devices the pod gets
    shared: list[SharedGPU] = field(default_factory=list)  # containers left alone for GPU sharing


# ----------------------------------------------------------------------------- pods at admission
# The webhook creates nothing: it labels a translated pod and records the specs of the templates
# it refers to; the controller watches pods with the label and creates the missing templates.
TRANSLATED_LABEL = "gpucluster.nvidia.com/translated"
TEMPLATES_ANNOTATION = "gpucluster.nvidia.com/claim-templates"
# Templates the controller created (and may garbage-collect once no pod refers to them).
PROVISIONED_LABEL = "gpucluster.nvidia.com/provisioned"
# A pod's annotations are limited to 256 KiB in all; a translation never needs more than a few KiB.
MAX_TEMPLATES_ANNOTATION_BYTES = 16 * 1024


def templates_annotation(templates: Iterable[Mapping[str, Any]]) -> str:
    """``{name: spec}`` of the templates, canonical JSON (the value of :data:`TEMPLATES_ANNOTATION`)."""
    specs = {str(t["metadata"]["name"]): t["spec"] for t in templates}
    return orjson.dumps(specs, option=orjson.OPT_SORT_KEYS).decode()  # once per review: orjson, not json


def templates_from_annotation(annotations: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    """The ``{name: spec}`` a pod's annotation records; None when absent or not such an object."""
    raw = annotations.get(TEMPLATES_ANNOTATION)
    if not isinstance(raw, str) or len(raw) > MAX_TEMPLATES_ANNOTATION_BYTES:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, dict) for k, v in value.items()):
        return None
    return value


_MIG_SELECTOR = re.compile(r'^device\.attributes\["gpu\.nvidia\.com"\]\.profile == "([a-z0-9.+-]{1,40})"$')
_REQUEST_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def template_spec_problem(spec: Any, config: TranslationConfig = DEFAULT_CONFIG) -> str | None:
    """Why ``spec`` is not a ResourceClaimTemplate spec a translation makes (None when it is one).

    The controller creates templates from what a pod's annotation says; anyone who may create a
    pod can write that annotation, so only the shapes a translation produces are accepted: our
    label, ExactCount requests of the mapped DeviceClasses (MIG: one profile selector), at most
    the ResourceClaim limits.
    """
    if not isinstance(spec, dict) or set(spec) != {"metadata", "spec"}:
        return "not a translated template spec (metadata and spec)"
    if spec["metadata"] != {"labels": {MANAGED_BY_LABEL: MANAGED_BY}}:
        return f"template metadata must be exactly the {MANAGED_BY_LABEL} label"
    body = spec["spec"]
    requests = body.get("devices", {}).get("requests") if isinstance(body, dict) and set(body) == {"devices"} else None
    if not isinstance(requests, list) or not 0 < len(requests) <= MAX_REQUESTS_PER_CLAIM:
        return f"spec.devices must hold 1 to {MAX_REQUESTS_PER_CLAIM} requests and nothing else"
    if set(body["devices"]) != {"requests"}:
        return "spec.devices must hold requests only"
    plain = {m.device_class for m in config.mapping.values() if not m.selector}
    selected = {(m.device_class, m.selector) for m in config.mapping.values() if m.selector}
    total = 0
    for request in requests:
        if not isinstance(request, dict) or set(request) != {"name", "exactly"}:
            return "a request must have exactly name and exactly"
        exactly = request["exactly"]
        if not isinstance(request["name"], str) or not _REQUEST_NAME.match(request["name"]):
            return "a request name must be a DNS label"
        if not isinstance(exactly, dict) or exactly.get("allocationMode") != "ExactCount":
            return "requests must be ExactCount"
        count_ = exactly.get("count")
        if isinstance(count_, bool) or not isinstance(count_, int) or not 0 < count_ <= MAX_DEVICES_PER_CLAIM:
            return f"a request count must be 1 to {MAX_DEVICES_PER_CLAIM}"
        total += count_
        device_class = exactly.get("deviceClassName")
        selectors = exactly.get("selectors")
        if set(exactly) - {"deviceClassName", "allocationMode", "count", "selectors"}:
            return "requests may set deviceClassName, allocationMode, count and selectors only"
        if selectors is None:
            if device_class not in plain:
                return f"DeviceClass {device_class!r} is not one a translation requests without a selector"
            continue
        expression = (
            selectors[0].get("cel", {}).get("expression")
            if isinstance(selectors, list) and len(selectors) == 1 and isinstance(selectors[0], dict)
            and isinstance(selectors[0].get("cel"), dict) and set(selectors[0]) == {"cel"}
            else None
        )  # fmt: skip
        if not isinstance(expression, str):
            return "a request may carry one CEL selector only"
        mig = config.mig_prefix is not None and device_class == config.mig_device_class
        if (device_class, expression) not in selected and not (mig and _MIG_SELECTOR.match(expression)):
            return f"selector {expression[:60]!r} of DeviceClass {device_class!r} is not one a translation makes"
    if total > MAX_DEVICES_PER_CLAIM:
        return f"the template asks for {total} devices (a ResourceClaim holds at most {MAX_DEVICES_PER_CLAIM})"
    return None


# ----------------------------------------------------------------------------- quantities


MAX_COUNT = 2**63 - 1  # an extended resource is counted in an int64 (resource.Quantity.Value())


def parse_quantity(value: Any) -> Fraction:
    """A Kubernetes quantity (string, or a number from YAML) as an exact fraction, read by the one
    quantity parser (:mod:`gpucluster.dra.quantity`, ``resource.ParseQuantity``'s rules).

    Raises ``ValueError`` for anything Kubernetes would not parse.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value!r} is not a quantity")
        # As written (1e+26 is 10^26), not the nearest binary double (100000000000000004764729344).
        return Fraction(repr(value))
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a quantity")
    try:
        return Quantity.parse(value).value
    except QuantityError:
        raise ValueError(f"{value!r} is not a quantity") from None


# The translated-from annotation: json.dumps(record, sort_keys=True), with one encoder.
_RECORD = json.JSONEncoder(sort_keys=True)


def _quantity_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


# ----------------------------------------------------------------------------- names

_MIG_BASE = re.compile(r"^(?:\d+c\.)?\d+g\.\d+gb")


def mig_profile(suffix: str) -> str:
    """The MIG profile the DRA driver publishes for a device-plugin resource suffix.

    The device plugin replaces ``+`` by ``.`` in resource names: ``1g.10gb.me`` is ``1g.10gb+me``,
    ``1g.10gb.me.all`` is ``1g.10gb+me.all``. ``-me`` and plain profiles are spelled the same.
    Suffixes that do not look like a profile are used as they are.
    """
    base = _MIG_BASE.match(suffix)
    if base is None:
        return suffix
    rest = suffix[base.end() :]
    if rest.startswith("."):
        return suffix[: base.end()] + "+" + rest[1:]
    return suffix


def _cel_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _dns_label(text: str, limit: int = _DNS_LABEL_MAX) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower())
    label = re.sub(r"-{2,}", "-", label).strip("-")[:limit].strip("-")
    return label or "device"


def _request_bases(resources: Iterable[str]) -> dict[str, str]:
    """A distinct DNS-label base name per resource: ``nvidia.com/mig-1g.10gb`` -> ``mig-1g-10gb``."""
    bases: dict[str, str] = {}
    used: set[str] = set()
    for resource in sorted(resources):
        base = _dns_label(resource.rsplit("/", 1)[-1], 40)
        if base in used:
            base = f"{base[:33]}-{_digest(resource)[:6]}"
        used.add(base)
        bases[resource] = base
    return bases


# The canonical JSON that names are hashes of (part of the names' contract: never change it).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _digest(value: Any) -> str:
    return hashlib.sha256(_CANONICAL.encode(value).encode()).hexdigest()


def _spec_digest(spec: Mapping[str, Any]) -> str:
    """:func:`_digest` of a template spec a translation builds (strings, integers, lists and
    objects; no floats), with orjson: its sorted compact JSON is byte for byte the canonical JSON
    whenever it is ASCII without DEL (which ``ensure_ascii`` escapes); anything else (and
    integers orjson refuses) takes the canonical encoder."""
    try:
        canonical = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return _digest(spec)
    if not canonical.isascii() or b"\x7f" in canonical:
        return _digest(spec)
    return hashlib.sha256(canonical).hexdigest()


def _template_name(prefix: str, summary: str, spec: Mapping[str, Any]) -> str:
    digest = _spec_digest(spec)[:_HASH_LEN]
    room = _DNS_LABEL_MAX - len(prefix) - len(digest) - 2
    short = summary[: max(room, 0)].strip("-")
    return f"{prefix}-{short}-{digest}" if short else f"{prefix}-{digest}"


# Another name for a template whose content-addressed name is taken by an object with another
# spec (someone else's): the hash is salted with the attempt number, so every choice stays a
# function of the content and anyone can check that a name belongs to a spec.
MAX_NAME_ATTEMPTS = 8


def _name_digest(spec: Mapping[str, Any], attempt: int) -> str:
    return _digest(spec if attempt == 0 else {"attempt": attempt, "spec": spec})[:_HASH_LEN]


def template_name_candidates(name: str, spec: Mapping[str, Any]) -> Iterator[str]:
    """``name`` (the content-addressed name of ``spec``) and its alternatives, in the order tried
    (lazily: the alternatives' hashes are computed only when a name is taken)."""
    yield name
    stem = name[:-_HASH_LEN] if len(name) > _HASH_LEN else ""
    for k in range(1, MAX_NAME_ATTEMPTS):
        yield stem + _name_digest(spec, k)


def template_name_matches(name: str, spec: Mapping[str, Any], prefix: str = DEFAULT_CONFIG_TEMPLATE_PREFIX) -> bool:
    """Whether ``name`` is a name a translation gives a template with this ``spec``."""
    if not name.startswith(prefix + "-") or len(name) > _DNS_LABEL_MAX:
        return False
    return any(name.endswith(_name_digest(spec, k)) for k in range(MAX_NAME_ATTEMPTS))


# ----------------------------------------------------------------------------- analysis

Kind = Literal["init", "sidecar", "regular"]
_MISSING = object()


@dataclass
class _Container:
    kind: Kind
    position: int  # index in initContainers + containers: the order containers start in
    source: str  # "initContainers" or "containers"
    index: int  # index in that field
    name: str
    counts: dict[str, int]  # translatable resource -> devices
    originals: dict[str, str]  # translatable resource -> quantity as written (zero counts included)
    zeros: dict[str, str] = field(default_factory=dict)  # resources asked for with a zero count

    @property
    def label(self) -> str:
        return _label(self.kind, self.name)


_KIND_LABELS: Mapping[Kind, str] = {"init": "init container", "sidecar": "sidecar", "regular": "container"}


def _label(kind: Kind, name: str) -> str:
    return f"{_KIND_LABELS[kind]} {name}"


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_mapping(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)  # a dict without the ABC's check


def _as_dict(value: Any) -> Mapping[str, Any]:
    return value if _is_mapping(value) else {}


def _containers(pod_spec: Mapping[str, Any]) -> list[tuple[Kind, str, int, Mapping[str, Any]]]:
    found: list[tuple[Kind, str, int, Mapping[str, Any]]] = []
    for i, c in enumerate(_as_list(pod_spec.get("initContainers"))):
        if _is_mapping(c):
            kind: Kind = "sidecar" if c.get("restartPolicy") == "Always" else "init"
            found.append((kind, "initContainers", i, c))
    for i, c in enumerate(_as_list(pod_spec.get("containers"))):
        if _is_mapping(c):
            found.append(("regular", "containers", i, c))
    return found


def _check(resource: str, limit: Any, request: Any) -> tuple[int | None, str | None]:
    """(count, None) for a translatable request, or (None, why not)."""
    if (
        type(limit) is str
        and (request is _MISSING or request == limit)
        and len(limit) <= _PLAIN_COUNT_DIGITS
        and limit.isascii()
        and limit.isdigit()
    ):
        return int(limit), None  # the usual case, a count in plain digits: what _check_quantities gives it
    return _check_quantities(resource, limit, request)


# Plain decimal digits up to this many are a count without parsing: a whole number, not negative,
# below MAX_COUNT (19 digits) and what resource.ParseQuantity reads them as.
_PLAIN_COUNT_DIGITS = 18


def _check_quantities(resource: str, limit: Any, request: Any) -> tuple[int | None, str | None]:
    """:func:`_check` by the quantity parser, for any limit and request."""
    if limit is _MISSING:
        return None, f"{resource} has a request but no limit (Kubernetes requires one)"
    try:
        lim = parse_quantity(limit)
    except ValueError:
        return None, f"{resource} {_quantity_text(limit)!r} is not a valid quantity"
    if request is not _MISSING:
        try:
            req = parse_quantity(request)
        except ValueError:
            return None, f"{resource} {_quantity_text(request)!r} is not a valid quantity"
        if req != lim:
            return None, (f"{resource} request {_quantity_text(request)} differs from limit {_quantity_text(limit)}")
    if lim.denominator != 1:
        return None, f"{resource} {_quantity_text(limit)} is not a whole number of devices"
    if lim < 0:
        return None, f"{resource} {_quantity_text(limit)} is negative"
    if lim > MAX_COUNT:
        return None, f"{resource} {_quantity_text(limit)} is beyond the largest count Kubernetes schedules (2^63-1)"
    return int(lim), None


def _analyse(
    pod_spec: Mapping[str, Any], config: TranslationConfig, shared: list[SharedGPU] | None = None
) -> tuple[list[_Container], list[str]]:
    """Translatable containers (with their counts) and what cannot be translated (containers left
    alone for GPU sharing are also appended to ``shared``)."""
    result: list[_Container] = []
    problems: list[str] = []
    for position, (kind, fld, index, c) in enumerate(_containers(pod_spec)):
        name = str(c.get("name", f"{fld}[{index}]"))
        label = _label(kind, name)
        resources = _as_dict(c.get("resources"))
        limits = _as_dict(resources.get("limits"))
        requests = _as_dict(resources.get("requests"))
        names = sorted(str(r) for r in set(limits) | set(requests))
        mappings = {r: config.resolve(r) for r in names}
        gpus = tuple(r for r in names if mappings[r] is not None)
        qualifiers = tuple(r for r in names if mappings[r] is None and _sharing_name(r)) if gpus else ()
        if qualifiers:
            # One request to a sharing scheduler: the whole container stays as it is. Its other
            # unknown nvidia.com/ resources are still reported.
            sharing = SharedGPU(label, gpus, qualifiers)
            problems.append(sharing.problem)
            if shared is not None:
                shared.append(sharing)
            problems.extend(
                f"{label}: {r} is not a resource gpucluster translates; left as it is"
                for r in names
                if r not in gpus and r not in qualifiers and config.watched(r)
            )
            continue
        counts: dict[str, int] = {}
        originals: dict[str, str] = {}
        zeros: dict[str, str] = {}
        invalid: list[str] = []
        for resource in names:
            if mappings[resource] is None:
                if config.watched(resource):
                    problems.append(f"{label}: {resource} is not a resource gpucluster translates; left as it is")
                continue
            limit = limits.get(resource, _MISSING)
            count, why = _check(resource, limit, requests.get(resource, _MISSING))
            if why is not None or count is None:
                invalid.append(str(why))
                continue
            if count == 0:  # asks for nothing of this resource; the container's other ones still count
                zeros[resource] = _quantity_text(limit)
                continue
            counts[resource] = count
            originals[resource] = _quantity_text(limit)
        claims = resources.get("claims")
        if counts and claims is not None and not isinstance(claims, list):  # it would be rewritten
            invalid.append("resources.claims is not a list")
        if invalid:
            problems.extend(f"{label}: {why}; container left unchanged" for why in invalid)
            continue
        if counts:
            result.append(_Container(kind, position, fld, index, name, counts, {**originals, **zeros}, zeros))
        elif zeros:
            asked = ", ".join(f"{r} {q}" for r, q in sorted(zeros.items()))
            problems.append(f"{label}: {asked} asks for no device; container left unchanged")
    return result, problems


# ----------------------------------------------------------------------------- planning


@dataclass
class _Piece:
    resource: str
    size: int
    users: list[int]  # positions of the containers that see this piece, in start order


def _plan_resource(resource: str, users: Sequence[tuple[_Container, int]]) -> list[_Piece]:
    """Cut one resource's device line into pieces (see the module docstring)."""
    if len(users) == 1:  # the usual case: one container's devices are one piece, whatever its kind
        container, n = users[0]
        return [_Piece(resource, n, [container.position])]
    regular = [(c, n) for c, n in users if c.kind == "regular"]
    sidecars = sorted(((c, n) for c, n in users if c.kind == "sidecar"), key=lambda cn: -cn[0].position)
    inits = [(c, n) for c, n in users if c.kind == "init"]
    long_lived = regular + sidecars

    def later(position: int) -> int:
        return sum(n for c, n in long_lived if c.position > position)

    extra = max([0, *(n - later(c.position) for c, n in inits)])
    segments: list[tuple[int, int, int]] = []  # (start, end, container position)
    start = extra
    for c, n in long_lived:
        segments.append((start, start + n, c.position))
        start += n
    segments.extend((0, n, c.position) for c, n in inits)
    total = start
    cuts = sorted({0, total, *(s for s, _, _ in segments), *(e for _, e, _ in segments)})
    pieces: list[_Piece] = []
    for lo, hi in pairwise(cuts):
        covering = sorted(p for s, e, p in segments if s <= lo and hi <= e)
        pieces.append(_Piece(resource, hi - lo, covering))
    return pieces


@dataclass
class _Claim:
    name: str
    members: list[int]  # container positions, in start order
    requests: list[tuple[str, _Piece]]  # (request name, piece) in template order
    template: dict[str, Any]


def _group(pieces: Sequence[_Piece], positions: Iterable[int]) -> list[list[int]]:
    parent = {p: p for p in positions}

    def find(p: int) -> int:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    for piece in pieces:
        first = find(piece.users[0])
        for other in piece.users[1:]:
            root = find(other)
            if root != first:
                parent[max(root, first)] = min(root, first)
                first = min(root, first)
    groups: dict[int, list[int]] = {}
    for p in sorted(parent):
        groups.setdefault(find(p), []).append(p)
    return sorted(groups.values(), key=lambda g: g[0])


def _device_request(name: str, mapping: ResourceMapping, count: int) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": mapping.device_class, "allocationMode": "ExactCount", "count": count}
    if mapping.selector:
        exactly["selectors"] = [{"cel": {"expression": mapping.selector}}]
    return {"name": name, "exactly": exactly}


def _build_claims(
    containers: Sequence[_Container], config: TranslationConfig, namespace: str | None
) -> tuple[list[_Claim], list[_Piece]]:
    by_resource: dict[str, list[tuple[_Container, int]]] = {}
    for c in containers:
        for resource, n in c.counts.items():
            by_resource.setdefault(resource, []).append((c, n))
    pieces = [piece for resource in sorted(by_resource) for piece in _plan_resource(resource, by_resource[resource])]
    bases = _request_bases(by_resource)
    claims: list[_Claim] = []
    for k, members in enumerate(_group(pieces, (c.position for c in containers))):
        member_set = set(members)
        mine = [piece for piece in pieces if piece.users[0] in member_set]
        requests: list[tuple[str, _Piece]] = []
        summary: list[str] = []
        for resource in sorted({piece.resource for piece in mine}):
            parts = [piece for piece in mine if piece.resource == resource]
            base = bases[resource]
            if len(parts) == 1:
                requests.append((base, parts[0]))
            else:
                requests.extend((f"{base}-{i}", piece) for i, piece in enumerate(parts))
            summary.append(f"{base}-{sum(piece.size for piece in parts)}")
        spec: dict[str, Any] = {
            "metadata": {"labels": {MANAGED_BY_LABEL: MANAGED_BY}},
            "spec": {
                "devices": {
                    "requests": [
                        _device_request(name, _resolved(config, piece.resource), piece.size) for name, piece in requests
                    ]
                }
            },
        }
        metadata: dict[str, Any] = {
            "name": _template_name(config.template_prefix, "-".join(summary), spec),
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        }
        if namespace:
            metadata["namespace"] = namespace
        template = {"apiVersion": RESOURCE_API_VERSION, "kind": "ResourceClaimTemplate", "metadata": metadata}
        template["spec"] = spec
        claims.append(_Claim(f"{config.claim_prefix}-{k}", members, requests, template))
    return claims, pieces


def _resolved(config: TranslationConfig, resource: str) -> ResourceMapping:
    mapping = config.resolve(resource)
    if mapping is None:  # pragma: no cover - only translatable resources get here
        raise AssertionError(resource)
    return mapping


# ----------------------------------------------------------------------------- public API


def gpu_resources(pod_spec: Mapping[str, Any], config: TranslationConfig = DEFAULT_CONFIG) -> dict[str, dict[str, int]]:
    """Container name -> {resource: devices} for the requests a translation would take over.

    Containers whose GPU requests cannot be translated (see the module docstring) and resources
    the mapping does not know are left out; empty when the pod asks for no translatable GPU.
    """
    containers, _ = _analyse(pod_spec, config)
    return {c.name: dict(c.counts) for c in containers}


def translate_pod_spec(
    pod_spec: Mapping[str, Any],
    *,
    namespace: str | None,
    existing_annotations: Mapping[str, str] | None = None,
    config: TranslationConfig = DEFAULT_CONFIG,
    share: bool = False,
) -> Translation:
    """Translate the GPU extended resources of a pod spec (or pod template spec) into DRA claims.

    ``pod_spec`` is never modified; ``Translation.pod_spec`` is a translated copy (an unchanged
    copy when ``changed`` is false). ``existing_annotations`` are the pod's (or template's)
    annotations, used to recognise a pod that was already translated. ``namespace`` is set on the
    returned templates when given.

    ``share=True`` copies only what the translation changes (the spec, the container lists and
    the containers it rewrites, their resources): the copy shares every other subtree with
    ``pod_spec``, so neither may be modified afterwards. The webhook's choice: it diffs the two
    and keeps both unchanged.
    """
    out = dict(pod_spec) if share else clone(dict(pod_spec))
    shared: list[SharedGPU] = []
    containers, problems = _analyse(pod_spec, config, shared)
    translation = Translation(pod_spec=out, problems=problems, shared=shared)
    if not containers:
        return translation
    if existing_annotations and config.annotation in existing_annotations:
        who = ", ".join(c.name for c in containers)
        translation.problems.append(
            f"pod already translated ({config.annotation} is set); GPU requests of {who} left unchanged"
        )
        return translation

    listed = pod_spec.get("resourceClaims")
    if listed is not None and not isinstance(listed, list):
        # null is absent (as kube-apiserver reads it); anything else is not a pod spec to rewrite.
        translation.problems.append("spec.resourceClaims is not a list; pod left unchanged")
        return translation
    claims, _ = _build_claims(containers, config, namespace)
    existing = {str(rc.get("name")) for rc in _as_list(listed) if isinstance(rc, Mapping)}
    free = (f"{config.claim_prefix}-{k}" for k in count())
    for claim in claims:  # names the pod already uses are skipped: gpu-0 taken, ours start at gpu-1
        claim.name = next(name for name in free if name not in existing)
    pod_problems: list[str] = []
    for claim in claims:
        devices = sum(piece.size for _, piece in claim.requests)
        if devices > MAX_DEVICES_PER_CLAIM or len(claim.requests) > MAX_REQUESTS_PER_CLAIM:
            pod_problems.append(
                f"claim {claim.name} would need {devices} devices in {len(claim.requests)} "
                f"request{'' if len(claim.requests) == 1 else 's'} "
                f"(a ResourceClaim holds at most {MAX_DEVICES_PER_CLAIM}); pod left unchanged"
            )
    if pod_problems:
        translation.problems.extend(pod_problems)
        return translation

    by_position = {c.position: c for c in containers}
    changes: list[tuple[int, str, str]] = []
    templates: dict[str, dict[str, Any]] = {}
    # Copy on write: the lists that change are copied before they do (the containers, once each,
    # by _rewritten); the rest of ``out`` may be ``pod_spec``'s own (share=True).
    for source in {c.source for c in containers}:
        out[source] = list(out[source])
    claim_list = out["resourceClaims"] = list(_as_list(out.get("resourceClaims")))  # the copy's items
    for claim in claims:
        tpl_name = claim.template["metadata"]["name"]
        templates.setdefault(tpl_name, claim.template)
        claim_list.append({"name": claim.name, "resourceClaimTemplateName": tpl_name})
        for position in claim.members:
            c = by_position[position]
            used = [name for name, piece in claim.requests if position in piece.users]
            refs: list[dict[str, str]]
            if len(claim.requests) == 1:
                refs = [{"name": claim.name}]
            else:
                refs = [{"name": claim.name, "request": name} for name in used]
            out[c.source][c.index] = _rewritten(out[c.source][c.index], {*c.counts, *c.zeros}, refs)
            for resource in sorted(c.counts):
                names = [
                    name for name, piece in claim.requests if piece.resource == resource and position in piece.users
                ]
                where = f"claim {claim.name}"
                if len(claim.requests) > 1:
                    where += (" request " if len(names) == 1 else " requests ") + ", ".join(names)
                changes.append(
                    (position, resource, f"{c.label}: {resource} {c.counts[resource]} -> {where} (template {tpl_name})")
                )
        for _, piece in claim.requests:
            device_class = _resolved(config, piece.resource).device_class
            translation.devices[device_class] = translation.devices.get(device_class, 0) + piece.size
            translation.resources[piece.resource] = translation.resources.get(piece.resource, 0) + piece.size

    record = {"containers": {c.name: dict(sorted(c.originals.items())) for c in containers}}
    translation.annotations = {config.annotation: _RECORD.encode(record)}
    translation.templates = list(templates.values())
    translation.changes = [line for _, _, line in sorted(changes)]
    translation.changed = True
    return translation


# What translate_pod_spec reads of a pod spec: the container lists, each container's name,
# restartPolicy and resources, and the pod's resourceClaims.
_CONTAINER_LISTS = ("initContainers", "containers")
_PART_KEYS = frozenset((*_CONTAINER_LISTS, "resourceClaims"))


def translated_part(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``pod_spec`` a translation reads and changes, in the spec's key order: its
    container lists (every item kept at its index; a container's name, restartPolicy and resources
    only) and resourceClaims. Its translation is the spec's (``pod_spec`` aside: the translated
    part), and so is the diff of the two. The pods of a Job, a StatefulSet or a Deployment that
    differ in their env, args or images share it."""
    # Written out field by field: every translation and the provisioner's memo key take it, and
    # this form costs half of a comprehension over the field names.
    part: dict[str, Any] = {}
    for key in pod_spec:
        if key not in _PART_KEYS:
            continue
        value = pod_spec[key]
        if key == "resourceClaims" or type(value) is not list:
            part[key] = value
            continue
        kept: list[Any] = []
        for c in value:
            if type(c) is dict:
                fields = {}
                if "name" in c:
                    fields["name"] = c["name"]
                if "restartPolicy" in c:
                    fields["restartPolicy"] = c["restartPolicy"]
                if "resources" in c:
                    fields["resources"] = c["resources"]
                kept.append(fields)
            else:
                kept.append(c)
        part[key] = kept
    return part


def _rewritten(container: Mapping[str, Any], counts: Set[str], refs: list[dict[str, str]]) -> dict[str, Any]:
    """A copy of ``container`` without the ``counts`` resources and with the claims ``refs``
    (copied down to the resources it changes; keys keep their places)."""
    out = dict(container)
    resources = out.get("resources")
    resources = dict(resources) if isinstance(resources, dict) else {}
    out["resources"] = resources
    for key in ("limits", "requests"):
        values = resources.get(key)
        if isinstance(values, dict):
            kept = {name: value for name, value in values.items() if name not in counts}
            if kept:
                resources[key] = kept
            else:
                del resources[key]
    claims = resources.get("claims")
    if not isinstance(claims, list):
        claims = []
    resources["claims"] = claims + refs
    return out


def translate_pod(
    pod: Mapping[str, Any], *, namespace: str | None = None, config: TranslationConfig = DEFAULT_CONFIG
) -> tuple[dict[str, Any], Translation]:
    """Translate a whole Pod: the translated copy (annotations applied) and the translation.

    The namespace is the pod's ``metadata.namespace``, else ``namespace`` (at admission the
    object may not carry it yet). The input is never modified.
    """
    # The spec comes back from translate_pod_spec as a fresh copy; the rest is small.
    result = {key: clone(value) for key, value in pod.items() if key != "spec"}
    metadata = _as_dict(pod.get("metadata"))
    ns = metadata.get("namespace") or namespace
    annotations = _as_dict(metadata.get("annotations"))
    translation = translate_pod_spec(
        _as_dict(pod.get("spec")),
        namespace=str(ns) if ns else None,
        existing_annotations={str(k): str(v) for k, v in annotations.items()},
        config=config,
    )
    if "spec" in pod:
        result["spec"] = translation.pod_spec
    if translation.changed:
        meta = result.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
            result["metadata"] = meta
        current = meta.get("annotations")
        meta["annotations"] = {**(current if isinstance(current, dict) else {}), **translation.annotations}
    return result, translation
