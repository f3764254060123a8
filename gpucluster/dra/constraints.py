"""Claim constraints as the search checks them, and the device attribute values they compare.

``matchAttribute`` and ``distinctAttribute`` (upstream's ``matchAttributeConstraint`` and
``distinctAttributeConstraint``), plus their set forms for DRAListTypeAttributes. Kept apart
from the search because what two attribute values have in common is a question of the API's
value types, not of the order devices are tried in; the search only adds and removes devices.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpucluster.dra.claims import ConstraintSpec
from gpucluster.dra.model import Semantics
from gpucluster.dra.pools import Device


def _attribute_value(raw: Any) -> tuple[str, Any] | None:
    """A comparable attribute value; None for an unknown value type."""
    if type(raw) is not dict and not isinstance(raw, Mapping):  # the ABC check is slow: dicts first
        return None
    for kind in ("string", "int", "bool", "version"):
        value = raw.get(kind)
        if value is not None:
            return (kind, value)
    return None


MISSING = object()
"""The value of an attribute the device does not have (None is a value of an unknown type)."""


def lookup_attribute(device: Device, name: str) -> Any:
    """The raw attribute for a fully qualified name (``lookupAttribute``); MISSING if absent."""
    attrs = device.attributes
    if name in attrs:
        return attrs[name]
    domain, _, ident = name.partition("/")
    if domain == device.key[0] and ident in attrs:
        return attrs[ident]
    return MISSING


def value_of(device: Device, name: str) -> Any:
    """The comparable value of attribute ``name`` (None: unknown type; MISSING: not set), cached
    on the device: constraints ask for the same few attributes of every device again and again."""
    cache = device.values
    if cache is None:
        cache = device.values = {}
    else:
        value = cache.get(name, MISSING)
        if value is not MISSING or name in cache:
            return value
    # lookup_attribute and _attribute_value, inlined: this runs for every device of every node.
    attrs = device.attributes
    raw = attrs.get(name, MISSING)
    if raw is MISSING:
        domain, _, ident = name.partition("/")
        if domain == device.key[0]:
            raw = attrs.get(ident, MISSING)
    if raw is MISSING:
        value = MISSING
    elif type(raw) is dict and raw.get("string") is not None:
        value = ("string", raw["string"])
    else:
        value = _attribute_value(raw)
    cache[name] = value
    return value


# DRAListTypeAttributes: attributeAsSet's order, the list fields (non-empty) before the scalars.
_LIST_FIELDS = (("ints", "int"), ("bools", "bool"), ("strings", "string"), ("versions", "version"))
_SCALAR_FIELDS = ("int", "bool", "string", "version")

AttributeSet = tuple[str, frozenset[Any]]


def _attribute_set(raw: Any) -> AttributeSet | None:
    """``attributeAsSet``: (kind, values) of a list attribute or a scalar one; None when it has
    no (non-empty) value of a known type."""
    if not isinstance(raw, Mapping):
        return None
    try:
        for key, kind in _LIST_FIELDS:
            values = raw.get(key)
            if type(values) is list and values:
                return (kind, frozenset(values))
        for kind in _SCALAR_FIELDS:
            value = raw.get(kind)
            if value is not None:
                return (kind, frozenset((value,)))
    except TypeError:
        return None  # an unhashable element: not a value the API server stores
    return None


def set_of(device: Device, name: str) -> Any:
    """The :func:`_attribute_set` of attribute ``name`` (None: unknown type; MISSING: not set),
    cached on the device next to :func:`value_of`'s values."""
    cache = device.values
    if cache is None:
        cache = device.values = {}
    key = "\x00" + name  # never an attribute name
    found = cache.get(key, MISSING)
    if found is MISSING and key not in cache:
        raw = lookup_attribute(device, name)
        found = cache[key] = MISSING if raw is MISSING else _attribute_set(raw)
    return found


def _needs_sets(device: Device, name: str) -> bool:
    """Whether set semantics could decide differently from scalar ones for this device: its
    attribute has a list field, no value of a known type, or more than one value field."""
    raw = lookup_attribute(device, name)
    if raw is MISSING:
        return False
    if type(raw) is not dict or value_of(device, name) is None:
        return True
    return sum(1 for v in raw.values() if v is not None) != 1


