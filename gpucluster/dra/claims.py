"""ResourceClaims, ResourceClaimTemplates and DeviceClasses as the allocator uses them.

Parsing validates what the API server would (so the allocator can trust its input) and compiles
every CEL selector once. Problems become :class:`AllocatorInputError` naming the object and the
field path, for example ``ResourceClaim default/x: spec.devices.requests[0].exactly.count: must
be greater than zero``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

from gpucluster.dra.model import AllocatorInputError, object_ref, parse_quantity


class SelectorProgram(Protocol):
    def evaluate(self, view: Any) -> bool: ...


SelectorCompiler = Callable[[str], SelectorProgram]
"""``compile_selector`` of :mod:`gpucluster.dra.cel` (raises CelCompileError)."""


@dataclass(frozen=True, slots=True)
class Selector:
    index: int
    expression: str
    program: SelectorProgram


@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    name: str
    selectors: tuple[Selector, ...]


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # "Equal" or "Exists"
    value: str
    effect: str  # "" tolerates every effect

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        # k8s.io/dynamic-resource-allocation/resourceclaim.ToleratesTaint
        if self.effect and self.effect != effect:
            return False
        if self.key and self.key != key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == value


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """An ``exactly`` request or one ``firstAvailable`` subrequest."""

    name: str
    parent: str  # name of the request holding this subrequest; "" for an exactly request
    class_name: str
    selectors: tuple[Selector, ...]
    mode: str  # "ExactCount" | "All"
    count: int
    admin_access: bool
    tolerations: tuple[Toleration, ...]
    path: str  # field path, for messages
    admin_access_set: bool = False  # adminAccess given, true or false (hasAdminAccess upstream)
    # capacity.requests (DRAConsumableCapacity): name as written -> exact amount; None: no capacity field.
    capacity: tuple[tuple[str, Fraction], ...] | None = None

    @property
    def full_name(self) -> str:
        """The name Kubernetes writes into allocation results: ``req`` or ``req/sub``."""
        return f"{self.parent}/{self.name}" if self.parent else self.name


@dataclass(frozen=True, slots=True)
class RequestGroup:
    name: str
    exactly: RequestSpec | None
    subrequests: tuple[RequestSpec, ...]

    @property
    def alternatives(self) -> tuple[RequestSpec, ...]:
        return (self.exactly,) if self.exactly is not None else self.subrequests


@dataclass(frozen=True, slots=True)
class ConstraintSpec:
    kind: str  # "matchAttribute" | "distinctAttribute"
    attribute: str
    requests: frozenset[str]

    def applies_to(self, request: RequestSpec) -> bool:
        if not self.requests:
            return True
        if request.parent:
            return request.parent in self.requests or request.full_name in self.requests
        return request.name in self.requests


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    kind: str
    ref: str  # namespace/name
    requests: tuple[RequestGroup, ...]
    constraints: tuple[ConstraintSpec, ...]

    @property
    def label(self) -> str:
        return f"{self.kind} {self.ref}"


_MODES = ("ExactCount", "All")


def compile_selectors(
    raw: Any, where: str, label: str, compile_selector: SelectorCompiler, compile_error: type[Exception]
) -> tuple[Selector, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise AllocatorInputError(f"{label}: {where}: must be a list")
    selectors = []
    for i, sel in enumerate(raw):
        cel = sel.get("cel") if isinstance(sel, Mapping) else None
        expr = cel.get("expression") if isinstance(cel, Mapping) else None
        if not isinstance(expr, str) or not expr.strip():
            # The allocator's "CEL expression empty (unsupported selector type?)".
            raise AllocatorInputError(f"{label}: {where}[{i}].cel.expression: required")
        try:
            program = compile_selector(expr)
        except compile_error as exc:
            raise AllocatorInputError(f"{label}: {where}[{i}].cel.expression: {exc}") from None
        selectors.append(Selector(i, expr, program))
    return tuple(selectors)


def parse_device_class(
    raw: Mapping[str, Any], compile_selector: SelectorCompiler, compile_error: type[Exception]
) -> DeviceClassInfo:
    name = object_ref(raw, default_namespace=None)
    label = f"DeviceClass {name}"
    spec = raw.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise AllocatorInputError(f"{label}: spec: must be an object")
    return DeviceClassInfo(
        name=name,
        selectors=compile_selectors(spec.get("selectors"), "spec.selectors", label, compile_selector, compile_error),
    )


def _parse_tolerations(raw: Any, where: str, label: str) -> tuple[Toleration, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise AllocatorInputError(f"{label}: {where}: must be a list")
    result = []
    for i, t in enumerate(raw):
        t_where = f"{where}[{i}]"
        if not isinstance(t, Mapping):
            raise AllocatorInputError(f"{label}: {t_where}: must be an object")
        operator = t.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise AllocatorInputError(f"{label}: {t_where}.operator: unsupported value {operator!r} (Equal or Exists)")
        key = t.get("key") or ""
        value = t.get("value") or ""
        effect = t.get("effect") or ""
        if not all(isinstance(x, str) for x in (key, value, effect)):
            raise AllocatorInputError(f"{label}: {t_where}: key, value and effect must be strings")
        if not key and operator != "Exists":
            raise AllocatorInputError(f"{label}: {t_where}.operator: must be Exists when key is empty")
        if operator == "Exists" and value:
            raise AllocatorInputError(f"{label}: {t_where}.value: must be empty when operator is Exists")
        result.append(Toleration(key, operator, value, effect))
    return tuple(result)


def _parse_request_body(
    raw: Mapping[str, Any],
    name: str,
    parent: str,
    where: str,
    label: str,
    compile_selector: SelectorCompiler,
    compile_error: type[Exception],
) -> RequestSpec:
    class_name = raw.get("deviceClassName")
    if not isinstance(class_name, str) or not class_name:
        raise AllocatorInputError(f"{label}: {where}.deviceClassName: required")
    mode = raw.get("allocationMode") or "ExactCount"
    if mode not in _MODES:
        raise AllocatorInputError(f"{label}: {where}.allocationMode: unsupported value {mode!r} (ExactCount or All)")
    count_raw = raw.get("count")
    if mode == "ExactCount":
        if count_raw is None:
            count = 1
        elif isinstance(count_raw, bool) or not isinstance(count_raw, int):
            raise AllocatorInputError(f"{label}: {where}.count: must be an integer")
        elif count_raw <= 0:
            raise AllocatorInputError(f"{label}: {where}.count: must be greater than zero, not {count_raw}")
        else:
            count = count_raw
    else:
        if count_raw not in (None, 0):
            raise AllocatorInputError(f"{label}: {where}.count: must not be set when allocationMode is All")
        count = 0
    admin = raw.get("adminAccess")
    if admin is not None and not isinstance(admin, bool):
        raise AllocatorInputError(f"{label}: {where}.adminAccess: must be a boolean")
    capacity = _parse_capacity(raw.get("capacity"), f"{where}.capacity", label)
    return RequestSpec(
        name=name,
        parent=parent,
        class_name=class_name,
        selectors=compile_selectors(raw.get("selectors"), f"{where}.selectors", label, compile_selector, compile_error),
        mode=mode,
        count=count,
        admin_access=bool(admin),
        admin_access_set=admin is not None,
        tolerations=_parse_tolerations(raw.get("tolerations"), f"{where}.tolerations", label),
        path=where,
        capacity=capacity,
    )


def _parse_capacity(raw: Any, where: str, label: str) -> tuple[tuple[str, Fraction], ...] | None:
    """``capacity.requests`` of a request (CapacityRequirements)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise AllocatorInputError(f"{label}: {where}: must be an object")
    requests = raw.get("requests") or {}
    if not isinstance(requests, Mapping):
        raise AllocatorInputError(f"{label}: {where}.requests: must map capacity names to quantities")
    out = []
    for name, value in requests.items():
        amount = parse_quantity(value, f"{label}: {where}.requests[{name}]")
        if amount < 0:
            raise AllocatorInputError(f"{label}: {where}.requests[{name}]: must not be negative")
        out.append((str(name), amount))
    return tuple(out)


