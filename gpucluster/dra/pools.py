"""ResourceSlices and the resource pools a node can allocate from.

Mirrors ``GatherPools`` of k8s.io/dynamic-resource-allocation/structured (the "incubating"
allocator of 1.34, 1.35 and 1.36, see :class:`~gpucluster.dra.model.Semantics` for what changed):

- a slice is relevant for a node through ``spec.nodeName``, ``spec.allNodes``, ``spec.nodeSelector``
  or, with ``spec.perDeviceNodeSelection``, through any of its devices;
- only the highest ``spec.pool.generation`` of each pool counts;
- a pool is incomplete when fewer slices than ``spec.pool.resourceSliceCount`` are there, invalid
  when device names repeat (1.35+: also duplicate counter sets or unknown consumed counters).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpucluster.dra.model import (
    AllocatorInputError,
    DeviceKey,
    NodeInfo,
    NodeSelector,
    Semantics,
    parse_node_selector,
    parse_quantity,
)

CounterSets = dict[str, dict[str, Fraction]]


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(slots=True, eq=False, init=False)
class Device:
    """One ``spec.devices[]`` entry. Hashable by identity."""

    name: str
    key: DeviceKey
    index: int  # position in spec.devices, also the index into the slice's CEL views
    attributes: Mapping[str, Any]
    taints: tuple[Taint, ...]
    consumes: tuple[tuple[str, tuple[tuple[str, Fraction], ...]], ...]
    has_binding_conditions: bool
    node_name: str
    all_nodes: bool
    node_selector: NodeSelector | None
    ident: str  # "driver/pool/device", as explanations name it
    plain: bool  # no taints, consumes no counters, does not allow multiple allocations
    multi: bool  # allowMultipleAllocations: shared among allocations with DRAConsumableCapacity
    capacity_policies: bool | None  # some capacity has a requestPolicy (None: not looked at yet)
    # Why CEL cannot see the device (an attribute that does not convert), "" if it can; None:
    # not checked yet (see selection.DeviceSelection).
    conversion_error: str | None
    # attribute name -> comparable value, filled by the allocator's constraints (see constraints.value_of)
    values: dict[str, Any] | None

    def __init__(
        self,
        name: str,
        key: DeviceKey,
        index: int,
        attributes: Mapping[str, Any],
        taints: tuple[Taint, ...] = (),
        consumes: tuple[tuple[str, tuple[tuple[str, Fraction], ...]], ...] = (),
        has_binding_conditions: bool = False,
        node_name: str = "",
        all_nodes: bool = False,
        node_selector: NodeSelector | None = None,
        multi: bool = False,
    ) -> None:
        # Written out (not generated): 8,000 devices of a 1,000-node cluster are built per call.
        self.name = name
        self.key = key
        self.index = index
        self.attributes = attributes
        self.taints = taints
        self.consumes = consumes
        self.has_binding_conditions = has_binding_conditions
        self.node_name = node_name
        self.all_nodes = all_nodes
        self.node_selector = node_selector
        self.ident = f"{key[0]}/{key[1]}/{key[2]}"
        self.plain = not taints and not consumes and not multi
        self.multi = multi
        self.capacity_policies = None
        self.conversion_error = None
        self.values = None

    def available_on(self, node: NodeInfo) -> bool:
        """Per-device node selection (``perDeviceNodeSelection: true`` slices)."""
        if self.node_name:
            return self.node_name == node.name
        if self.all_nodes:
            return True
        if self.node_selector is not None:
            return self.node_selector.matches(node)
        return False


@dataclass(slots=True, eq=False)
class Slice:
    """A parsed ResourceSlice. ``raw`` is the dict it came from (for CEL views)."""

    name: str
    raw: Mapping[str, Any]
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str
    all_nodes: bool
    node_selector: NodeSelector | None
    per_device: bool
    devices: list[Device]
    shared_counters: CounterSets
    counter_set_names: tuple[str, ...]
    has_binding_conditions: bool
    plain: bool = False  # every device is known plain (Device.plain); False: some may not be
    views: list[Any] | None = None  # filled on first use by the allocator

    @property
    def pool_id(self) -> tuple[str, str]:
        return (self.driver, self.pool)

    def relevant_for(self, node: NodeInfo) -> bool | None:
        """True/False when node selection decides; None when no known field is set."""
        if self.node_name:
            return self.node_name == node.name
        if self.all_nodes:
            return True
        if self.node_selector is not None:
            return self.node_selector.matches(node)
        if self.per_device:
            return any(d.available_on(node) for d in self.devices)
        return None


# ---------------------------------------------------------------------------------------------
# Parsing. Nothing parsed is kept between calls: an explanation parses each slice of its cluster
# once, and a caller that explains the same objects again keeps what it derived itself (see
# ClusterState.derived), so no process-wide cache can hand out a stale Slice.


def _str(value: Any, where: str, *, required: bool = True) -> str:
    if value is None or value == "":
        if required:
            raise AllocatorInputError(f"{where}: required")
        return ""
    if not isinstance(value, str):
        raise AllocatorInputError(f"{where}: must be a string")
    return value


def _int(value: Any, where: str, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise AllocatorInputError(f"{where}: must be an integer")
    return value


def _counters(raw: Any, where: str) -> dict[str, Fraction]:
    if not isinstance(raw, Mapping):
        raise AllocatorInputError(f"{where}: must be a map of counter name to {{value: quantity}}")
    result: dict[str, Fraction] = {}
    for name, counter in raw.items():
        if not isinstance(counter, Mapping) or "value" not in counter:
            raise AllocatorInputError(f"{where}.{name}.value: required")
        result[str(name)] = parse_quantity(counter["value"], f"{where}.{name}.value")
    return result


def _parse_taints(raw: Any, where: str) -> tuple[Taint, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise AllocatorInputError(f"{where}: must be a list")
    taints = []
    for i, t in enumerate(raw):
        if not isinstance(t, Mapping):
            raise AllocatorInputError(f"{where}[{i}]: must be an object")
        taints.append(
            Taint(
                key=_str(t.get("key"), f"{where}[{i}].key"),
                value=_str(t.get("value"), f"{where}[{i}].value", required=False),
                effect=_str(t.get("effect"), f"{where}[{i}].effect"),
            )
        )
    return tuple(taints)


def parse_slice(raw: Mapping[str, Any], index: int) -> Slice:
    """The ResourceSlice ``raw`` (``index``: its position in the input, for unnamed slices)."""
    # (``type(x) is dict`` first: an ABC isinstance check costs more, thousands of slices a call.)
    meta = raw.get("metadata")
    name = meta.get("name") if type(meta) is dict or isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        name = f"#{index}"
    label = f"ResourceSlice {name}"
    spec = raw.get("spec")
    if type(spec) is not dict and not isinstance(spec, Mapping):
        raise AllocatorInputError(f"{label}: spec: required")
    # Each field checked by type first, the helpers (which format the field's path) only where
    # that is not enough: thousands of slices a call.
    driver = spec.get("driver")
    if type(driver) is not str or not driver:
        driver = _str(driver, f"{label}: spec.driver")
    pool_raw = spec.get("pool")
    if type(pool_raw) is not dict and not isinstance(pool_raw, Mapping):
        raise AllocatorInputError(f"{label}: spec.pool: required")
    pool = pool_raw.get("name")
    if type(pool) is not str or not pool:
        pool = _str(pool, f"{label}: spec.pool.name")
    generation = pool_raw.get("generation")
    if type(generation) is not int:
        generation = _int(generation, f"{label}: spec.pool.generation", default=0)
    slice_count = pool_raw.get("resourceSliceCount")
    if type(slice_count) is not int:
        slice_count = _int(slice_count, f"{label}: spec.pool.resourceSliceCount", default=1)
    if slice_count < 1:
        raise AllocatorInputError(f"{label}: spec.pool.resourceSliceCount: must be greater than zero")

    node_name = spec.get("nodeName")
    if type(node_name) is not str:
        node_name = _str(node_name, f"{label}: spec.nodeName", required=False)
    all_nodes = spec.get("allNodes") is True
    per_device = spec.get("perDeviceNodeSelection") is True
    node_selector = (
        parse_node_selector(spec["nodeSelector"], f"{label}: spec.nodeSelector")
        if spec.get("nodeSelector") is not None
        else None
    )

    shared: CounterSets = {}
    set_names: list[str] = []
    shared_raw = spec.get("sharedCounters") or []
    if not isinstance(shared_raw, list):
        raise AllocatorInputError(f"{label}: spec.sharedCounters: must be a list")
    for i, counter_set in enumerate(shared_raw):
        where = f"{label}: spec.sharedCounters[{i}]"
        if not isinstance(counter_set, Mapping):
            raise AllocatorInputError(f"{where}: must be an object")
        set_name = _str(counter_set.get("name"), f"{where}.name")
        set_names.append(set_name)
        shared[set_name] = _counters(counter_set.get("counters") or {}, f"{where}.counters")

    devices_raw = spec.get("devices") or []
    if not isinstance(devices_raw, list):
        raise AllocatorInputError(f"{label}: spec.devices: must be a list")
    devices: list[Device] = []
    any_binding = False
    plain = True
    for i, d in enumerate(devices_raw):
        # The common device (a name, attributes, capacity) without building error paths: most
        # devices are plain, and formatting a field path for every field of 8,000 devices is a
        # third of the time of a first explanation of a 1,000-node cluster.
        if type(d) is dict and _PLAIN_FIELDS.issuperset(d):
            dev_name = d.get("name")
            attributes = d.get("attributes")
            if type(dev_name) is str and dev_name and (attributes is None or type(attributes) is dict):
                multi = d.get("allowMultipleAllocations") is True
                devices.append(Device(dev_name, (driver, pool, dev_name), i, attributes or {}, multi=multi))
                plain = plain and not multi
                continue
        plain = False
        where = f"{label}: spec.devices[{i}]"
        if not isinstance(d, Mapping):
            raise AllocatorInputError(f"{where}: must be an object")
        dev_name = _str(d.get("name"), f"{where}.name")
        attributes = d.get("attributes") or {}
        if not isinstance(attributes, Mapping):
            raise AllocatorInputError(f"{where}.attributes: must be a map")
        consumes = []
        consumes_raw = d.get("consumesCounters") or []
        if not isinstance(consumes_raw, list):
            raise AllocatorInputError(f"{where}.consumesCounters: must be a list")
        for j, c in enumerate(consumes_raw):
            c_where = f"{where}.consumesCounters[{j}]"
            if not isinstance(c, Mapping):
                raise AllocatorInputError(f"{c_where}: must be an object")
            set_name = _str(c.get("counterSet"), f"{c_where}.counterSet")
            counters = _counters(c.get("counters") or {}, f"{c_where}.counters")
            consumes.append((set_name, tuple(counters.items())))
        binding = bool(d.get("bindingConditions"))
        any_binding = any_binding or binding
        dev_selector = (
            parse_node_selector(d["nodeSelector"], f"{where}.nodeSelector")
            if d.get("nodeSelector") is not None
            else None
        )
        devices.append(
            Device(
                name=dev_name,
                key=(driver, pool, dev_name),
                index=i,
                attributes=attributes,
                taints=_parse_taints(d.get("taints"), f"{where}.taints"),
                consumes=tuple(consumes),
                has_binding_conditions=binding,
                node_name=_str(d.get("nodeName"), f"{where}.nodeName", required=False),
                all_nodes=d.get("allNodes") is True,
                node_selector=dev_selector,
                multi=d.get("allowMultipleAllocations") is True,
            )
        )
    return Slice(
        name=name,
        raw=raw,
        driver=driver,
        pool=pool,
        generation=generation,
        slice_count=slice_count,
        node_name=node_name,
        all_nodes=all_nodes,
        node_selector=node_selector,
        per_device=per_device,
        devices=devices,
        shared_counters=shared,
        counter_set_names=tuple(set_names),
        has_binding_conditions=any_binding,
        plain=plain,
    )


# The fields a device without taints, counters, binding conditions or node selection may have.
_PLAIN_FIELDS = frozenset(("name", "attributes", "capacity", "allowMultipleAllocations"))


def has_request_policy(capacity: Any) -> bool:
    """Whether some capacity has a ``requestPolicy`` (the API server allows one only on devices
    that allow multiple allocations; the allocator checks it on every device)."""
    if type(capacity) is not dict:
        return False
    return any(type(c) is dict and c.get("requestPolicy") is not None for c in capacity.values())


def check_slice_for_version(s: Slice, semantics: Semantics) -> None:
    """Cross-field rules of the API server that differ between releases."""
    if semantics.pool_counters:
        if s.shared_counters and s.devices:
            raise AllocatorInputError(
                f"ResourceSlice {s.name}: spec: only one of devices and sharedCounters may be set "
                f"(Kubernetes {semantics.version}; counter sets moved to their own slices in 1.35)"
            )
        return
    if not semantics.partitionable_devices:
        return  # the API server drops counters without DRAPartitionableDevices: nothing to validate
    for device in s.devices:
        for set_name, counters in device.consumes:
            if set_name not in s.shared_counters:
                raise AllocatorInputError(
                    f"ResourceSlice {s.name}: spec.devices[{device.index}].consumesCounters: counter set "
                    f"{set_name!r} is not in spec.sharedCounters (Kubernetes 1.34 counts per slice)"
                )
            for counter, _ in counters:
                if counter not in s.shared_counters[set_name]:
                    raise AllocatorInputError(
                        f"ResourceSlice {s.name}: spec.devices[{device.index}].consumesCounters: counter "
                        f"{counter!r} is not in counter set {set_name!r}"
                    )


# ---------------------------------------------------------------------------------------------
# Pools.


@dataclass(slots=True, eq=False)
class Pool:
    driver: str
    name: str
    slices: list[Slice] = field(default_factory=list)  # device slices relevant for the node
    other_slices: list[Slice] = field(default_factory=list)  # 1.35+: the rest of the pool (counters)
    counter_sets: CounterSets = field(default_factory=dict)  # 1.35+: the pool's counter sets
    incomplete: bool = False
    invalid: str = ""  # reason, empty when valid
    seen_slices: int = 0
    expected_slices: int = 0
    has_binding_conditions: bool = False

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"


def _add_slice(pools: dict[tuple[str, str], list[Slice]], s: Slice) -> None:
    current = pools.get(s.pool_id)
    if current is None:
        pools[s.pool_id] = [s]
        return
    if s.generation < current[0].generation:
        return  # out-dated
    if s.generation > current[0].generation:
        pools[s.pool_id] = [s]  # newer generation replaces the older one
        return
    current.append(s)


def _duplicate_device(slices: Sequence[Slice]) -> str:
    if len(slices) == 1:
        names = [d.name for d in slices[0].devices]
        if len(set(names)) == len(names):
            return ""  # the common case: one slice, no name twice
    seen: set[str] = set()
    for s in slices:
        for d in s.devices:
            if d.name in seen:
                return f"duplicate device name {d.name}"
            seen.add(d.name)
    return ""


def _counter_sets(slices: Iterable[Slice]) -> tuple[CounterSets, str]:
    sets: CounterSets = {}
    for s in slices:
        for set_name in s.counter_set_names:
            if set_name in sets:
                return {}, f"duplicate counter set name {set_name}"
            sets[set_name] = s.shared_counters[set_name]
    return sets, ""


def _unknown_counter(sets: CounterSets, slices: Iterable[Slice]) -> str:
    for s in slices:
        for d in s.devices:
            for set_name, counters in d.consumes:
                if set_name not in sets:
                    return f"counter set {set_name} not found"
                for counter, _ in counters:
                    if counter not in sets[set_name]:
                        return f"counter {counter} not found in counter set {set_name}"
    return ""


def gather_pools(
    candidates: Sequence[Slice],
    node: NodeInfo,
    semantics: Semantics,
    slices_by_pool: Mapping[tuple[str, str], Sequence[Slice]],
) -> list[Pool]:
    """The pools whose devices ``node`` can use, in the order the allocator searches them.

    ``candidates`` are the slices that may be relevant (in input order); ``slices_by_pool`` are
    all slices of each pool, whatever node they target (1.35+ uses them for incomplete pools and
    for counters consumed by devices of other nodes).
    """
    grouped: dict[tuple[str, str], list[Slice]] = {}
    if (
        semantics.binding_order
        and not semantics.sorted_order
        and len(candidates) > 1
        and any(s.has_binding_conditions for s in candidates)
    ):
        # GatherPools adds the slices with binding conditions to their pools after the others
        # (1.36 sorts a pool's slices by name instead).
        candidates = sorted(candidates, key=lambda s: s.has_binding_conditions)
    for s in candidates:
        if semantics.pool_counters and s.shared_counters:
            # Counter sets are needed whatever node they name; with DRAPartitionableDevices off
            # their slice is skipped, though it still counts towards its pool being complete.
            relevant: bool | None = semantics.partitionable_devices
        else:
            relevant = s.relevant_for(node)
        if relevant:
            _add_slice(grouped, s)
        # None: no known node selection field, a future extension: ignored like upstream.

    if not semantics.pool_counters:
        # 1.34's GatherPools puts the pools with binding conditions last, whatever the gate.
        pools = [_pool_134(pid, slices) for pid, slices in grouped.items()]
        if len(pools) == 1 or not any(p.has_binding_conditions for p in pools):
            return pools  # nothing to move
        return [p for p in pools if not p.has_binding_conditions] + [p for p in pools if p.has_binding_conditions]

    result: list[Pool] = []
    with_binding: list[Pool] = []
    for pid, slices in grouped.items():
        generation = slices[0].generation
        expected = slices[0].slice_count
        all_for_pool: list[Slice] | None = None
        if len(slices) != expected:
            # Maybe slices of the same generation target other nodes: count those too.
            obsolete = False
            all_for_pool = []
            for other in slices_by_pool.get(pid, ()):
                if other.generation == generation:
                    all_for_pool.append(other)
                elif other.generation > generation:
                    obsolete = True  # the driver is replacing this generation: ignore the pool
                    break
            if obsolete:
                continue
            if len(all_for_pool) != expected:
                result.append(
                    Pool(
                        driver=pid[0],
                        name=pid[1],
                        incomplete=True,
                        seen_slices=len(all_for_pool),
                        expected_slices=expected,
                    )
                )
                continue
        pool = _pool_135(pid, slices, all_for_pool, semantics)
        pool.seen_slices = len(all_for_pool) if all_for_pool is not None else len(slices)
        pool.expected_slices = expected
        if semantics.binding_order and pool.has_binding_conditions:
            with_binding.append(pool)
        else:
            result.append(pool)
    if semantics.sorted_order:
        result.sort(key=lambda p: (p.driver, p.name))
        with_binding.sort(key=lambda p: (p.driver, p.name))
    return result + with_binding


def _pool_134(pid: tuple[str, str], slices: list[Slice]) -> Pool:
    expected = slices[0].slice_count
    return Pool(
        driver=pid[0],
        name=pid[1],
        slices=slices,
        incomplete=len(slices) != expected,
        invalid=_duplicate_device(slices),
        seen_slices=len(slices),
        expected_slices=expected,
        has_binding_conditions=slices[0].has_binding_conditions
        if len(slices) == 1
        else any(s.has_binding_conditions for s in slices),
    )


def _pool_135(
    pid: tuple[str, str], slices: list[Slice], all_for_pool: list[Slice] | None, semantics: Semantics
) -> Pool:
    if semantics.sorted_order:
        slices = sorted(slices, key=lambda s: s.name)
    device_slices = [s for s in slices if not s.shared_counters]
    counter_slices = [s for s in slices if s.shared_counters]
    pool = Pool(driver=pid[0], name=pid[1])
    reason = _duplicate_device(device_slices)
    sets: CounterSets = {}
    if not semantics.partitionable_devices:
        # buildPool: without DRAPartitionableDevices counters are not validated (nor used).
        reason = _duplicate_device(list(slices))
        if reason:
            pool.invalid = reason
            return pool
        # Every slice's devices; one that consumes counters is refused by the search (gated).
        pool.slices = list(slices)
        pool.has_binding_conditions = any(s.has_binding_conditions for s in slices)
        return pool
    if not reason:
        sets, reason = _counter_sets(counter_slices)
        if not reason:
            reason = _unknown_counter(sets, slices)
    if reason:
        pool.invalid = reason
        return pool
    pool.slices = device_slices
    pool.counter_sets = sets
    pool.has_binding_conditions = any(s.has_binding_conditions for s in device_slices)
    if all_for_pool is not None and len(all_for_pool) != len(slices):
        seen = {id(s) for s in slices}
        others = [s for s in all_for_pool if id(s) not in seen]
        reason = _unknown_counter(sets, others)
        if reason:
            return Pool(driver=pid[0], name=pid[1], invalid=reason)
        pool.other_slices = [s for s in others if not s.shared_counters]
    return pool