def _show_set(found: AttributeSet) -> str:
    kind, values = found
    return "[" + ", ".join(sorted(show_value((kind, v)) for v in values)) + "]"


def show_value(value: tuple[str, Any] | None) -> str:
    """An attribute value as messages show it: strings quoted, "?" for an unknown type."""
    return "?" if value is None else repr(value[1]) if value[0] == "string" else str(value[1])


@functools.lru_cache(maxsize=256)  # one constraint object per node: the same few labels
def _label(kind: str, attribute: str) -> str:
    return f"constraint {kind} {attribute}"


class Constraint:
    """A claim constraint over the devices chosen so far, which the search adds and removes."""

    __slots__ = ("label", "spec")

    def __init__(self, spec: ConstraintSpec) -> None:
        self.spec = spec
        self.label = _label(spec.kind, spec.attribute)

    def add(self, device: Device, request: int) -> str:
        """Add the device chosen for the claim's request ``request`` (its index), or say why not."""
        raise NotImplementedError

    def remove(self, device: Device, request: int) -> None:
        raise NotImplementedError


class MatchAttribute(Constraint):
    """All devices share the value (``matchAttributeConstraint``)."""

    __slots__ = ("count", "value")

    def __init__(self, spec: ConstraintSpec) -> None:
        super().__init__(spec)
        self.count = 0
        self.value: tuple[str, Any] | None = None

    def add(self, device: Device, request: int) -> str:
        value = value_of(device, self.spec.attribute)
        if value is MISSING:
            return f"{self.label} (attribute not set)"
        if self.count == 0:
            self.value = value
        elif value is None or value != self.value:
            return f"{self.label} ({show_value(value)} differs from {show_value(self.value)} of the devices already chosen)"
        self.count += 1
        return ""

    def remove(self, device: Device, request: int) -> None:
        self.count -= 1


class DistinctAttribute(Constraint):
    """``distinctAttributeConstraint`` as upstream has it (1.34 to 1.37): it remembers one value
    per request, the last device's, so a device is refused only when its value equals the
    remembered value of some request; a request's earlier devices are forgotten as the next one
    is added, and removing any device of a request forgets the request's value."""

    __slots__ = ("by_identity", "count", "values")

    def __init__(self, spec: ConstraintSpec, by_identity: bool = False) -> None:
        super().__init__(spec)
        self.values: dict[int, Any] = {}
        self.count = 0
        # Semantics.distinct_by_identity (1.34): the remembered "value" is the device itself.
        self.by_identity = by_identity

    def add(self, device: Device, request: int) -> str:
        value = value_of(device, self.spec.attribute)
        if value is MISSING:
            return f"{self.label} (attribute not set)"
        if value is None:
            return f"{self.label} (unknown attribute type)"
        remembered = device.key if self.by_identity else value
        if self.count and remembered in self.values.values():
            return f"{self.label} ({show_value(value)} already chosen)"
        self.values[request] = remembered
        self.count += 1
        return ""

    def remove(self, device: Device, request: int) -> None:
        self.values.pop(request, None)
        self.count -= 1


class SetConstraint(Constraint):
    """A constraint over attribute sets (DRAListTypeAttributes); ``chosen``: one entry per
    device added, so ``remove`` restores what was before."""

    __slots__ = ("chosen",)

    def __init__(self, spec: ConstraintSpec) -> None:
        super().__init__(spec)
        self.chosen: list[AttributeSet] = []

    def add(self, device: Device, request: int) -> str:
        found = set_of(device, self.spec.attribute)
        if found is MISSING:
            return f"{self.label} (attribute not set)"
        if found is None:
            return f"{self.label} (unknown attribute type)"
        kept = self._keep(found)
        if isinstance(kept, str):
            return kept
        self.chosen.append(kept)
        return ""

    def _keep(self, found: AttributeSet) -> AttributeSet | str:
        """What to remember for this device, or why it cannot be added."""
        raise NotImplementedError

    def remove(self, device: Device, request: int) -> None:
        self.chosen.pop()


