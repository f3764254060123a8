"""The per-node search of the structured allocator, instrumented to explain itself.

Semantics follow ``Allocator.Allocate`` of k8s.io/dynamic-resource-allocation/structured, in the
implementation kube-scheduler runs for the version and gates (:func:`gpucluster.dra.model.variant`),
checked case by case against that code (tests/oracle):

- claims are allocated one after the other, each request after the other, one device after the
  other, trying every eligible device in pool/slice/device order and backtracking on failure
  (first solution wins);
- within one request devices are chosen as combinations in entry order (1.36 does so; 1.34 and
  1.35 walk ordered selections, and where every constraint is a property of the set the first
  ordered selection that succeeds is the first combination). Where the order matters upstream -
  its distinctAttribute remembers one value per request, its counters stay taken by a device a
  taint or constraint refuses (1.34, 1.35), 1.34 checks capacity against the device at the
  request's device index - the search walks ordered selections, unpruned, as upstream does;
- ``firstAvailable`` tries subrequests in order; a subrequest that would exceed the 32-results
  limit of a claim makes the search try the next one; in 1.34 and 1.35, when the first two both ask for
  All devices, the second gets the devices the first one's class and selectors match (upstream
  checks it under the first one's key of its device-match cache), and in 1.34 an All subrequest after
  the first keeps only its first device, the first subrequest going on from there (upstream's
  recursion drops the subrequest index);
- ``allocationMode: All`` fixes the devices up front; one of them in use, tainted or out of
  counters means no solution, one violating a claim constraint is an error;
- a device in use (allocated to another claim, or being allocated for this pod) is skipped
  before selectors are evaluated; requests with ``adminAccess`` ignore other claims' use;
- selectors: the class ones first, then the request ones; a CEL runtime error aborts, and so
  does a device attribute CEL cannot convert (``DeviceMatches`` converts them all first);
- DRAConsumableCapacity: every device is checked against a request's ``capacity.requests``; a
  device that allows multiple allocations is never "in use" in the search and serves requests
  while its capacity lasts (with what other claims' ``shareID`` results consume), one request
  several times in 1.34 and 1.35 (1.36 goes on after the device chosen); its counters are
  consumed by its first allocation only;
- partitionable devices consume shared counters (per slice in 1.34, per pool from 1.35);
- taints must be tolerated (1.35+: only NoSchedule/NoExecute matter);
- ``matchAttribute`` / ``distinctAttribute`` constraints, scoped by ``requests``; with
  DRAListTypeAttributes on (1.36 alpha, upstream's "experimental" allocator) a value is a set (a
  list attribute, or a scalar as one element): ``matchAttribute`` needs an element common to all
  chosen devices, ``distinctAttribute`` pairwise disjoint sets. Where the node has no device
  with a list (or otherwise non-scalar) value for the attribute the two are the same, and the
  scalar constraint, with its pruning, is used.

Besides the answer, every considered device gets the first reason it cannot be used.

The search is pruned where upstream's would only fail more slowly: a request stops as soon as the
devices left in entry order (statically usable, and for a ``matchAttribute`` already fixed, with
that value) cannot fill the remaining count, a device that would fix a ``matchAttribute``
value too few remaining devices share is passed over, and devices consuming shared counters stop
when the fewest of them that must still be chosen cannot fit what is left of a counter, or of
all counters of their scope together. With shared devices, a request starts only when the
capacity left on the usable devices can host the allocations the pod still needs (each device
counted at the smallest amount any of those requests asks of it); a ``matchAttribute`` that
every device a request may take meets with one value, and binds no other request, is left out.
Pruning never hides a CEL runtime error
upstream would meet: where the skipped part of the search holds a device whose selector fails,
the search fails with that error as upstream does. Every node's search also has a deadline (the
scheduler's filter timeout): past it the node's answer says "gave up after N ms on node X".
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpucluster.dra import capacity
from gpucluster.dra.claims import ClaimSpec, ConstraintSpec, DeviceClassInfo, RequestSpec, Selector
from gpucluster.dra.model import ALLOCATION_RESULTS_MAX_SIZE, DeviceKey, NodeInfo, Semantics
from gpucluster.dra.pools import Device, Pool, Slice, has_request_policy
from gpucluster.dra.quantity import Quantity

_KNOWN_TAINT_EFFECTS = ("NoSchedule", "NoExecute")
_NO_BINDING_CONDITIONS = "binding conditions not supported (DRADeviceBindingConditions is off)"
_COUNTERS_GATED = "consumes counters, but DRAPartitionableDevices is off"

_CLASS_AND_REQUEST, _CLASS_ONLY, _REQUEST_ONLY = (True, False), (True,), (False,)  # see _evaluate

_SHARED_WEIGHT = 1 << 20
"""What a usable shared device counts for in the count bound: more than any request needs."""

DEFAULT_MAX_STEPS = 1_000_000
"""Search steps before a node is given up."""

DEFAULT_DEADLINE_MS = 10_000.0
"""Time per node before its search is given up: kube-scheduler's default DRA filter timeout (10 s)."""


@dataclass(frozen=True, slots=True)
class CelFailure:
    """A CEL runtime error: ``reason`` for the device, ``message`` as kube-scheduler reports it."""

    reason: str
    message: str


StaticResult = str | CelFailure | None


class FatalError(Exception):
    """An error that makes kube-scheduler abort scheduling the pod (not only this node)."""


class _MaxSizeExceeded(Exception):
    pass


class _StepsExceeded(Exception):
    pass


class _DeadlineExceeded(Exception):
    pass


