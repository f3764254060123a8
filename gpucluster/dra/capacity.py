"""Consumable capacity (DRAConsumableCapacity): what one request would consume of a device that
allows multiple allocations, and whether the device's request policy allows it (pure).

As upstream's ``consumable_capacity.go``: a request's capacity names resolve against the
device's capacity (an unqualified name is the driver's own, ``<driver>/x`` and ``x`` are one
name; another domain only by its qualified name); a name the device lacks means the device does
not fit. For every capacity of the device the consumed amount is the request rounded up by the
capacity's ``requestPolicy`` (``validRange``: to ``min``, then to a ``step`` above it;
``validValues``: to the next listed value), or, with no request, the policy's ``default`` or the
whole capacity. The amount must not violate the policy and, with what other allocations of the
device already consume (claims allocated before, and the requests of this search), must fit
the capacity. Every device is checked so; only a device that allows multiple allocations is
shared, and only its allocations record what they consume. Amounts are exact fractions, so no
milli-value or int64 arithmetic is involved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpucluster.dra.model import AllocatorInputError, parse_quantity
from gpucluster.dra.quantity import Format, Quantity, parse_cached

Requests = Sequence[tuple[str, Fraction]]


def qualified(name: str, driver: str) -> str:
    """A capacity name with its domain: an unqualified name is the driver's own."""
    return name if "/" in name else f"{driver}/{name}"


def _device_capacity(device: Mapping[str, Any], driver: str) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Capacity by fully-qualified name (with the name as published); an entry qualified with the
    driver's domain wins over an unqualified one of the same identifier."""
    raw = device.get("capacity") or {}
    out: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for name, cap in raw.items():
        if str(name).startswith(driver + "/") and isinstance(cap, Mapping):
            out[str(name)] = (str(name), cap)
    for name, cap in raw.items():
        key = qualified(str(name), driver)
        if key not in out and isinstance(cap, Mapping):
            out[key] = (str(name), cap)
    return out


def _resolve(name: str, driver: str, raw: Mapping[str, Any]) -> str | None:
    if name in raw:
        return qualified(name, driver)
    domain, _, ident = name.partition("/")
    if ident:
        return name if domain == driver and ident in raw else None
    full = f"{driver}/{name}"
    return full if full in raw else None