class MatchAttributeSet(SetConstraint):
    """DRAListTypeAttributes' ``matchAttribute``: the devices' sets have an element in common.

    The common elements of the chosen devices are kept per device, so removing one restores
    them (upstream's experimental allocator keeps only the running intersection and does not
    widen it again on backtracking, which can miss a solution a later combination has).
    """

    __slots__ = ()

    def _keep(self, found: AttributeSet) -> AttributeSet | str:
        # chosen[-1]: the elements common to every device chosen so far.
        if not self.chosen:
            return found
        kind, common = self.chosen[-1]
        both = common & found[1] if found[0] == kind else frozenset()
        if not both:
            return (
                f"{self.label} ({_show_set(found)} has no value in common with "
                f"{_show_set(self.chosen[-1])} of the devices already chosen)"
            )
        return (kind, both)


class DistinctAttributeSet(SetConstraint):
    """DRAListTypeAttributes' ``distinctAttribute``: the devices' sets are pairwise disjoint."""

    __slots__ = ()

    def _keep(self, found: AttributeSet) -> AttributeSet | str:
        for other in self.chosen:
            if other[0] == found[0] and other[1] & found[1]:
                return f"{self.label} ({_show_set(found)} shares a value with {_show_set(other)} already chosen)"
        return found


def constraint_for_node(spec: ConstraintSpec, semantics: Semantics, devices: Sequence[Device]) -> Constraint:
    """The constraint's search object: with DRAListTypeAttributes on, the set one where some
    device of the node (``devices``) makes set semantics differ (the scalar ones are pruned,
    these not)."""
    if semantics.list_type_attributes and any(_needs_sets(d, spec.attribute) for d in devices):
        return MatchAttributeSet(spec) if spec.kind == "matchAttribute" else DistinctAttributeSet(spec)
    if spec.kind == "matchAttribute":
        return MatchAttribute(spec)
    return DistinctAttribute(spec, by_identity=semantics.distinct_by_identity)


def _same_raw(devices: Sequence[Device | None], name: str, domain: str, ident: str) -> Any:
    """The raw attribute ``name`` (``lookup_attribute``'s order) every device has, equal on all
    of them; MISSING if there is none."""
    first: Any = MISSING
    for d in devices:
        if d is None:
            return MISSING
        attrs = d.attributes
        raw = attrs.get(name, MISSING)
        if raw is MISSING and domain == d.key[0]:
            raw = attrs.get(ident, MISSING)
        if raw is MISSING:
            return MISSING
        if first is MISSING:
            first = raw
        elif raw is not first and raw != first:
            return MISSING
    return first


