"""Which devices a set of compiled selectors cannot tell apart: a key of the values they read.

A :class:`~gpucluster.dra.cel.program.Program` lists in ``reads`` everything it may read from
``device``. When every read is a lookup with a constant domain and name
(``device.attributes["gpu.nvidia.com"].productName``, ``has(...)`` of one, the same for
``device.capacity``), ``device.driver`` or ``device.allowMultipleAllocations``, the program's
verdict - true, false or the runtime error with its message - is a function of the driver and
of the raw values those lookups find, resolved as :class:`~gpucluster.dra.cel.view.DeviceView`
resolves them (an unqualified name of the driver's domain first, then ``domain/name``; absent
and ``null`` alike). :func:`read_key` builds the function that turns the raw devices of a slice
into such keys, so a caller may evaluate the programs once per distinct key instead of once per device.

A raw value becomes part of a key only in the forms whose conversion depends on nothing but the
key: an attribute with one field (``string``, ``version``, ``int``, ``bool``, each of its exact
JSON type), a capacity whose ``value`` is a string or an int (other fields of a capacity are
never read). Any other value - a list attribute, a value of the wrong type, several fields - has
no key: the device must be evaluated on its own, as must every device for a program that reads
a whole domain, a whole map or ``device`` itself (``reads`` cannot say which values matter).

Nothing here decides whether a device's attributes convert at all (Kubernetes converts every
attribute before evaluating): that is :func:`~gpucluster.dra.cel.view.conversion_error`'s, per
device, whatever the key.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Final

from gpucluster.dra.cel.view import EMPTY_MAP

ReadKey = Callable[[str, Sequence[Mapping[str, Any]]], "list[tuple[Hashable, ...] | None]"]
"""``keys(driver, raw_devices)``: per device of a slice (``spec.devices``), the values the programs
read, or None where the device has no key."""

_NO_KEY: Final = object()


def _attribute_key(attr: Any) -> Hashable:
    """A raw attribute as a key (None: absent), or _NO_KEY."""
    if attr is None:
        return None
    if attr.__class__ is not dict or len(attr) != 1:
        return _NO_KEY
    value = attr.get("string")
    if value.__class__ is str:
        return value  # the common case: the string itself (no other key is a str)
    value = attr.get("version")
    if value.__class__ is str:
        return ("version", value)
    value = attr.get("int")
    if value.__class__ is int:
        return ("int", value)
    value = attr.get("bool")
    if value is True or value is False:
        return ("bool", value)
    return _NO_KEY


def _capacity_key(cap: Any) -> Hashable:
    """A raw capacity as a key (None: absent), or _NO_KEY."""
    if cap is None:
        return None
    if cap.__class__ is not dict:
        return _NO_KEY
    value = cap.get("value")
    if value.__class__ is str:
        return value
    if value.__class__ is int:
        return ("int", value)
    return _NO_KEY


def read_key(programs: Iterable[Any]) -> ReadKey | None:
    """The key function for evaluating all of ``programs`` on the devices of a slice, or None
    when one of them reads more than constant lookups, the driver and allowMultipleAllocations
    (or is not a :class:`~gpucluster.dra.cel.program.Program`)."""
    lookups: set[tuple[bool, str, str]] = set()  # (capacity?, domain, name)
    multi = False
    for program in programs:
        reads = getattr(program, "reads", None)
        if not isinstance(reads, frozenset):
            return None
        for read in reads:
            if len(read) == 3 and read[0] in ("attributes", "capacity"):
                lookups.add((read[0] == "capacity", read[1], read[2]))
            elif read == ("allowMultipleAllocations",):
                multi = True
            elif read != ("driver",):
                return None
    plan = sorted(lookups)
    attribute_names = [(domain, name) for is_capacity, domain, name in plan if not is_capacity]
    capacity_names = [(domain, name) for is_capacity, domain, name in plan if is_capacity]

    # Where each lookup looks, by driver: the unqualified name (the driver's own domain), then
    # "domain/name", as DeviceView does.
    places: dict[str, tuple[list[tuple[str | None, str]], list[tuple[str | None, str]]]] = {}

    def keys(driver: str, devices: Sequence[Mapping[str, Any]]) -> list[tuple[Hashable, ...] | None]:
        found = places.get(driver)
        if found is None:
            found = places[driver] = (
                [_where(driver, domain, name) for domain, name in attribute_names],
                [_where(driver, domain, name) for domain, name in capacity_names],
            )
        attributes, capacities = found
        out: list[tuple[Hashable, ...] | None] = []
        for device in devices:
            key: list[Hashable] = [driver]
            keyed = True
            if attributes:
                raw = device.get("attributes") or EMPTY_MAP
                for short, qualified in attributes:
                    value = raw.get(short) if short is not None else None
                    if value is None:
                        value = raw.get(qualified)
                    if value.__class__ is dict and len(value) == 1:
                        text = value.get("string")  # the common case: the string itself
                        if text.__class__ is str:
                            key.append(text)
                            continue
                    part = _attribute_key(value)
                    if part is _NO_KEY:
                        keyed = False
                        break
                    key.append(part)
            if capacities and keyed:
                raw = device.get("capacity") or EMPTY_MAP
                for short, qualified in capacities:
                    value = raw.get(short) if short is not None else None
                    if value is None:
                        value = raw.get(qualified)
                    part = _capacity_key(value)
                    if part is _NO_KEY:
                        keyed = False
                        break
                    key.append(part)
            if not keyed:
                out.append(None)
                continue
            if multi:
                key.append(device.get("allowMultipleAllocations") is True)
            out.append(tuple(key))
        return out

    return keys


def _where(driver: str, domain: str, name: str) -> tuple[str | None, str]:
    """Where DeviceView looks a name up: unqualified when the domain is the driver's (None if
    not), then qualified."""
    return (name if domain == driver and "/" not in name else None, f"{domain}/{name}")