def consumed(requested: Fraction | None, total: Fraction, policy: Mapping[str, Any] | None, where: str) -> Fraction:
    """``calculateConsumedQuantity``: what a request (None: none) consumes of one capacity."""
    if requested is None:
        if policy and policy.get("default") is not None:
            return parse_quantity(policy["default"], f"{where}.requestPolicy.default")
        return total
    if not policy:
        return requested
    valid_range = policy.get("validRange")
    if isinstance(valid_range, Mapping) and valid_range.get("min") is not None:
        low = parse_quantity(valid_range["min"], f"{where}.requestPolicy.validRange.min")
        if requested < low:
            return low
        if valid_range.get("step") is None:
            return requested
        step = parse_quantity(valid_range["step"], f"{where}.requestPolicy.validRange.step")
        if step <= 0:
            raise AllocatorInputError(f"{where}.requestPolicy.validRange.step: must be greater than zero")
        steps = -((low - requested) // step)  # ceil((requested - low) / step)
        return low + step * steps
    values = policy.get("validValues")
    if isinstance(values, list) and values:
        for value in values:
            amount = parse_quantity(value, f"{where}.requestPolicy.validValues")
            if requested <= amount:
                return amount
    return requested


def violates(amount: Fraction, policy: Mapping[str, Any] | None, where: str) -> bool:
    """``violatesPolicy``."""
    if not policy:
        return False
    if policy.get("default") is not None and amount == parse_quantity(
        policy["default"], f"{where}.requestPolicy.default"
    ):
        return False
    valid_range = policy.get("validRange")
    if isinstance(valid_range, Mapping):
        if valid_range.get("max") is not None and amount > parse_quantity(
            valid_range["max"], f"{where}.requestPolicy.max"
        ):
            return True
        if valid_range.get("step") is not None:
            step = parse_quantity(valid_range["step"], f"{where}.requestPolicy.validRange.step")
            low = parse_quantity(valid_range.get("min") or 0, f"{where}.requestPolicy.validRange.min")
            if step > 0 and (amount - low) % step != 0:
                return True
        return False
    values = policy.get("validValues")
    if isinstance(values, list) and values:
        return all(amount != parse_quantity(v, f"{where}.requestPolicy.validValues") for v in values)
    return False


@dataclass(frozen=True, slots=True)
class Demand:
    """What one allocation of a device takes of each of its capacities (by fully-qualified name)."""

    amounts: Mapping[str, Fraction]
    totals: Mapping[str, Fraction]
    published: Mapping[str, str]  # fully-qualified name -> the name as the device publishes it
    formats: Mapping[str, Format]  # fully-qualified name -> the quantity format of the capacity's value

    def over(self, used: Mapping[str, Fraction] | None) -> str:
        """Why this allocation does not fit next to ``used`` ("" if it does)."""
        for key, amount in self.amounts.items():
            already = used.get(key, _ZERO) if used else _ZERO
            total = self.totals[key]
            if amount + already > total:
                fmt = self.formats[key]
                need, have = _quantity(amount, fmt), _quantity(total, fmt)
                if already:
                    return f"capacity {key}: needs {need}, {_quantity(total - already, fmt)} of {have} left"
                return f"capacity {key}: needs {need}, has {have}"
        return ""

    def consumed_capacity(self) -> dict[str, str]:
        """The allocation result's ``consumedCapacity``: published name -> quantity."""
        return {self.published[key]: _quantity(amount, self.formats[key]) for key, amount in self.amounts.items()}


_ZERO = Fraction(0)


def demand(device: Mapping[str, Any], driver: str, requests: Requests | None) -> Demand | str:
    """What one allocation of ``device`` consumes for these capacity requests, or why the device
    cannot serve them at all (a capacity it lacks, an amount its requestPolicy does not allow)."""
    raw = device.get("capacity") or {}
    if not isinstance(raw, Mapping):
        return Demand({}, {}, {}, {})
    resolved: dict[str, Fraction] = {}
    for name, amount in requests or ():
        key = _resolve(name, driver, raw)
        if key is None:
            return f"does not have the requested capacity {name}"
        if key in resolved:
            raise AllocatorInputError(f"capacity {key.partition('/')[2] or key} requested twice (as {name} too)")
        resolved[key] = amount
    amounts: dict[str, Fraction] = {}
    totals: dict[str, Fraction] = {}
    published: dict[str, str] = {}
    formats: dict[str, Format] = {}
    for key, (name, cap) in _device_capacity(device, driver).items():
        where = f"device {device.get('name')}: capacity {key}"
        value = cap.get("value")
        total = parse_quantity(value, f"{where}.value")
        policy = cap.get("requestPolicy") if isinstance(cap.get("requestPolicy"), Mapping) else None
        amount = consumed(resolved.get(key), total, policy, where)
        if violates(amount, policy, where):
            return f"capacity {key}: {_show(amount)} is not allowed by its requestPolicy"
        amounts[key] = amount
        totals[key] = total
        published[key] = name
        formats[key] = parse_cached(value).format if isinstance(value, str) else "DecimalSI"
    return Demand(amounts, totals, published, formats)


def _quantity(amount: Fraction, fmt: Format) -> str:
    if amount.denominator == 1:
        return Quantity.from_int(amount.numerator, fmt).canonical()
    nanos = amount * 1_000_000_000
    if nanos.denominator == 1:
        return Quantity.parse(f"{nanos.numerator}n").canonical()
    return str(float(amount))


def _show(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else str(float(value))