class NodeValues:
    """The values of the attributes a node's constraints read, for each of its search entries
    (``devices``: None for an entry without a device), a column per attribute worked out once
    for the node: the constraints' static reasons and the pruning's groups of devices by value
    read whole columns, for every request, where one lookup per device and request cost more
    than the rest of a constrained claim's search on a node of plain GPUs.

    A column holds :func:`value_of` of each device (MISSING for an entry without a device).
    """

    __slots__ = ("columns", "devices", "groups", "settled", "unknown", "unset")

    def __init__(self, devices: Sequence[Device | None]) -> None:
        self.devices = devices
        self.columns: dict[str, list[Any]] = {}
        # attribute -> value of a known type -> the indices of the entries with it, in order
        # (None: some value cannot be a key); filled with the column
        self.groups: dict[str, dict[Any, list[int]] | None] = {}
        # attribute -> whether some device lacks it / has a value of unknown type (with the column)
        self.unset: dict[str, bool] = {}
        self.unknown: dict[str, bool] = {}
        # attribute -> the one value every device has (None: not every device has the same
        # value of a known type), see settled_value
        self.settled: dict[str, Any] = {}

    def column(self, name: str) -> list[Any]:
        """:func:`value_of` ``name`` of every entry."""
        found = self.columns.get(name)
        if found is not None:
            return found
        out: list[Any] = []
        append = out.append
        domain, _, ident = name.partition("/")
        for d in self.devices:
            if d is None:
                append(MISSING)
                continue
            # value_of's common case, inlined (its per-device cache is not needed: the column is
            # the cache); anything else as value_of has it.
            attrs = d.attributes
            raw = attrs.get(name, MISSING)
            if raw is MISSING and domain == d.key[0]:
                raw = attrs.get(ident, MISSING)
            if type(raw) is dict:
                text = raw.get("string")
                if text is not None:
                    append(("string", text))
                    continue
            append(value_of(d, name))
        self.columns[name] = out
        groups: dict[Any, list[int]] | None = {}
        unset = unknown = False
        for i, value in enumerate(out):
            if value is MISSING:
                unset = unset or self.devices[i] is not None
            elif value is None:
                unknown = True
            elif groups is not None:
                try:
                    found_group = groups.get(value)
                except TypeError:
                    groups = None  # an unhashable value: the constraint's own code says what happens
                    continue
                if found_group is None:
                    groups[value] = [i]
                else:
                    found_group.append(i)
        self.groups[name] = groups
        self.unset[name] = unset
        self.unknown[name] = unknown
        return out

    def known(self, name: str) -> list[Any]:
        """The column with None for every entry without a value of a known type (MISSING too)."""
        key = "\x00" + name  # never an attribute name
        found = self.columns.get(key)
        if found is None:
            found = self.columns[key] = [None if v is MISSING else v for v in self.column(name)]
        return found

    def settled_value(self, name: str) -> Any:
        """The value of a known type every entry's device has for ``name``; None if there is no
        such value (some entry has no device, lacks the attribute, has a value of unknown type or
        another value than the first).

        The raw attributes are compared, not their values: equal raw attributes have equal
        values, and a node of one product publishes the same raw attribute on every device, so
        no value is built for the common case. (Unequal raw attributes may still have equal
        values: then the answer is None, and the column decides.)"""
        if name in self.settled:
            return self.settled[name]
        value = None
        devices = self.devices
        if devices and devices[0] is not None:
            domain, _, ident = name.partition("/")
            first = _same_raw(devices, name, domain, ident)
            if first is not MISSING:
                value = value_of(devices[0], name)
                if value is MISSING:
                    value = None
                elif value is not None:
                    try:
                        hash(value)
                    except TypeError:
                        value = None  # not a value the API stores: the constraint's code says what happens
        self.settled[name] = value
        return value

    def static_reasons(self, constraints: Sequence[Constraint]) -> list[str] | None:
        """:func:`static_reason` of every entry's device (entries without one: ""), None when it
        is "" for all of them."""
        reasons: list[str] | None = None
        # The last constraint first: the first constraint's reason is the one a device keeps.
        for c in reversed(constraints):
            if isinstance(c, SetConstraint):
                name = c.spec.attribute
                column = [MISSING if d is None else set_of(d, name) for d in self.devices]
                unknown_fails = True
            else:
                if self.settled_value(c.spec.attribute) is not None:
                    continue  # every device has the attribute, of a known type
                column = self.column(c.spec.attribute)
                unknown_fails = isinstance(c, DistinctAttribute)
                if not self.unset[c.spec.attribute] and not (unknown_fails and self.unknown[c.spec.attribute]):
                    continue  # every device has the attribute, of a known type if that matters
            for i, value in enumerate(column):
                if value is MISSING:
                    if self.devices[i] is None:
                        continue
                    reason = f"{c.label} (attribute not set)"
                elif value is None and unknown_fails:
                    reason = f"{c.label} (unknown attribute type)"
                else:
                    continue
                if reasons is None:
                    reasons = [""] * len(column)
                reasons[i] = reason
        return reasons


def static_reason(constraints: Iterable[Constraint], d: Device) -> str:
    """Why the device can never be added to ``constraints``, whatever else is chosen ("" if it can)."""
    for c in constraints:
        if isinstance(c, SetConstraint):
            found = set_of(d, c.spec.attribute)
            if found is MISSING:
                return f"{c.label} (attribute not set)"
            if found is None:
                return f"{c.label} (unknown attribute type)"
            continue
        value = value_of(d, c.spec.attribute)
        if value is MISSING:
            return f"{c.label} (attribute not set)"
        if isinstance(c, DistinctAttribute) and value is None:
            return f"{c.label} (unknown attribute type)"
    return ""
