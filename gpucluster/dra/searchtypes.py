"""The types one node's search and the explanation of its outcome share.

The explanation's inputs (:class:`ExplainContext`, shared by every node), a device in search
order (:class:`Entry`), a request as the search sees it (:class:`Req`) and the outcomes of
checking a device against a request's selectors. They sit below both the search and the
explanation recorder so that neither has to import the other for its types.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpucluster.dra.claims import ClaimSpec, DeviceClassInfo, RequestSpec
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


@dataclass(slots=True, eq=False)
class Entry:
    """One device in search order (or, in 1.34, the place where an invalid pool is reached)."""

    index: int
    pool: Pool
    slice: Slice | None
    device: Device | None
    id: str


@dataclass(slots=True, eq=False)
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
    capacity_id: int = 0  # requests asking the same capacity.requests have the same id
    # 1.34 (Semantics.second_all_subrequest_reuses_first): the subrequest whose class and
    # selectors decide which devices this All subrequest gets.
    matched_as: Req | None = None
    static: list[StaticResult] = field(default_factory=list)  # aligned with the node's entries
    num_devices: int = 0
    all_devices: list[Entry] = field(default_factory=list)
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


def request_uid(ci: int, ri: int, si: int) -> int:
    # Unique per (claim, request, subrequest) within one explanation; requests and subrequests
    # are bounded by the API (32 each), claims are not.
    return (ci * 64 + ri) * 64 + si
