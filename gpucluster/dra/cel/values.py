"""Runtime representation of CEL values and the operators that apply to any value.

===============  =====================================================================
CEL type         Python representation
===============  =====================================================================
int              ``int`` (never ``bool``), kept within int64 by every operation
uint             :class:`Uint` (an ``int`` subclass) within uint64
double           ``float``
bool             ``bool``
string / bytes   ``str`` / ``bytes``
null             ``None``
list / map       ``list`` / ``dict`` (never mutated once built)
optional         :class:`Optional`
type             :class:`CelType`
Quantity/Semver  :class:`gpucluster.dra.quantity.Quantity` / :class:`gpucluster.dra.semver.Semver`
device           :class:`gpucluster.dra.cel.view.DeviceView`
===============  =====================================================================

Errors are Python exceptions (:class:`CelRuntimeError`); the logical operators and the
comprehension macros catch them where CEL says an error can be absorbed.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, Final, NoReturn

from gpucluster.dra.cel.errors import CelRuntimeError
from gpucluster.dra.quantity import Quantity
from gpucluster.dra.semver import Semver

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
UINT64_MAX: Final = 2**64 - 1


class Uint(int):
    """A CEL ``uint``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}u"


class CelType:
    """A CEL type value, the result of ``type(x)`` and of identifiers such as ``int``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("CelType", self.name))

    def __repr__(self) -> str:
        return self.name


class Optional:
    """A CEL ``optional_type`` value; ``Optional.NONE`` is ``optional.none()``."""

    __slots__ = ("has_value", "value")

    NONE: Optional

    def __init__(self, value: Any, has_value: bool = True) -> None:
        self.value = value
        self.has_value = has_value

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.has_value else "optional.none()"


Optional.NONE = Optional(None, has_value=False)

TYPE_NAMES: Final[dict[type, str]] = {
    bool: "bool",
    int: "int",
    Uint: "uint",
    float: "double",
    str: "string",
    bytes: "bytes",
    type(None): "null_type",
    list: "list",
    dict: "map",
    Optional: "optional_type",
    CelType: "type",
    Quantity: "kubernetes.Quantity",
    Semver: "kubernetes.Semver",
}

# Type identifiers in scope of every expression (cel-go's standard declarations).
TYPE_IDENTIFIERS: Final = {
    name: CelType(name)
    for name in (
        "int",
        "uint",
        "double",
        "bool",
        "string",
        "bytes",
        "list",
        "map",
        "null_type",
        "type",
        "optional_type",
    )
}


def type_name(value: Any) -> str:
    name = TYPE_NAMES.get(type(value))
    if name is not None:
        return name
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "list"
    if isinstance(value, int):
        return "int"
    cel_type = getattr(value, "cel_type_name", None)
    return cel_type if isinstance(cel_type, str) else type(value).__name__


def no_such_overload(function: str = "") -> NoReturn:
    raise CelRuntimeError(f"no such overload: {function}" if function else "no such overload")


def no_such_key(key: Any) -> NoReturn:
    raise CelRuntimeError(f"no such key: {format_value(key)}")


def int_overflow() -> NoReturn:
    raise CelRuntimeError("integer overflow")


def uint_overflow() -> NoReturn:
    raise CelRuntimeError("unsigned integer overflow")


def check_int(value: int) -> int:
    if INT64_MIN <= value <= INT64_MAX:
        return value
    int_overflow()


# -- formatting ----------------------------------------------------------------------------


def format_double(x: float) -> str:
    """Go's ``fmt.Sprintf("%g", x)``, which cel-go uses for ``string(double)``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    sign, digits_t, exp = Decimal(repr(x)).as_tuple()
    assert isinstance(exp, int)
    digits = list(digits_t)
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop()
        exp += 1
    sci = exp + len(digits) - 1
    text = "".join(str(d) for d in digits)
    prefix = "-" if sign else ""
    # Shortest representation: %e when the exponent is < -4 or >= 6 (Go's strconv 'g', prec -1).
    if sci < -4 or sci >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if sci < 0 else '+'}{abs(sci):02d}"
    if sci < 0:
        return f"{prefix}0.{'0' * (-sci - 1)}{text}"
    if sci + 1 >= len(text):
        return prefix + text + "0" * (sci + 1 - len(text))
    return f"{prefix}{text[: sci + 1]}.{text[sci + 1 :]}"


