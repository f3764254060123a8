"""Exact Kubernetes ``resource.Quantity`` semantics in pure Python.

This is a behavioural re-implementation (not a port) of
``k8s.io/apimachinery/pkg/api/resource`` (``quantity.go``, ``suffix.go``, ``amount.go``,
``math.go``) together with the CEL quantity library of ``k8s.io/apiserver``
(``pkg/cel/library/quantity.go``), which is what DRA device selectors evaluate.

What is reproduced exactly
--------------------------
* **Grammar.** ``ParseQuantity``'s hand-written scanner: an optional sign, digits with an
  optional ``.`` (``"1."``, ``".5"``, ``"."`` and even ``""``-with-a-suffix are numbers), then a
  suffix made of the letters ``eEinumkKMGTP``, an optional sign and digits, which must be one of
  ``n u m "" k M G T P E`` (DecimalSI), ``Ki Mi Gi Ti Pi Ei`` (BinarySI) or ``e``/``E`` followed by
  an int64 (DecimalExponent; the exponent is truncated to int32 as Go does). No whitespace.
  Oddities that follow from upstream's scanner are kept: ``"+"``, ``"."``, ``"k"``, ``"Mi"`` and
  ``"e3"`` parse as zero, while ``"Pi"``, ``"Ei"`` and ``".e-10"`` fail with "unable to parse
  numeric part of quantity".
* **Value.** Values are rounded *away from zero* to a multiple of 10^-9 (``0.1n`` -> ``1n``,
  ``-1e-10`` -> ``-1n``); BinarySI values beyond int64 are capped at ±(2^63-1); a BinarySI value
  with magnitude below 1 becomes DecimalSI. Everything else is exact (``fractions.Fraction``).
* **Representation.** Kubernetes keeps a quantity either as a scaled int64 (``int64Amount``)
  or as an ``inf.Dec``, and two CEL functions depend on which: ``isInteger()``/``asInteger()``
  (Go's ``AsInt64``, false for any ``inf.Dec`` and for negative int64 scales, so ``"1000m"``,
  ``"1.0"``, ``"100Ti"``, ``"1Pi"`` and ``"9223372036854775807"`` are *not* integers) and
  ``asApproximateFloat()`` (``mantissa * math.Pow10(exponent)``, reproduced bit for bit,
  including ``NaN`` for ``"0e400"``). This module tracks the same representation through
  ``parse``, ``add`` and ``sub``.
* **Canonical form.** ``CanonicalizeBytes`` rules: the largest suffix (exponent a multiple of 3
  for the decimal formats, of 1024 for BinarySI) that loses no precision; BinarySI values within
  (-1024, 1024) or with a fractional part are written as DecimalSI.
* **Arithmetic.** ``Add``/``Sub`` keep the receiver's format unless the receiver is zero, in which
  case the operand's format is taken.

Intentional differences (each one is covered by a test)
-------------------------------------------------------
* ``Quantity`` is immutable. Go's ``Cmp`` converts its receiver to ``inf.Dec`` in place when the
  operand is an ``inf.Dec``, so in Go a later ``isInteger()`` on the same object can flip to
  false after a ``compareTo``/``isLessThan``; that side effect is not reproduced.
* ``canonical()`` / ``str()`` always give the canonical form. Go's ``String()`` returns the
  original input verbatim when the parser deemed it canonical (so ``"+1"``, ``"01"`` or
  ``"1.500k"`` are echoed unchanged in Go).
* Where upstream's suffix tables have no entry (DecimalSI of 10^21 or more; BinarySI of 2^70 or
  more, which only ``add`` can produce since parsing caps BinarySI), Go emits the bare mantissa,
  which denotes a different number (``1000000000000000000000`` prints as ``"1"``). Here the
  largest suffix is used instead (``"1000E"``, ``"1024Ei"``), which keeps the value.
* ``int64Amount`` ``Sub`` of -2^63 overflows silently in Go; here the result stays exact.
* Resource limits, so that hostile input cannot stall the webhook (Kubernetes accepts such values,
  though comparing or adding them makes it compute numbers with up to 2^31 digits): non-zero
  values of magnitude 10^1000 or more are rejected, on parse and as ``add``/``sub`` results, and
  so is a fractional BinarySI mantissa with more than 4000 significant digits. Zero values keep
  their exponent only within ±400, which has no observable effect.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Final, Literal

from gpucluster.dra.ordering import Ordered
from gpucluster.dra.valueerrors import ValueParseError, quote_input

__all__ = [
    "BINARY_SI",
    "DECIMAL_EXPONENT",
    "DECIMAL_SI",
    "ERR_FORMAT_WRONG",
    "ERR_NOT_INTEGER",
    "ERR_NUMERIC",
    "ERR_SUFFIX",
    "Format",
    "Quantity",
    "QuantityError",
]

Format = Literal["DecimalSI", "BinarySI", "DecimalExponent"]

DECIMAL_SI: Final = "DecimalSI"
BINARY_SI: Final = "BinarySI"
DECIMAL_EXPONENT: Final = "DecimalExponent"

_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_NANO: Final = 10**9

# Largest decimal order of magnitude accepted for a non-zero value (|value| < 10**_MAX_ORDER).
_MAX_ORDER: Final = 1000
# Largest number of significant digits accepted for a fractional BinarySI mantissa.
_MAX_BINARY_DIGITS: Final = 4000
# Zero values keep their (observable only through asApproximateFloat/isInteger) exponent
# clamped to this range; Pow10 saturates well inside it.
_ZERO_SCALE_LIMIT: Final = 400

# Kubernetes' error texts (quantity.go), reused verbatim as QuantityError.reason.
_SPLIT_RE_STRING: Final = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT_WRONG: Final = "quantities must match the regular expression '" + _SPLIT_RE_STRING + "'"
ERR_NUMERIC: Final = "unable to parse numeric part of quantity"
ERR_SUFFIX: Final = "unable to parse quantity's suffix"
ERR_NOT_INTEGER: Final = "cannot convert value to integer"

# Equivalent to apimachinery's parseQuantityString scanner (possessive, so no backtracking):
# sign, integer digits, optional "." and fraction digits, then suffix letters, sign, digits.
_QUANTITY_RE: Final = re.compile(r"([+-]?)([0-9]*+)(\.[0-9]*+)?+([eEinumkKMGTP]*+[+-]?+[0-9]*+)")
_EXPONENT_RE: Final = re.compile(r"([+-]?)([0-9]++)")

_SUFFIXES: Final[dict[str, tuple[int, int, Format]]] = {
    "": (10, 0, "DecimalSI"),
    "n": (10, -9, "DecimalSI"),
    "u": (10, -6, "DecimalSI"),
    "m": (10, -3, "DecimalSI"),
    "k": (10, 3, "DecimalSI"),
    "M": (10, 6, "DecimalSI"),
    "G": (10, 9, "DecimalSI"),
    "T": (10, 12, "DecimalSI"),
    "P": (10, 15, "DecimalSI"),
    "E": (10, 18, "DecimalSI"),
    "Ki": (2, 10, "BinarySI"),
    "Mi": (2, 20, "BinarySI"),
    "Gi": (2, 30, "BinarySI"),
    "Ti": (2, 40, "BinarySI"),
    "Pi": (2, 50, "BinarySI"),
    "Ei": (2, 60, "BinarySI"),
}
_DECIMAL_SUFFIX_BY_EXPONENT: Final[dict[int, str]] = {
    -9: "n",
    -6: "u",
    -3: "m",
    0: "",
    3: "k",
    6: "M",
    9: "G",
    12: "T",
    15: "P",
    18: "E",
}
_BINARY_SUFFIX_BY_POWER: Final[dict[int, str]] = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}

# Go's math.Pow10 tables; float(int) and float("1e-N") are correctly rounded, like Go constants.
_POW10TAB: Final = tuple(float(10**i) for i in range(32))
_POW10POSTAB32: Final = tuple(float(10 ** (32 * i)) for i in range(10))
_POW10NEGTAB32: Final = tuple(float(f"1e-{32 * i}") for i in range(11))


class QuantityError(ValueParseError):
    """A string is not a Kubernetes quantity, or a quantity operation is not possible.

    ``str(err)`` names the input (``invalid quantity "1.5.3": ...``); ``err.reason`` is the bare
    Kubernetes error text (e.g. ``unable to parse quantity's suffix``).
    """


def _invalid(s: str, reason: str) -> QuantityError:
    return QuantityError(f"invalid quantity {quote_input(s)}: {reason}", reason)


def _wrap32(x: int) -> int:
    """Go int32 arithmetic wrap-around."""
    return ((x + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _go_pow10(n: int) -> float:
    """Go's ``math.Pow10``, bit for bit."""
    if 0 <= n <= 308:
        return _POW10POSTAB32[n // 32] * _POW10TAB[n % 32]
    if -323 <= n <= 0:
        return _POW10NEGTAB32[-n // 32] / _POW10TAB[-n % 32]
    return math.inf if n > 0 else 0.0


def _p10(n: int) -> int:
    """``10**n`` for ``n >= 0``, typed as int."""
    result: int = 10**n
    return result


def _too_big(unscaled: int, scale: int) -> bool:
    """Whether ``|unscaled * 10**scale| >= 10**_MAX_ORDER`` (zero never is)."""
    if unscaled == 0:
        return False
    if scale >= _MAX_ORDER:
        return True
    return abs(unscaled) >= _p10(_MAX_ORDER - scale)


def _clamp_zero_scale(scale: int) -> int:
    return max(-_ZERO_SCALE_LIMIT, min(_ZERO_SCALE_LIMIT, scale))


def _interpret(suffix: str) -> tuple[int, int, Format] | None:
    """suffix.go ``interpret``: (base, exponent, format), or None for an unknown suffix."""
    known = _SUFFIXES.get(suffix)
    if known is not None:
        return known
    if len(suffix) > 1 and suffix[0] in "eE":
        # strconv.ParseInt(suffix[1:], 10, 64), then the int32 conversion Go applies.
        m = _EXPONENT_RE.fullmatch(suffix[1:])
        if m is None:
            return None
        digits = m.group(2).lstrip("0") or "0"
        if len(digits) > 19:
            return None
        exponent = -int(digits) if m.group(1) == "-" else int(digits)
        if not _INT64_MIN <= exponent <= _INT64_MAX:
            return None
        return 10, _wrap32(exponent), "DecimalExponent"
    return None


def _decimal_nanos(significant: str, exp10: int) -> int:
    """``int(significant) * 10**exp10`` in nano units, rounded away from zero.

    ``significant`` has no leading or trailing zeros, and the value is below 10**_MAX_ORDER.
    """
    if exp10 >= -9:
        return int(significant) * _p10(exp10 + 9)
    cut = -9 - exp10  # digits below a nano; never all zero since there are no trailing zeros
    return 1 if cut >= len(significant) else int(significant[:-cut]) + 1


def _binary_nanos(significant: str, exp10: int, power: int) -> int | None:
    """``int(significant) * 10**exp10 * 2**power`` in nano units, rounded away from zero;
    None when it certainly exceeds the BinarySI cap of 2**63-1."""
    order = len(significant) + exp10  # 10**(order-1) <= int(significant) * 10**exp10 < 10**order
    if order > 20:  # at least 10**20 * 1024
        return None
    if order + 28 <= 0:  # value * 10**9 < 10**order * 2**60 * 10**9 < 1
        return 1
    if len(significant) > _MAX_BINARY_DIGITS:
        raise ValueError(f"more than {_MAX_BINARY_DIGITS} significant digits")
    scaled = int(significant) << power
    if exp10 + 9 >= 0:
        return scaled * _p10(exp10 + 9)
    q, r = divmod(scaled, _p10(-exp10 - 9))
    return q + (1 if r else 0)


@dataclass(frozen=True, eq=False, slots=True)
class Quantity(Ordered):
    """An immutable Kubernetes quantity; equality, ordering and hashing are by exact value.

    Build one with :meth:`parse` or :meth:`from_int`. Internally the value is
    ``_unscaled * 10**_scale``; ``_dec`` records whether Kubernetes would hold it as an
    ``inf.Dec`` (True) or as a scaled int64 (False), which only ``is_integer``/``as_integer``
    and ``as_approximate_float`` observe.
    """

    _unscaled: int
    _scale: int
    format: Format
    _dec: bool

    # ----------------------------------------------------------------------------- building

    @classmethod
    def parse(cls, s: str) -> Quantity:
        """``resource.ParseQuantity``; raises :class:`QuantityError` naming ``s``."""
        m = _QUANTITY_RE.fullmatch(s)
        if m is None or not s:
            raise _invalid(s, ERR_FORMAT_WRONG)
        sign, num_raw, frac, suffix = m.groups()
        negative = sign == "-"
        denom = frac[1:] if frac else ""
        num = num_raw.lstrip("0") or "0"

        interpreted = _interpret(suffix)
        if interpreted is None:
            raise _invalid(s, ERR_SUFFIX)
        base, exponent, fmt = interpreted

        # Fast path: the value fits a scaled int64 (Go's int64Amount).
        if base == 10:
            precision = 18 - (len(num) + len(denom))
            scale = exponent
            multiplier = 1
        else:
            scale = 0
            multiplier = 1 << exponent
            precision = 15 - len(num) - exponent * 3 // 10 - 1 if not denom else -1
        if precision >= 0:
            scale = _wrap32(scale - len(denom))
            if scale >= -9:
                result = int(num + denom) * multiplier
                if result <= _INT64_MAX:
                    if result == 0:
                        return cls(0, _clamp_zero_scale(scale), fmt, False)
                    if _too_big(result, scale):
                        raise _invalid(s, "value is too large (at least 10^1000)")
                    return cls(-result if negative else result, scale, fmt, False)

        # Slow path: inf.Dec, rounded away from zero to nano.
        if not num_raw and not denom:
            raise _invalid(s, ERR_NUMERIC)  # inf.Dec.SetString: no digits
        digits = (num + denom).lstrip("0")
        # inf.Dec scale arithmetic is int32 in Go, hence the wrap-arounds.
        exp10 = -_wrap32(len(denom) + _wrap32(-exponent)) if base == 10 else -len(denom)
        if not digits:
            return cls(0, _clamp_zero_scale(exp10), fmt, True)
        significant = digits.rstrip("0")
        exp10 += len(digits) - len(significant)
        if base == 10:
            if len(significant) + exp10 > _MAX_ORDER:
                raise _invalid(s, "value is too large (at least 10^1000)")
            nanos = _decimal_nanos(significant, exp10)
        else:
            try:
                capped = _binary_nanos(significant, exp10, exponent)
            except ValueError as err:
                raise _invalid(s, str(err)) from None
            if capped is None or capped > _INT64_MAX * _NANO:
                return cls(-_INT64_MAX if negative else _INT64_MAX, 0, fmt, True)
            nanos = capped
            if nanos < _NANO:
                fmt = "DecimalSI"
        return cls(-nanos if negative else nanos, -9, fmt, True)

    @classmethod
    def from_int(cls, n: int, format: Format = "DecimalExponent") -> Quantity:
        """``resource.NewQuantity(n, format)`` for an int64 ``n``.

        The default format is DecimalExponent because that is what the Kubernetes CEL library
        uses for the integer operands of ``add``/``sub`` (``quantity("0").add(5000)`` is
        ``5e3``).
        """
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"from_int needs an int, not {type(n).__name__}")
        if not _INT64_MIN <= n <= _INT64_MAX:
            raise QuantityError(f"integer {n} does not fit in int64", "integer out of int64 range")
        return cls(n, 0, format, False)

    # ----------------------------------------------------------------------------- value

    @property
    def value(self) -> Fraction:
        """The exact value."""
        if self._scale >= 0:
            return Fraction(self._unscaled * _p10(self._scale))
        return Fraction(self._unscaled, _p10(-self._scale))

    def sign(self) -> int:
        """-1, 0 or 1."""
        u = self._unscaled
        return (u > 0) - (u < 0)

    def is_integer(self) -> bool:
        """CEL ``isInteger()``: Go's ``Quantity.AsInt64`` succeeds.

        That is representation-dependent in Kubernetes: only a scaled int64 with a
        non-negative scale whose value fits int64 qualifies (``"1000m"`` and ``"1Pi"`` do not).
        """
        if self._dec:
            return False
        scale = self._scale
        if scale == 0:
            return True
        if scale < 0:
            return False
        if self._unscaled == 0:
            return True
        return _INT64_MIN <= self._unscaled * _p10(scale) <= _INT64_MAX

    def as_integer(self) -> int:
        """CEL ``asInteger()``; raises QuantityError("cannot convert value to integer")."""
        if not self.is_integer():
            raise QuantityError(ERR_NOT_INTEGER)
        return self._unscaled * _p10(self._scale)

    def as_approximate_float(self) -> float:
        """CEL ``asApproximateFloat()`` (Go ``AsApproximateFloat64``), bit for bit."""
        u = self._unscaled
        try:
            base = float(u)
        except OverflowError:
            base = math.inf if u > 0 else -math.inf
        if self._scale == 0:
            return base
        return base * _go_pow10(self._scale)

    # ----------------------------------------------------------------------------- comparison

    def cmp(self, other: Quantity) -> int:
        """-1, 0 or 1 by exact value."""
        a, b = self.sign(), other.sign()
        if a != b:
            return -1 if a < b else 1
        if a == 0:
            return 0
        low = min(self._scale, other._scale)
        x = self._unscaled * _p10(self._scale - low)
        y = other._unscaled * _p10(other._scale - low)
        return (x > y) - (x < y)

    def _order(self, other: Quantity) -> int:
        return self.cmp(other)

    def __hash__(self) -> int:
        return hash(self.value)

    # ----------------------------------------------------------------------------- arithmetic

    def add(self, other: Quantity) -> Quantity:
        """``q.DeepCopy(); q.Add(other)``: exact; format is the receiver's unless it is zero."""
        return self._add(other._unscaled, other._scale, other.format, other._dec)

    def sub(self, other: Quantity) -> Quantity:
        """``q.DeepCopy(); q.Sub(other)``: exact; format is the receiver's unless it is zero."""
        return self._add(-other._unscaled, other._scale, other.format, other._dec)

    def _add(self, u2: int, s2: int, fmt2: Format, dec2: bool) -> Quantity:
        u1, s1 = self._unscaled, self._scale
        fmt = fmt2 if u1 == 0 else self.format
        if not self._dec and not dec2:
            summed = _int64_amount_add(u1, s1, u2, s2)
            if summed is not None:
                return Quantity(summed[0], summed[1], fmt, False)
        low = min(s1, s2)
        total = u1 * _p10(s1 - low) + u2 * _p10(s2 - low)
        if total == 0:
            low = _clamp_zero_scale(low)
        elif _too_big(total, low):
            raise QuantityError("quantity arithmetic result is too large (at least 10^1000)", "result too large")
        return Quantity(total, low, fmt, True)

    # ----------------------------------------------------------------------------- formatting

    def canonical(self) -> str:
        """``CanonicalizeBytes``: the canonical string (e.g. ``1536Mi``, ``100m``, ``1e3``)."""
        u, scale = self._unscaled, self._scale
        if u == 0:
            return "0"
        fmt = self.format
        if fmt == "BinarySI":
            if self._cmp_int(-1024) > 0 and self._cmp_int(1024) < 0:
                fmt = "DecimalSI"
            else:
                whole = self._integral()
                if whole is None:
                    fmt = "DecimalSI"
                else:
                    mantissa, power = abs(whole), 0
                    while mantissa % 1024 == 0:
                        mantissa //= 1024
                        power += 1
                    if whole < 0:
                        mantissa = -mantissa
                    if power > 6:  # no suffix beyond Ei upstream (it prints the bare mantissa)
                        return f"{mantissa * 1024 ** (power - 6)}Ei"
                    return f"{mantissa}{_BINARY_SUFFIX_BY_POWER[power]}"
        mantissa, exponent = u, scale
        while mantissa % 10 == 0:
            mantissa //= 10
            exponent += 1
        exponent3 = exponent - exponent % 3
        mantissa *= _p10(exponent - exponent3)
        if fmt == "DecimalExponent":
            return f"{mantissa}e{exponent3}" if exponent3 else str(mantissa)
        suffix = _DECIMAL_SUFFIX_BY_EXPONENT.get(exponent3)
        if suffix is not None:
            return f"{mantissa}{suffix}"
        if exponent3 > 18:  # no suffix beyond E upstream (it prints the bare mantissa)
            return f"{mantissa * _p10(exponent3 - 18)}E"
        return f"{mantissa}e{exponent3}"  # below nano: cannot be produced by this module

    def __str__(self) -> str:
        return self.canonical()

    def __repr__(self) -> str:
        return f"Quantity({self.canonical()!r}, {self.format})"

    # ----------------------------------------------------------------------------- helpers

    def _cmp_int(self, n: int) -> int:
        if self._scale >= 0:
            x, y = self._unscaled * _p10(self._scale), n
        else:
            x, y = self._unscaled, n * _p10(-self._scale)
        return (x > y) - (x < y)

    def _integral(self) -> int | None:
        if self._scale >= 0:
            return self._unscaled * _p10(self._scale)
        q, r = divmod(self._unscaled, _p10(-self._scale))
        return None if r else q


def _int64_amount_add(a: int, a_scale: int, b: int, b_scale: int) -> tuple[int, int] | None:
    """amount.go ``int64Amount.Add``: the sum as (value, scale), or None if Go would overflow."""
    if not _INT64_MIN <= b <= _INT64_MAX:
        return None  # -(-2**63): Go wraps here; fall back to the exact inf.Dec path instead
    if b == 0:
        return a, a_scale
    if a == 0:
        return b, b_scale
    if a_scale == b_scale:
        total, scale = a + b, a_scale
    elif a_scale > b_scale:
        shifted = a * _p10(a_scale - b_scale)
        if not _INT64_MIN <= shifted <= _INT64_MAX:
            return None
        total, scale = shifted + b, b_scale
    else:
        shifted = b * _p10(b_scale - a_scale)
        if not _INT64_MIN <= shifted <= _INT64_MAX:
            return None
        total, scale = a + shifted, a_scale
    if not _INT64_MIN <= total <= _INT64_MAX:
        return None
    return total, scale


# Memo keyed by the text itself (never by id() or a generation): a Quantity is immutable and a pure
# function of its text, so an entry can never be stale; bounded by size. Capacities and CEL
# quantity() calls repeat the same few texts on every device of every node.
PARSED: dict[str, Quantity] = {}


def parse_cached(s: str) -> Quantity:
    """:meth:`Quantity.parse`, memoized by text."""
    q = PARSED.get(s)
    if q is None:
        q = Quantity.parse(s)
        if len(PARSED) > 65536:
            PARSED.clear()
        PARSED[s] = q
    return q
