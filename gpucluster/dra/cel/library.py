"""Function declarations (for the checker) and implementations (for evaluation).

What is declared is what Kubernetes' DRA selector environment offers (``environment/base.go``
at the compatibility version of Kubernetes 1.34, plus the DRA additions of
``dynamic-resource-allocation/cel/compile.go``): the CEL standard library, optional types,
``ext.Strings`` version 2, ``ext.Sets``, ``ext.Lists`` (slice, flatten, distinct, reverse,
sort, lists.range), ``ext.Bindings``, Kubernetes' lists, regex, quantity and semver libraries.

Each CEL function has one Python implementation that takes CEL values (receiver first) and
checks their runtime types itself, raising ``no such overload`` when none applies; the
checker's overload declarations decide what compiles.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from gpucluster.dra.cel import types as t
from gpucluster.dra.cel.errors import CelRuntimeError
from gpucluster.dra.cel.regex import compile_regex, find_all, find_first
from gpucluster.dra.cel.values import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    CelType,
    Optional,
    Uint,
    check_int,
    compare,
    equals,
    format_double,
    format_value,
    int_overflow,
    no_such_overload,
    type_name,
    uint_overflow,
)
from gpucluster.dra.quantity import PARSED, Quantity, QuantityError, parse_cached
from gpucluster.dra.semver import Semver, SemverError


@dataclass(frozen=True)
class Overload:
    id: str
    params: tuple[t.Type, ...]  # the receiver first for member overloads
    result: t.Type
    member: bool = False


DECLS: dict[str, list[Overload]] = {}
IMPLS: dict[str, Callable[..., Any]] = {}


def _decl(name: str, *overloads: Overload) -> None:
    DECLS.setdefault(name, []).extend(overloads)


def _g(oid: str, params: tuple[t.Type, ...], result: t.Type) -> Overload:
    return Overload(oid, params, result, False)


def _m(oid: str, params: tuple[t.Type, ...], result: t.Type) -> Overload:
    return Overload(oid, params, result, True)


_F = TypeVar("_F", bound=Callable[..., Any])


def _impl(name: str) -> Callable[[_F], _F]:
    def register(fn: _F) -> _F:
        IMPLS[name] = fn
        return fn

    return register


A, B = t.A, t.B
INT, UINT, DOUBLE, BOOL, STRING, BYTES = t.INT, t.UINT, t.DOUBLE, t.BOOL, t.STRING, t.BYTES
DYN, QUANTITY, SEMVER = t.DYN, t.QUANTITY, t.SEMVER
LIST_A = t.list_of(A)
MAP_AB = t.map_of(A, B)
OPT_A = t.optional_of(A)

# -- operators -----------------------------------------------------------------------------

_decl("!_", _g("logical_not", (BOOL,), BOOL))
_decl("-_", _g("negate_int64", (INT,), INT), _g("negate_double", (DOUBLE,), DOUBLE))
_decl("_==_", _g("equals", (A, A), BOOL))
_decl("_!=_", _g("not_equals", (A, A), BOOL))
_decl("_?_:_", _g("conditional", (BOOL, A, A), A))
_decl("@in", _g("in_list", (A, LIST_A), BOOL), _g("in_map", (A, MAP_AB), BOOL))
_decl(
    "_+_",
    _g("add_int64", (INT, INT), INT),
    _g("add_uint64", (UINT, UINT), UINT),
    _g("add_double", (DOUBLE, DOUBLE), DOUBLE),
    _g("add_string", (STRING, STRING), STRING),
    _g("add_bytes", (BYTES, BYTES), BYTES),
    _g("add_list", (LIST_A, LIST_A), LIST_A),
)
for _op, _name in (("_-_", "subtract"), ("_*_", "multiply"), ("_/_", "divide")):
    _decl(
        _op,
        _g(f"{_name}_int64", (INT, INT), INT),
        _g(f"{_name}_uint64", (UINT, UINT), UINT),
        _g(f"{_name}_double", (DOUBLE, DOUBLE), DOUBLE),
    )
_decl("_%_", _g("modulo_int64", (INT, INT), INT), _g("modulo_uint64", (UINT, UINT), UINT))

_ORDERED = (BOOL, INT, UINT, DOUBLE, STRING, BYTES)
for _op, _name in (("_<_", "less"), ("_<=_", "less_equals"), ("_>_", "greater"), ("_>=_", "greater_equals")):
    _decl(_op, *(_g(f"{_name}_{x.kind}", (x, x), BOOL) for x in _ORDERED))
    # cel.CrossTypeNumericComparisons(true), enabled by Kubernetes since 1.28.
    _decl(
        _op,
        *(
            _g(f"{_name}_{x.kind}_{y.kind}", (x, y), BOOL)
            for x in (INT, UINT, DOUBLE)
            for y in (INT, UINT, DOUBLE)
            if x != y
        ),
    )

# -- standard functions --------------------------------------------------------------------

_decl(
    "size",
    *(_g(f"size_{x.kind}", (x,), INT) for x in (STRING, BYTES)),
    _g("size_list", (LIST_A,), INT),
    _g("size_map", (MAP_AB,), INT),
    *(_m(f"{x.kind}_size", (x,), INT) for x in (STRING, BYTES)),
    _m("list_size", (LIST_A,), INT),
    _m("map_size", (MAP_AB,), INT),
)
_decl("type", _g("type", (A,), t.type_of(A)))
_decl("dyn", _g("to_dyn", (A,), DYN))
_decl(
    "int",
    _g("int64_to_int64", (INT,), INT),
    _g("uint64_to_int64", (UINT,), INT),
    _g("double_to_int64", (DOUBLE,), INT),
    _g("string_to_int64", (STRING,), INT),
)
_decl(
    "uint",
    _g("uint64_to_uint64", (UINT,), UINT),
    _g("int64_to_uint64", (INT,), UINT),
    _g("double_to_uint64", (DOUBLE,), UINT),
    _g("string_to_uint64", (STRING,), UINT),
)
_decl(
    "double",
    _g("double_to_double", (DOUBLE,), DOUBLE),
    _g("int64_to_double", (INT,), DOUBLE),
    _g("uint64_to_double", (UINT,), DOUBLE),
    _g("string_to_double", (STRING,), DOUBLE),
)
_decl("string", *(_g(f"{x.kind}_to_string", (x,), STRING) for x in (STRING, BOOL, INT, UINT, DOUBLE, BYTES)))
_decl("bytes", _g("bytes_to_bytes", (BYTES,), BYTES), _g("string_to_bytes", (STRING,), BYTES))
_decl("bool", _g("bool_to_bool", (BOOL,), BOOL), _g("string_to_bool", (STRING,), BOOL))
for _fn in ("contains", "startsWith", "endsWith"):
    _decl(_fn, _m(f"{_fn}_string", (STRING, STRING), BOOL))
_decl("matches", _g("matches", (STRING, STRING), BOOL), _m("matches_string", (STRING, STRING), BOOL))

# -- optional types (cel.OptionalTypes) ----------------------------------------------------

_decl("optional.of", _g("optional_of", (A,), OPT_A))
_decl("optional.ofNonZeroValue", _g("optional_ofNonZeroValue", (A,), OPT_A))
_decl("optional.none", _g("optional_none", (), OPT_A))
_decl("hasValue", _m("optional_hasValue", (OPT_A,), BOOL))
_decl("value", _m("optional_value", (OPT_A,), A))
_decl("orValue", _m("optional_orValue_value", (OPT_A, A), A))
_decl("or", _m("optional_or_optional", (OPT_A, OPT_A), OPT_A))

# -- ext.Strings version 2 -----------------------------------------------------------------

_decl("charAt", _m("string_char_at_int", (STRING, INT), STRING))
_decl(
    "indexOf",
    _m("string_index_of_string", (STRING, STRING), INT),
    _m("string_index_of_string_int", (STRING, STRING, INT), INT),
    _m("list_a_index_of_int", (LIST_A, A), INT),
)
_decl(
    "lastIndexOf",
    _m("string_last_index_of_string", (STRING, STRING), INT),
    _m("string_last_index_of_string_int", (STRING, STRING, INT), INT),
    _m("list_a_last_index_of_int", (LIST_A, A), INT),
)
_decl("lowerAscii", _m("string_lower_ascii", (STRING,), STRING))
_decl("upperAscii", _m("string_upper_ascii", (STRING,), STRING))
_decl(
    "replace",
    _m("string_replace_string_string", (STRING, STRING, STRING), STRING),
    _m("string_replace_string_string_int", (STRING, STRING, STRING, INT), STRING),
)
_decl(
    "split",
    _m("string_split_string", (STRING, STRING), t.list_of(STRING)),
    _m("string_split_string_int", (STRING, STRING, INT), t.list_of(STRING)),
)
_decl(
    "substring",
    _m("string_substring_int", (STRING, INT), STRING),
    _m("string_substring_int_int", (STRING, INT, INT), STRING),
)
_decl("trim", _m("string_trim", (STRING,), STRING))
_decl(
    "join",
    _m("list_join", (t.list_of(STRING),), STRING),
    _m("list_join_string", (t.list_of(STRING), STRING), STRING),
)
_decl("strings.quote", _g("strings_quote", (STRING,), STRING))
_decl("format", _m("string_format", (STRING, t.list_of(DYN)), STRING))

# -- ext.Sets ------------------------------------------------------------------------------

for _fn in ("contains", "equivalent", "intersects"):
    _decl(f"sets.{_fn}", _g(f"list_sets_{_fn}_list", (LIST_A, LIST_A), BOOL))

# -- ext.Lists version 3 (Kubernetes 1.34) ---------------------------------------------------

_COMPARABLE = (INT, UINT, DOUBLE, BOOL, STRING, BYTES)
_decl("slice", _m("list_slice", (LIST_A, INT, INT), LIST_A))
_decl(
    "flatten",
    _m("list_flatten", (t.list_of(LIST_A),), LIST_A),
    _m("list_flatten_int", (t.list_of(DYN), INT), t.list_of(DYN)),
)
_decl("distinct", _m("list_distinct", (LIST_A,), LIST_A))
_decl("reverse", _m("list_reverse", (LIST_A,), LIST_A))
_decl("sort", *(_m(f"list_{x.kind}_sort", (t.list_of(x),), t.list_of(x)) for x in _COMPARABLE))
_decl("lists.range", _g("lists_range", (INT,), t.list_of(INT)))

# -- Kubernetes lists library ----------------------------------------------------------------

_decl("isSorted", *(_m(f"list_{x.kind}_is_sorted_bool", (t.list_of(x),), BOOL) for x in _COMPARABLE))
_decl("sum", *(_m(f"list_{x.kind}_sum_{x.kind}", (t.list_of(x),), x) for x in (INT, UINT, DOUBLE)))
_decl("min", *(_m(f"list_{x.kind}_min_{x.kind}", (t.list_of(x),), x) for x in _COMPARABLE))
_decl("max", *(_m(f"list_{x.kind}_max_{x.kind}", (t.list_of(x),), x) for x in _COMPARABLE))

# -- Kubernetes regex library --------------------------------------------------------------

_decl("find", _m("string_find_string", (STRING, STRING), STRING))
_decl(
    "findAll",
    _m("string_find_all_string", (STRING, STRING), t.list_of(STRING)),
    _m("string_find_all_string_int", (STRING, STRING, INT), t.list_of(STRING)),
)

# -- Kubernetes quantity library -----------------------------------------------------------

_decl("quantity", _g("string_to_quantity", (STRING,), QUANTITY))
_decl("isQuantity", _g("is_quantity_string", (STRING,), BOOL))
_decl("sign", _g("quantity_sign", (QUANTITY,), INT))
_decl(
    "isGreaterThan",
    _m("quantity_is_greater_than", (QUANTITY, QUANTITY), BOOL),
    _m("semver_is_greater_than", (SEMVER, SEMVER), BOOL),
)
_decl(
    "isLessThan",
    _m("quantity_is_less_than", (QUANTITY, QUANTITY), BOOL),
    _m("semver_is_less_than", (SEMVER, SEMVER), BOOL),
)
_decl(
    "compareTo",
    _m("quantity_compare_to", (QUANTITY, QUANTITY), INT),
    _m("semver_compare_to", (SEMVER, SEMVER), INT),
)
_decl("asApproximateFloat", _m("quantity_get_float", (QUANTITY,), DOUBLE))
_decl("asInteger", _m("quantity_get_int", (QUANTITY,), INT))
_decl("isInteger", _m("quantity_is_integer", (QUANTITY,), BOOL))
_decl(
    "add",
    _m("quantity_add", (QUANTITY, QUANTITY), QUANTITY),
    _m("quantity_add_int", (QUANTITY, INT), QUANTITY),
)
_decl(
    "sub",
    _m("quantity_sub", (QUANTITY, QUANTITY), QUANTITY),
    _m("quantity_sub_int", (QUANTITY, INT), QUANTITY),
)

# -- Kubernetes semver library (version 1) ---------------------------------------------------

_decl(
    "semver",
    _g("string_to_semver", (STRING,), SEMVER),
    _g("string_bool_to_semver", (STRING, BOOL), SEMVER),
)
_decl(
    "isSemver",
    _g("is_semver_string", (STRING,), BOOL),
    _g("is_semver_string_bool", (STRING, BOOL), BOOL),
)
for _fn in ("major", "minor", "patch"):
    _decl(_fn, _m(f"semver_{_fn}", (SEMVER,), INT))

# Functions of the Kubernetes CEL base environment that this implementation does not offer.
UNSUPPORTED_FUNCTIONS: Final = frozenset(
    {
        "timestamp",
        "duration",
        "getFullYear",
        "getMonth",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getHours",
        "getMinutes",
        "getSeconds",
        "getMilliseconds",
        "url",
        "isURL",
        "ip",
        "isIP",
        "cidr",
        "isCIDR",
        "sortBy",
        "first",
        "last",
        "transformMapEntry",
    }
)


# == implementations =======================================================================


def _err(message: str) -> CelRuntimeError:
    return CelRuntimeError(message)


@_impl("!_")
def not_(x: Any) -> bool:
    if x is True:
        return False
    if x is False:
        return True
    no_such_overload("!_")


@_impl("-_")
def neg(x: Any) -> Any:
    tx = type(x)
    if tx is int:
        if x == INT64_MIN:
            int_overflow()
        return -x
    if tx is float:
        return -x
    no_such_overload("-_")


@_impl("_+_")
def add(a: Any, b: Any) -> Any:
    ta = type(a)
    if ta is type(b):
        if ta is int:
            r = a + b
            if INT64_MIN <= r <= INT64_MAX:
                return r
            int_overflow()
        if ta is float or ta is str or ta is bytes:
            return a + b
        if ta is Uint:
            r = int(a) + int(b)
            if r > UINT64_MAX:
                uint_overflow()
            return Uint(r)
        if ta is list:
            return a + b
    if isinstance(a, list) and isinstance(b, list):
        return list(a) + list(b)
    no_such_overload("_+_")


@_impl("_-_")
def sub(a: Any, b: Any) -> Any:
    ta = type(a)
    if ta is type(b):
        if ta is int:
            r = a - b
            if INT64_MIN <= r <= INT64_MAX:
                return r
            int_overflow()
        if ta is float:
            return a - b
        if ta is Uint:
            r = int(a) - int(b)
            if r < 0:
                uint_overflow()
            return Uint(r)
    no_such_overload("_-_")


@_impl("_*_")
def mul(a: Any, b: Any) -> Any:
    ta = type(a)
    if ta is type(b):
        if ta is int:
            r = a * b
            if INT64_MIN <= r <= INT64_MAX:
                return r
            int_overflow()
        if ta is float:
            return a * b
        if ta is Uint:
            r = int(a) * int(b)
            if r > UINT64_MAX:
                uint_overflow()
            return Uint(r)
    no_such_overload("_*_")


@_impl("_/_")
def div(a: Any, b: Any) -> Any:
    ta = type(a)
    if ta is type(b):
        if ta is int:
            if b == 0:
                raise _err("division by zero")
            if a == INT64_MIN and b == -1:
                int_overflow()
            q = abs(a) // abs(b)
            return q if (a < 0) == (b < 0) else -q
        if ta is float:
            if b == 0.0:
                if a == 0.0 or math.isnan(a):
                    return math.nan
                return math.copysign(math.inf, a) * math.copysign(1.0, b)
            return a / b
        if ta is Uint:
            if b == 0:
                raise _err("division by zero")
            return Uint(int(a) // int(b))
    no_such_overload("_/_")


@_impl("_%_")
def mod(a: Any, b: Any) -> Any:
    ta = type(a)
    if ta is type(b):
        if ta is int:
            if b == 0:
                raise _err("modulus by zero")
            if a == INT64_MIN and b == -1:
                int_overflow()
            r = abs(a) % abs(b)
            return -r if a < 0 else r
        if ta is Uint:
            if b == 0:
                raise _err("modulus by zero")
            return Uint(int(a) % int(b))
    no_such_overload("_%_")


@_impl("_==_")
def eq(a: Any, b: Any) -> bool:
    return equals(a, b)


@_impl("_!=_")
def ne(a: Any, b: Any) -> bool:
    return not equals(a, b)


@_impl("@in")
def in_(elem: Any, container: Any) -> bool:
    if isinstance(container, list):
        for item in container:
            try:
                if equals(item, elem):
                    return True
            except CelRuntimeError:
                continue
        return False
    if isinstance(container, dict):
        from gpucluster.dra.cel.values import map_contains

        return map_contains(container, elem)
    no_such_overload("@in")


# DRAListTypeAttributes: ``<target>.includes(<arg>)`` (compile.go's includesFunc), declared only
# with the gate on (see LIST_DECLS); lists longer than ResourceSliceMaxAttributeValuesPerDevice
# are an error once that many items did not match.
MAX_ATTRIBUTE_VALUES: Final = 48  # resourceapi.ResourceSliceMaxAttributeValuesPerDevice
LIST_DECLS: Final[dict[str, list[Overload]]] = {
    "includes": [Overload("dra_includes_dyn_dyn", (t.DYN, t.DYN), t.BOOL, True)]
}


def _equal(a: Any, b: Any) -> bool:
    try:
        return equals(a, b)
    except CelRuntimeError:
        return False  # ref.Val.Equal gave an error, which is not types.True


@_impl("includes")
def includes(target: Any, arg: Any) -> bool:
    if isinstance(target, list):
        for i, item in enumerate(target):
            if i >= MAX_ATTRIBUTE_VALUES:
                raise CelRuntimeError(
                    f"'includes' function cannot be applied to lists longer than {MAX_ATTRIBUTE_VALUES} values"
                )
            if _equal(item, arg):
                return True
        return False
    return _equal(target, arg)


@_impl("size")
def size(x: Any) -> int:
    if isinstance(x, (str, list, dict)):
        return len(x)
    if isinstance(x, bytes):
        return len(x)
    no_such_overload("size")


@_impl("type")
def type_(x: Any) -> CelType:
    return CelType(type_name(x))


@_impl("dyn")
def dyn(x: Any) -> Any:
    return x


def _conversion_error(src: Any, dst: str) -> CelRuntimeError:
    return _err(f"type conversion error from '{type_name(src)}' to '{dst}'")


_GO_INT_RE: Final = re.compile(r"[+-]?[0-9]+\Z")
_GO_UINT_RE: Final = re.compile(r"[0-9]+\Z")
_GO_FLOAT_RE: Final = re.compile(
    r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)\Z", re.IGNORECASE
)


@_impl("int")
def to_int(x: Any) -> int:
    tx = type(x)
    if tx is int:
        return int(x)
    if tx is Uint:
        if x > INT64_MAX:
            int_overflow()
        return int(x)
    if tx is float:
        if math.isnan(x) or math.isinf(x) or x <= -9.223372036854775808e18 or x >= 9.223372036854775807e18:
            int_overflow()
        return int(x)
    if tx is str:
        if _GO_INT_RE.match(x):
            n = int(x)
            if INT64_MIN <= n <= INT64_MAX:
                return n
        raise _conversion_error(x, "int")
    no_such_overload("int")


@_impl("uint")
def to_uint(x: Any) -> Uint:
    tx = type(x)
    if tx is Uint:
        return Uint(x)
    if tx is int:
        if x < 0:
            uint_overflow()
        return Uint(x)
    if tx is float:
        if math.isnan(x) or math.isinf(x) or x < 0 or x >= 1.8446744073709552e19:
            uint_overflow()
        return Uint(int(x))
    if tx is str:
        if _GO_UINT_RE.match(x):
            n = int(x)
            if n <= UINT64_MAX:
                return Uint(n)
        raise _conversion_error(x, "uint")
    no_such_overload("uint")


@_impl("double")
def to_double(x: Any) -> float:
    tx = type(x)
    if tx is float:
        return float(x)
    if tx is int or tx is Uint:
        return float(x)
    if tx is str:
        if _GO_FLOAT_RE.match(x):
            return float(x)
        raise _conversion_error(x, "double")
    no_such_overload("double")


@_impl("string")
def to_string(x: Any) -> str:
    tx = type(x)
    if tx is str:
        return str(x)
    if tx is bool:
        return "true" if x else "false"
    if tx is int or tx is Uint:
        return str(int(x))
    if tx is float:
        return format_double(x)
    if tx is bytes:
        try:
            return str(x.decode("utf-8"))
        except UnicodeDecodeError:
            raise _err("invalid UTF-8 in bytes, cannot convert to string") from None
    no_such_overload("string")


@_impl("bytes")
def to_bytes(x: Any) -> bytes:
    if type(x) is bytes:
        return x
    if type(x) is str:
        return x.encode("utf-8")
    no_such_overload("bytes")


_GO_BOOLS: Final = {
    "1": True,
    "t": True,
    "T": True,
    "TRUE": True,
    "true": True,
    "True": True,
    "0": False,
    "f": False,
    "F": False,
    "FALSE": False,
    "false": False,
    "False": False,
}


@_impl("bool")
def to_bool(x: Any) -> bool:
    if type(x) is bool:
        return x
    if type(x) is str:
        if x in _GO_BOOLS:
            return _GO_BOOLS[x]
        raise _conversion_error(x, "bool")
    no_such_overload("bool")


def _strings(fn: str, *args: Any) -> None:
    for a in args:
        if type(a) is not str:
            no_such_overload(fn)


@_impl("contains")
def contains(s: Any, sub: Any) -> bool:
    _strings("contains", s, sub)
    return sub in s


@_impl("startsWith")
def starts_with(s: Any, prefix: Any) -> bool:
    _strings("startsWith", s, prefix)
    return bool(s.startswith(prefix))


@_impl("endsWith")
def ends_with(s: Any, suffix: Any) -> bool:
    _strings("endsWith", s, suffix)
    return bool(s.endswith(suffix))


@_impl("matches")
def matches(s: Any, pattern: Any) -> bool:
    _strings("matches", s, pattern)
    return compile_regex(pattern).search(s) is not None


# -- optional ------------------------------------------------------------------------------


@_impl("optional.of")
def optional_of(x: Any) -> Optional:
    return Optional(x)


def is_zero_value(x: Any) -> bool:
    if x is None or x is False:
        return True
    if type(x) in (int, Uint, float):
        return bool(x == 0)
    if isinstance(x, (str, bytes, list, dict)):
        return len(x) == 0
    if isinstance(x, Optional):
        return not x.has_value
    return False


@_impl("optional.ofNonZeroValue")
def optional_of_non_zero_value(x: Any) -> Optional:
    return Optional.NONE if is_zero_value(x) else Optional(x)


@_impl("optional.none")
def optional_none() -> Optional:
    return Optional.NONE


def _opt(fn: str, x: Any) -> Optional:
    if type(x) is not Optional:
        no_such_overload(fn)
    return x


@_impl("hasValue")
def has_value(x: Any) -> bool:
    return _opt("hasValue", x).has_value


@_impl("value")
def value(x: Any) -> Any:
    opt = _opt("value", x)
    if not opt.has_value:
        raise _err("optional.none() dereference")
    return opt.value


@_impl("orValue")
def or_value(x: Any, default: Any) -> Any:
    opt = _opt("orValue", x)
    return opt.value if opt.has_value else default


@_impl("or")
def or_(x: Any, other: Any) -> Any:
    opt = _opt("or", x)
    if opt.has_value:
        return opt
    return _opt("or", other)


# -- strings -------------------------------------------------------------------------------


def _int(fn: str, x: Any) -> int:
    if type(x) is not int:
        no_such_overload(fn)
    return int(x)


@_impl("charAt")
def char_at(s: Any, i: Any) -> str:
    _strings("charAt", s)
    i = _int("charAt", i)
    if i < 0 or i > len(s):
        raise _err(f"index out of range: {i}")
    return "" if i == len(s) else str(s[i])


def _index_of(s: Any, sub: Any, *rest: Any) -> int:
    _strings("indexOf", s, sub)
    off = _int("indexOf", rest[0]) if rest else 0
    if off < 0:
        raise _err(f"index out of range: {off}")
    if sub == "":
        return min(off, len(s))
    if off >= len(s):
        return -1
    return int(s.find(sub, off))


def _last_index_of(s: Any, sub: Any, *rest: Any) -> int:
    _strings("lastIndexOf", s, sub)
    if not rest:
        if sub == "":
            return len(s)
        if len(s.encode("utf-8")) < len(sub.encode("utf-8")):
            return -1
        off = len(s) - 1
    else:
        off = _int("lastIndexOf", rest[0])
    if off < 0:
        raise _err(f"index out of range: {off}")
    if sub == "":
        return min(off, len(s))
    if off >= len(s):
        return -1
    off = min(off, len(s) - len(sub))
    if off < 0:
        return -1
    return int(s.rfind(sub, 0, off + len(sub)))


def _list_index_of(lst: list[Any], item: Any, reverse: bool) -> int:
    indices = range(len(lst) - 1, -1, -1) if reverse else range(len(lst))
    for i in indices:
        try:
            if equals(lst[i], item):
                return i
        except CelRuntimeError:
            continue
    return -1


@_impl("indexOf")
def index_of(target: Any, *args: Any) -> int:
    if isinstance(target, list) and len(args) == 1:
        return _list_index_of(target, args[0], False)
    return _index_of(target, *args)


@_impl("lastIndexOf")
def last_index_of(target: Any, *args: Any) -> int:
    if isinstance(target, list) and len(args) == 1:
        return _list_index_of(target, args[0], True)
    return _last_index_of(target, *args)


_ASCII_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER: Final = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


@_impl("lowerAscii")
def lower_ascii(s: Any) -> str:
    _strings("lowerAscii", s)
    return str(s.translate(_ASCII_LOWER))


@_impl("upperAscii")
def upper_ascii(s: Any) -> str:
    _strings("upperAscii", s)
    return str(s.translate(_ASCII_UPPER))


@_impl("replace")
def replace(s: Any, old: Any, new: Any, *rest: Any) -> str:
    _strings("replace", s, old, new)
    n = _int("replace", rest[0]) if rest else -1
    return str(s.replace(old, new, n if n >= 0 else -1))


@_impl("split")
def split(s: Any, sep: Any, *rest: Any) -> list[str]:
    _strings("split", s, sep)
    n = _int("split", rest[0]) if rest else -1
    if n == 0:
        return []
    if sep == "":
        chars = list(s)
        if 0 < n < len(chars):
            return [*chars[: n - 1], "".join(chars[n - 1 :])]
        return chars
    return list(s.split(sep, n - 1 if n > 0 else -1))


@_impl("substring")
def substring(s: Any, start: Any, *rest: Any) -> str:
    _strings("substring", s)
    start = _int("substring", start)
    if rest:
        end = _int("substring", rest[0])
        if start > end:
            raise _err(f"invalid substring range. start: {start}, end: {end}")
        if start < 0 or start > len(s):
            raise _err(f"index out of range: {start}")
        if end < 0 or end > len(s):
            raise _err(f"index out of range: {end}")
        return str(s[start:end])
    if start < 0 or start > len(s):
        raise _err(f"index out of range: {start}")
    return str(s[start:])


# unicode.IsSpace in Go: ASCII white space, NEL, NBSP and the Unicode White_Space property.
_GO_SPACE: Final = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


@_impl("trim")
def trim(s: Any) -> str:
    _strings("trim", s)
    return str(s.strip(_GO_SPACE))


@_impl("join")
def join(lst: Any, *rest: Any) -> str:
    if not isinstance(lst, list):
        no_such_overload("join")
    sep = rest[0] if rest else ""
    _strings("join", sep)
    for item in lst:
        if type(item) is not str:
            raise _err(f"join: invalid input: {format_value(item)}")
    return str(sep.join(lst))


_QUOTE_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


@_impl("strings.quote")
def quote(s: Any) -> str:
    _strings("strings.quote", s)
    return '"' + "".join(_QUOTE_ESCAPES.get(c, c) for c in s) + '"'


@_impl("format")
def format_(fmt: Any, args: Any) -> str:
    _strings("format", fmt)
    if not isinstance(args, list):
        no_such_overload("format")
    from gpucluster.dra.cel.formatting import format_string

    return format_string(fmt, args)


# -- sets ----------------------------------------------------------------------------------


def _lists(fn: str, *args: Any) -> None:
    for a in args:
        if not isinstance(a, list):
            no_such_overload(fn)


def _contains_all(a: list[Any], b: list[Any]) -> bool:
    return all(in_(x, a) for x in b)


@_impl("sets.contains")
def sets_contains(a: Any, b: Any) -> bool:
    _lists("sets.contains", a, b)
    return _contains_all(a, b)


@_impl("sets.equivalent")
def sets_equivalent(a: Any, b: Any) -> bool:
    _lists("sets.equivalent", a, b)
    return _contains_all(a, b) and _contains_all(b, a)


@_impl("sets.intersects")
def sets_intersects(a: Any, b: Any) -> bool:
    _lists("sets.intersects", a, b)
    return any(in_(x, a) for x in b)


# -- lists ---------------------------------------------------------------------------------


@_impl("slice")
def slice_(lst: Any, start: Any, end: Any) -> list[Any]:
    _lists("slice", lst)
    start = _int("slice", start)
    end = _int("slice", end)
    if start < 0 or end < 0:
        raise _err(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise _err(f"cannot slice({start}, {end}), start index must be less than or equal to end index")
    if end > len(lst):
        raise _err(f"cannot slice({start}, {end}), list is length {len(lst)}")
    return list(lst[start:end])


def _flatten(lst: list[Any], depth: int) -> list[Any]:
    out: list[Any] = []
    for item in lst:
        if isinstance(item, list) and depth > 0:
            out.extend(_flatten(item, depth - 1))
        else:
            out.append(item)
    return out


@_impl("flatten")
def flatten(lst: Any, *rest: Any) -> list[Any]:
    _lists("flatten", lst)
    depth = _int("flatten", rest[0]) if rest else 1
    if depth < 0:
        raise _err("level must be non-negative")
    return _flatten(lst, depth)


@_impl("distinct")
def distinct(lst: Any) -> list[Any]:
    _lists("distinct", lst)
    out: list[Any] = []
    for item in lst:
        if not in_(item, out):
            out.append(item)
    return out


@_impl("reverse")
def reverse(lst: Any) -> list[Any]:
    _lists("reverse", lst)
    return list(reversed(lst))


def _sort_key_check(lst: list[Any], fn: str) -> None:
    if lst:
        kinds = {type(x) for x in lst}
        if len(kinds) > 1 or next(iter(kinds)) not in (int, Uint, float, bool, str, bytes):
            no_such_overload(fn)


@_impl("sort")
def sort(lst: Any) -> list[Any]:
    _lists("sort", lst)
    _sort_key_check(lst, "sort")
    return sorted(lst)


@_impl("lists.range")
def lists_range(n: Any) -> list[int]:
    return list(range(_int("lists.range", n)))


@_impl("isSorted")
def is_sorted(lst: Any) -> bool:
    _lists("isSorted", lst)
    return all(compare(prev, item) <= 0 for prev, item in itertools.pairwise(lst))


@_impl("sum")
def sum_(lst: Any, zero: Any = 0) -> Any:
    _lists("sum", lst)
    acc = zero
    for i, item in enumerate(lst):
        acc = item if i == 0 and zero == 0 and type(item) in (int, Uint, float) else add(acc, item)
    if lst and type(acc) not in (int, Uint, float):
        no_such_overload("sum")
    return acc


def _extreme(lst: Any, fn: str, sign: int) -> Any:
    _lists(fn, lst)
    if not lst:
        raise _err(f"{fn} called on empty list")
    best = lst[0]
    for item in lst[1:]:
        if compare(best, item) == sign:
            best = item
    return best


@_impl("min")
def min_(lst: Any) -> Any:
    return _extreme(lst, "min", 1)


@_impl("max")
def max_(lst: Any) -> Any:
    return _extreme(lst, "max", -1)


# -- regex ---------------------------------------------------------------------------------


@_impl("find")
def find(s: Any, pattern: Any) -> str:
    _strings("find", s, pattern)
    return find_first(compile_regex(pattern), s)


@_impl("findAll")
def find_all_(s: Any, pattern: Any, *rest: Any) -> list[str]:
    _strings("findAll", s, pattern)
    n = _int("findAll", rest[0]) if rest else -1
    return find_all(compile_regex(pattern), s, n)


# -- quantity ------------------------------------------------------------------------------

# Parse memos keyed by the text itself (never by id() or a generation): a Quantity or Semver is
# immutable and a pure function of its text, so an entry can never be stale; bounded by size.
_QUANTITY_CACHE = PARSED
parse_quantity = parse_cached


@_impl("quantity")
def quantity(s: Any) -> Quantity:
    _strings("quantity", s)
    try:
        return parse_quantity(s)
    except QuantityError as exc:
        raise _err(str(exc)) from None


@_impl("isQuantity")
def is_quantity(s: Any) -> bool:
    _strings("isQuantity", s)
    try:
        parse_quantity(s)
    except QuantityError:
        return False
    return True


def _q(fn: str, x: Any) -> Quantity:
    if type(x) is not Quantity:
        no_such_overload(fn)
    return x


@_impl("sign")
def sign(q: Any) -> int:
    return int(_q("sign", q).sign())


@_impl("asApproximateFloat")
def as_approximate_float(q: Any) -> float:
    return float(_q("asApproximateFloat", q).as_approximate_float())


@_impl("asInteger")
def as_integer(q: Any) -> int:
    try:
        n = int(_q("asInteger", q).as_integer())
    except QuantityError:
        raise _err("cannot convert value to integer") from None
    if not INT64_MIN <= n <= INT64_MAX:
        raise _err("cannot convert value to integer")
    return n


@_impl("isInteger")
def is_integer(q: Any) -> bool:
    try:
        as_integer(q)
    except CelRuntimeError as exc:
        if exc.message.startswith("no such overload"):
            raise
        return False
    return True


def _q_operand(fn: str, x: Any) -> Quantity:
    if type(x) is Quantity:
        return x
    if type(x) is int:
        return Quantity.from_int(x)
    no_such_overload(fn)


@_impl("add")
def q_add(q: Any, other: Any) -> Quantity:
    return _q("add", q).add(_q_operand("add", other))


@_impl("sub")
def q_sub(q: Any, other: Any) -> Quantity:
    return _q("sub", q).sub(_q_operand("sub", other))


# -- semver --------------------------------------------------------------------------------

_SEMVER_STRICT: dict[str, Semver] = {}
_SEMVER_NORMALIZED: dict[str, Semver] = {}


def parse_semver(s: str, normalize: bool = False) -> Semver:
    cache = _SEMVER_NORMALIZED if normalize else _SEMVER_STRICT
    v = cache.get(s)
    if v is None:
        v = Semver.parse(s, normalize=normalize)
        if len(cache) > 65536:
            cache.clear()
        cache[s] = v
    return v


@_impl("semver")
def semver(s: Any, *rest: Any) -> Semver:
    _strings("semver", s)
    normalize = rest[0] if rest else False
    if type(normalize) is not bool:
        no_such_overload("semver")
    try:
        return parse_semver(s, normalize)
    except SemverError as exc:
        raise _err(str(exc)) from None


@_impl("isSemver")
def is_semver(s: Any, *rest: Any) -> bool:
    try:
        semver(s, *rest)
    except CelRuntimeError as exc:
        if exc.message.startswith("no such overload"):
            raise
        return False
    return True


def _sv(fn: str, x: Any) -> Semver:
    if type(x) is not Semver:
        no_such_overload(fn)
    return x


@_impl("major")
def major(v: Any) -> int:
    return int(_sv("major", v).major)


@_impl("minor")
def minor(v: Any) -> int:
    return int(_sv("minor", v).minor)


@_impl("patch")
def patch(v: Any) -> int:
    return int(_sv("patch", v).patch)


# -- quantity and semver comparisons ---------------------------------------------------------


def quantity_cmp(a: Quantity, b: Quantity) -> int:
    """``a.compareTo(b)`` for two Quantities, with a fast path for equal scales."""
    if a._scale == b._scale:
        x, y = a._unscaled, b._unscaled
        return (x > y) - (x < y)
    return int(a.cmp(b))


def semver_cmp(a: Semver, b: Semver) -> int:
    """``a.compareTo(b)`` for two Semvers, with a fast path for releases."""
    if not a.pre and not b.pre:
        x, y = a.major, b.major
        if x == y:
            x, y = a.minor, b.minor
            if x == y:
                x, y = a.patch, b.patch
        return (x > y) - (x < y)
    return int(a.compare(b))


@_impl("compareTo")
def compare_to(a: Any, b: Any) -> int:
    ta = type(a)
    if ta is type(b):
        if ta is Quantity:
            return quantity_cmp(a, b)
        if ta is Semver:
            return semver_cmp(a, b)
    no_such_overload("compareTo")


@_impl("isGreaterThan")
def is_greater_than(a: Any, b: Any) -> bool:
    return compare_to(a, b) > 0


@_impl("isLessThan")
def is_less_than(a: Any, b: Any) -> bool:
    return compare_to(a, b) < 0


def check_int_result(value: int) -> int:
    return check_int(value)