@dataclass(slots=True)
class ExplainContext:
    """What every node shares during one explanation."""

    claims: Sequence[ClaimSpec]
    classes: Mapping[str, DeviceClassInfo]
    semantics: Semantics
    in_use: Mapping[DeviceKey, str]  # device -> claim holding it
    views: Callable[[Mapping[str, Any]], Sequence[Any]]
    runtime_error: type[Exception]
    conversion_error: Callable[[Any], str] | None = None  # see allocator.SelectorBackend
    max_steps: int = DEFAULT_MAX_STEPS
    deadline_ms: float | None = DEFAULT_DEADLINE_MS  # per node; None: no deadline
    # (request uid, device) -> selector outcome; devices shared by several nodes are evaluated once.
    selector_cache: dict[tuple[int, Device], StaticResult] = field(default_factory=dict)
    selector_labels: dict[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # by request uid
    # capacity.requests -> a small id (requests asking the same capacity share what it takes)
    capacity_ids: dict[tuple[tuple[str, Fraction], ...], int] = field(default_factory=dict)
    capacity_by_request: dict[int, int] = field(default_factory=dict)  # request uid -> its capacity id
    # DRAConsumableCapacity: devices other claims hold shares of (results with a shareID), and
    # what those shares consume of a device (results with consumedCapacity), by fully-qualified
    # capacity name.
    shared_allocated: Collection[DeviceKey] = frozenset()
    consumed: Mapping[DeviceKey, Mapping[str, Fraction]] = field(default_factory=dict)


@dataclass(slots=True)
class RequestReport:
    claim: str
    request: str  # gpu or gpu/sub
    mode: str
    count: int  # wanted (All: the number of matching devices)
    considered: int
    usable: int
    rejections: list[tuple[str, str]]  # (driver/pool/device, first reason)
    selectors: tuple[tuple[str, str], ...]  # (label, expression) to explain "selector #i false"
    chosen: bool | None = None  # subrequests: whether this alternative was used


@dataclass(slots=True)
class NodeOutcome:
    node: str
    satisfiable: bool
    # per claim: (request, driver, pool, device, consumedCapacity of a shared allocation, else None)
    allocation: list[list[tuple[str, str, str, str, dict[str, str] | None]]]
    reasons: list[str]
    requests: list[RequestReport]
    fatal: str = ""
    steps: int = 0  # calls of allocateOne, upstream's numAllocateOneInvocations (after pruning)
    gave_up: str = ""  # "gave up after N ms on node X" or the steps limit: no answer for this node
    elapsed_ms: float = 0.0  # time spent on this node (selectors, search, explanation)


# ---------------------------------------------------------------------------------------------
# Constraints


def _attribute_value(raw: Any) -> tuple[str, Any] | None:
    """A comparable attribute value; None for an unknown value type."""
    if type(raw) is not dict and not isinstance(raw, Mapping):  # the ABC check is slow: dicts first
        return None
    for kind in ("string", "int", "bool", "version"):
        value = raw.get(kind)
        if value is not None:
            return (kind, value)
    return None


_MISSING = object()


def lookup_attribute(device: Device, name: str) -> Any:
    """The raw attribute for a fully qualified name (``lookupAttribute``); _MISSING if absent."""
    attrs = device.attributes
    if name in attrs:
        return attrs[name]
    domain, _, ident = name.partition("/")
    if domain == device.key[0] and ident in attrs:
        return attrs[ident]
    return _MISSING


def value_of(device: Device, name: str) -> Any:
    """The comparable value of attribute ``name`` (None: unknown type; _MISSING: not set), cached
    on the device: constraints ask for the same few attributes of every device again and again."""
    cache = device.values
    if cache is None:
        cache = device.values = {}
    else:
        value = cache.get(name, _MISSING)
        if value is not _MISSING or name in cache:
            return value
    # lookup_attribute and _attribute_value, inlined: this runs for every device of every node.
    attrs = device.attributes
    raw = attrs.get(name, _MISSING)
    if raw is _MISSING:
        domain, _, ident = name.partition("/")
        if domain == device.key[0]:
            raw = attrs.get(ident, _MISSING)
    if raw is _MISSING:
        value = _MISSING
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
    """The :func:`_attribute_set` of attribute ``name`` (None: unknown type; _MISSING: not set),
    cached on the device next to :func:`value_of`'s values."""
    cache = device.values
    if cache is None:
        cache = device.values = {}
    key = "\x00" + name  # never an attribute name
    found = cache.get(key, _MISSING)
    if found is _MISSING and key not in cache:
        raw = lookup_attribute(device, name)
        found = cache[key] = _MISSING if raw is _MISSING else _attribute_set(raw)
    return found


def _needs_sets(device: Device, name: str) -> bool:
    """Whether set semantics could decide differently from scalar ones for this device: its
    attribute has a list field, no value of a known type, or more than one value field."""
    raw = lookup_attribute(device, name)
    if raw is _MISSING:
        return False
    if type(raw) is not dict or value_of(device, name) is None:
        return True
    return sum(1 for v in raw.values() if v is not None) != 1


def _show_set(found: AttributeSet) -> str:
    kind, values = found
    return "[" + ", ".join(sorted(_show((kind, v)) for v in values)) + "]"


def _show(value: tuple[str, Any] | None) -> str:
    return "?" if value is None else repr(value[1]) if value[0] == "string" else str(value[1])


class _Constraint:
    __slots__ = ("label", "spec")

    def __init__(self, spec: ConstraintSpec) -> None:
        self.spec = spec
        self.label = f"constraint {spec.kind} {spec.attribute}"

    def add(self, device: Device, request: int) -> str:
        """Add the device chosen for the claim's request ``request`` (its index), or say why not."""
        raise NotImplementedError

    def remove(self, device: Device, request: int) -> None:
        raise NotImplementedError


class _MatchAttribute(_Constraint):
    """All devices share the value (``matchAttributeConstraint``)."""

    __slots__ = ("count", "value")

    def __init__(self, spec: ConstraintSpec) -> None:
        super().__init__(spec)
        self.count = 0
        self.value: tuple[str, Any] | None = None

    def add(self, device: Device, request: int) -> str:
        value = value_of(device, self.spec.attribute)
        if value is _MISSING:
            return f"{self.label} (attribute not set)"
        if self.count == 0:
            self.value = value
        elif value is None or value != self.value:
            return f"{self.label} ({_show(value)} differs from {_show(self.value)} of the devices already chosen)"
        self.count += 1
        return ""

    def remove(self, device: Device, request: int) -> None:
        self.count -= 1


class _DistinctAttribute(_Constraint):
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
        if value is _MISSING:
            return f"{self.label} (attribute not set)"
        if value is None:
            return f"{self.label} (unknown attribute type)"
        remembered = device.key if self.by_identity else value
        if self.count and remembered in self.values.values():
            return f"{self.label} ({_show(value)} already chosen)"
        self.values[request] = remembered
        self.count += 1
        return ""

    def remove(self, device: Device, request: int) -> None:
        self.values.pop(request, None)
        self.count -= 1


class _SetConstraint(_Constraint):
    """A constraint over attribute sets (DRAListTypeAttributes); ``chosen``: one entry per
    device added, so ``remove`` restores what was before."""

    __slots__ = ("chosen",)

    def __init__(self, spec: ConstraintSpec) -> None:
        super().__init__(spec)
        self.chosen: list[AttributeSet] = []

    def add(self, device: Device, request: int) -> str:
        found = set_of(device, self.spec.attribute)
        if found is _MISSING:
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


class _MatchAttributeSet(_SetConstraint):
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


class _DistinctAttributeSet(_SetConstraint):
    """DRAListTypeAttributes' ``distinctAttribute``: the devices' sets are pairwise disjoint."""

    __slots__ = ()

    def _keep(self, found: AttributeSet) -> AttributeSet | str:
        for other in self.chosen:
            if other[0] == found[0] and other[1] & found[1]:
                return f"{self.label} ({_show_set(found)} shares a value with {_show_set(other)} already chosen)"
        return found


# ---------------------------------------------------------------------------------------------
# The search


@dataclass(slots=True, eq=False)
class _Entry:
    """One device in search order (or, in 1.34, the place where an invalid pool is reached)."""

    index: int
    pool: Pool
    slice: Slice | None
    device: Device | None
    id: str


@dataclass(slots=True, eq=False)
class _Rest:
    """A request and the later ones of the pod, for the capacity bound: ``later_need`` devices
    after this request (``own_later`` of them in its claim), and per usable entry (for any of
    them) what each of those requests would take of it if it is shared (empty: allocated whole)."""

    later_need: int
    own_later: int
    # (entry index, None for a device allocated whole, else (the smallest amount any of them
    # takes per capacity, the device's capacities, how many of them can use it))
    users: list[tuple[int, tuple[dict[str, Fraction], Mapping[str, Fraction], int] | None]]


@dataclass(slots=True, eq=False)
class _Req:
    claim_index: int
    request_index: int
    sub_index: int
    spec: RequestSpec
    cls: DeviceClassInfo
    uid: int
    is_sub: bool
    constraints: list[_Constraint]  # the claim's constraints that apply to this request
    capacity_id: int = 0  # requests asking the same capacity.requests have the same id
    # 1.34 (Semantics.second_all_subrequest_reuses_first): the subrequest whose class and
    # selectors decide which devices this All subrequest gets.
    matched_as: _Req | None = None
    static: list[StaticResult] = field(default_factory=list)  # aligned with the node's entries
    num_devices: int = 0
    all_devices: list[_Entry] = field(default_factory=list)
    selected: list[StaticResult] = field(default_factory=list)  # All: the selectors' verdict per entry
    # Pruning, ExactCount only: usable[i] = statically usable entries at index >= i; per
    # matchAttribute constraint (index into ``constraints``), value -> indices of usable entries;
    # the indices of entries the search aborts on: a CEL runtime error, an invalid pool (1.34).
    usable: list[int] = field(default_factory=list)
    by_value: dict[int, dict[tuple[str, Any], list[int]]] = field(default_factory=dict)
    value_at: dict[int, list[tuple[str, Any] | None]] = field(default_factory=dict)  # same keys, per entry
    cel_failures: list[int] = field(default_factory=list)
    # Usable entries that consume shared counters: index -> (counter scope, amount per counter).
    consumption: dict[int, tuple[object, dict[tuple[str, str], Fraction]]] = field(default_factory=dict)


class NodeSearch:
    """Allocate the claims of one pod on one node, and explain the outcome."""

    def __init__(self, ctx: ExplainContext, node: NodeInfo, pools: list[Pool], notes: list[str]) -> None:
        self.ctx = ctx
        self.sem = ctx.semantics
        self.node = node
        self.pools = pools
        self.notes = notes
        entries: list[_Entry] = []
        skip_unusable = self.sem.skip_unusable_pools
        for pool in pools:
            if pool.incomplete or pool.invalid:
                if skip_unusable:
                    continue
                if pool.invalid:
                    entries.append(_Entry(len(entries), pool, None, None, pool.id))
                    continue
            for s in pool.slices:
                for d in s.devices:
                    entries.append(_Entry(len(entries), pool, s, d, d.ident))
        self.entries = entries
        # DRAConsumableCapacity: a device that allows multiple allocations is never "in use" by
        # this search; it serves requests while its capacity lasts, one request more than once.
        if self.sem.consumable_capacity:
            self.shared = [e.device is not None and e.device.multi for e in entries]
        else:
            self.shared = [False] * len(entries)
        self.any_shared = True in self.shared
        # Upstream's counter leak (Semantics.counters_leak) makes the search's result depend on
        # every device it visits, in its order: then the search is upstream's plain depth-first
        # one, without the pruning that skips visits, and a device refused by a taint or a
        # constraint after its counters were taken keeps them.
        consumers = [e.device for e in entries if e.device is not None and e.device.consumes]
        self.leaky = (
            self.sem.counters_leak
            and self.sem.partitionable_devices
            and bool(consumers)
            and (
                any(c.constraints for c in ctx.claims) or (self.sem.device_taints and any(d.taints for d in consumers))
            )
        )
        self.leak_on_visit: set[tuple[int, int]] = set()  # (request uid, entry index)
        # Semantics.capacity_wrong_device with DRAConsumableCapacity on: the capacity check
        # depends on the device's place in the request, so it is made as each device is tried.
        self.wrong_device = self.sem.capacity_wrong_device and self.sem.consumable_capacity
        # Upstream's plain search, unpruned, where its answer depends on the order of visits.
        self.plain_search = self.leaky or self.wrong_device
        self._entry_at: dict[tuple[int, int], _Entry] | None = None
        # Where the order of a request's devices can change the answer (upstream's
        # distinctAttribute remembers the last value per request; leaked counters), 1.34 and
        # 1.35 are searched as upstream does: every ordered selection, not only combinations.
        self.permute = False
        self.reqs: list[_Req] = []
        self.rests: dict[int, _Rest | None] = {}  # request uid -> see _rest
        self.class_results: dict[tuple[str, Device], StaticResult] = {}  # see _selectors
        # DRAConsumableCapacity: (capacity requests, entry index) -> what one allocation takes of
        # the device, or why none can.
        self.demands: dict[tuple[int, int], capacity.Demand | str] = {}
        self.capacity_reasons: dict[tuple[int, int], str] = {}  # the same key: _capacity_reason
        self.groups: list[list[list[_Req]]] = []  # claim -> request -> alternatives
        self.constraints: list[list[_Constraint]] = []
        self.steps = 0
        self.give_up_at = float("inf")
        self.started = 0.0
        # The search's state: what is being allocated, counters and capacity used, reasons.
        self.allocating: dict[DeviceKey, set[int]] = {}
        self.holder: dict[DeviceKey, _Req] = {}
        self.selected: dict[tuple[int, int], int] = {}
        self.consumed: dict[object, dict[tuple[str, str], Fraction]] = {}
        self.capacity_used: dict[DeviceKey, dict[str, Fraction]] = {}  # shared devices
        self.shares: dict[DeviceKey, int] = {}  # shared device -> allocations chosen in this search
        self.slot_note = ""  # why the capacity bound stopped the search
        self.available: dict[object, dict[tuple[str, str], Fraction]] = {}
        self.dynamic: dict[tuple[int, int], str] = {}  # (req uid, entry index) -> first reason
        self.results: list[list[tuple[_Req, _Entry, capacity.Demand | None]]] = [[] for _ in self.ctx.claims]

    # -- setup ---------------------------------------------------------------------------------

    def _capacity_id(self, uid: int, spec: RequestSpec) -> int:
        if spec.capacity is None:
            return 0
        found = self.ctx.capacity_by_request.get(uid)
        if found is None:
            ids = self.ctx.capacity_ids
            found = ids.get(spec.capacity)
            if found is None:
                found = ids[spec.capacity] = len(ids) + 1
            self.ctx.capacity_by_request[uid] = found
        return found

    def _constraint(self, spec: ConstraintSpec) -> _Constraint:
        """The constraint's search object: with DRAListTypeAttributes on, the set one where some
        device of this node makes set semantics differ (the scalar ones are pruned, these not)."""
        if self.sem.list_type_attributes and any(
            e.device is not None and _needs_sets(e.device, spec.attribute) for e in self.entries
        ):
            return _MatchAttributeSet(spec) if spec.kind == "matchAttribute" else _DistinctAttributeSet(spec)
        if spec.kind == "matchAttribute":
            return _MatchAttribute(spec)
        return _DistinctAttribute(spec, by_identity=self.sem.distinct_by_identity)

    def _build_requests(self) -> None:
        for ci, claim in enumerate(self.ctx.claims):
            constraints: list[_Constraint] = [self._constraint(c) for c in claim.constraints]
            self.constraints.append(constraints)
            claim_groups: list[list[_Req]] = []
            for ri, group in enumerate(claim.requests):
                alternatives = []
                for si, spec in enumerate(group.alternatives):
                    req = _Req(
                        claim_index=ci,
                        request_index=ri,
                        sub_index=si,
                        spec=spec,
                        cls=self.ctx.classes[spec.class_name],
                        uid=_request_uid(ci, ri, si),
                        is_sub=group.exactly is None,
                        constraints=[c for c in constraints if c.spec.applies_to(spec)],
                        capacity_id=self._capacity_id(_request_uid(ci, ri, si), spec),
                    )
                    self.reqs.append(req)
                    alternatives.append(req)
                if (
                    self.sem.second_all_subrequest_reuses_first
                    and len(alternatives) > 1
                    and alternatives[0].spec.mode == alternatives[1].spec.mode == "All"
                ):
                    first, second = alternatives[0], alternatives[1]
                    second.matched_as = first
                    self.notes.append(
                        f"request {second.spec.full_name}: Kubernetes {self.sem.version} gives it the devices the class and "
                        f"selectors of {first.spec.full_name} match (both ask for all devices), its own are not "
                        "evaluated"
                    )
                claim_groups.append(alternatives)
            self.groups.append(claim_groups)

    # -- selectors and static reasons ------------------------------------------------------------

    def _selectors(self, req: _Req, s: Slice, d: Device) -> StaticResult:
        """Binding conditions, class selectors, request selectors (``isSelectable``), cached."""
        # A slice of one node is seen by that node's search only, which asks once per request:
        # only devices other nodes can see too are worth caching.
        shared = not s.node_name or s.per_device
        key = (req.uid, d)
        cache = self.ctx.selector_cache
        if shared and key in cache:
            return cache[key]
        result: StaticResult = None
        if d.has_binding_conditions and not self.sem.binding_conditions:
            result = _NO_BINDING_CONDITIONS
        else:
            views = s.views
            if views is None:
                views = s.views = list(self.ctx.views(s.raw))
            view = views[d.index]
            if len(self.reqs) == 1:
                result = self._evaluate(req, view, d, _CLASS_AND_REQUEST)
            else:
                if req.cls.selectors:
                    # Requests of one class share its verdict (several requests of a pod).
                    class_key = (req.cls.name, d)
                    if class_key in self.class_results:
                        result = self.class_results[class_key]
                    else:
                        result = self.class_results[class_key] = self._evaluate(req, view, d, _CLASS_ONLY)
                if result is None and req.spec.selectors:
                    result = self._evaluate(req, view, d, _REQUEST_ONLY)
        if shared:
            cache[key] = result
        return result

    def _evaluate(self, req: _Req, view: Any, d: Device, parts: tuple[bool, ...]) -> StaticResult:
        """The class's selectors (``True`` in ``parts``), then the request's (``False``), on one
        device: None when all match, else the first that does not."""
        runtime_error = self.ctx.runtime_error
        check = self.ctx.conversion_error
        # The device's first selector (the class's, else the request's) is among these?
        if parts[0]:
            first_here = bool(req.cls.selectors) or (len(parts) > 1 and bool(req.spec.selectors))
        else:
            first_here = not req.cls.selectors and bool(req.spec.selectors)
        if check is not None and first_here:
            # DeviceMatches converts every attribute before evaluating: one it cannot convert
            # fails the first selector, whatever the selector reads.
            bad = d.conversion_error
            if bad is None:
                bad = d.conversion_error = check(view)
            if bad:
                cls = bool(req.cls.selectors)
                first = (req.cls.selectors or req.spec.selectors)[0]
                return self._cel_failure(req, first, runtime_error(bad), cls=cls)
        for cls in parts:
            for sel in req.cls.selectors if cls else req.spec.selectors:
                try:
                    ok = sel.program.evaluate(view)
                except runtime_error as exc:
                    return self._cel_failure(req, sel, exc, cls=cls)
                if ok is not True:
                    return f"class selector #{sel.index} false" if cls else f"selector #{sel.index} false"
        return None

    def _cel_failure(self, req: _Req, sel: Selector, exc: Exception, *, cls: bool) -> CelFailure:
        if cls:
            return CelFailure(
                f"class selector #{sel.index} CEL error: {exc}",
                f"class {req.cls.name}: selector #{sel.index}: CEL runtime error: {exc}",
            )
        return CelFailure(
            f"selector #{sel.index} CEL error: {exc}",
            f"claim {self.ctx.claims[req.claim_index].ref}: selector #{sel.index}: CEL runtime error: {exc}",
        )

    def _taint_reason(self, req: _Req, d: Device) -> str:
        if not self.sem.device_taints:
            return ""  # DRADeviceTaints off: the allocator does not look at taints
        for taint in d.taints:
            if self.sem.only_known_taint_effects and taint.effect not in _KNOWN_TAINT_EFFECTS:
                continue
            if not any(t.tolerates(taint.key, taint.value, taint.effect) for t in req.spec.tolerations):
                return f"taint {taint} not tolerated"
        return ""

    def _demand(self, req: _Req, entry: _Entry) -> capacity.Demand | str:
        # Requests asking the same capacity share what one allocation takes of a device.
        key = (req.capacity_id, entry.index)
        found = self.demands.get(key)
        if found is None:
            s, d = entry.slice, entry.device
            assert s is not None and d is not None
            found = self.demands[key] = capacity.demand(s.raw["spec"]["devices"][d.index], s.driver, req.spec.capacity)
        return found

    def _capacity_reason(self, req: _Req, entry: _Entry) -> str:
        """Why one allocation of the device cannot serve the request's capacity next to what other
        claims' shared allocations consume (``CmpRequestOverCapacity``, DRAConsumableCapacity on)."""
        d = entry.device
        assert d is not None
        if not d.multi and req.spec.capacity is None:
            policies = d.capacity_policies
            if policies is None:
                s = entry.slice
                assert s is not None
                policies = d.capacity_policies = has_request_policy(s.raw["spec"]["devices"][d.index].get("capacity"))
            if not policies:
                return ""  # takes every capacity whole, and nothing else shares the device: it fits
        key = (req.capacity_id, entry.index)
        reason = self.capacity_reasons.get(key)
        if reason is None:
            found = self._demand(req, entry)
            reason = found if isinstance(found, str) else found.over(self.ctx.consumed.get(d.key))
            self.capacity_reasons[key] = reason
        return reason

    def _over_now(self, req: _Req, entry: _Entry) -> str:
        """Why one more allocation of the device cannot serve the request next to what other
        claims' allocations and this search's consume of it (``CmpRequestOverCapacity`` with the
        allocating capacity), "" if it can."""
        d = entry.device
        assert d is not None
        found = self._demand(req, entry)
        if isinstance(found, str):
            return found
        used = self.capacity_used.get(d.key)
        return found.over(used if used is not None else self.ctx.consumed.get(d.key))

    def _take_capacity(self, req: _Req, entry: _Entry) -> tuple[capacity.Demand | None, str]:
        """Reserve what this allocation of a shared device consumes; (None, why) if it does not fit."""
        d = entry.device
        assert d is not None
        found = self._demand(req, entry)
        if isinstance(found, str):
            return None, found
        used = self.capacity_used.get(d.key)
        if used is None:
            used = self.capacity_used[d.key] = dict(self.ctx.consumed.get(d.key, {}))
        why = found.over(used)
        if why:
            return None, why + " after the allocations already chosen"
        for key, amount in found.amounts.items():
            used[key] = used.get(key, Fraction(0)) + amount
        return found, ""

    def _wrong_device_capacity(self, req: _Req, entry: _Entry, slot: int) -> str:
        """1.34's capacity check, made against device ``slot`` of the chosen device's slice (the
        request's device index), with what that device's allocations consume."""
        s = entry.slice
        assert s is not None
        raw = s.raw["spec"]["devices"]
        if slot >= len(raw):
            raise FatalError(
                f"kube-scheduler {self.sem.version} panics here: its capacity check reads device #{slot} of "
                f"ResourceSlice {s.name}, which has {len(raw)} (upstream's CmpRequestOverCapacity)"
            )
        if self._entry_at is None:
            self._entry_at = {
                (id(e.slice), e.device.index): e for e in self.entries if e.slice is not None and e.device is not None
            }
        other = self._entry_at.get((id(s), slot))
        if other is None:
            return ""
        why = self._over_now(req, other)
        if not why:
            return ""
        return f"{why} (Kubernetes {self.sem.version} checks the capacity of {other.id}, device #{slot} of the slice)"

    def _release_capacity(self, entry: _Entry, taken: capacity.Demand) -> None:
        assert entry.device is not None
        used = self.capacity_used[entry.device.key]
        for key, amount in taken.amounts.items():
            used[key] -= amount

    def _constraint_reason(self, req: _Req, d: Device) -> str:
        for c in req.constraints:
            if isinstance(c, _SetConstraint):
                found = set_of(d, c.spec.attribute)
                if found is _MISSING:
                    return f"{c.label} (attribute not set)"
                if found is None:
                    return f"{c.label} (unknown attribute type)"
                continue
            value = value_of(d, c.spec.attribute)
            if value is _MISSING:
                return f"{c.label} (attribute not set)"
            if isinstance(c, _DistinctAttribute) and value is None:
                return f"{c.label} (unknown attribute type)"
        return ""

    def _static(self, req: _Req, entry: _Entry, all_mode: bool) -> StaticResult:
        """The first reason a device can never serve ``req`` on this node, whatever else is chosen.

        The order is the allocator's: in use (for ExactCount), binding conditions, class
        selectors, request selectors, per-device node selection, then (allocateDevice) in use
        (for All), counters, taints, constraints.
        """
        d, s = entry.device, entry.slice
        if d is None or s is None:
            return f"pool invalid: {entry.pool.invalid}"
        in_use = self.ctx.in_use
        check_use = not req.spec.admin_access and d.key in in_use
        if check_use and not all_mode:
            return f"in use by {in_use[d.key]}"
        result = self._selectors(req.matched_as or req, s, d)
        if req.matched_as is not None and isinstance(result, str) and result != _NO_BINDING_CONDITIONS:
            result = f"subrequest {req.matched_as.spec.name}'s {result}"
        if all_mode:
            req.selected[entry.index] = result  # _prepare_all's members
        if result is not None:
            return result
        if self.sem.consumable_capacity and not all_mode:
            reason = self._capacity_reason(req, entry)
            if reason:
                return reason
        if s.per_device and not d.available_on(self.node):
            return "not available on this node (perDeviceNodeSelection)"
        if check_use:
            return f"in use by {in_use[d.key]}"
        if not d.plain:
            reason = self._counters_alone(entry) if d.consumes and not self._counters_taken(entry) else ""
            if reason:
                return reason
            reason = self._taint_reason(req, d)
            if reason:
                if self.leaky and d.consumes:
                    self.leak_on_visit.add((req.uid, entry.index))
                return reason
        if req.constraints:
            reason = self._constraint_reason(req, d)
            if reason and self.leaky and d.consumes:
                self.leak_on_visit.add((req.uid, entry.index))
            return reason or None
        return None

    # -- counters ------------------------------------------------------------------------------

    def _scope(self, entry: _Entry) -> object:
        # 1.34: counters belong to the slice; 1.35+: to the pool.
        return entry.pool if self.sem.pool_counters else entry.slice

    def _available(self, entry: _Entry) -> dict[tuple[str, str], Fraction]:
        scope = self._scope(entry)
        have = self.available.get(scope)
        if have is not None:
            return have
        if self.sem.pool_counters:
            sets = entry.pool.counter_sets
            slices = [*entry.pool.slices, *entry.pool.other_slices]
        else:
            assert entry.slice is not None
            sets = entry.slice.shared_counters
            slices = [entry.slice]
        have = {(set_name, c): v for set_name, counters in sets.items() for c, v in counters.items()}
        in_use = self.ctx.in_use
        shared = self.ctx.shared_allocated if self.sem.counters_once_per_shared_device else frozenset()
        for s in slices:
            for d in s.devices:
                if d.key not in in_use and d.key not in shared:
                    continue
                for set_name, counters in d.consumes:
                    for c, v in counters:
                        if (set_name, c) in have:
                            have[(set_name, c)] -= v
        self.available[scope] = have
        return have

    def _counters_alone(self, entry: _Entry) -> str:
        assert entry.device is not None
        if not self.sem.partitionable_devices:
            return _COUNTERS_GATED
        have = self._available(entry)
        want: dict[tuple[str, str], Fraction] = {}
        for set_name, counters in entry.device.consumes:
            for c, v in counters:
                want[(set_name, c)] = want.get((set_name, c), Fraction(0)) + v
        for key, available in have.items():
            if available < want.get(key, 0):
                return f"counter {key[0]}/{key[1]} exhausted"
        return ""

    def _counters_taken(self, entry: _Entry) -> bool:
        """Whether a shared device's counters are consumed already: once by the first of its
        allocations (``allocateDevice`` skips the check while some of its capacity is in use)."""
        d = entry.device
        assert d is not None
        if not self.sem.counters_once_per_shared_device:
            return False
        return self.shared[entry.index] and (d.key in self.ctx.consumed or self.shares.get(d.key, 0) > 0)

    def _take_counters(self, entry: _Entry) -> str:
        """Reserve the device's counters; on failure nothing stays reserved."""
        assert entry.device is not None
        have = self._available(entry)
        scope = self._scope(entry)
        used = self.consumed.setdefault(scope, {})
        for set_name, counters in entry.device.consumes:
            for c, v in counters:
                used[(set_name, c)] = used.get((set_name, c), Fraction(0)) + v
        for key, available in have.items():
            if available < used.get(key, 0):
                self._release_counters(entry)
                return f"counter {key[0]}/{key[1]} exhausted together with the devices already chosen"
        return ""

    def _release_counters(self, entry: _Entry) -> None:
        assert entry.device is not None
        used = self.consumed[self._scope(entry)]
        for set_name, counters in entry.device.consumes:
            for c, v in counters:
                used[(set_name, c)] -= v

    # -- allocation of one device ------------------------------------------------------------------

    def _note(self, req: _Req, entry: _Entry, reason: str) -> None:
        key = (req.uid, entry.index)
        if key not in self.dynamic:
            self.dynamic[key] = reason

    def _note_in_use(self, req: _Req, entry: _Entry) -> None:
        assert entry.device is not None
        holder = self.holder.get(entry.device.key)
        if holder is not None and holder is not req:
            self._note(req, entry, f"chosen for request {holder.spec.full_name}")

    def _allocate_device(self, req: _Req, entry: _Entry, must: bool, slot: int = 0) -> bool:
        """``allocateDevice``: availability, counters, taints, constraints, capacity; records the device.

        ``must`` is for allocationMode All, where the devices were not filtered by
        :meth:`_static` and a violated constraint is an error.
        """
        d = entry.device
        assert d is not None
        ci = req.claim_index
        shared = self.shared[entry.index]
        if self.wrong_device and shared and not must:
            # allocateOne checks the device's own capacity, with this search's allocations of it,
            # before allocateDevice (whose check reads another device).
            why = self._over_now(req, entry)
            if why:
                self._note(req, entry, why + " after the allocations already chosen")
                return False
        if must:
            if shared:
                # Never marked as being allocated; only a claim holding it whole keeps it.
                busy = not req.spec.admin_access and d.key in self.ctx.in_use
            else:
                claims = self.allocating.get(d.key)
                if req.spec.admin_access:
                    busy = claims is not None and ci in claims
                else:
                    busy = bool(claims) or d.key in self.ctx.in_use
            if busy:
                self._note_in_use(req, entry)
                return False
        counters = bool(d.consumes) and not self._counters_taken(entry)
        if counters:
            reason = self._take_counters(entry) if self.sem.partitionable_devices else _COUNTERS_GATED
            if reason:
                self._note(req, entry, reason)
                return False
        elif d.consumes and not self.sem.partitionable_devices:
            return False
        if must and d.taints:
            reason = self._taint_reason(req, d)
            if reason:
                if counters and not self.leaky:
                    self._release_counters(entry)
                return False
        constraints = req.constraints
        for i, c in enumerate(constraints):
            reason = c.add(d, req.request_index)
            if reason:
                for prev in constraints[:i]:
                    prev.remove(d, req.request_index)
                if counters and not self.leaky:
                    self._release_counters(entry)
                if must:
                    claim = self.ctx.claims[ci]
                    raise FatalError(
                        f"claim {claim.ref}, request {req.spec.name}: cannot add device {entry.id} "
                        "because a claim constraint would not be satisfied"
                    )
                self._note(req, entry, reason)
                return False
        if self.wrong_device:
            reason = self._wrong_device_capacity(req, entry, slot)
            if reason:
                for c in constraints:
                    c.remove(d, req.request_index)
                if counters and not self.leaky:
                    self._release_counters(entry)
                self._note(req, entry, reason)
                return False
        taken: capacity.Demand | None = None
        if shared:
            taken, reason = self._take_capacity(req, entry)
            if taken is None:
                for c in constraints:
                    c.remove(d, req.request_index)
                if counters:
                    self._release_counters(entry)
                self._note(req, entry, reason)
                return False
            self.shares[d.key] = self.shares.get(d.key, 0) + 1
        else:
            claims = self.allocating.get(d.key)
            if claims is None:
                self.allocating[d.key] = {ci}
            else:
                claims.add(ci)
            self.holder[d.key] = req
        self.results[ci].append((req, entry, taken))
        return True

    def _deallocate(self, req: _Req, entry: _Entry) -> None:
        d = entry.device
        assert d is not None
        for c in req.constraints:
            c.remove(d, req.request_index)
        taken = self.results[req.claim_index].pop()[2]
        if taken is not None:
            self._release_capacity(entry, taken)
            self.shares[d.key] -= 1
            if d.consumes and not self._counters_taken(entry):
                self._release_counters(entry)  # its last allocation in this search
        else:
            self.allocating[d.key].discard(req.claim_index)
            if self.holder.get(d.key) is req:
                del self.holder[d.key]
            if d.consumes:
                self._release_counters(entry)

    # -- the recursion ---------------------------------------------------------------------------

    def _allocate_one(self, ci: int, ri: int, si: int, di: int, in_sub: bool, start: int) -> bool:
        """``allocateOne``: find a device for slot ``di`` of request ``ri`` (subrequest ``si``)."""
        self.steps += 1
        if self.steps > self.ctx.max_steps:
            raise _StepsExceeded
        if not self.steps & 255 and time.perf_counter() > self.give_up_at:
            raise _DeadlineExceeded
        if ci >= len(self.groups):
            return True
        if ri >= len(self.groups[ci]):
            try:
                return self._allocate_one(ci + 1, 0, 0, 0, False, 0)
            except _MaxSizeExceeded:
                # Another subrequest choice in an earlier claim may need fewer devices.
                return False
        alternatives = self.groups[ci][ri]
        req = alternatives[si]
        if req.is_sub and not in_sub:
            all_exceeded = True
            for sub_index in range(len(alternatives)):
                try:
                    done = self._allocate_one(ci, ri, sub_index, di, True, 0)
                except _MaxSizeExceeded:
                    continue
                all_exceeded = False
                if done:
                    self.selected[(ci, ri)] = sub_index
                    return True
            if all_exceeded:
                raise _MaxSizeExceeded
            return False

        all_mode = req.spec.mode == "All"
        if all_mode and not req.all_devices:
            return False
        if di >= req.num_devices:
            return self._allocate_one(ci, ri + 1, 0, 0, False, 0)
        if len(self.results[ci]) + req.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE:
            raise _MaxSizeExceeded
        if (
            self.any_shared
            and di == 0
            and not all_mode
            and not self.plain_search
            and self._slots_short(ci, ri, req, di)
        ):
            return False  # checked as each request starts: where several requests multiply the work

        if all_mode:
            entry = req.all_devices[di]
            if not self._allocate_device(req, entry, must=True, slot=di):
                return False
            # 1.34: the next device is looked for as the first subrequest's (Semantics).
            next_si = 0 if self.sem.all_subrequest_goes_on_as_first else si
            try:
                done = self._allocate_one(ci, ri, next_si, di + 1, in_sub, 0)
            except BaseException:
                self._deallocate(req, entry)
                raise
            if not done:
                self._deallocate(req, entry)
            return done

        entries = self.entries
        static = req.static
        allocating = self.allocating
        shared = self.shared
        admin = req.spec.admin_access
        need = req.num_devices - di
        usable = req.usable
        # matchAttribute values fixed by devices already chosen, and constraints this device fixes.
        fixed: list[list[int]] = []
        unfixed: list[int] = []
        if req.by_value:
            for k, positions in req.by_value.items():
                c = req.constraints[k]
                assert isinstance(c, _MatchAttribute)
                if c.count:
                    fixed.append(positions.get(c.value, []) if c.value is not None else [])
                else:
                    unfixed.append(k)
        if req.consumption and need > 1 and start < len(entries) and not self.plain_search:
            why = self._counters_short(req, start, need)
            if why:
                self._pruned(ci, req, start)
                for i in req.consumption:
                    if i >= start:
                        self._note(req, entries[i], why)
                return False
        for index in range(start, len(entries)):
            short = usable[index] < need and not self.plain_search
            if fixed and not short and not self.plain_search:
                for p in fixed:
                    if len(p) - bisect_left(p, index) < need:
                        short = True
                        break
            if short:
                self._pruned(ci, req, index)
                if fixed:
                    self._note_mismatches(req, index)
                break
            entry = entries[index]
            d = entry.device
            if d is None:
                # 1.34: reaching an invalid pool aborts.
                raise FatalError(f"pool {entry.pool.name} is invalid: {entry.pool.invalid}")
            # In use? Devices of other claims are "in use" in ``static`` already.
            claims = allocating.get(d.key)
            if claims and (not admin or ci in claims):
                self._note_in_use(req, entry)
                continue
            result = static[index]
            if result is not None:
                if type(result) is CelFailure:
                    raise FatalError(result.message)
                if self.leaky and (req.uid, index) in self.leak_on_visit and not shared[index]:
                    self._take_counters(entry)  # upstream keeps them when the refusal comes later
                continue
            if unfixed and need > 1 and not self.plain_search:
                why = self._too_few_share(req, index, need, unfixed)
                if why:
                    self._note(req, entry, why)
                    self._pruned(ci, req, index + 1)
                    continue
            # Device.plain: nothing to check (no taints, no counters, no multiple allocations).
            full = not d.plain or bool(req.constraints) or self.wrong_device
            if full and not self._allocate_device(req, entry, must=False, slot=di):
                continue
            if not full:
                # Nothing to check: record it (the fast path of _allocate_device).
                if claims is None:
                    allocating[d.key] = {ci}
                else:
                    claims.add(ci)
                self.holder[d.key] = req
                self.results[ci].append((req, entry, None))
            try:
                # 1.34 and 1.35 try every device again for the next one of the request, so a
                # shared device may serve it too; 1.36 goes on after the device just chosen.
                again = shared[index] and not self.sem.combinations
                after = 0 if self.permute else index if again else index + 1
                done = self._allocate_one(ci, ri, si, di + 1, in_sub, after)
            except BaseException:
                self._deallocate(req, entry)
                raise
            if done:
                return True
            self._deallocate(req, entry)
        return False

    def _rest(self, ci: int, ri: int, req: _Req) -> _Rest | None:
        """What this request and every later one of the pod ask for, when the capacity bound
        applies to them (see :meth:`_slots_short`); None when it does not."""
        key = req.uid
        if key in self.rests:
            return self.rests[key]
        rest: _Rest | None = None
        later = self.groups[ci][ri + 1 :]
        later_claims = [alts for groups in self.groups[ci + 1 :] for alts in groups]
        own_later = sum(alts[0].num_devices for alts in later if len(alts) == 1)
        reqs = [req, *(alts[0] for alts in later + later_claims if len(alts) == 1)]
        plain = len(reqs) == 1 + len(later) + len(later_claims) and all(
            r.spec.mode != "All" and not r.spec.admin_access and not r.cel_failures for r in reqs
        )
        # The search below must end in "no" (never at the results limit, which subrequests of
        # earlier claims react to): every later claim within the limit on its own.
        plain = plain and all(
            sum(alts[0].num_devices for alts in groups) <= ALLOCATION_RESULTS_MAX_SIZE
            for groups in self.groups[ci + 1 :]
        )
        if plain:
            users: list[tuple[int, tuple[dict[str, Fraction], Mapping[str, Fraction], int] | None]] = []
            for index, entry in enumerate(self.entries):
                usable = [r for r in reqs if r.static[index] is None]
                if not usable:
                    continue
                if not self.shared[index]:
                    users.append((index, None))
                    continue
                lows: dict[str, Fraction] = {}
                totals: Mapping[str, Fraction] = {}
                for r in usable:
                    found = self._demand(r, entry)
                    assert not isinstance(found, str)  # a static reason otherwise
                    totals = found.totals
                    for name, amount in found.amounts.items():
                        low = lows.get(name)
                        if low is None or amount < low:
                            lows[name] = amount
                users.append((index, ({k: v for k, v in lows.items() if v > 0}, totals, len(usable))))
            rest = _Rest(sum(r.num_devices for r in reqs[1:]), own_later, users)
        self.rests[key] = rest
        return rest

    def _slots_short(self, ci: int, ri: int, req: _Req, di: int) -> bool:
        """Whether the devices cannot host the allocations the pod still needs (this request's
        remaining devices and every later request's), counting for each usable device how many
        more allocations its capacity left can take at least at the smallest amount asked of it
        (a device allocated whole takes one). Only where shared devices make the count bounds
        give up; constraints and counters are ignored, so this never rules out a solution."""
        rest = self._rest(ci, ri, req)
        if rest is None:
            return False
        need = req.num_devices - di + rest.later_need
        if len(self.results[ci]) + req.num_devices - di + rest.own_later > ALLOCATION_RESULTS_MAX_SIZE:
            return False  # the results limit decides first
        slots = 0
        once = self.sem.combinations  # 1.36: a request takes a shared device once
        for index, share in rest.users:
            d = self.entries[index].device
            assert d is not None
            if share is None:
                if not self.allocating.get(d.key):
                    slots += 1
            else:
                lows, totals, users = share
                if not lows:
                    return False  # nothing limits this device
                used = self.capacity_used.get(d.key) or self.ctx.consumed.get(d.key) or {}
                fit: int | None = None
                for key, low in lows.items():
                    left = totals[key] - used[key] if key in used else totals[key]
                    n = int(left // low)
                    fit = n if fit is None or n < fit else fit
                assert fit is not None
                slots += max(0, min(fit, users) if once else fit)
            if slots >= need:
                return False
        self.slot_note = (
            f"the capacity left on the usable devices takes at most {slots} more allocation(s), "
            f"{need} needed by claim {self.ctx.claims[ci].ref}, request {req.spec.full_name} and the requests after it"
        )
        for index, _ in rest.users:
            entry = self.entries[index]
            if req.static[index] is not None or not self.shared[index]:
                continue
            assert entry.device is not None
            found = self._demand(req, entry)
            taken = self.capacity_used.get(entry.device.key) or self.ctx.consumed.get(entry.device.key)
            why = found.over(taken) if not isinstance(found, str) else found
            self._note(req, entry, why + " after the allocations already chosen" if why else self.slot_note)
        return True

    def _pruned(self, ci: int, req: _Req, index: int) -> None:
        """Entries from ``index`` on are not tried: raise the CEL error upstream would meet there."""
        failures = req.cel_failures
        if not failures:
            return
        allocating = self.allocating
        for i in range(bisect_left(failures, index), len(failures)):
            entry = self.entries[failures[i]]
            if entry.device is None:
                raise FatalError(f"pool {entry.pool.name} is invalid: {entry.pool.invalid}")
            claims = allocating.get(entry.device.key)
            if claims and (not req.spec.admin_access or ci in claims):
                continue  # upstream skips a device in use before evaluating its selectors
            result = req.static[failures[i]]
            assert isinstance(result, CelFailure)
            raise FatalError(result.message)

    @staticmethod
    def _too_few_share(req: _Req, index: int, need: int, unfixed: list[int]) -> str:
        """Why entry ``index`` cannot start the rest of the request: it would fix a
        matchAttribute value too few of the remaining devices share ("" if it can)."""
        for k in unfixed:
            value = req.value_at[k][index]
            same = req.by_value[k].get(value, []) if value is not None else []
            have = len(same) - bisect_left(same, index)
            if have < need:
                label = req.constraints[k].label
                return f"{label} (only {have} usable device(s) from here on share {_show(value)}, need {need})"
        return ""

    def _counters_short(self, req: _Req, start: int, need: int) -> str:
        """Why no ``need`` usable entries from ``start`` on fit the shared counters left ("" if
        they may): a lower bound on what they consume, per counter scope.

        A device is checked against every counter of its scope (slice, or pool from 1.35) once
        it consumes any, so for a scope whose consumers must supply ``m`` of the devices (the
        others cannot supply them all), the ``m`` smallest amounts of each counter among its
        consumers must fit what is left of that counter.
        """
        entries = self.entries
        static = req.static
        candidates = 0
        by_scope: dict[object, list[int]] = {}
        consumption = req.consumption
        for i in range(start, len(entries)):
            if static[i] is not None:
                continue
            candidates += 1
            found = consumption.get(i)
            if found is not None:
                by_scope.setdefault(found[0], []).append(i)
        for scope, members in by_scope.items():
            m = need - (candidates - len(members))
            if m <= 0:
                continue
            have = self._available(entries[members[0]])
            used = self.consumed.get(scope, {})
            lefts = {key: available - used.get(key, Fraction(0)) for key, available in have.items()}
            if any(left < 0 for left in lefts.values()):
                return f"counters of {_scope_label(lefts)} exhausted"
            per_key: dict[tuple[str, str], list[Fraction]] = {}
            shares: list[float] = []
            for i in members:
                share = 0.0
                for key, amount in consumption[i][1].items():
                    left = lefts.get(key)
                    if left is None:
                        continue  # a counter the scope does not declare is never checked
                    per_key.setdefault(key, []).append(amount)
                    if amount:
                        share = (share + float(amount / left)) if left else math.inf
                shares.append(share)
            for key, amounts in per_key.items():
                k = m - (len(members) - len(amounts))  # the others take none of this counter
                if k <= 0:
                    continue
                amounts.sort()
                lower = sum(amounts[:k], Fraction(0))
                if lower > lefts[key]:
                    return (
                        f"counter {key[0]}/{key[1]}: {m} more device(s) from here on would consume at least "
                        f"{_amount(lower)}, {_amount(lefts[key])} left"
                    )
            # All counters together: a device's share is the sum over counters of what it takes of
            # what is left (infinite for any of an exhausted one); chosen devices take at most all
            # of each counter, so their shares sum to at most the number of counters. Floats,
            # with a margin far above their rounding error: a near tie is never pruned.
            shares.sort()
            if sum(shares[:m]) > len(lefts) * (1 + 1e-9) + 1e-9:
                return f"counters of {_scope_label(lefts)}: {m} more device(s) from here on do not fit in what is left"
        return ""

    def _note_mismatches(self, req: _Req, index: int) -> None:
        """Explain the devices a fixed matchAttribute value rules out (the search does not try them)."""
        for c in req.constraints:
            if not isinstance(c, _MatchAttribute) or not c.count:
                continue
            for i in range(index, len(self.entries)):
                entry = self.entries[i]
                if req.static[i] is not None or entry.device is None:
                    continue
                value = value_of(entry.device, c.spec.attribute)
                if value is None or value is _MISSING or value != c.value:
                    self._note(
                        req,
                        entry,
                        f"{c.label} ({_show(None if value is _MISSING else value)} differs from "
                        f"{_show(c.value)} of the devices already chosen)",
                    )

    def _drop_settled(self, req: _Req, usable: Sequence[int]) -> None:
        """Leave out of the search a matchAttribute constraint every device the request may take
        (``usable``: entry indices) satisfies with one value, when no other request of the claim
        is bound by it: it can never fail there, so it only costs time."""
        if not any(isinstance(c, _MatchAttribute) for c in req.constraints):
            return
        entries = self.entries
        others = [r for alts in self.groups[req.claim_index] for r in alts if r.request_index != req.request_index]
        kept = []
        for c in req.constraints:
            if isinstance(c, _MatchAttribute) and not any(c in r.constraints for r in others):
                name = c.spec.attribute
                values: set[Any] = set()
                for i in usable:
                    d = entries[i].device
                    assert d is not None
                    values.add(value_of(d, name))
                    if len(values) > 1:
                        break
                if len(values) <= 1 and None not in values and _MISSING not in values:
                    continue
            kept.append(c)
        req.constraints = kept

    def _index_for_pruning(self, req: _Req) -> None:
        self._drop_settled(req, [i for i, r in enumerate(req.static) if r is None])
        statics = req.static
        usable = [0] * (len(statics) + 1)
        any_shared = False
        if self.any_shared:
            shared = self.shared
            for i in range(len(statics) - 1, -1, -1):
                if statics[i] is None and shared[i]:
                    any_shared = True
                    usable[i] = usable[i + 1] + _SHARED_WEIGHT  # may fill every remaining slot
                else:
                    usable[i] = usable[i + 1] + (statics[i] is None)
        else:
            for i in range(len(statics) - 1, -1, -1):
                usable[i] = usable[i + 1] + (statics[i] is None)
        req.usable = usable
        entries = self.entries
        req.cel_failures = [i for i, r in enumerate(statics) if type(r) is CelFailure or entries[i].device is None]
        if any_shared:
            # The counter and matchAttribute bounds count devices, each chosen once: a device
            # serving several allocations breaks them, so only the count bound above applies.
            return
        if self.sem.partitionable_devices:
            for i, r in enumerate(statics):
                d = entries[i].device
                if r is None and d is not None and d.consumes:
                    want: dict[tuple[str, str], Fraction] = {}
                    for set_name, counters in d.consumes:
                        for name, v in counters:
                            want[(set_name, name)] = want.get((set_name, name), Fraction(0)) + v
                    if any(v < 0 for v in want.values()):
                        req.consumption = {}  # the bounds assume amounts >= 0: no pruning
                        break
                    req.consumption[i] = (self._scope(entries[i]), want)
        for k, c in enumerate(req.constraints):
            if not isinstance(c, _MatchAttribute):
                continue
            positions: dict[tuple[str, Any], list[int]] = {}
            values: list[tuple[str, Any] | None] = [None] * len(statics)
            name = c.spec.attribute
            for i, r in enumerate(statics):
                if r is None:
                    d = entries[i].device
                    assert d is not None
                    value = value_of(d, name)
                    if value is not None and value is not _MISSING:
                        values[i] = value
                        found = positions.get(value)
                        if found is None:
                            positions[value] = [i]
                        else:
                            found.append(i)
            req.by_value[k] = positions
            req.value_at[k] = values

    # -- driver ------------------------------------------------------------------------------------

    def _prepare(self) -> None:
        """``Allocate`` before the search: requests, "All" devices, the 32-results limit."""
        # Explanations first: they never raise, CEL errors are kept for when the search meets them.
        for req in self.reqs:
            all_mode = req.spec.mode == "All"
            if all_mode:
                req.selected = [None] * len(self.entries)
            req.static = [self._static(req, e, all_mode) for e in self.entries]
            if not all_mode:
                self._index_for_pruning(req)
        for claim in self.ctx.claims:
            for group in claim.requests:
                if group.exactly is None and not self.sem.prioritized_list:
                    raise FatalError(
                        f"claim {claim.ref}, request {group.name}: has subrequests, but the DRAPrioritizedList "
                        "feature is disabled"
                    )
                for spec in group.alternatives:
                    if spec.capacity is not None and not self.sem.consumable_capacity and self.sem.sharing_code:
                        which = f"subrequest {spec.name}" if spec.parent else f"request {spec.name}"
                        raise FatalError(
                            f"claim {claim.ref}, {which}: has capacity requests, but the DRAConsumableCapacity "
                            "feature is disabled"
                        )
                    if spec.admin_access_set and not self.sem.admin_access:
                        raise FatalError(
                            f"claim {claim.ref}, request {spec.name}: admin access is requested, but the feature "
                            "is disabled"
                        )
            if not self.sem.sharing_code:
                for i, constraint in enumerate(claim.constraints):
                    if constraint.kind == "distinctAttribute":
                        # An implementation without the DRAConsumableCapacity code knows only
                        # matchAttribute.
                        raise FatalError(
                            f"claim {claim.ref}, constraint #{i}: empty constraint (unsupported constraint type?)"
                        )
        for ci, claim in enumerate(self.ctx.claims):
            minimum = 0
            for alternatives in self.groups[ci]:
                fewest: int | None = None
                for req in alternatives:
                    if req.spec.mode == "All":
                        self._prepare_all(claim, req)
                        self._drop_settled(req, [e.index for e in req.all_devices])
                    else:
                        req.num_devices = req.spec.count
                    fewest = req.num_devices if fewest is None else min(fewest, req.num_devices)
                minimum += fewest or 0
            if minimum > ALLOCATION_RESULTS_MAX_SIZE:
                raise FatalError(
                    f"claim {claim.ref}: number of requested devices {minimum} exceeds the claim limit "
                    f"of {ALLOCATION_RESULTS_MAX_SIZE}"
                )

    def _prepare_all(self, claim: ClaimSpec, req: _Req) -> None:
        for pool in self.pools:
            if pool.incomplete:
                raise FatalError(
                    f"claim {claim.ref}, request {req.spec.name}: asks for all devices, but resource pool "
                    f"{pool.id} is currently being updated"
                )
            if pool.invalid:
                raise FatalError(
                    f"claim {claim.ref}, request {req.spec.name}: asks for all devices, but resource pool "
                    f"{pool.id} is currently invalid"
                )
        members = []
        for entry in self.entries:
            assert entry.device is not None and entry.slice is not None
            result = req.selected[entry.index]  # the selectors' verdict, from _static
            if isinstance(result, CelFailure):
                raise FatalError(result.message)
            if result is not None:
                continue
            if entry.slice.per_device and not entry.device.available_on(self.node):
                continue
            if self.sem.consumable_capacity and self._capacity_reason(req, entry):
                continue  # validateDeviceRequest: "all" means all devices that can serve it
            members.append(entry)
        req.all_devices = members
        req.num_devices = len(members)

    def _search(self) -> bool:
        try:
            return self._allocate_one(0, 0, 0, 0, False, 0)
        except _MaxSizeExceeded:
            return False

    def run(self) -> NodeOutcome:
        self._build_requests()
        self.permute = not self.sem.combinations and (
            self.plain_search or any(isinstance(c, _DistinctAttribute) for cs in self.constraints for c in cs)
        )
        fatal = ""
        gave_up = ""
        done = False
        reasons = list(self.notes)
        self.started = time.perf_counter()
        if self.ctx.deadline_ms is not None:
            self.give_up_at = self.started + self.ctx.deadline_ms / 1000
        try:
            self._prepare()
            done = self._search()
        except FatalError as exc:
            fatal = str(exc)
        except _StepsExceeded:
            gave_up = f"timed out trying to allocate devices (search stopped after {self.ctx.max_steps} steps)"
            reasons.append(gave_up)
        except _DeadlineExceeded:
            elapsed = (time.perf_counter() - self.started) * 1000
            gave_up = f"gave up after {elapsed:.0f} ms on node {self.node.name}"
            reasons.append(gave_up)
        if fatal:
            reasons.append(fatal)
        elif not done and self.slot_note:
            reasons.append(self.slot_note)
        if not fatal and not done and self.sem.skip_unusable_pools and any(p.invalid for p in self.pools):
            reasons.append("invalid resource pools were encountered")
        if not self.entries and not fatal and not done:
            reasons.append("no devices are published for this node")
        satisfied = done and not fatal
        allocation: list[list[tuple[str, str, str, str, dict[str, str] | None]]] = []
        if satisfied:
            for chosen in self.results:
                allocation.append(
                    [
                        (req.spec.full_name, *entry.device.key, taken.consumed_capacity() if taken else None)
                        for req, entry, taken in chosen
                        if entry.device
                    ]
                )
        return NodeOutcome(
            node=self.node.name,
            satisfiable=satisfied,
            allocation=allocation,
            reasons=reasons,
            requests=self._reports(satisfied),
            fatal=fatal,
            steps=self.steps,
            gave_up=gave_up,
            elapsed_ms=(time.perf_counter() - self.started) * 1000,
        )

    def _selector_labels(self, req: _Req) -> tuple[tuple[str, str], ...]:
        labels = self.ctx.selector_labels.get(req.uid)
        if labels is None:
            labels = self.ctx.selector_labels[req.uid] = tuple(
                (f"class selector #{s.index}", s.expression) for s in req.cls.selectors
            ) + tuple((f"selector #{s.index}", s.expression) for s in req.spec.selectors)
        return labels

    def _reports(self, satisfied: bool) -> list[RequestReport]:
        reports = []
        entries = self.entries
        for req in self.reqs:
            spec = req.spec
            rejections: list[tuple[str, str]] = []
            usable = 0
            considered = 0
            statics = req.static or [None] * len(entries)
            if (satisfied or not self.dynamic) and statics.count(None) == len(entries):
                considered = usable = len(entries)  # every device usable (so no invalid pool): nothing to say
                statics = []
            for entry, result in zip(entries, statics, strict=False):
                if entry.device is None:
                    rejections.append((entry.id, f"pool invalid: {entry.pool.invalid}"))
                    continue
                considered += 1
                if result is None:
                    usable += 1
                    if not satisfied and self.dynamic:
                        dynamic = self.dynamic.get((req.uid, entry.index))
                        if dynamic:
                            rejections.append((entry.id, dynamic))
                    continue
                rejections.append((entry.id, result.reason if isinstance(result, CelFailure) else result))
            chosen: bool | None = None
            if req.is_sub:
                chosen = satisfied and self.selected.get((req.claim_index, req.request_index)) == req.sub_index
            reports.append(
                RequestReport(
                    claim=self.ctx.claims[req.claim_index].ref,
                    request=spec.full_name,
                    mode=spec.mode,
                    count=req.num_devices if spec.mode == "All" else spec.count,
                    considered=considered,
                    usable=usable,
                    rejections=rejections,
                    selectors=self._selector_labels(req),
                    chosen=chosen,
                )
            )
        return reports


def _scope_label(counters: Mapping[tuple[str, str], Any]) -> str:
    """The counter sets of one scope, for messages: ``gpu-0, gpu-1``."""
    return ", ".join(dict.fromkeys(set_name for set_name, _ in counters))


def _amount(x: Fraction) -> str:
    """A counter amount as Kubernetes prints a quantity (160Gi)."""
    return str(Quantity.from_int(x.numerator, "BinarySI")) if x.denominator == 1 else f"{float(x):g}"


def _request_uid(ci: int, ri: int, si: int) -> int:
    # Unique per (claim, request, subrequest) within one explanation; requests and subrequests
    # are bounded by the API (32 each), claims are not.
    return (ci * 64 + ri) * 64 + si
