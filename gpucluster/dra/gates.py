"""The DRA feature gates the allocator reads, their defaults per Kubernetes version, ``Name=bool,...``.

Defaults and locks follow ``pkg/features/kube_features.go`` (the versioned feature specs):

=========================== ====== ====== ======================
gate                        1.34   1.35   1.36
=========================== ====== ====== ======================
DRAAdminAccess              on     on     on (GA, locked)
DRAPrioritizedList          on     on     on (GA)
DRADeviceTaints             off    off    on (beta)
DRAPartitionableDevices     off    off    on (beta)
DRAConsumableCapacity       off    off    on (beta)
DRADeviceBindingConditions  off    off    on (beta)
DRASchedulerFilterTimeout   on     on     on (beta)
DRAListTypeAttributes       -      -      off (alpha)
=========================== ====== ====== ======================

DRAListTypeAttributes (KEP-5491) does not exist before 1.36: setting it there is an
"unrecognized feature gate" error. It is not in :data:`GATES` (the gates every version has, which
:func:`defaults` reports): :func:`resolve` includes it only when ``overrides`` sets it.

What each changes in the allocator (k8s.io/dynamic-resource-allocation/structured): with
DRAAdminAccess off a request asking for admin access is an error; with DRAPrioritizedList off a
request with ``firstAvailable`` is an error; with DRADeviceTaints off taints are ignored; with
DRAPartitionableDevices off slices with ``sharedCounters`` or ``perDeviceNodeSelection`` are
ignored and devices consuming counters are never allocated; with DRADeviceBindingConditions off
devices with ``bindingConditions`` are never allocated; DRAConsumableCapacity declares
``device.allowMultipleAllocations`` in CEL; DRASchedulerFilterTimeout gives every node's search
its deadline; with DRAListTypeAttributes on, attributes may hold lists (``ints``, ``bools``,
``strings``, ``versions``): CEL sees them as lists (plus ``x.includes(y)``), ``matchAttribute``
needs values common to all devices and ``distinctAttribute`` pairwise disjoint values; off, a
device with a list attribute fails CEL evaluation ("unsupported attribute value").
"""

from __future__ import annotations

from collections.abc import Mapping

from gpucluster.dra.inputerror import SUPPORTED_VERSIONS, AllocatorInputError

ADMIN_ACCESS = "DRAAdminAccess"
PRIORITIZED_LIST = "DRAPrioritizedList"
DEVICE_TAINTS = "DRADeviceTaints"
PARTITIONABLE_DEVICES = "DRAPartitionableDevices"
CONSUMABLE_CAPACITY = "DRAConsumableCapacity"
BINDING_CONDITIONS = "DRADeviceBindingConditions"
FILTER_TIMEOUT = "DRASchedulerFilterTimeout"
LIST_TYPE_ATTRIBUTES = "DRAListTypeAttributes"

GATES = (
    ADMIN_ACCESS,
    PRIORITIZED_LIST,
    DEVICE_TAINTS,
    PARTITIONABLE_DEVICES,
    CONSUMABLE_CAPACITY,
    BINDING_CONDITIONS,
    FILTER_TIMEOUT,
)

# Alpha gates introduced after 1.34, off by default: gate -> the first minor version that knows it.
_INTRODUCED = {LIST_TYPE_ATTRIBUTES: 36}

# Gates that turned on by default in 1.36.
_ON_FROM_1_36 = (DEVICE_TAINTS, PARTITIONABLE_DEVICES, CONSUMABLE_CAPACITY, BINDING_CONDITIONS)
# (gate, version) -> the only value it may have (LockToDefault).
_LOCKED = {(ADMIN_ACCESS, "1.36"): True}


def defaults(version: str) -> dict[str, bool]:
    """Kubernetes' default for every gate of :data:`GATES` at ``version``."""
    if version not in SUPPORTED_VERSIONS:
        raise AllocatorInputError(
            f"kubernetes version {version!r} is not supported (one of {', '.join(SUPPORTED_VERSIONS)})"
        )
    minor = int(version.split(".")[1])
    return {gate: gate not in _ON_FROM_1_36 or minor >= 36 for gate in GATES}


def resolve(version: str, overrides: Mapping[str, bool] | None = None) -> dict[str, bool]:
    """The gates in effect: ``version``'s defaults with ``overrides``; unknown or locked gates are errors.

    An alpha gate of ``version`` (off by default) is in the result only when ``overrides`` sets it."""
    gates = defaults(version)
    minor = int(version.split(".")[1])
    for name, value in (overrides or {}).items():
        if name not in gates and minor < _INTRODUCED.get(name, 99):
            known = [*GATES, *(gate for gate, since in _INTRODUCED.items() if minor >= since)]
            raise AllocatorInputError(f"unrecognized feature gate: {name} (known: {', '.join(known)})")
        if not isinstance(value, bool):
            raise AllocatorInputError(f"feature gate {name}: value must be true or false, not {value!r}")
        locked = _LOCKED.get((name, version))
        if locked is not None and value != locked:
            raise AllocatorInputError(
                f"cannot set feature gate {name} to {str(value).lower()}, feature is locked to "
                f"{str(locked).lower()} in Kubernetes {version}"
            )
        gates[name] = value
    return gates


def parse(text: str) -> dict[str, bool]:
    """``Name=bool,Name=bool`` as kube-scheduler's ``--feature-gates`` reads it (bool: strconv.ParseBool)."""
    gates: dict[str, bool] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, raw = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise AllocatorInputError(f"missing bool value for {name or part}")
        value = _BOOLS.get(raw.strip())
        if value is None:
            raise AllocatorInputError(f"invalid value of {name}={raw.strip()}, err: invalid syntax")
        gates[name] = value
    return gates


# strconv.ParseBool
_BOOLS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}


def supported_version(info: Mapping[str, object]) -> str:
    """The allocator version for a server's ``/version`` answer: its ``major.minor`` when
    supported, else the nearest supported one (the newest for newer servers)."""
    minor = "".join(ch for ch in str(info.get("minor", "")) if ch.isdigit())
    found = f"{info.get('major', '1')}.{minor}"
    if found in SUPPORTED_VERSIONS:
        return found
    newest = SUPPORTED_VERSIONS[-1]
    return newest if minor and int(minor) > int(newest.split(".")[1]) else SUPPORTED_VERSIONS[0]


def setting(text: str, version: str) -> dict[str, bool]:
    """A ``--feature-gates`` value checked against ``version`` (unknown, malformed or locked
    gates are errors): the overrides to pass as the allocator's ``feature_gates``."""
    overrides = parse(text)
    resolve(version, overrides)
    return overrides
