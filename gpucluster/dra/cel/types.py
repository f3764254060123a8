"""Static CEL types and the type-parameter unification used by the checker.

The rules follow cel-go's checker (``checker/types.go``): ``dyn`` and ``any`` are assignable
to and from everything, type parameters are bound on first use and widened to the most
general type, and ``null`` is assignable to the nullable kinds.
"""

from __future__ import annotations

from typing import Final


class Type:
    """An immutable CEL type: a kind (``int``, ``list``, ``kubernetes.Quantity`` ...) plus parameters."""

    __slots__ = ("kind", "params")

    def __init__(self, kind: str, params: tuple[Type, ...] = ()) -> None:
        self.kind = kind
        self.params = params

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Type) and self.kind == other.kind and self.params == other.params

    def __hash__(self) -> int:
        return hash((self.kind, self.params))

    def __repr__(self) -> str:
        return f"Type({self})"

    def __str__(self) -> str:
        if self.kind == "list":
            return f"list({self.params[0]})"
        if self.kind == "map":
            return f"map({self.params[0]}, {self.params[1]})"
        if self.kind in ("optional_type", "type") and self.params:
            return f"{self.kind}({self.params[0]})"
        return self.kind

    @property
    def is_param(self) -> bool:
        return self.kind.startswith("_var") or self.kind in ("A", "B", "C")


INT: Final = Type("int")
UINT: Final = Type("uint")
DOUBLE: Final = Type("double")
BOOL: Final = Type("bool")
STRING: Final = Type("string")
BYTES: Final = Type("bytes")
NULL: Final = Type("null_type")
DYN: Final = Type("dyn")
ANY: Final = Type("any")
ERROR: Final = Type("*error*")
QUANTITY: Final = Type("kubernetes.Quantity")
SEMVER: Final = Type("kubernetes.Semver")
DEVICE: Final = Type("kubernetes.DRADevice")
TIMESTAMP: Final = Type("google.protobuf.Timestamp")
DURATION: Final = Type("google.protobuf.Duration")
TYPE: Final = Type("type")

A: Final = Type("A")
B: Final = Type("B")


def list_of(t: Type) -> Type:
    return Type("list", (t,))


def map_of(k: Type, v: Type) -> Type:
    return Type("map", (k, v))


def optional_of(t: Type) -> Type:
    return Type("optional_type", (t,))


def type_of(t: Type) -> Type:
    return Type("type", (t,))


PRIMITIVE_KINDS: Final = frozenset({"int", "uint", "double", "bool", "string", "bytes"})
_NULLABLE_KINDS: Final = frozenset(
    {"any", "google.protobuf.Timestamp", "google.protobuf.Duration", "kubernetes.DRADevice", "null_type"}
)
_OPAQUE_KINDS: Final = frozenset({"kubernetes.Quantity", "kubernetes.Semver", "optional_type"})


def is_dyn(t: Type) -> bool:
    return t.kind in ("dyn", "any")


def is_dyn_or_error(t: Type) -> bool:
    return t.kind in ("dyn", "any", "*error*")


class Mapping:
    """Type-parameter substitutions (type variable name -> type)."""

    __slots__ = ("subs",)

    def __init__(self, subs: dict[str, Type] | None = None) -> None:
        self.subs: dict[str, Type] = dict(subs or {})

    def copy(self) -> Mapping:
        return Mapping(self.subs)

    def find(self, t: Type) -> Type | None:
        return self.subs.get(t.kind)


def _less_specific(t1: Type, t2: Type) -> bool:
    """True when t1 is as or less specific than t2 (dyn is the least specific)."""
    if is_dyn(t1) or t1.is_param:
        return True
    if is_dyn(t2) or t2.is_param:
        return False
    if t1.kind != t2.kind or len(t1.params) != len(t2.params):
        return False
    if t1.kind == "type":
        return True
    return all(_less_specific(p1, p2) for p1, p2 in zip(t1.params, t2.params, strict=True))


def most_general(t1: Type, t2: Type) -> Type:
    return t1 if _less_specific(t1, t2) else t2


def _not_referenced_in(m: Mapping, t: Type, within: Type) -> bool:
    if t == within:
        return False
    if within.is_param:
        sub = m.find(within)
        return True if sub is None else _not_referenced_in(m, t, sub)
    return all(_not_referenced_in(m, t, p) for p in within.params)


def _valid_substitution(m: Mapping, t1: Type, t2: Type) -> tuple[bool, bool]:
    if t1 == t2:
        return True, True
    sub = m.find(t2)
    if sub is not None:
        if t1 == sub:
            return True, True
        if _assignable(m, t1, sub):
            new = most_general(t1, sub)
            if _not_referenced_in(m, t2, new):
                m.subs[t2.kind] = new
            return True, True
        return False, True
    if _not_referenced_in(m, t2, t1):
        m.subs[t2.kind] = t1
        return True, False
    return False, False


def _assignable(m: Mapping, t1: Type, t2: Type) -> bool:
    """Whether a value of type t1 may be passed where t2 is expected (updates ``m``)."""
    if t2.is_param:
        valid, has_sub = _valid_substitution(m, t1, t2)
        if valid:
            return True
        if has_sub:
            return False
    if t1.is_param:
        return _valid_substitution(m, t2, t1)[0]
    if is_dyn_or_error(t1) or is_dyn_or_error(t2):
        return True
    if t1.kind == "null_type":
        return t2.kind in _NULLABLE_KINDS or t2.kind in _OPAQUE_KINDS
    if t2.kind == "null_type":
        return t1.kind in _NULLABLE_KINDS or t1.kind in _OPAQUE_KINDS
    if t1.kind == "type":
        return t2.kind == "type"
    if t1.kind != t2.kind or len(t1.params) != len(t2.params):
        return False
    return all(_assignable(m, p1, p2) for p1, p2 in zip(t1.params, t2.params, strict=True))


def is_assignable(m: Mapping, t1: Type, t2: Type) -> Mapping | None:
    """A copy of ``m`` extended so that t1 is assignable to t2, or None."""
    copy = m.copy()
    return copy if _assignable(copy, t1, t2) else None


def is_assignable_list(m: Mapping, l1: list[Type], l2: list[Type]) -> Mapping | None:
    if len(l1) != len(l2):
        return None
    copy = m.copy()
    for t1, t2 in zip(l1, l2, strict=True):
        if not _assignable(copy, t1, t2):
            return None
    return copy


def substitute(m: Mapping, t: Type, params_to_dyn: bool) -> Type:
    sub = m.find(t) if t.is_param else None
    if sub is not None:
        return substitute(m, sub, params_to_dyn)
    if params_to_dyn and t.is_param:
        return DYN
    if not t.params:
        return t
    return Type(t.kind, tuple(substitute(m, p, params_to_dyn) for p in t.params))


def rename_params(t: Type, fresh: dict[str, Type]) -> Type:
    """Replace the declaration's type parameters (A, B) by fresh checker variables."""
    if t.kind in fresh:
        return fresh[t.kind]
    if not t.params:
        return t
    return Type(t.kind, tuple(rename_params(p, fresh) for p in t.params))


def has_params(t: Type) -> bool:
    return t.is_param or any(has_params(p) for p in t.params)
