"""Kubernetes' structured allocator test table, continued: sharing devices among allocations.

The cases of upstream's ``allocator_testing.go`` (kubernetes/kubernetes, the 1.35 table) from
"consumable-capacity-multi-allocatable-device-with-allocated-capacity-use-remaining" on, up to
the distinctAttribute cases that ``tests/test_allocator_upstream.py`` already holds: a device
with ``allowMultipleAllocations`` serving several allocations (DRAConsumableCapacity), capacity
already consumed by claims allocated elsewhere, and devices that must stay dedicated. The
builders and the conventions are that file's (ids are upstream's names, features are exactly
upstream's, order within a claim is irrelevant).

Upstream's allocated state becomes a ResourceClaim allocated elsewhere, the way the scheduler
builds that state from claims: ``allocatedDevices`` is a result without ``shareID`` (the device
is fully in use), ``allocatedCapacityDevices`` (AggregatedCapacity) a result with a ``shareID``
and ``consumedCapacity``, which adds to what the device already gives away.

Upstream's results also carry ``shareID`` and ``consumedCapacity``; every expected pick here
states both ({} where upstream's result has no consumedCapacity), compared with our
AllocatedDevice's ``shared`` and ``consumed_capacity``; quantities by value, so "4Gi" and
"4294967296" agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import pytest

from gpucluster.dra.allocator import AllocatedDevice
from gpucluster.dra.quantity import Quantity
from tests.test_allocator_upstream import (
    _MULTI_CLASS,
    CASES,
    CLAIM0,
    CLAIM1,
    CLASS_A,
    DRIVER_A,
    NODE1,
    POOL1,
    Case,
    Obj,
    Pick,
    _cap_request,
    _counters,
    _mem,
    _multi,
    _multi_with,
    _range,
    all_request,
    answer,
    cel,
    claim,
    counter_set,
    device,
    explain_case,
    klass,
    match,
    mem_at_least,
    pick,
    prioritized,
    rslice,
    subreq,
)

CC = ("ConsumableCapacity",)
PL_CC = ("ConsumableCapacity", "PrioritizedList")
PL_PD_CC = ("PrioritizedList", "PartitionableDevices", "ConsumableCapacity")
# upstream classWithAllowMultipleAllocations(classA, driverA, false)
_DEDICATED_CLASS = [
    klass(CLASS_A, DRIVER_A, f'device.driver == "{DRIVER_A}" && device.allowMultipleAllocations == false')
]

# ----------------------------------------------------------------------------- builders

Expected = tuple[Pick, bool, dict[str, str]]  # a pick, whether its result has a shareID, its consumedCapacity


def got(
    req: str, dev: str, consumed: dict[str, str] | None = None, *, claim_name: str = CLAIM0, shared: bool = True
) -> Expected:
    """One result upstream expects: ``shared`` whether it has a shareID (one allocation of a device
    that allows multiple allocations), ``consumed`` its consumedCapacity (None: the result has none)."""
    return pick(claim_name, req, DRIVER_A, POOL1, dev), shared, dict(consumed or {})


def cap(quantity: str, name: str = "capacity-0") -> dict[str, str]:
    return {name: quantity}


def _capacity(quantity: str) -> Obj:
    return {"requests": cap(quantity)}


def _shared_claim(shares: list[tuple[str, dict[str, str]]]) -> Obj:
    """A claim allocated elsewhere whose results share devices of pool-1 (upstream's
    allocatedCapacityDevices): each result has a shareID and what it consumes."""
    results = [
        {
            "request": "r",
            "driver": DRIVER_A,
            "pool": POOL1,
            "device": dev,
            "shareID": f"aaaaaaaa-aaaa-aaaa-aaaa-{i:012d}",
            "consumedCapacity": consumed,
        }
        for i, (dev, consumed) in enumerate(shares)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "shared-elsewhere", "namespace": "default"},
        "spec": {"devices": {"requests": [_cap_request("r", None)]}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def _multi_range(name: str, value: str, **extra: Any) -> Obj:
    """upstream device(name).withAllowMultipleAllocations().withCapacityRequestPolicyRange({capacity0: value})."""
    return {**_multi(name, _range(value)), **extra}


def _dedicated_range(name: str, value: str) -> Obj:
    """upstream device(name).withCapacityRequestPolicyRange({capacity0: value}), no allowMultipleAllocations."""
    return {"name": name, "capacity": _range(value)}


def _multi_cap(name: str, value: str | None) -> Obj:
    """upstream device(name, {capacity0: value}).withAllowMultipleAllocations() (None: no capacity)."""
    return _multi(name, {"capacity-0": {"value": value}} if value is not None else None)


def _slice(*devs: Obj, count: int = 1, name: str = "slice-1") -> Obj:
    return rslice(name, NODE1, POOL1, DRIVER_A, *devs, count=count)


@dataclass
class SharingCase(Case):
    shared: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # device, consumedCapacity
    consumed: list[Expected] = field(default_factory=list)


def case(
    name: str,
    claims: list[Obj],
    slices: list[Obj],
    classes: list[Obj],
    expect: list[Expected] | str | None,
    *marks: pytest.MarkDecorator,
    features: tuple[str, ...] = CC,
    **extra: Any,
) -> Any:
    picks = [p for p, _, _ in expect] if isinstance(expect, list) else expect
    consumed = expect if isinstance(expect, list) else []
    c = SharingCase(claims, slices, classes, expect=picks, features=features, consumed=consumed, **extra)
    return pytest.param(c, id=name, marks=marks)


# ----------------------------------------------------------------------------- the runner


def run(c: SharingCase) -> tuple[list[Pick] | str | None, list[AllocatedDevice]]:
    """The answer in the form of ``Case.expect`` (tests/test_allocator_upstream.py's), and the
    allocated devices."""
    result = explain_case(c, extra=(_shared_claim(c.shared),) if c.shared else ())
    verdict = answer(c, result)
    return verdict, list(result.nodes[0].allocation) if isinstance(verdict, list) and result else []


def _amounts(consumed: dict[str, str]) -> tuple[tuple[str, Fraction], ...]:
    return tuple(sorted((k, Quantity.parse(v).value) for k, v in consumed.items()))


# ----------------------------------------------------------------------------- the cases

# device-2 before device-1, so device-2 is tried first (upstream's order)
_BACKTRACK = _slice(
    _multi_with("device-2", {"stringAttribute": "stringAttributeValue1"}, _range("2")),
    _multi_with("device-1", {"stringAttribute": "stringAttributeValue2"}, _range("4")),
)
_TWO_AND_ONE = [_slice(_multi_cap("device-1", "2"), _multi_cap("device-2", "1"))]
_ONE_AND_ONE = [_slice(_multi_cap("device-1", "1"), _multi_cap("device-2", "1"))]


def _capacity_at_least(quantity: str) -> Obj:
    return cel(f'device.capacity["{DRIVER_A}"]["capacity-0"].compareTo(quantity("{quantity}")) >= 0')


def _two_counter_sets(name: str, capacity0: str) -> Obj:
    """A device consuming capacity-0 from counter-set-1 and 4 of capacity-1 from counter-set-2, its
    capacity from the counters, capacity-1 with the range policy (upstream withCapacityRequestPolicyRange)."""
    out = device(
        name,
        consumes=[("counter-set-1", {"capacity-0": capacity0}), ("counter-set-2", {"capacity-1": "4"})],
        from_counters=True,
        allowMultipleAllocations=True,
    )
    out["capacity"]["capacity-1"] = _range("4")["capacity-0"]
    return out


SHARING = [
    case(
        "consumable-capacity-multi-allocatable-device-with-allocated-capacity-use-remaining",
        [claim(CLAIM0, _cap_request("req-0", "2"))],
        [_slice(_multi_range("device-1", "4"))],
        _MULTI_CLASS,
        [got("req-0", "device-1", cap("2"))],
        shared=[("device-1", cap("2"))],
    ),
    case(
        "consumable-capacity-multi-allocatable-device-with-allocated-capacity-next-device",
        [claim(CLAIM0, _cap_request("req-0", "2"))],
        [_slice(_multi_range("device-1", "2"), _multi_range("device-2", "2"))],
        _MULTI_CLASS,
        [got("req-0", "device-2", cap("2"))],
        shared=[("device-1", cap("2"))],
    ),
    case(
        "consumable-capacity-with-multi-allocatable-device-backtrack",
        [
            claim(
                CLAIM0,
                _cap_request("req-0", "2"),
                _cap_request("req-1", "2"),
                constraints=[match("stringAttribute")],
            ),
            claim(CLAIM1, _cap_request("req-0", "2")),
        ],
        [_BACKTRACK],
        [klass(CLASS_A, DRIVER_A)],
        [
            got("req-0", "device-1", cap("2")),
            got("req-1", "device-1", cap("2")),
            got("req-0", "device-2", cap("2"), claim_name=CLAIM1),
        ],
    ),
    case(
        "consumable-capacity-multi-allocatable-device-with-subrequest",
        [
            claim(
                CLAIM0,
                prioritized(
                    "req-0",
                    subreq("subReq-0", CLASS_A, capacity=_capacity("4")),
                    subreq("subReq-1", CLASS_A, capacity=_capacity("2")),
                    subreq("subReq-1", CLASS_A),  # the name twice, as upstream (validation is bypassed there)
                ),
            )
        ],
        [_slice(_multi_range("device-1", "2"))],
        _MULTI_CLASS,
        [got("req-0/subReq-1", "device-1", cap("2"))],
        features=PL_CC,
    ),
    case(
        "consumable-capacity-multi-allocatable-device-with-no-available-consumable-capacity",
        [claim(CLAIM0, _cap_request("req-0", "2"))],
        [_slice(_multi_range("device-1", "2"))],
        _MULTI_CLASS,
        None,
        shared=[("device-1", cap("2"))],
    ),
    case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-no-capacity",
        [claim(CLAIM0, all_request("req-0", CLASS_A, capacity=_capacity("2")))],
        [_slice(_multi_cap("device-1", "2"), _multi_cap("device-2", None))],
        _MULTI_CLASS,
        [got("req-0", "device-1", cap("2"))],
    ),
    case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-insufficient-capacity",
        [claim(CLAIM0, all_request("req-0", CLASS_A, capacity=_capacity("2")))],
        _TWO_AND_ONE,
        _MULTI_CLASS,
        [got("req-0", "device-1", cap("2"))],
    ),
    case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-sufficient",
        [
            claim(
                CLAIM0,
                _cap_request("req-0", "1"),
                all_request("req-1", CLASS_A, capacity=_capacity("1")),
            )
        ],
        _TWO_AND_ONE,
        [klass(CLASS_A, DRIVER_A)],
        [got("req-0", "device-1", cap("1")), got("req-1", "device-1", cap("1")), got("req-1", "device-2", cap("1"))],
    ),
    case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-sufficient",
        [claim(CLAIM0, all_request("req-0", CLASS_A, capacity=_capacity("1")))],
        _TWO_AND_ONE,
        [klass(CLASS_A, DRIVER_A)],
        [got("req-0", "device-1", cap("1")), got("req-0", "device-2", cap("1"))],
        shared=[("device-1", cap("1"))],
    ),
    case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-insufficient",
        [
            claim(
                CLAIM0,
                _cap_request("req-0", "1"),
                all_request("req-1", CLASS_A, capacity=_capacity("1")),
            )
        ],
        _ONE_AND_ONE,
        [klass(CLASS_A, DRIVER_A)],
        None,
    ),
    case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-insufficient",
        [claim(CLAIM0, all_request("req-0", CLASS_A, capacity=_capacity("1")))],
        _ONE_AND_ONE,
        [klass(CLASS_A, DRIVER_A)],
        [got("req-0", "device-2", cap("1"))],
        shared=[("device-1", cap("1"))],
    ),
    case(
        "consumable-capacity-dedicated-device-with-consumable-capacity-request",
        [claim(CLAIM0, _cap_request("req-0", "1"))],
        [_slice(device("device-1", {"capacity-0": "1"}))],
        _DEDICATED_CLASS,
        [got("req-0", "device-1", shared=False)],  # a dedicated device: no shareID, no consumedCapacity
    ),
    case(
        "consumable-capacity-dedicated-device-with-multiple-consumable-capacity-request",
        [claim(CLAIM0, _cap_request("req-0", "1")), claim(CLAIM1, _cap_request("req-0", "1"))],
        [_slice(_dedicated_range("device-1", "2"))],
        _DEDICATED_CLASS,
        None,
    ),
    case(
        "allow-multiple-allocations-exclude-multi-allocatable-device-by-class-selector",
        [claim(CLAIM0, _cap_request("req-0", "1"))],
        [_slice(_multi_cap("device-1", "1"))],
        _DEDICATED_CLASS,
        None,
    ),
    case(
        "allow-multiple-allocations-not-allocate-multi-allocatable-device-which-already-dedicated",
        [claim(CLAIM0, _cap_request("req-0", "1"))],
        [_slice(_multi_range("device-1", "2"))],
        _MULTI_CLASS,
        None,
        allocated=[(DRIVER_A, POOL1, "device-1")],
    ),
    case(
        "allow-multiple-allocations-not-allocate-dedicated-device-which-change-from-multi-allocatable",
        [claim(CLAIM0, _cap_request("req-0", "1"))],
        [_slice(_dedicated_range("device-1", "2"))],
        _MULTI_CLASS,
        None,
        shared=[("device-1", cap("1"))],
    ),
    case(
        "allow-multiple-allocations-with-partitionable-device",
        [
            claim(
                CLAIM0,
                _cap_request("req-0"),
                prioritized(
                    "req-1",
                    subreq("subReq-0", CLASS_A, 1, mem_at_least("6Gi")),
                    subreq("subReq-1", CLASS_A, 1, mem_at_least("4Gi")),
                ),
            )
        ],
        [
            _slice(
                _mem("device-1", "4Gi", allowMultipleAllocations=True),
                _mem("device-2", "6Gi", allowMultipleAllocations=True),
                _mem("device-3", "4Gi", allowMultipleAllocations=True),
                count=2,
            ),
            _counters("slice-2", memory="8Gi"),
        ],
        _MULTI_CLASS,
        [got("req-0", "device-1", cap("4Gi", "memory")), got("req-1/subReq-1", "device-3", cap("4Gi", "memory"))],
        features=PL_PD_CC,
    ),
    case(
        "consumable-capacity-with-partitionable-device-multiple-capacity-pools",
        [
            claim(
                CLAIM0,
                _cap_request("req-0", "1"),
                _cap_request("req-2", "2"),
                prioritized(
                    "req-1",
                    subreq("subReq-0", CLASS_A, 1, _capacity_at_least("4"), capacity=_capacity("1")),
                    subreq("subReq-1", CLASS_A, 1, _capacity_at_least("2"), capacity=_capacity("1")),
                ),
            )
        ],
        [
            _slice(
                _two_counter_sets("device-1", "2"),
                _two_counter_sets("device-2", "4"),
                _two_counter_sets("device-3", "2"),
                count=2,
            ),
            rslice(
                "slice-2",
                NODE1,
                POOL1,
                DRIVER_A,
                count=2,
                counter_sets=[
                    counter_set("counter-set-1", **{"capacity-0": "4"}),
                    counter_set("counter-set-2", **{"capacity-1": "8"}),
                ],
            ),
        ],
        [klass(CLASS_A, DRIVER_A)],
        [
            got("req-0", "device-1", {"capacity-0": "1", "capacity-1": "2"}),
            got("req-2", "device-3", {"capacity-0": "2", "capacity-1": "2"}),
            got("req-1/subReq-1", "device-1", {"capacity-0": "1", "capacity-1": "2"}),
        ],
        features=PL_PD_CC,
    ),
]


@pytest.mark.parametrize("c", SHARING)
def test_upstream_sharing_case(c: SharingCase) -> None:
    answer, allocation = run(c)
    expected = sorted(c.expect) if isinstance(c.expect, list) else c.expect
    assert answer == expected
    # Whether each result is one allocation of a shared device (upstream: has a shareID), and
    # what it consumes.
    ours = sorted(
        (
            (a.claim, a.request, a.driver, a.pool, a.device),
            a.shared,
            _amounts(dict(a.consumed_capacity)),
        )
        for a in allocation
    )
    assert ours == sorted((p, shared, _amounts(consumed)) for p, shared, consumed in c.consumed)


def test_case_names_are_unique() -> None:
    names = [p.id for p in SHARING]
    assert len(names) == len(set(names)) == 18
    assert not set(names) & {p.id for p in CASES}
