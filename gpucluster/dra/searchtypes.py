"""The types one node's search and the explanation of its outcome share.

The explanation's inputs (:class:`ExplainContext`, shared by every node), a device in search
order (:class:`Entry`), a request as the search sees it (:class:`Req`) and the outcomes of
checking a device against a request's selectors. They sit below both the search and the
explanation recorder so that neither has to import the other for its types.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpucluster.dra.cel.readkey import ReadKey
from gpucluster.dra.claims import ClaimSpec, DeviceClassInfo, RequestSpec, Selector
from gpucluster.dra.constraints import Constraint
from gpucluster.dra.model import DeviceKey, Semantics
from gpucluster.dra.pools import Device, Pool, Slice

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


class Scope:
    """Some selectors of a request (its class's, its own, or both) as one explanation evaluates
    them on every device: the attribute conversion check if the device's first selector is among
    them (else None), the key of the values they read (None: evaluate every device), and their
    verdict by key."""

    __slots__ = ("check", "keys", "selectors", "verdicts")

    def __init__(
        self, selectors: tuple[Selector, ...], check: Callable[[Mapping[str, Any]], str] | None, keys: ReadKey | None
    ) -> None:
        self.selectors = selectors
        self.check = check
        self.keys = keys
        self.verdicts: dict[Hashable, StaticResult] = {}


class FatalError(Exception):
    """An error that makes kube-scheduler abort scheduling the pod (not only this node)."""


@dataclass(slots=True)
class ExplainContext:
    """What every node shares during one explanation."""

    claims: Sequence[ClaimSpec]
    classes: Mapping[str, DeviceClassInfo]
    semantics: Semantics
    in_use: Mapping[DeviceKey, str]  # device -> claim holding it
    views: Callable[[Mapping[str, Any]], Sequence[Any]]
    runtime_error: type[Exception]
    conversion_error: Callable[[Mapping[str, Any]], str] | None = None  # see allocator.SelectorBackend
    read_key: Callable[[Sequence[Any]], ReadKey | None] | None = None  # see allocator.SelectorBackend
    max_steps: int = DEFAULT_MAX_STEPS
    deadline_ms: float | None = DEFAULT_DEADLINE_MS  # per node; None: no deadline
    # (request uid, slice) -> selector outcomes of its devices; slices several nodes see are evaluated once.
    selector_cache: dict[tuple[int, Slice], list[StaticResult]] = field(default_factory=dict)
    # (request uid, which selectors) or (class name,) -> those selectors and their verdicts by
    # the values they read (see selection.DeviceSelection).
    verdicts: dict[tuple[Any, ...], Scope] = field(default_factory=dict)
    selector_labels: dict[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # by request uid
    # (constraint label, value, its type, devices that have it, devices needed) -> the pruning's reason
    messages: dict[tuple[str, Any, type | None, int, int], str] = field(default_factory=dict)
    # capacity.requests -> a small id (requests asking the same capacity share what it takes)
    capacity_ids: dict[tuple[tuple[str, Fraction], ...], int] = field(default_factory=dict)
    capacity_by_request: dict[int, int] = field(default_factory=dict)  # request uid -> its capacity id
    # DRAConsumableCapacity: devices other claims hold shares of (results with a shareID), and
    # what those shares consume of a device (results with consumedCapacity), by fully-qualified
    # capacity name.
    shared_allocated: Collection[DeviceKey] = frozenset()
    consumed: Mapping[DeviceKey, Mapping[str, Fraction]] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class Entry:
    """One device in search order (or, in 1.34, the place where an invalid pool is reached)."""

    index: int
    pool: Pool
    slice: Slice | None
    device: Device | None
    id: str


@dataclass(slots=True, eq=False, init=False)
class Req:
    """A request (or subrequest) of a claim as one node's search sees it, and what the search
    works out about it before it starts."""

    claim_index: int
    request_index: int
    sub_index: int
    spec: RequestSpec
    cls: DeviceClassInfo
    uid: int
    is_sub: bool
    constraints: list[Constraint]  # the claim's constraints that apply to this request
    capacity_id: int  # requests asking the same capacity.requests have the same id
    # 1.34 (Semantics.second_all_subrequest_reuses_first): the subrequest whose class and
    # selectors decide which devices this All subrequest gets.
    matched_as: Req | None
    static: list[StaticResult]  # aligned with the node's entries
    num_devices: int
    all_devices: list[Entry]
    selected: list[StaticResult]  # All: the selectors' verdict per entry
    # Pruning, ExactCount only: usable[i] = statically usable entries at index >= i; per
    # matchAttribute constraint (index into ``constraints``), value -> indices of usable entries;
    # the indices of entries the search aborts on: a CEL runtime error, an invalid pool (1.34).
    usable: list[int]
    by_value: dict[int, dict[tuple[str, Any], list[int]]]
    value_at: dict[int, list[tuple[str, Any] | None]]  # same keys, per entry
    cel_failures: list[int]
    # Usable entries that consume shared counters: index -> (counter scope, amount per counter).
    consumption: dict[int, tuple[object, dict[tuple[str, str], Fraction]]]

    def __init__(
        self,
        claim_index: int,
        request_index: int,
        sub_index: int,
        spec: RequestSpec,
        cls: DeviceClassInfo,
        uid: int,
        is_sub: bool,
        constraints: list[Constraint],
        capacity_id: int = 0,
    ) -> None:
        # Written out: one per request and node, the defaults without a factory call each.
        self.claim_index = claim_index
        self.request_index = request_index
        self.sub_index = sub_index
        self.spec = spec
        self.cls = cls
        self.uid = uid
        self.is_sub = is_sub
        self.constraints = constraints
        self.capacity_id = capacity_id
        self.matched_as = None
        self.static = []
        self.num_devices = 0
        self.all_devices = []
        self.selected = []
        self.usable = []
        self.by_value = {}
        self.value_at = {}
        self.cel_failures = []
        self.consumption = {}


def request_uid(ci: int, ri: int, si: int) -> int:
    # Unique per (claim, request, subrequest) within one explanation; requests and subrequests
    # are bounded by the API (32 each), claims are not.
    return (ci * 64 + ri) * 64 + si