def _name(raw: Any, where: str, label: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise AllocatorInputError(f"{label}: {where}: required")
    return raw


def parse_claim(
    raw: Mapping[str, Any], index: int, compile_selector: SelectorCompiler, compile_error: type[Exception]
) -> ClaimSpec:
    """A ResourceClaim, or the claim a ResourceClaimTemplate would create (``spec.spec``)."""
    kind = raw.get("kind")
    if kind not in ("ResourceClaim", "ResourceClaimTemplate"):
        raise AllocatorInputError(
            f"claim #{index}: kind: expected ResourceClaim or ResourceClaimTemplate, not {kind!r}"
        )
    label = f"{kind} {object_ref(raw)}"
    spec = raw.get("spec")
    prefix = "spec"
    if kind == "ResourceClaimTemplate":
        spec = spec.get("spec") if isinstance(spec, Mapping) else None
        prefix = "spec.spec"
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise AllocatorInputError(f"{label}: {prefix}: must be an object")
    devices = spec.get("devices") or {}
    if not isinstance(devices, Mapping):
        raise AllocatorInputError(f"{label}: {prefix}.devices: must be an object")
    requests_raw = devices.get("requests") or []
    if not isinstance(requests_raw, list):
        raise AllocatorInputError(f"{label}: {prefix}.devices.requests: must be a list")

    groups: list[RequestGroup] = []
    seen: set[str] = set()
    for i, req in enumerate(requests_raw):
        where = f"{prefix}.devices.requests[{i}]"
        if not isinstance(req, Mapping):
            raise AllocatorInputError(f"{label}: {where}: must be an object")
        name = _name(req.get("name"), f"{where}.name", label)
        if name in seen:
            raise AllocatorInputError(f"{label}: {where}.name: duplicate request name {name!r}")
        seen.add(name)
        exactly = req.get("exactly")
        first = req.get("firstAvailable")
        if exactly is not None and first:
            raise AllocatorInputError(f"{label}: {where}: exactly one of exactly or firstAvailable may be set")
        if exactly is not None:
            if not isinstance(exactly, Mapping):
                raise AllocatorInputError(f"{label}: {where}.exactly: must be an object")
            body = _parse_request_body(exactly, name, "", f"{where}.exactly", label, compile_selector, compile_error)
            groups.append(RequestGroup(name, body, ()))
        elif first:
            if not isinstance(first, list):
                raise AllocatorInputError(f"{label}: {where}.firstAvailable: must be a list")
            subs = []
            for j, sub in enumerate(first):
                s_where = f"{where}.firstAvailable[{j}]"
                if not isinstance(sub, Mapping):
                    raise AllocatorInputError(f"{label}: {s_where}: must be an object")
                # A subrequest name given twice is the API server's to refuse: the allocator
                # tries subrequests by position (upstream's allocates such a claim).
                sub_name = _name(sub.get("name"), f"{s_where}.name", label)
                if sub.get("adminAccess") is not None:
                    raise AllocatorInputError(f"{label}: {s_where}.adminAccess: not allowed in a subrequest")
                subs.append(_parse_request_body(sub, sub_name, name, s_where, label, compile_selector, compile_error))
            groups.append(RequestGroup(name, None, tuple(subs)))
        else:
            raise AllocatorInputError(f"{label}: {where}: one of exactly or firstAvailable is required")

    constraints: list[ConstraintSpec] = []
    constraints_raw = devices.get("constraints") or []
    if not isinstance(constraints_raw, list):
        raise AllocatorInputError(f"{label}: {prefix}.devices.constraints: must be a list")
    known = {g.name for g in groups} | {s.full_name for g in groups for s in g.subrequests}
    for i, c in enumerate(constraints_raw):
        where = f"{prefix}.devices.constraints[{i}]"
        if not isinstance(c, Mapping):
            raise AllocatorInputError(f"{label}: {where}: must be an object")
        kinds = [k for k in ("matchAttribute", "distinctAttribute") if c.get(k) is not None]
        if len(kinds) != 1:
            # The allocator's "empty constraint (unsupported constraint type?)".
            raise AllocatorInputError(
                f"{label}: {where}: exactly one of matchAttribute or distinctAttribute is required"
            )
        attribute = c[kinds[0]]
        if not isinstance(attribute, str) or "/" not in attribute:
            raise AllocatorInputError(
                f"{label}: {where}.{kinds[0]}: must be a fully qualified attribute name (domain/name)"
            )
        refs = c.get("requests") or []
        if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
            raise AllocatorInputError(f"{label}: {where}.requests: must be a list of request names")
        for j, ref in enumerate(refs):
            if ref not in known:
                raise AllocatorInputError(f"{label}: {where}.requests[{j}]: unknown request {ref!r}")
        constraints.append(ConstraintSpec(kinds[0], attribute, frozenset(refs)))

    return ClaimSpec(kind=str(kind), ref=object_ref(raw), requests=tuple(groups), constraints=tuple(constraints))