def format_value(value: Any) -> str:
    """Roughly Go's ``%v`` of a CEL value, used in error messages and ``string()``."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is float:
        return format_double(value)
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{format_value(k)}: {format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Optional):
        return f"optional.of({format_value(value.value)})" if value.has_value else "optional.none()"
    if isinstance(value, int):
        return str(int(value))
    return str(value)


# -- equality and ordering -----------------------------------------------------------------

_NUMERIC: Final = (int, Uint, float)


def equals(a: Any, b: Any) -> bool:
    """CEL heterogeneous equality (cel-go ``types.Equal``).

    ``null`` equals only ``null``; numbers compare across int, uint and double; values of
    different kinds are unequal, except that a Quantity or Semver on the left-hand side
    compared with anything but its own type (or null) is a ``no such overload`` error, as
    Kubernetes' ``Quantity.Equal`` / ``Semver.Equal`` return it.
    """
    ta = type(a)
    tb = type(b)
    if ta is tb and (ta is str or ta is int or ta is bool or ta is float or ta is bytes or ta is Uint):
        return bool(a == b)
    if a is None or b is None:
        return a is b
    if ta is Quantity or ta is Semver:
        if tb is ta:
            return bool(a == b)
        no_such_overload()
    if ta is bool or tb is bool:
        return False
    if ta in _NUMERIC and tb in _NUMERIC:
        if ta is float or tb is float:
            return _numeric_compare(a, b) == 0  # NaN equals nothing
        return bool(a == b)
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return False
        return all(_equals_or_error(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        if not isinstance(b, dict) or len(a) != len(b):
            return False
        for key, value in a.items():
            found, other = map_find(b, key)
            if not found or not _equals_or_error(value, other):
                return False
        return True
    if ta is Optional:
        if tb is not Optional:
            return False
        if not a.has_value or not b.has_value:
            return bool(a.has_value == b.has_value)
        return equals(a.value, b.value)
    if ta is CelType:
        return bool(a == b)
    if ta is str or ta is bytes:
        return False
    return a is b


def _equals_or_error(a: Any, b: Any) -> bool:
    # cel-go's list and map equality only stops on an element that is definitely unequal:
    # an element comparison that errors counts as "not false".
    try:
        return equals(a, b)
    except CelRuntimeError:
        return True


def compare(a: Any, b: Any, function: str = "") -> int:
    """CEL ordering (``<`` and friends), -1/0/1; numbers compare across int, uint and double."""
    ta = type(a)
    tb = type(b)
    if ta is tb and ta in (int, str, float, Uint, bool, bytes):
        if ta is float and (math.isnan(a) or math.isnan(b)):
            raise CelRuntimeError("NaN values cannot be ordered")
        return -1 if a < b else (1 if a > b else 0)
    if ta in _NUMERIC and tb in _NUMERIC:
        if (ta is float and math.isnan(a)) or (tb is float and math.isnan(b)):
            raise CelRuntimeError("NaN values cannot be ordered")
        if ta is float or tb is float:
            return _numeric_compare(a, b)
        return -1 if a < b else (1 if a > b else 0)
    no_such_overload(function)


# float(math.MaxInt64), float(math.MinInt64), float(math.MaxUint64) as cel-go's range checks have them.
_INT_MAX_AS_DOUBLE: Final = 9223372036854775808.0
_INT_MIN_AS_DOUBLE: Final = -9223372036854775808.0
_UINT_MAX_AS_DOUBLE: Final = 18446744073709551616.0


def _numeric_compare(a: Any, b: Any) -> int:
    """int/uint against double as cel-go does it (``compareIntDouble``, ``compareUintDouble``):
    a double outside the integer's range decides; otherwise the integer is converted to a double
    first, so ``9223372036854775807 >= 9223372036854775808.0`` holds. A NaN compares as unequal
    (1), as cel-go's ``compareDouble`` has it."""
    if type(a) is float:
        if type(b) is float:
            return _double_compare(a, b)
        return -_integer_double_compare(b, a)
    return _integer_double_compare(a, b)


def _integer_double_compare(i: int, d: float) -> int:
    if type(i) is Uint:
        if d < 0:
            return 1
        if d > _UINT_MAX_AS_DOUBLE:
            return -1
    else:
        if d < _INT_MIN_AS_DOUBLE:
            return 1
        if d > _INT_MAX_AS_DOUBLE:
            return -1
    return _double_compare(float(i), d)


def _double_compare(x: float, y: float) -> int:
    if x < y:
        return -1
    if x > y:
        return 1
    return 0 if x == y else 1  # NaN


def lt(a: Any, b: Any) -> bool:
    return compare(a, b, "_<_") < 0


def le(a: Any, b: Any) -> bool:
    return compare(a, b, "_<=_") <= 0


def gt(a: Any, b: Any) -> bool:
    return compare(a, b, "_>_") > 0


def ge(a: Any, b: Any) -> bool:
    return compare(a, b, "_>=_") >= 0


# -- maps ----------------------------------------------------------------------------------


def map_find(m: dict[Any, Any], key: Any) -> tuple[bool, Any]:
    """Look a key up with CEL semantics: bool keys never match numbers, and integral doubles
    and uints find int keys (cel-go's heterogeneous map lookup)."""
    tk = type(key)
    if tk is str:
        if key in m:
            return True, m[key]
        return False, None
    if tk is bool:
        for k, v in m.items():
            if type(k) is bool and k == key:
                return True, v
        return False, None
    if tk is float:
        if not key.is_integer():
            return False, None
        key = int(key)
    elif tk is not int and tk is not Uint:
        return False, None
    if key in m:
        for k, v in m.items():
            if type(k) is not bool and type(k) is not str and k == key:
                return True, v
    return False, None


def map_contains(m: dict[Any, Any], key: Any) -> bool:
    return map_find(m, key)[0]
