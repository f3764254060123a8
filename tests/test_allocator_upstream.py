"""Kubernetes' structured allocator test table, case by case, against gpucluster.dra.allocator.

Each ``pytest.param`` id is the name of a case in upstream's
``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting/allocator_testing.go``
(kubernetes/kubernetes, the 1.35 table: counter sets in their own slices, the "None" taint
effect, invalid pools skipped). Every case states the outcome upstream expects for its one node:
the devices allocated (order within a claim is irrelevant, as upstream's ``ConsistOf``), no
allocation, or an error. Upstream's ``Features`` are off unless a case sets them, so every gate
the allocator reads is passed explicitly. A case where we disagree would be marked
``pytest.mark.xfail(strict=True)`` with how (none is). Node selectors and config of the
allocation result are not compared (we do not produce them). The sharing cases
(DRAConsumableCapacity) continue in ``tests/test_allocator_upstream_sharing.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gpucluster.dra import gates
from gpucluster.dra.allocator import AllocatorInputError, Explanation, explain

Obj = dict[str, Any]

DRIVER_A, DRIVER_B = "driver-a", "driver-b"
CLASS_A, CLASS_B = "class-a", "class-b"
NODE1, NODE2 = "node-1", "node-2"
REGION1, REGION2 = "region-1", "region-2"
POOL1, POOL2, POOL3, POOL4 = "pool-1", "pool-2", "pool-3", "pool-4"
CLAIM0, CLAIM1 = "claim-0", "claim-1"
MAX = 32  # resourceapi.AllocationResultsMaxSize

# Upstream Features field -> the gate that switches it.
_FEATURES = {
    "AdminAccess": gates.ADMIN_ACCESS,
    "PrioritizedList": gates.PRIORITIZED_LIST,
    "DeviceTaints": gates.DEVICE_TAINTS,
    "PartitionableDevices": gates.PARTITIONABLE_DEVICES,
    "ConsumableCapacity": gates.CONSUMABLE_CAPACITY,
    "DeviceBinding": gates.BINDING_CONDITIONS,
}


# ----------------------------------------------------------------------------- builders (upstream's helpers)


def cel(expression: str) -> Obj:
    return {"cel": {"expression": expression}}


def mem_at_least(quantity: str) -> Obj:
    return cel(f'device.capacity["{DRIVER_A}"].memory.compareTo(quantity("{quantity}")) >= 0')


def klass(name: str, driver: str, expression: str | None = None) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [cel(expression or f'device.driver == "{driver}"')]},
    }


CLASSES_AB = [klass(CLASS_A, DRIVER_A), klass(CLASS_B, DRIVER_B)]


def request(name: str, cls: str, count: int | None = 1, *selectors: Obj, **extra: Any) -> Obj:
    body: Obj = {"deviceClassName": cls, "allocationMode": "ExactCount", **extra}
    if count is not None:
        body["count"] = count
    if selectors:
        body["selectors"] = list(selectors)
    return {"name": name, "exactly": body}


def all_request(name: str, cls: str, *selectors: Obj, **extra: Any) -> Obj:
    body: Obj = {"deviceClassName": cls, "allocationMode": "All", **extra}
    if selectors:
        body["selectors"] = list(selectors)
    return {"name": name, "exactly": body}


def subreq(name: str, cls: str, count: int | None = 1, *selectors: Obj, mode: str = "ExactCount", **extra: Any) -> Obj:
    body: Obj = {"name": name, "deviceClassName": cls, "allocationMode": mode, **extra}
    if count is not None and mode != "All":
        body["count"] = count
    if selectors:
        body["selectors"] = list(selectors)
    return body


def prioritized(name: str, *subs: Obj) -> Obj:
    return {"name": name, "firstAvailable": list(subs)}


def claim(name: str, *requests: Obj, constraints: list[Obj] | None = None, config: list[Obj] | None = None) -> Obj:
    devices: Obj = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": devices},
    }


def match(attribute: str, *requests: str) -> Obj:
    out: Obj = {"matchAttribute": f"{DRIVER_A}/{attribute}"}
    if requests:
        out["requests"] = list(requests)
    return out


def _attribute(value: Any) -> Obj:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, str) and value[:1].isdigit() and value.count(".") == 2:
        return {"version": value}
    return {"string": value}


def device(
    name: str,
    capacity: dict[str, str] | None = None,
    attributes: dict[str, Any] | None = None,
    *,
    consumes: list[tuple[str, dict[str, str]]] | None = None,
    from_counters: bool = False,
    taints: list[Obj] | None = None,
    **extra: Any,
) -> Obj:
    """upstream device(); ``from_counters`` gives the device the capacity it consumes."""
    out: Obj = {"name": name, **extra}
    if attributes:
        out["attributes"] = {k: _attribute(v) for k, v in attributes.items()}
    if consumes:
        out["consumesCounters"] = [
            {"counterSet": cs, "counters": {k: {"value": v} for k, v in counters.items()}} for cs, counters in consumes
        ]
        if from_counters:
            capacity = {k: v for _, counters in consumes for k, v in counters.items()}
    if capacity:
        out["capacity"] = {k: {"value": v} for k, v in capacity.items()}
    if taints:
        out["taints"] = taints
    return out


def devices(count: int) -> list[Obj]:
    return [device(f"device-{i}") for i in range(count)]


ALL_NODES = "allNodes"
PER_DEVICE = "perDeviceNodeSelection"


def rslice(
    name: str,
    where: str | Obj,
    pool: str,
    driver: str,
    *devs: Obj,
    count: int = 1,
    generation: int = 1,
    counter_sets: list[Obj] | None = None,
) -> Obj:
    """upstream slice(): ``where`` is a node name, ALL_NODES, PER_DEVICE or a NodeSelector."""
    spec: Obj = {"driver": driver, "pool": {"name": pool, "generation": generation, "resourceSliceCount": count}}
    if isinstance(where, dict):
        spec["nodeSelector"] = where
    elif where == ALL_NODES:
        spec["allNodes"] = True
    elif where == PER_DEVICE:
        spec["perDeviceNodeSelection"] = True
    else:
        spec["nodeName"] = where
    if counter_sets is not None:
        spec["sharedCounters"] = counter_sets
    else:
        spec["devices"] = list(devs)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def counter_set(name: str, **counters: str) -> Obj:
    return {"name": name, "counters": {k: {"value": v} for k, v in counters.items()}}


def label_selector(key: str, *values: str) -> Obj:
    return {"nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}]}


def local_selector(node_name: str) -> Obj:
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}


def node(name: str, region: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"region": region, "planet": "earth"}},
    }


def toleration(key: str, effect: str, operator: str = "Exists", value: str | None = None) -> Obj:
    out: Obj = {"key": key, "operator": operator, "effect": effect}
    if value is not None:
        out["value"] = value
    return out


TAINT_NONE = {"key": "taint-key", "value": "taint-value", "effect": "None"}
TAINT_NO_SCHEDULE = {"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}
TAINT_NO_EXECUTE = {"key": "taint-key", "value": "taint-value-2", "effect": "NoExecute"}
TOLERATE_NO_SCHEDULE = toleration("taint-key", "NoSchedule")
TOLERATE_NO_EXECUTE = toleration("taint-key", "NoExecute", "Equal", "taint-value-2")


def admin(req: Obj) -> Obj:
    req["exactly"]["adminAccess"] = True
    return req


# ----------------------------------------------------------------------------- the runner

Pick = tuple[str, str, str, str, str]  # claim, request, driver, pool, device


def pick(claim_name: str, req: str, driver: str, pool: str, dev: str) -> Pick:
    return (f"default/{claim_name}", req, driver, pool, dev)


def picks_a(req: str, *devs: str, pool: str = POOL1, claim_name: str = CLAIM0) -> list[Pick]:
    return [pick(claim_name, req, DRIVER_A, pool, d) for d in devs]


ERROR = "error"
# Upstream's Allocate fails with "invalid resource pools were encountered" wrapped in
# ErrFailedAllocationOnNode: not fatal, the scheduler reports the node as not fitting with that
# message. Ours: the node does not fit and that is its reason, no fatal error.
NODE_ERROR = "node-error"


@dataclass
class Case:
    claims: list[Obj]
    slices: list[Obj] = field(default_factory=list)
    classes: list[Obj] = field(default_factory=lambda: [klass(CLASS_A, DRIVER_A)])
    expect: list[Pick] | str | None = None  # devices, ERROR, NODE_ERROR, or None: no allocation
    features: tuple[str, ...] = ()
    allocated: list[tuple[str, str, str]] = field(default_factory=list)
    node: Obj = field(default_factory=lambda: node(NODE1, REGION1))
    error: str = ""  # upstream's message: ours must contain it when we report (not refuse) an error
    # Cases of 1.36's table for what 1.35 still does otherwise (the oracle's v0.35.10 agrees).
    version: str = "1.35"


def _allocated_claim(ids: list[tuple[str, str, str]]) -> Obj:
    results = [{"request": "r", "driver": d, "pool": p, "device": x} for d, p, x in ids]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "allocated-elsewhere", "namespace": "default"},
        "spec": {"devices": {"requests": [request("r", CLASS_A)]}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def explain_case(
    case: Case, *, version: str | None = None, features: dict[str, str] = _FEATURES, extra: tuple[Obj, ...] = ()
) -> Explanation | None:
    """``explain`` for the case's node, every gate set as the case's ``features`` say (``extra``:
    more cluster objects); None for input the API server would refuse (AllocatorInputError):
    upstream's allocator sees it only because its tests bypass validation."""
    version = version or case.version
    feature_gates = {gate: name in case.features for name, gate in features.items()}
    for gate, value in list(feature_gates.items()):
        try:
            gates.resolve(version, {gate: value})
        except AllocatorInputError:
            del feature_gates[gate]  # locked at this version (DRAAdminAccess from 1.36): upstream's Features is not
    cluster = [*case.classes, *case.slices, case.node]
    if case.allocated:
        cluster.append(_allocated_claim(case.allocated))
    cluster.extend(extra)
    try:
        return explain(
            case.claims,
            cluster,
            node=case.node["metadata"]["name"],
            kubernetes_version=version,
            feature_gates=feature_gates,
        )
    except AllocatorInputError:
        return None


def object_ref(obj: Obj) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def answer(case: Case, result: Explanation | None) -> list[Pick] | str | None:
    """An explanation in the form of ``Case.expect``."""
    if result is None:
        return ERROR
    if result.errors:
        assert not case.error or any(case.error in e for e in result.errors), result.errors
        return ERROR
    if not result.satisfiable:
        # No allocation is an answer only with its explanation: a report for every request of the
        # case's claims (an allocator that answers "no" without looking passes no case here).
        asked = {(object_ref(c), r["name"]) for c in case.claims for r in c["spec"]["devices"]["requests"]}
        reported = {(r.claim, r.request.split("/")[0]) for r in result.nodes[0].requests}
        assert asked <= reported, f"requests without a report: {sorted(asked - reported)}"
        if case.error and any(case.error in r for r in result.nodes[0].reasons):
            return NODE_ERROR
        return None
    return sorted((a.claim, a.request, a.driver, a.pool, a.device) for a in result.nodes[0].allocation)


def run(case: Case) -> list[Pick] | str | None:
    """What our allocator answers for the case's node, in the form of ``Case.expect``."""
    return answer(case, explain_case(case))


def case(name: str, c: Case, *marks: pytest.MarkDecorator) -> Any:
    return pytest.param(c, id=name, marks=marks)


ONE_SLICE_A = [rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1"))]
TWO_DEVICES_A = [rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1"), device("device-2"))]
SMALL, LARGE = device("device-1", {"memory": "1Gi"}), device("device-2", {"memory": "2Gi"})
ALL_VERSIONS = {"driverVersion": "1.0.0", "numa": 1, "stringAttribute": "stringAttributeValue", "boolAttribute": True}


def _two_with(attribute: str, first: Any, second: Any) -> list[Obj]:
    return [
        rslice(
            "slice-1",
            NODE1,
            POOL1,
            DRIVER_A,
            device("device-1", attributes={attribute: first}),
            device("device-2", attributes={attribute: second}),
        )
    ]


def _fa(*subs: Obj, name: str = "req-0") -> list[Obj]:
    return [claim(CLAIM0, prioritized(name, *subs))]


def _counters(name: str, count: int = 2, **counters: str) -> Obj:
    return rslice(name, NODE1, POOL1, DRIVER_A, count=count, counter_sets=[counter_set("counter-set-1", **counters)])


def _mem(dev_name: str, memory: str, *, from_counters: bool = True, **extra: Any) -> Obj:
    return device(dev_name, consumes=[("counter-set-1", {"memory": memory})], from_counters=from_counters, **extra)


# ----------------------------------------------------------------------------- basics, classes, pools

BASICS = [
    case("simple", Case([claim(CLAIM0, request("req-0", CLASS_A))], ONE_SLICE_A, expect=picks_a("req-0", "device-1"))),
    case(
        "other-node",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_B, device("device-1")),
                rslice("slice-2", NODE2, POOL2, DRIVER_A, device("device-1")),
            ],
            expect=picks_a("req-0", "device-1", pool=POOL2),
            node=node(NODE2, REGION2),
        ),
    ),
    case(
        "small-and-large",
        Case(
            [
                claim(
                    CLAIM0,
                    request("req-0", CLASS_A, 1, mem_at_least("1Gi")),
                    request("req-1", CLASS_A, 1, mem_at_least("2Gi")),
                )
            ],
            [rslice("slice-1", NODE1, POOL1, DRIVER_A, SMALL, LARGE)],
            expect=picks_a("req-0", "device-1") + picks_a("req-1", "device-2"),
        ),
    ),
    case(
        "small-and-large-backtrack-requests",
        Case(
            [
                claim(
                    CLAIM0,
                    request("req-0", CLASS_A, 1, mem_at_least("1Gi")),
                    request("req-1", CLASS_A, 1, mem_at_least("2Gi")),
                )
            ],
            [rslice("slice-1", NODE1, POOL1, DRIVER_A, LARGE, SMALL)],
            expect=picks_a("req-0", "device-1") + picks_a("req-1", "device-2"),
        ),
    ),
    case(
        "small-and-large-backtrack-claims",
        Case(
            [
                claim(CLAIM0, request("req-0", CLASS_A, 1, mem_at_least("1Gi"))),
                claim(CLAIM1, request("req-1", CLASS_A, 1, mem_at_least("2Gi"))),
            ],
            [rslice("slice-1", NODE1, POOL1, DRIVER_A, LARGE, SMALL)],
            expect=picks_a("req-0", "device-1") + picks_a("req-1", "device-2", claim_name=CLAIM1),
        ),
    ),
    case(
        "devices-split-across-different-slices",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, 2))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1")),
                rslice("slice-2", NODE1, POOL2, DRIVER_A, device("device-1")),
            ],
            expect=picks_a("req-0", "device-1") + picks_a("req-0", "device-1", pool=POOL2),
        ),
    ),
    case(
        "obsolete-slice",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice("slice-1-obsolete", NODE1, POOL1, DRIVER_A, device("device-1"), count=2),
                rslice("slice-1-obsolete", NODE1, POOL1, DRIVER_A, device("device-2"), count=2, generation=2),
            ],
            expect=None,
        ),
    ),
    case(
        "duplicate-slice",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1"), count=2),
                rslice("slice-1-2", NODE1, POOL1, DRIVER_A, device("device-1"), count=2),
            ],
            expect=NODE_ERROR,
            error="invalid resource pools were encountered",
        ),
    ),
    case("no-slices", Case([claim(CLAIM0, request("req-0", CLASS_A))], [], expect=None)),
    case(
        "not-enough-suitable-devices",
        Case([claim(CLAIM0, request("req-0", CLASS_A)), claim(CLAIM0, request("req-1", CLASS_A))], ONE_SLICE_A),
    ),
    # Upstream: "could not retrieve device class ..."; ours: PreFilter's "does not exist".
    case(
        "no-classes",
        Case([claim(CLAIM0, request("req-0", CLASS_A))], ONE_SLICE_A, classes=[], expect=ERROR),
    ),
    case(
        "unknown-class",
        Case([claim(CLAIM0, request("req-0", "unknown-class"))], ONE_SLICE_A, expect=ERROR),
    ),
    case("empty-class", Case([claim(CLAIM0, request("req-0", ""))], ONE_SLICE_A, expect=ERROR)),
    case(
        "several-different-drivers",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A)), claim(CLAIM0, request("req-0", CLASS_B))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1"), device("device-2")),
                rslice("slice-1", NODE1, POOL1, DRIVER_B, device("device-1")),
            ],
            classes=CLASSES_AB,
            expect=[*picks_a("req-0", "device-1"), pick(CLAIM0, "req-0", DRIVER_B, POOL1, "device-1")],
        ),
    ),
    case(
        "already-allocated-devices",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            ONE_SLICE_A,
            allocated=[(DRIVER_A, POOL1, "device-1"), (DRIVER_A, POOL1, "device-2")],
        ),
    ),
    case(
        "max-number-devices",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, MAX))],
            [rslice("slice-1", NODE1, POOL1, DRIVER_A, *devices(MAX))],
            expect=picks_a("req-0", *(f"device-{i}" for i in range(MAX))),
        ),
    ),
    case(
        "too-many-devices-single-request",
        Case([claim(CLAIM0, request("req-0", CLASS_A, 500))], expect=ERROR, error="exceeds the claim limit"),
    ),
    case(
        "too-many-devices-total",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, MAX), request("req-1", CLASS_A, 1))],
            [rslice("slice-1", NODE1, POOL1, DRIVER_A, *devices(MAX + 1))],
            expect=ERROR,
            error="exceeds the claim limit",
        ),
    ),
]

# ----------------------------------------------------------------------------- allocationMode All

ALL_MODE = [
    case(
        "all-devices-single",
        Case([claim(CLAIM0, all_request("req-0", CLASS_A))], ONE_SLICE_A, expect=picks_a("req-0", "device-1")),
    ),
    case(
        "all-devices-many",
        Case(
            [claim(CLAIM0, all_request("req-0", CLASS_A))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1")),
                rslice("slice-1", NODE1, POOL2, DRIVER_A, device("device-1")),
            ],
            expect=picks_a("req-0", "device-1") + picks_a("req-0", "device-1", pool=POOL2),
        ),
    ),
    case(
        # Upstream sets count 1 next to All (validation would refuse it); without it the
        # request still asks for all devices of an incomplete pool.
        "all-devices-of-the-incomplete-pool",
        Case(
            [claim(CLAIM0, all_request("req-0", CLASS_A))],
            [rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1"), count=2)],
            expect=ERROR,
            error="asks for all devices, but resource pool driver-a/pool-1 is currently being updated",
        ),
    ),
]
_A_PLUS_B = [
    rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1")),
    rslice("slice-1", NODE1, POOL1, DRIVER_B, device("device-1")),
]
_MANY_A_PLUS_B = [TWO_DEVICES_A[0], _A_PLUS_B[1]]
_ALL_A = claim(CLAIM0, all_request("req-0", CLASS_A))
_ONE_B = claim(CLAIM1, request("req-0", CLASS_B))
_B_PICK = [pick(CLAIM1, "req-0", DRIVER_B, POOL1, "device-1")]
ALL_MODE += [
    case(
        "all-devices-plus-another",
        Case([_ALL_A, _ONE_B], _A_PLUS_B, classes=CLASSES_AB, expect=picks_a("req-0", "device-1") + _B_PICK),
    ),
    case(
        "all-devices-plus-another-reversed",
        Case([_ONE_B, _ALL_A], _A_PLUS_B, classes=CLASSES_AB, expect=picks_a("req-0", "device-1") + _B_PICK),
    ),
    case(
        "all-devices-many-plus-another",
        Case(
            [_ALL_A, _ONE_B],
            _MANY_A_PLUS_B,
            classes=CLASSES_AB,
            expect=picks_a("req-0", "device-1", "device-2") + _B_PICK,
        ),
    ),
    case(
        "all-devices-many-plus-another-reversed",
        Case(
            [_ONE_B, _ALL_A],
            _MANY_A_PLUS_B,
            classes=CLASSES_AB,
            expect=picks_a("req-0", "device-1", "device-2") + _B_PICK,
        ),
    ),
    case("all-devices-no-solution", Case([claim(CLAIM1, request("req-0", CLASS_A)), _ALL_A], ONE_SLICE_A)),
    case("all-devices-no-solution-reversed", Case([_ALL_A, claim(CLAIM1, request("req-0", CLASS_A))], ONE_SLICE_A)),
    case("all-devices-slice-without-devices", Case([_ALL_A], [rslice("slice-1", NODE1, POOL1, DRIVER_A)])),
    case("all-devices-no-slices", Case([_ALL_A], [])),
    case("all-devices-some-allocated", Case([_ALL_A], TWO_DEVICES_A, allocated=[(DRIVER_A, POOL1, "device-1")])),
]

# ----------------------------------------------------------------------------- admin access

ADMIN = [
    case(
        "all-devices-some-allocated-admin-access",
        Case(
            [claim(CLAIM0, admin(all_request("req-0", CLASS_A)))],
            TWO_DEVICES_A,
            allocated=[(DRIVER_A, POOL1, "device-1")],
            features=("AdminAccess",),
            expect=picks_a("req-0", "device-1", "device-2"),
        ),
    ),
    case(
        "all-devices-some-allocating-admin-access",
        Case(
            [claim(CLAIM0, admin(request("req-0", CLASS_A)), admin(all_request("req-1", CLASS_A)))],
            TWO_DEVICES_A,
            features=("AdminAccess",),
        ),
    ),
    case(
        "count-devices-some-allocated-admin-access",
        Case(
            [claim(CLAIM0, admin(request("req-0", CLASS_A, 2)))],
            TWO_DEVICES_A,
            allocated=[(DRIVER_A, POOL1, "device-1")],
            features=("AdminAccess",),
            expect=picks_a("req-0", "device-1", "device-2"),
        ),
    ),
    case(
        "separate-claims-share-device-admin-access",
        Case(
            [claim(CLAIM0, admin(request("req-0", CLASS_A))), claim(CLAIM1, admin(request("req-0", CLASS_A)))],
            TWO_DEVICES_A,
            features=("AdminAccess",),
            expect=picks_a("req-0", "device-1") + picks_a("req-0", "device-1", claim_name=CLAIM1),
        ),
    ),
    case(
        "admin-access-claims-device-allocating-for-non-admin-access",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A)), claim(CLAIM1, admin(request("req-0", CLASS_A)))],
            TWO_DEVICES_A,
            features=("AdminAccess",),
            expect=picks_a("req-0", "device-1") + picks_a("req-0", "device-1", claim_name=CLAIM1),
        ),
    ),
    case(
        "admin-access-disabled",
        Case(
            [claim(CLAIM0, admin(request("req-0", CLASS_A)))],
            ONE_SLICE_A,
            expect=ERROR,
            error="admin access is requested, but the feature is disabled",
        ),
    ),
    case(
        "admin-access-enabled",
        Case(
            [claim(CLAIM0, admin(request("req-0", CLASS_A)))],
            ONE_SLICE_A,
            allocated=[(DRIVER_A, POOL1, "device-1"), (DRIVER_A, POOL1, "device-2")],
            features=("AdminAccess",),
            expect=picks_a("req-0", "device-1"),
        ),
    ),
]

# ----------------------------------------------------------------------------- node selection

NODES = [
    case(
        "network-attached-device",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [rslice("slice-1", label_selector("region", REGION1), POOL1, DRIVER_A, device("device-1"))],
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "unsuccessful-allocation-network-attached-device",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [rslice("slice-1", label_selector("region", REGION1), POOL1, DRIVER_A, device("device-1"))],
            node=node(NODE2, REGION2),
        ),
    ),
    case(
        "many-network-attached-devices",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, 4))],
            [
                rslice("slice-1", label_selector("region", REGION1), POOL1, DRIVER_A, device("device-1")),
                rslice("slice-1", ALL_NODES, POOL2, DRIVER_A, device("device-1")),
                rslice("slice-1", label_selector("planet", "earth"), POOL3, DRIVER_A, device("device-1")),
                rslice("slice-1", local_selector(NODE1), POOL4, DRIVER_A, device("device-1")),
            ],
            expect=[pick(CLAIM0, "req-0", DRIVER_A, p, "device-1") for p in (POOL1, POOL2, POOL3, POOL4)],
        ),
    ),
    case(
        "local-and-network-attached-devices",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, 2))],
            [
                rslice("slice-1", label_selector("region", REGION1), POOL1, DRIVER_A, device("device-1")),
                rslice("slice-1", NODE1, POOL2, DRIVER_A, device("device-1")),
            ],
            expect=picks_a("req-0", "device-1") + picks_a("req-0", "device-1", pool=POOL2),
        ),
    ),
]

# ----------------------------------------------------------------------------- constraints


def _with(attribute: str, first: Any, second: Any, *, count: int = 2, all_mode: bool = False) -> Case:
    req = all_request("req-0", CLASS_A) if all_mode else request("req-0", CLASS_A, count)
    return Case(
        [claim(CLAIM0, req, constraints=[match(attribute)])],
        _two_with(attribute, first, second),
        classes=CLASSES_AB,
        expect=ERROR if all_mode else None,
    )


CONSTRAINTS = [
    case(
        "with-constraint",
        Case(
            [
                claim(
                    CLAIM0,
                    request("req-0", CLASS_A),
                    request("req-1", CLASS_A),
                    constraints=[
                        match("numa"),
                        match("driverVersion"),
                        match("stringAttribute"),
                        match("boolAttribute"),
                    ],
                )
            ],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    device("device-1", attributes=ALL_VERSIONS),
                    device("device-2", attributes=ALL_VERSIONS),
                )
            ],
            expect=picks_a("req-0", "device-1") + picks_a("req-1", "device-2"),
        ),
    ),
    case(
        "with-constraint-non-existent-attribute",
        Case([claim(CLAIM0, request("req-0", CLASS_A), constraints=[match("NonExistentAttribute")])], ONE_SLICE_A),
    ),
    case("with-constraint-not-matching-int-attribute", _with("numa", 1, 2)),
    case(
        "with-constraint-not-matching-int-attribute-all-devices",
        Case(
            _with("numa", 1, 2, all_mode=True).claims,
            _two_with("numa", 1, 2),
            classes=CLASSES_AB,
            expect=ERROR,
            error="cannot add device driver-a/pool-1/device-2 because a claim constraint would not be satisfied",
        ),
    ),
    case(
        "with-constraint-not-matching-string-attribute",
        _with("stringAttribute", "stringAttributeValue", "stringAttributeValue2"),
    ),
    case("with-constraint-not-matching-bool-attribute", _with("boolAttribute", True, False)),
    case("with-constraint-not-matching-version-attribute", _with("driverVersion", "1.0.0", "2.0.0")),
    case(
        "with-constraint-for-request",
        Case(
            [
                claim(
                    CLAIM0,
                    request("req-0", CLASS_A),
                    request("req-1", CLASS_A),
                    constraints=[match("driverVersion", "req-0")],
                )
            ],
            _two_with("driverVersion", "1.0.0", "2.0.0"),
            classes=CLASSES_AB,
            expect=picks_a("req-0", "device-1") + picks_a("req-1", "device-2"),
        ),
    ),
    case(
        "with-constraint-for-request-retry",
        Case(
            [
                claim(
                    CLAIM0,
                    request("req-0", CLASS_A),
                    request("req-1", CLASS_A),
                    constraints=[match("driverVersion", "req-0"), match("stringAttribute")],
                )
            ],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    device("device-1", attributes={"driverVersion": "1.0.0", "stringAttribute": "a"}),
                    device("device-2", attributes={"driverVersion": "2.0.0", "stringAttribute": "b"}),
                    device("device-3", attributes={"driverVersion": "3.0.0", "stringAttribute": "b"}),
                )
            ],
            classes=CLASSES_AB,
            expect=picks_a("req-0", "device-2") + picks_a("req-1", "device-3"),
        ),
    ),
]

# ----------------------------------------------------------------------------- config, invalid input

_CONFIG_A = {"opaque": {"driver": DRIVER_A, "parameters": {"deviceAttribute": "deviceAttributeValue"}}}
INPUT = [
    case(
        "with-class-device-config",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            ONE_SLICE_A,
            classes=[
                {
                    **klass(CLASS_A, DRIVER_A),
                    "spec": {
                        "selectors": [cel(f'device.driver == "{DRIVER_A}"')],
                        "config": [{"opaque": {"driver": DRIVER_A, "parameters": {"classAttribute": "v"}}}],
                    },
                }
            ],
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "claim-with-device-config",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A), config=[_CONFIG_A])],
            ONE_SLICE_A,
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "unknown-selector",
        Case([claim(CLAIM0, request("req-0", CLASS_A, 1, {}))], ONE_SLICE_A, expect=ERROR),
    ),
    case(
        "unknown-allocation-mode",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, 1, allocationMode="future-mode"))],
            ONE_SLICE_A,
            expect=ERROR,
        ),
    ),
    case(
        "unknown-constraint",
        Case([claim(CLAIM0, request("req-0", CLASS_A), constraints=[{}])], ONE_SLICE_A, expect=ERROR),
    ),
    case(
        "invalid-CEL-one-device",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, 1, cel("noSuchVar")))],
            ONE_SLICE_A,
            expect=ERROR,
            error="undeclared reference",
        ),
    ),
    case(
        "invalid-CEL-one-device-class",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            ONE_SLICE_A,
            classes=[klass(CLASS_A, DRIVER_A, "noSuchVar")],
            expect=ERROR,
        ),
    ),
    case(
        "invalid-CEL-all-devices",
        Case([claim(CLAIM0, all_request("req-0", CLASS_A, cel("noSuchVar")))], ONE_SLICE_A, expect=ERROR),
    ),
]

# ----------------------------------------------------------------------------- firstAvailable

PL = ("PrioritizedList",)
_ALL_FIRST = subreq("subReq-0", CLASS_A, mode="All")
PRIORITIZED = [
    case(
        "all-devices-slice-without-devices-prioritized-list",
        Case(
            _fa(subreq("subReq-0", CLASS_A, mode="All"), subreq("subReq-1", CLASS_B)),
            [rslice("slice-1", NODE1, POOL1, DRIVER_A), rslice("slice-2", NODE1, POOL2, DRIVER_B, device("device-1"))],
            classes=CLASSES_AB,
            features=PL,
            expect=[pick(CLAIM0, "req-0/subReq-1", DRIVER_B, POOL2, "device-1")],
        ),
    ),
    case(
        "all-devices-no-slices-prioritized-list",
        Case(
            _fa(subreq("subReq-0", CLASS_A, mode="All"), subreq("subReq-1", CLASS_B)),
            [rslice("slice-2", NODE1, POOL2, DRIVER_B, device("device-1"))],
            classes=CLASSES_AB,
            features=PL,
            expect=[pick(CLAIM0, "req-0/subReq-1", DRIVER_B, POOL2, "device-1")],
        ),
    ),
    case(
        "all-devices-some-allocated-prioritized-list",
        Case(
            _fa(subreq("subReq-0", CLASS_A, mode="All"), subreq("subReq-1", CLASS_B)),
            [TWO_DEVICES_A[0], rslice("slice-2", NODE1, POOL2, DRIVER_B, device("device-1"))],
            classes=CLASSES_AB,
            allocated=[(DRIVER_A, POOL1, "device-1")],
            features=PL,
            expect=[pick(CLAIM0, "req-0/subReq-1", DRIVER_B, POOL2, "device-1")],
        ),
    ),
    case(
        "prioritized-list-first-unavailable",
        Case(
            _fa(subreq("subReq-0", CLASS_B), subreq("subReq-1", CLASS_A)),
            ONE_SLICE_A,
            classes=CLASSES_AB,
            features=PL,
            expect=picks_a("req-0/subReq-1", "device-1"),
        ),
    ),
    case(
        "prioritized-list-non-available",
        Case(
            _fa(subreq("subReq-0", CLASS_B, 2), subreq("subReq-1", CLASS_A, 2)),
            [ONE_SLICE_A[0], rslice("slice-2", NODE1, POOL2, DRIVER_B, device("device-1"))],
            classes=CLASSES_AB,
            features=PL,
        ),
    ),
    case(
        "prioritized-list-device-config",
        Case(
            [
                claim(
                    CLAIM0,
                    prioritized("req-0", subreq("subReq-0", CLASS_A), subreq("subReq-1", CLASS_B, 2)),
                    config=[
                        {"requests": ["req-0/subReq-0"], "opaque": {"driver": DRIVER_A, "parameters": {"foo": "x"}}},
                        {"requests": ["req-0/subReq-1"], "opaque": {"driver": DRIVER_B, "parameters": {"bar": "x"}}},
                    ],
                )
            ],
            [rslice("slice-1", NODE1, POOL1, DRIVER_B, device("device-1"), device("device-2"))],
            classes=CLASSES_AB,
            features=PL,
            expect=[pick(CLAIM0, "req-0/subReq-1", DRIVER_B, POOL1, d) for d in ("device-1", "device-2")],
        ),
    ),
    case(
        "prioritized-list-subrequests-with-expressions",
        Case(
            [
                claim(
                    CLAIM0,
                    request("req-0", CLASS_A, 1, mem_at_least("1Gi")),
                    prioritized(
                        "req-1",
                        subreq("subReq-0", CLASS_A, 1, mem_at_least("4Gi")),
                        subreq("subReq-1", CLASS_A, 2, mem_at_least("2Gi")),
                    ),
                )
            ],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    device("device-1", {"memory": "2Gi"}),
                    device("device-2", {"memory": "2Gi"}),
                    device("device-3", {"memory": "1Gi"}),
                )
            ],
            features=PL,
            expect=picks_a("req-0", "device-3") + picks_a("req-1/subReq-1", "device-1", "device-2"),
        ),
    ),
]
_VERSIONED = [
    rslice(
        "slice-1",
        NODE1,
        POOL1,
        DRIVER_A,
        device("device-1", {"memory": "8Gi"}, {"driverVersion": "1.0.0"}),
    ),
]
_FA_8_2_1 = (
    request("req-0", CLASS_A, 1, mem_at_least("8Gi")),
    prioritized(
        "req-1",
        subreq("subReq-0", CLASS_A, 1, mem_at_least("2Gi")),
        subreq("subReq-1", CLASS_A, 1, mem_at_least("1Gi")),
    ),
)
_8GI_4GI = [
    rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1", {"memory": "8Gi"})),
    rslice("slice-2", NODE1, POOL2, DRIVER_A, device("device-2", {"memory": "4Gi"})),
]
PRIORITIZED += [
    case(
        "prioritized-list-subrequests-with-constraints-ref-parent-request",
        Case(
            [claim(CLAIM0, *_FA_8_2_1, constraints=[match("driverVersion", "req-0", "req-1")])],
            [
                *_VERSIONED,
                rslice(
                    "slice-2",
                    NODE1,
                    POOL2,
                    DRIVER_A,
                    device("device-2", {"memory": "2Gi"}, {"driverVersion": "2.0.0"}),
                    device("device-3", {"memory": "1Gi"}, {"driverVersion": "1.0.0"}),
                ),
            ],
            features=PL,
            expect=picks_a("req-0", "device-1") + picks_a("req-1/subReq-1", "device-3", pool=POOL2),
        ),
    ),
    case(
        "prioritized-list-subrequests-with-constraints-ref-sub-request",
        Case(
            [claim(CLAIM0, *_FA_8_2_1, constraints=[match("driverVersion", "req-0", "req-1/subReq-0")])],
            [
                *_VERSIONED,
                rslice(
                    "slice-2", NODE1, POOL2, DRIVER_A, device("device-2", {"memory": "2Gi"}, {"driverVersion": "2.0.0"})
                ),
            ],
            features=PL,
            expect=picks_a("req-0", "device-1") + picks_a("req-1/subReq-1", "device-2", pool=POOL2),
        ),
    ),
    case(
        "prioritized-list-subrequests-with-allocation-mode-all",
        Case(
            _fa(_ALL_FIRST, subreq("subReq-1", CLASS_A)),
            TWO_DEVICES_A,
            allocated=[(DRIVER_A, POOL1, "device-1")],
            features=PL,
            expect=picks_a("req-0/subReq-1", "device-2"),
        ),
    ),
    case(
        "prioritized-list-allocation-mode-all-multiple-requests",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A), prioritized("req-1", _ALL_FIRST, subreq("subReq-1", CLASS_A)))],
            TWO_DEVICES_A,
            features=PL,
            expect=picks_a("req-0", "device-1") + picks_a("req-1/subReq-1", "device-2"),
        ),
    ),
    case(
        "prioritized-list-disabled",
        Case(
            _fa(subreq("subReq-0", CLASS_A)),
            ONE_SLICE_A,
            expect=ERROR,
            error="has subrequests, but the DRAPrioritizedList feature is disabled",
        ),
    ),
    case(
        "prioritized-list-multi-request",
        Case(
            [
                claim(
                    CLAIM0,
                    request("req-1", CLASS_A, 1, mem_at_least("8Gi")),
                    prioritized(
                        "req-0",
                        subreq("subReq-0", CLASS_A, 1, mem_at_least("8Gi")),
                        subreq("subReq-1", CLASS_A, 1, mem_at_least("4Gi")),
                    ),
                )
            ],
            _8GI_4GI,
            features=PL,
            expect=picks_a("req-1", "device-1") + picks_a("req-0/subReq-1", "device-2", pool=POOL2),
        ),
    ),
    case(
        "prioritized-list-with-backtracking",
        Case(
            [
                claim(
                    CLAIM0,
                    prioritized(
                        "req-0",
                        subreq("subReq-0", CLASS_A, 1, mem_at_least("8Gi")),
                        subreq("subReq-1", CLASS_A, 1, mem_at_least("4Gi")),
                    ),
                    request("req-1", CLASS_A, 1, mem_at_least("8Gi")),
                )
            ],
            _8GI_4GI,
            features=PL,
            expect=picks_a("req-0/subReq-1", "device-2", pool=POOL2) + picks_a("req-1", "device-1"),
        ),
    ),
    case(
        "prioritized-list-too-many-in-first-subrequest",
        Case(
            _fa(subreq("subReq-0", CLASS_B, 500), subreq("subReq-1", CLASS_A)),
            ONE_SLICE_A,
            classes=CLASSES_AB,
            features=PL,
            expect=picks_a("req-0/subReq-1", "device-1"),
        ),
    ),
    case(
        "prioritized-list-allocation-mode-all",
        Case(
            _fa(_ALL_FIRST, subreq("subReq-1", CLASS_A)),
            TWO_DEVICES_A,
            allocated=[(DRIVER_A, POOL1, "device-2")],
            features=PL,
            expect=picks_a("req-0/subReq-1", "device-1"),
        ),
    ),
]
_GEN6 = cel(f'device.attributes["{DRIVER_A}"].generation == "v6"')
_GEN5 = cel(f'device.attributes["{DRIVER_A}"].generation == "v5"')
_ALL_V6_THEN_V5 = _fa(
    subreq("subReq-0", CLASS_A, None, _GEN6, mode="All"), subreq("subReq-1", CLASS_A, None, _GEN5, mode="All")
)
PRIORITIZED += [
    case(
        "prioritized-list-allocation-mode-all-with-selectors",
        Case(
            _ALL_V6_THEN_V5,
            [rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1", attributes={"generation": "v5"}))],
            features=PL,
            version="1.36",
            expect=picks_a("req-0/subReq-1", "device-1"),
        ),
    ),
    case(
        "prioritized-list-allocation-mode-all-with-selectors-multiple-pools",
        Case(
            _ALL_V6_THEN_V5,
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1", attributes={"generation": "v5"})),
                rslice("slice-2", NODE1, POOL2, DRIVER_A, device("device-1", attributes={"generation": "v5"})),
            ],
            features=PL,
            version="1.36",
            expect=picks_a("req-0/subReq-1", "device-1") + picks_a("req-0/subReq-1", "device-1", pool=POOL2),
        ),
    ),
    case(
        "prioritized-list-allocation-mode-all-with-selectors-multiple-pools-across-nodes",
        Case(
            _ALL_V6_THEN_V5,
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1", attributes={"generation": "v5"})),
                rslice(
                    "slice-2",
                    NODE2,
                    POOL2,
                    DRIVER_A,
                    device("device-1", attributes={"generation": "v5"}),
                    device("device-2", attributes={"generation": "v6"}),
                ),
            ],
            features=PL,
            version="1.36",
            expect=picks_a("req-0/subReq-1", "device-1"),
        ),
    ),
    case(
        "prioritized-list-allocation-mode-all-with-selectors-deviceclass-subset",
        Case(
            _ALL_V6_THEN_V5,
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    device("device-1", attributes={"generation": "v6", "selected": False}),
                    device("device-2", attributes={"generation": "v5", "selected": False}),
                    device("device-3", attributes={"generation": "v5", "selected": True}),
                )
            ],
            classes=[
                klass(CLASS_A, DRIVER_A, f'device.driver == "{DRIVER_A}" && device.attributes["{DRIVER_A}"].selected')
            ],
            features=PL,
            version="1.36",
            expect=picks_a("req-0/subReq-1", "device-3"),
        ),
    ),
    case(
        "prioritized-list-max-allocation-limit-request",
        Case(
            [
                claim(
                    CLAIM0,
                    prioritized("req-0", subreq("subReq-0", CLASS_A, MAX), subreq("subReq-1", CLASS_A, MAX // 2)),
                    prioritized("req-1", subreq("subReq-0", CLASS_A, MAX), subreq("subReq-1", CLASS_A, MAX // 2)),
                )
            ],
            [rslice("slice-1", NODE1, POOL1, DRIVER_A, *devices(2 * MAX))],
            features=PL,
            expect=picks_a("req-0/subReq-1", *(f"device-{i}" for i in range(MAX // 2)))
            + picks_a("req-1/subReq-1", *(f"device-{i}" for i in range(MAX // 2, MAX))),
        ),
    ),
]

# ----------------------------------------------------------------------------- partitionable devices

PD = ("PartitionableDevices",)
PD_PL = ("PartitionableDevices", "PrioritizedList")
_D1_D2_D3_4_6_4 = rslice(
    "slice-1",
    NODE1,
    POOL1,
    DRIVER_A,
    _mem("device-1", "4Gi"),
    _mem("device-2", "6Gi"),
    _mem("device-3", "4Gi"),
    count=2,
)
_FA_6_4 = prioritized(
    "req-1",
    subreq("subReq-0", CLASS_A, 1, mem_at_least("6Gi")),
    subreq("subReq-1", CLASS_A, 1, mem_at_least("4Gi")),
)


def _cpu_mem(dev_name: str, *sets: tuple[str, dict[str, str]]) -> Obj:
    return device(dev_name, consumes=list(sets), from_counters=True)


PARTITIONABLE = [
    case(
        "partitionable-devices-single-device",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, _mem("device-1", "4Gi", from_counters=False), count=2),
                _counters("slice-2", memory="8Gi"),
            ],
            features=PD,
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "partitionable-devices-prioritized-list",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A), _FA_6_4)],
            [_D1_D2_D3_4_6_4, _counters("slice-2", memory="8Gi")],
            features=PD_PL,
            expect=picks_a("req-0", "device-1") + picks_a("req-1/subReq-1", "device-3"),
        ),
    ),
    case(
        "partitionable-devices-multiple-devices",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A), request("req-1", CLASS_A))],
            [_D1_D2_D3_4_6_4, _counters("slice-2", memory="8Gi")],
            features=PD,
            expect=picks_a("req-0", "device-1") + picks_a("req-1", "device-3"),
        ),
    ),
    case(
        "partitionable-devices-multiple-capacity-pools",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A), _FA_6_4)],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    _cpu_mem("device-1", ("counter-set-1", {"memory": "4Gi"}), ("counter-set-2", {"cpus": "4"})),
                    _cpu_mem("device-2", ("counter-set-1", {"memory": "6Gi"}), ("counter-set-2", {"cpus": "6"})),
                    _cpu_mem("device-3", ("counter-set-1", {"memory": "4Gi"}), ("counter-set-2", {"cpus": "4"})),
                    count=2,
                ),
                rslice(
                    "slice-2",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    count=2,
                    counter_sets=[counter_set("counter-set-1", memory="18Gi"), counter_set("counter-set-2", cpus="8")],
                ),
            ],
            features=PD_PL,
            expect=picks_a("req-0", "device-1") + picks_a("req-1/subReq-1", "device-3"),
        ),
    ),
    case(
        "partitionable-devices-multiple-counters",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A), request("req-1", CLASS_A))],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    _cpu_mem(
                        "device-1",
                        ("counter-set-1", {"memory": "4Gi", "cpus": "6"}),
                        ("counter-set-2", {"cpus": "4", "memory": "2Gi"}),
                    ),
                    _cpu_mem(
                        "device-2",
                        ("counter-set-1", {"memory": "6Gi", "cpus": "4"}),
                        ("counter-set-2", {"cpus": "6", "memory": "6Gi"}),
                    ),
                    _cpu_mem(
                        "device-3",
                        ("counter-set-1", {"memory": "4Gi", "cpus": "4"}),
                        ("counter-set-2", {"cpus": "4", "memory": "4Gi"}),
                    ),
                    count=2,
                ),
                rslice(
                    "slice-2",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    count=2,
                    counter_sets=[
                        counter_set("counter-set-1", cpus="8", memory="18Gi"),
                        counter_set("counter-set-2", cpus="12", memory="18Gi"),
                    ],
                ),
            ],
            features=PD,
            expect=picks_a("req-0", "device-2") + picks_a("req-1", "device-3"),
        ),
    ),
    case(
        "partitionable-devices-multiple-pools",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A), request("req-1", CLASS_A))],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    _cpu_mem("device-1", ("counter-set-1", {"cpus": "6", "memory": "4Gi"})),
                    _cpu_mem("device-2", ("counter-set-1", {"cpus": "4", "memory": "6Gi"})),
                    _cpu_mem("device-3", ("counter-set-1", {"cpus": "4", "memory": "4Gi"})),
                    count=2,
                ),
                _counters("slice-2", cpus="8", memory="18Gi"),
                rslice(
                    "slice-3",
                    NODE1,
                    POOL2,
                    DRIVER_A,
                    _cpu_mem("device-1", ("counter-set-1", {"cpus": "6", "memory": "4Gi"})),
                    _cpu_mem("device-2", ("counter-set-1", {"cpus": "1", "memory": "7Gi"})),
                    _cpu_mem("device-3", ("counter-set-1", {"cpus": "1", "memory": "7Gi"})),
                    count=2,
                ),
                rslice(
                    "slice-4",
                    NODE1,
                    POOL2,
                    DRIVER_A,
                    count=2,
                    counter_sets=[counter_set("counter-set-1", cpus="8", memory="18Gi")],
                ),
            ],
            allocated=[(DRIVER_A, POOL1, "device-2"), (DRIVER_A, POOL1, "device-3"), (DRIVER_A, POOL2, "device-1")],
            features=PD,
            expect=picks_a("req-0", "device-2", pool=POOL2) + picks_a("req-1", "device-3", pool=POOL2),
        ),
    ),
    case(
        "partitionable-devices-unused-counters-in-counter-set",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, 2))],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    _mem("device-1", "5Gi", from_counters=False),
                    _mem("device-2", "4Gi", from_counters=False),
                    _mem("device-3", "4Gi", from_counters=False),
                    count=2,
                ),
                _counters("slice-2", memory="8Gi", unused="1Gi"),
            ],
            features=PD,
            expect=picks_a("req-0", "device-2", "device-3"),
        ),
    ),
    case(
        "partitionable-devices-no-capacity-available",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, _mem("device-1", "4Gi"), _mem("device-2", "16Gi")),
                _counters("slice-2", count=1, memory="18Gi"),
            ],
            allocated=[(DRIVER_A, POOL1, "device-2")],
            features=PD,
        ),
    ),
    case(
        "partitionable-devices-overallocated-capacity-pool",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, _mem("device-1", "4Gi"), _mem("device-2", "20Gi")),
                _counters("slice-2", count=1, memory="18Gi"),
            ],
            allocated=[(DRIVER_A, POOL1, "device-2")],
            features=PD,
        ),
    ),
    case(
        "partitionable-devices-disabled-device-consumes-counters",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, _mem("device-1", "4Gi", from_counters=False)),
                _counters("slice-2", count=1, memory="18Gi"),
            ],
        ),
    ),
    case(
        # GatherPools skips only perDeviceNodeSelection slices with the gate off; the counter
        # set's slice still counts for the pool's completeness.
        "partitionable-devices-disabled-other-device-do-not-consume-counters",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    _mem("device-1", "4Gi", from_counters=False),
                    device("device-2"),
                    count=2,
                ),
                _counters("slice-2", memory="18Gi"),
            ],
            expect=picks_a("req-0", "device-2"),
        ),
    ),
    case(
        "partitionable-devices-disabled-per-device-node-selection",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [rslice("slice-1", PER_DEVICE, POOL1, DRIVER_A, device("device-2", nodeName=NODE1))],
        ),
    ),
    case(
        "partitionable-devices-per-device-node-selection-nodename",
        Case(
            _fa(
                subreq("subReq-0", CLASS_A, 1, mem_at_least("6Gi")),
                subreq("subReq-1", CLASS_A, 1, mem_at_least("4Gi")),
            ),
            [
                rslice(
                    "slice-1",
                    PER_DEVICE,
                    POOL1,
                    DRIVER_A,
                    _mem("device-1", "4Gi", nodeName=NODE1),
                    _mem("device-2", "6Gi", nodeName=NODE2),
                    count=2,
                ),
                rslice(
                    "slice-2",
                    PER_DEVICE,
                    POOL1,
                    DRIVER_A,
                    count=2,
                    counter_sets=[counter_set("counter-set-1", memory="18Gi")],
                ),
            ],
            features=PD_PL,
            expect=picks_a("req-0/subReq-1", "device-1"),
        ),
    ),
    case(
        "partitionable-devices-per-device-node-selection-node-selector",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice(
                    "slice-1",
                    PER_DEVICE,
                    POOL1,
                    DRIVER_A,
                    _mem("device-1", "4Gi", nodeSelector=label_selector("region", REGION1)),
                    count=2,
                ),
                rslice(
                    "slice-2",
                    PER_DEVICE,
                    POOL1,
                    DRIVER_A,
                    count=2,
                    counter_sets=[counter_set("counter-set-1", memory="18Gi")],
                ),
            ],
            features=PD_PL,
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "partitionable-devices-per-device-node-selection-node-selector-multiple-devices",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, 3), request("req-1", CLASS_B, 3))],
            [
                rslice(
                    "slice-1",
                    PER_DEVICE,
                    POOL1,
                    DRIVER_A,
                    _mem("device-1", "4Gi", nodeSelector=label_selector("region", REGION1)),
                    _mem("device-2", "4Gi", nodeName=NODE1),
                    _mem("device-3", "4Gi", allNodes=True),
                    count=2,
                ),
                rslice(
                    "slice-2",
                    PER_DEVICE,
                    POOL1,
                    DRIVER_A,
                    count=2,
                    counter_sets=[counter_set("counter-set-1", memory="18Gi")],
                ),
                rslice(
                    "slice-3",
                    NODE1,
                    POOL2,
                    DRIVER_B,
                    *(
                        device(f"device-{i}", consumes=[("counter-set-2", {"memory": "4Gi"})], from_counters=True)
                        for i in (1, 2, 3)
                    ),
                    count=2,
                ),
                rslice(
                    "slice-4",
                    NODE1,
                    POOL2,
                    DRIVER_B,
                    count=2,
                    counter_sets=[counter_set("counter-set-2", memory="12Gi")],
                ),
            ],
            classes=CLASSES_AB,
            features=PD_PL,
            expect=picks_a("req-0", "device-1", "device-2", "device-3")
            + [pick(CLAIM0, "req-1", DRIVER_B, POOL2, f"device-{i}") for i in (1, 2, 3)],
        ),
    ),
    case(
        "partitionable-devices-with-attribute-selector",
        Case(
            [
                claim(
                    CLAIM0,
                    request("req-0", CLASS_A, 2),
                    request("req-1", CLASS_A, 1, cel(f'device.attributes["{DRIVER_A}"].special')),
                )
            ],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    *(
                        device(
                            f"device-{i}",
                            attributes={"special": i == 1},
                            consumes=[("counter-set-1", {f"cpu{i}": "1"}), ("counter-set-2", {"mem": "10Gi"})],
                        )
                        for i in (1, 2, 3)
                    ),
                    count=2,
                ),
                rslice(
                    "slice-2",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    count=2,
                    counter_sets=[
                        counter_set("counter-set-1", cpu1="1", cpu2="1", cpu3="1"),
                        counter_set("counter-set-2", mem="30Gi"),
                    ],
                ),
            ],
            features=PD,
            expect=picks_a("req-0", "device-2", "device-3") + picks_a("req-1", "device-1"),
        ),
    ),
]

# ----------------------------------------------------------------------------- device taints

DT = ("DeviceTaints",)
_TAINTED_TWO = [
    rslice(
        "slice-1",
        NODE1,
        POOL1,
        DRIVER_A,
        device("device-1", taints=[TAINT_NO_SCHEDULE]),
        device("device-2", taints=[TAINT_NO_EXECUTE]),
    )
]
_TAINTED_BOTH = [
    rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1", taints=[TAINT_NO_SCHEDULE, TAINT_NO_EXECUTE]))
]
_TAINTED_ONE = [rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1", taints=[TAINT_NO_SCHEDULE]))]
TAINTS = [
    case("tainted-two-devices", Case([claim(CLAIM0, request("req-0", CLASS_A))], _TAINTED_TWO, features=DT)),
    case("tainted-one-device-two-taints", Case([claim(CLAIM0, request("req-0", CLASS_A))], _TAINTED_BOTH, features=DT)),
    case(
        "tainted-two-devices-tolerated",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, tolerations=[TOLERATE_NO_EXECUTE]))],
            _TAINTED_TWO,
            features=DT,
            expect=picks_a("req-0", "device-2"),
        ),
    ),
    case(
        "tainted-two-devices-prioritized-list-tolerated",
        Case(
            _fa(subreq("subReq-0", CLASS_A), subreq("subReq-1", CLASS_A, tolerations=[TOLERATE_NO_EXECUTE])),
            _TAINTED_TWO,
            features=("DeviceTaints", "PrioritizedList"),
            expect=picks_a("req-0/subReq-1", "device-2"),
        ),
    ),
    case(
        "tainted-no-effect",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1", taints=[TAINT_NONE]))],
            features=DT,
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "tainted-one-device-two-taints-both-tolerated",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, tolerations=[TOLERATE_NO_SCHEDULE, TOLERATE_NO_EXECUTE]))],
            _TAINTED_BOTH,
            features=DT,
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "tainted-disabled",
        Case([claim(CLAIM0, request("req-0", CLASS_A))], _TAINTED_BOTH, expect=picks_a("req-0", "device-1")),
    ),
    case(
        "tainted-prioritized-list",
        Case(
            _fa(subreq("subReq-0", CLASS_B), subreq("subReq-1", CLASS_A)),
            _TAINTED_ONE,
            classes=CLASSES_AB,
            features=("DeviceTaints", "PrioritizedList"),
        ),
    ),
    case(
        "tainted-prioritized-list-disabled",
        Case(
            _fa(subreq("subReq-0", CLASS_B), subreq("subReq-1", CLASS_A)),
            _TAINTED_ONE,
            classes=CLASSES_AB,
            features=PL,
            expect=picks_a("req-0/subReq-1", "device-1"),
        ),
    ),
    case(
        "tainted-admin-access",
        Case(
            [claim(CLAIM0, admin(request("req-0", CLASS_A)))],
            _TAINTED_ONE,
            allocated=[(DRIVER_A, POOL1, "device-1"), (DRIVER_A, POOL1, "device-2")],
            features=("DeviceTaints", "AdminAccess"),
        ),
    ),
    case(
        "tainted-admin-access-disabled",
        Case(
            [claim(CLAIM0, admin(request("req-0", CLASS_A)))],
            _TAINTED_ONE,
            allocated=[(DRIVER_A, POOL1, "device-1"), (DRIVER_A, POOL1, "device-2")],
            features=("AdminAccess",),
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case("tainted-all-devices-single", Case([claim(CLAIM0, all_request("req-0", CLASS_A))], _TAINTED_ONE, features=DT)),
    case(
        "tainted-all-devices-single-disabled",
        Case([claim(CLAIM0, all_request("req-0", CLASS_A))], _TAINTED_ONE, expect=picks_a("req-0", "device-1")),
    ),
]

# ----------------------------------------------------------------------------- consumable capacity

CC = ("ConsumableCapacity",)
_MULTI_CLASS = [klass(CLASS_A, DRIVER_A, f'device.driver == "{DRIVER_A}" && device.allowMultipleAllocations == true')]


def _cap_request(name: str, quantity: str | None = None, cls: str = CLASS_A) -> Obj:
    req = request(name, cls)
    if quantity is not None:
        req["exactly"]["capacity"] = {"requests": {"capacity-0": quantity}}
    return req


def _multi(name: str, capacity: dict[str, Obj] | None = None) -> Obj:
    out: Obj = {"name": name, "allowMultipleAllocations": True}
    if capacity:
        out["capacity"] = capacity
    return out


def _range(value: str) -> dict[str, Obj]:
    policy = {"default": "2", "validRange": {"min": "2", "step": "2", "max": "4"}}
    return {"capacity-0": {"value": value, "requestPolicy": policy}}


def _one_multi(*devs: Obj) -> list[Obj]:
    return [rslice("slice-1", NODE1, POOL1, DRIVER_A, *devs)]


def _two_claims(quantity0: str | None = None, quantity1: str | None = None) -> list[Obj]:
    return [claim(CLAIM0, _cap_request("req-0", quantity0)), claim(CLAIM1, _cap_request("req-0", quantity1))]


_BOTH_DEVICE_1 = picks_a("req-0", "device-1") + picks_a("req-0", "device-1", claim_name=CLAIM1)
CONSUMABLE = [
    case(
        "consumable-capacity-multi-allocatable-device-with-missing-capacity-request",
        Case(
            [claim(CLAIM0, _cap_request("req-0", "1"))],
            _one_multi(_multi("device-1", {"capacity-1": {"value": "1"}})),
            features=CC,
        ),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-without-capacity-without-capacity-request",
        Case(_two_claims(), _one_multi(_multi("device-1")), classes=_MULTI_CLASS, features=CC, expect=_BOTH_DEVICE_1),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request",
        Case(
            _two_claims(),
            _one_multi(
                _multi("device-1", {"capacity-0": {"value": "1"}}), _multi("device-2", {"capacity-0": {"value": "1"}})
            ),
            classes=_MULTI_CLASS,
            features=CC,
            expect=picks_a("req-0", "device-1") + picks_a("req-0", "device-2", claim_name=CLAIM1),
        ),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request-block",
        Case(
            _two_claims(),
            _one_multi(_multi("device-1", {"capacity-0": {"value": "2"}})),
            classes=_MULTI_CLASS,
            features=CC,
        ),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-without-policy-with-capacity-request",
        Case(
            _two_claims("1", "1"),
            _one_multi(_multi("device-1", {"capacity-0": {"value": "2"}})),
            classes=_MULTI_CLASS,
            features=CC,
            expect=_BOTH_DEVICE_1,
        ),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-with-policy-without-capacity-request",
        Case(
            _two_claims(),
            _one_multi(_multi("device-1", _range("4"))),
            classes=_MULTI_CLASS,
            features=CC,
            expect=_BOTH_DEVICE_1,
        ),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-with-range-policy-step",
        Case(
            [claim(CLAIM0, _cap_request("req-0", "3"))],
            _one_multi(_multi("device-1", _range("4"))),
            classes=_MULTI_CLASS,
            features=CC,
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-with-request-over-max-sharing-policy",
        Case(
            [claim(CLAIM0, _cap_request("req-0", "6"))],
            _one_multi(_multi("device-1", _range("10"))),
            classes=_MULTI_CLASS,
            features=CC,
        ),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request",
        Case(
            _two_claims("1", "2"),
            _one_multi(_multi("device-1", _range("2"))),
            classes=_MULTI_CLASS,
            features=CC,
        ),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-violates-zero-request-policy",
        Case(
            [claim(CLAIM0, _cap_request("req-0", "1"))],
            _one_multi(
                _multi(
                    "device-1", {"capacity-0": {"value": "1", "requestPolicy": {"default": "0", "validValues": ["0"]}}}
                )
            ),
            classes=_MULTI_CLASS,
            features=CC,
        ),
    ),
]

# ----------------------------------------------------------------------------- distinctAttribute


def distinct(attribute: str, *requests: str) -> Obj:
    out: Obj = {"distinctAttribute": f"{DRIVER_A}/{attribute}"}
    if requests:
        out["requests"] = list(requests)
    return out


def _multi_with(name: str, attributes: dict[str, Any], capacity: dict[str, Obj] | None = None) -> Obj:
    out = _multi(name, capacity)
    out["attributes"] = {k: _attribute(v) for k, v in attributes.items()}
    return out


_BOOL_SELECTOR = cel(f'device.attributes["{DRIVER_A}"].boolAttribute')
DISTINCT = [
    case(
        "with-distinct-constraints",
        Case(
            [
                claim(
                    CLAIM0,
                    *(request(f"req-{i}", CLASS_A) for i in range(4)),
                    constraints=[
                        distinct("boolAttribute", "req-0", "req-1"),
                        distinct("driverVersion", "req-0", "req-1", "req-2"),
                        distinct("numa", "req-0", "req-1", "req-2", "req-3"),
                    ],
                )
            ],
            _one_multi(
                _multi_with("device-1", {"driverVersion": "1.0.0", "numa": 0, "boolAttribute": True}),
                _multi_with("device-2", {"driverVersion": "1.0.1", "numa": 1, "boolAttribute": False}),
                _multi_with("device-3", {"driverVersion": "1.0.2", "numa": 2, "boolAttribute": True}),
                _multi_with("device-4", {"driverVersion": "1.0.0", "numa": 3, "boolAttribute": True}),
            ),
            features=CC,
            expect=[
                *picks_a("req-0", "device-1"),
                *picks_a("req-1", "device-2"),
                *picks_a("req-2", "device-3"),
                *picks_a("req-3", "device-4"),
            ],
        ),
    ),
    case(
        "with-distinct-constraints-attribute-not-set",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A), constraints=[distinct("boolAttribute", "req-0")])],
            _one_multi(_multi("device-1")),
            features=CC,
        ),
    ),
    case(
        "with-distinct-constraints-unknown-type-attribute",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A), constraints=[distinct("boolAttribute", "req-0")])],
            _one_multi({**_multi("device-1"), "attributes": {"boolAttribute": {}}}),
            features=CC,
            expect=ERROR,
            error="unsupported attribute value",
        ),
    ),
    case(
        "with-distinct-constraints-with-subrequests",
        Case(
            [
                claim(
                    CLAIM0,
                    *(
                        prioritized(
                            f"req-{i}", subreq("subReq-0", CLASS_A, 1, _BOOL_SELECTOR), subreq("subReq-1", CLASS_A)
                        )
                        for i in range(3)
                    ),
                    constraints=[distinct("boolAttribute", "req-0", "req-1")],
                )
            ],
            _one_multi(
                _multi_with("device-1", {"boolAttribute": True}), _multi_with("device-2", {"boolAttribute": False})
            ),
            features=("ConsumableCapacity", "PrioritizedList"),
            expect=[
                *picks_a("req-0/subReq-0", "device-1"),
                *picks_a("req-1/subReq-1", "device-2"),
                *picks_a("req-2/subReq-0", "device-1"),
            ],
        ),
    ),
    case(
        "distinct-constraint-one-multi-allocatable-device-with-distinct-constraint",
        Case(
            [
                claim(
                    CLAIM0,
                    _cap_request("req-0", "1"),
                    _cap_request("req-1", "1"),
                    constraints=[distinct("stringAttribute")],
                )
            ],
            _one_multi(_multi_with("device-1", {"stringAttribute": "stringAttributeValue"}, _range("2"))),
            classes=_MULTI_CLASS,
            features=CC,
        ),
    ),
    case(
        "distinct-constraint-two-multi-allocatable-devices-with-distinct-constraint",
        Case(
            [
                claim(
                    CLAIM0,
                    _cap_request("req-0", "2"),
                    _cap_request("req-1", "2"),
                    constraints=[distinct("stringAttribute")],
                )
            ],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    _multi_with("device-1", {"stringAttribute": "stringAttributeValue1"}, _range("4")),
                    count=2,
                ),
                rslice(
                    "slice-1-b",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    _multi_with("device-2", {"stringAttribute": "stringAttributeValue2"}, _range("4")),
                    count=2,
                ),
            ],
            classes=_MULTI_CLASS,
            features=CC,
            expect=picks_a("req-0", "device-1") + picks_a("req-1", "device-2"),
        ),
    ),
]

# ----------------------------------------------------------------------------- binding conditions

DB = ("DeviceBinding",)
PD_DB = ("PartitionableDevices", "DeviceBinding")


def bound(dev: Obj, conditions: list[str], failure: list[str]) -> Obj:
    """upstream withBindingConditions."""
    return {**dev, "bindingConditions": conditions, "bindingFailureConditions": failure}


_TYPE_X = cel(f'device.attributes["{DRIVER_A}"].type == "X"')
_TYPE_Y = cel(f'device.attributes["{DRIVER_A}"].type == "Y"')
_PREPARE = (["IsPrepare"], ["BindingFailed"])
_PD_BOUND_D1 = bound(_mem("device-1", "4Gi"), *_PREPARE)
_TAINT_KEY1 = {"key": "key1", "value": "value1", "effect": "NoSchedule"}
BINDING = [
    case(
        "device-binding-conditions",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [rslice("slice-1", NODE1, POOL1, DRIVER_A, bound(device("device-1"), *_PREPARE))],
            features=DB,
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "binding-conditions-multiple-devices",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, 2), request("req-1", CLASS_A))],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    bound(device("device-1"), *_PREPARE),
                    bound(device("device-2"), ["IsPrepare2"], ["BindingFailed2"]),
                    bound(device("device-3"), ["IsPrepare3"], ["BindingFailed3"]),
                )
            ],
            features=DB,
            expect=picks_a("req-0", "device-1", "device-2") + picks_a("req-1", "device-3"),
        ),
    ),
    case(
        "binding-conditions-with-and-without",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A), request("req-1", CLASS_A))],
            [rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1"), bound(device("device-2"), *_PREPARE))],
            features=DB,
            expect=picks_a("req-0", "device-1") + picks_a("req-1", "device-2"),
        ),
    ),
    case(
        "binding-conditions-without-feature-gate",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [rslice("slice-1", NODE1, POOL1, DRIVER_A, bound(device("device-1"), *_PREPARE))],
        ),
    ),
    case(
        "node-restriction",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice(
                    "slice-1", label_selector("planet", "earth"), POOL1, DRIVER_A, device("device-1", bindsToNode=True)
                )
            ],
            features=DB,
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "partitionable-devices-with-binding-conditions",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [rslice("slice-1", NODE1, POOL1, DRIVER_A, _PD_BOUND_D1, count=2), _counters("slice-2", memory="8Gi")],
            features=PD_DB,
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "partitionable-devices-with-binding-conditions-multiple",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, 2))],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    _PD_BOUND_D1,
                    bound(_mem("device-2", "4Gi"), ["IsPrepare2"], ["BindingFailed2"]),
                    count=2,
                ),
                _counters("slice-2", memory="8Gi"),
            ],
            features=PD_DB,
            expect=picks_a("req-0", "device-1", "device-2"),
        ),
    ),
    case(
        "partitionable-devices-with-binding-conditions-some-devices-no-conditions",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, 3))],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    bound(_mem("device-1", "2Gi"), *_PREPARE),
                    _mem("device-2", "2Gi"),
                    bound(_mem("device-3", "4Gi"), ["IsReady"], ["BindingTimeout"]),
                    count=2,
                ),
                _counters("slice-2", memory="8Gi"),
            ],
            features=PD_DB,
            expect=picks_a("req-0", "device-1", "device-2", "device-3"),
        ),
    ),
    case(
        "partitionable-devices-with-binding-conditions-multi-slices",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, 2))],
            [
                rslice("slice-4", NODE1, POOL1, DRIVER_A, _PD_BOUND_D1, count=4),
                _counters("slice-3", count=4, memory="8Gi"),
                rslice(
                    "slice-2",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    device("device-2", consumes=[("counter-set-2", {"memory": "4Gi"})], from_counters=True),
                    count=4,
                ),
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    count=4,
                    counter_sets=[counter_set("counter-set-2", memory="8Gi")],
                ),
            ],
            features=PD_DB,
            expect=picks_a("req-0", "device-1", "device-2"),
        ),
    ),
    case(
        "partitionable-devices-with-binding-conditions-and-taints",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, 2))],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    {**_PD_BOUND_D1, "taints": [_TAINT_KEY1]},
                    _mem("device-2", "4Gi"),
                ),
                _counters("slice-2", count=1, memory="8Gi"),
            ],
            features=(*PD_DB, "DeviceTaints"),
        ),
    ),
    case(
        "partitionable-devices-with-binding-conditions-and-taints-tolerated",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A, 2, tolerations=[toleration("key1", "NoSchedule")]))],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    {**_PD_BOUND_D1, "taints": [_TAINT_KEY1]},
                    _mem("device-2", "4Gi"),
                    count=2,
                ),
                _counters("slice-2", memory="8Gi"),
            ],
            features=(*PD_DB, "DeviceTaints"),
            expect=picks_a("req-0", "device-1", "device-2"),
        ),
    ),
    case(
        "check-combinations-with-backtracking-across-slices-and-pools",
        Case(
            [claim(CLAIM0, request("req-1", CLASS_A, 2), request("req-2", CLASS_A, 1, _TYPE_X))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1", attributes={"type": "X"}), count=2),
                rslice("slice-2", NODE1, POOL1, DRIVER_A, device("device-2", attributes={"type": "Y"}), count=2),
                rslice(
                    "slice-3",
                    NODE1,
                    POOL2,
                    DRIVER_A,
                    bound(device("device-3", attributes={"type": "Y"}), ["IsPrepare"], []),
                ),
            ],
            features=DB,
            expect=[
                *picks_a("req-1", "device-2"),
                *picks_a("req-1", "device-3", pool=POOL2),
                *picks_a("req-2", "device-1"),
            ],
        ),
    ),
]

# ----------------------------------------------------------------------------- the rest of the table


def klass_with_config(name: str, driver: str, attribute: str) -> Obj:
    """upstream classWithConfig."""
    out = klass(name, driver)
    out["spec"]["config"] = [{"opaque": {"driver": driver, "parameters": {attribute: attribute + "Value"}}}]
    return out


def _gen(where: str, generation: int, *devs: str, slice_name: str = "slice-1") -> Obj:
    """A pool-1 slice of a two-slice pool at ``generation`` (the multi-host cases)."""
    return rslice(slice_name, where, POOL1, DRIVER_A, *(device(d) for d in devs), count=2, generation=generation)


def _each(*devs: str, count: int = 2) -> list[Obj]:
    return [rslice(f"slice-{i + 1}", NODE1, POOL1, DRIVER_A, device(d), count=count) for i, d in enumerate(devs)]


def _typed() -> list[Obj]:
    return [
        rslice(
            "slice-1",
            NODE1,
            POOL1,
            DRIVER_A,
            device("device-1", attributes={"type": "X"}),
            device("device-2", attributes={"type": "Y"}),
            device("device-3", attributes={"type": "Y"}),
        )
    ]


_FOUR = [device(f"device-{i}") for i in range(1, 5)]
_FIVE = [claim(CLAIM0, request("req-0", CLASS_A, 5))]
_DUP_POOL1 = [
    rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1"), count=2),
    rslice("slice-2", NODE1, POOL1, DRIVER_A, device("device-1"), count=2),
    rslice("slice-3", NODE1, POOL2, DRIVER_A, device("device-2")),
]
_INVALID = {"expect": NODE_ERROR, "error": "invalid resource pools were encountered"}
REST = [
    case("empty", Case([], classes=[], expect=[])),
    case("no-claims-to-allocate", Case([], ONE_SLICE_A, expect=[])),
    case(
        "with-class-device-config-with-multiple-request-and-configs",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A), request("req-1", CLASS_A), request("req-2", CLASS_B))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, *devices(2)),
                rslice("slice-2", NODE1, POOL1, DRIVER_B, device("device-1")),
            ],
            classes=[
                klass_with_config(CLASS_A, DRIVER_A, "classAttribute-A"),
                klass_with_config(CLASS_B, DRIVER_B, "classAttribute-B"),
            ],
            expect=[
                *picks_a("req-0", "device-0"),
                *picks_a("req-1", "device-1"),
                pick(CLAIM0, "req-2", DRIVER_B, POOL1, "device-1"),
            ],
        ),
    ),
    case("many-devices-okay", Case([claim(CLAIM0, request("req-0", CLASS_A, MAX))])),
    case(
        "all-devices-invalid-CEL",
        Case([claim(CLAIM0, request("req-0", CLASS_A, 500))], expect=ERROR, error="exceeds the claim limit"),
    ),
    case(
        "prioritized-list-class-config",
        Case(
            _fa(subreq("subReq-0", CLASS_A, 2), subreq("subReq-1", CLASS_B, 2)),
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_B, device("device-1"), device("device-2")),
                rslice("slice-2", NODE1, POOL2, DRIVER_A, device("device-3")),
            ],
            classes=[klass_with_config(CLASS_A, DRIVER_A, "foo"), klass_with_config(CLASS_B, DRIVER_B, "bar")],
            features=PL,
            expect=[pick(CLAIM0, "req-0/subReq-1", DRIVER_B, POOL1, d) for d in ("device-1", "device-2")],
        ),
    ),
    case(
        "prioritized-list-max-allocation-allocation-mode-all",
        Case(
            [
                claim(
                    CLAIM0,
                    prioritized("req-0", subreq("subReq-0", CLASS_A, None, mode="All"), subreq("subReq-1", CLASS_A, 2)),
                    request("req-1", CLASS_B, 2),
                )
            ],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, *devices(MAX - 1)),
                rslice("slice-2", NODE1, POOL2, DRIVER_B, *devices(2)),
            ],
            classes=CLASSES_AB,
            features=PL,
            expect=picks_a("req-0/subReq-1", "device-0", "device-1")
            + [pick(CLAIM0, "req-1", DRIVER_B, POOL2, d) for d in ("device-0", "device-1")],
        ),
    ),
    case(
        "allocation-mode-all-with-multi-host-resource-pool",
        Case(
            [claim(CLAIM0, all_request("req-0", CLASS_A))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1"), count=2),
                rslice("slice-2", NODE2, POOL1, DRIVER_A, device("device-2"), count=2),
            ],
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "multi-host-resource-pool-with-stale-slice-for-current-node",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [_gen(NODE1, 1, "device-1"), _gen(NODE2, 2, "device-2", slice_name="slice-2")],
        ),
    ),
    case(
        "multi-host-resource-pool-complete-update-from-node-1-to-node-2",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                _gen(NODE1, 1, "device-1", slice_name="slice-1"),
                _gen(NODE1, 1, "device-2", slice_name="slice-1-b"),
                _gen(NODE2, 2, "device-1", slice_name="slice-2"),
                _gen(NODE2, 2, "device-2", slice_name="slice-2-b"),
            ],
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "multi-host-resource-pool-complete-update-from-node-2-to-node-1",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                _gen(NODE2, 1, "device-1", slice_name="slice-1"),
                _gen(NODE2, 1, "device-2", slice_name="slice-1-b"),
                _gen(NODE1, 2, "device-1", slice_name="slice-2"),
                _gen(NODE1, 2, "device-2", slice_name="slice-2-b"),
            ],
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "multi-host-resource-pool-incomplete-update-from-node-1-to-node-2",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                _gen(NODE1, 1, "device-1", slice_name="slice-1"),
                _gen(NODE1, 1, "device-2", slice_name="slice-1-b"),
                _gen(NODE2, 2, "device-1", slice_name="slice-2"),
            ],
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "multi-host-resource-pool-incomplete-update-from-node-2-to-node-1",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                _gen(NODE2, 1, "device-1", slice_name="slice-1"),
                _gen(NODE2, 1, "device-2", slice_name="slice-1-b"),
                _gen(NODE1, 2, "device-1", slice_name="slice-2"),
            ],
        ),
    ),
    case(
        "partitionable-devices-same-counter-set-name-in-different-resource-slices",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, device("device-1"), count=4),
                _counters("slice-2", count=4),
                rslice("slice-3", NODE1, POOL1, DRIVER_A, device("device-2"), count=4),
                _counters("slice-4", count=4),
            ],
            features=PD,
            **_INVALID,
        ),
    ),
    case(
        "partitionable-devices-device-counter-consumption-references-unknown-counter-set",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice(
                    "slice-1",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    {"name": "device-1", "consumesCounters": [{"counterSet": "counter-set-2", "counters": {}}]},
                    count=2,
                ),
                _counters("slice-2"),
            ],
            features=PD,
            **_INVALID,
        ),
    ),
    case(
        "partitionable-devices-device-counter-consumption-references-unknown-counter-in-counter-set",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, _mem("device-1", "8Gi", from_counters=False), count=2),
                rslice(
                    "slice-2",
                    NODE1,
                    POOL1,
                    DRIVER_A,
                    count=2,
                    counter_sets=[counter_set("counter-set-1", **{"other-memory": "8Gi"})],
                ),
            ],
            features=PD,
            **_INVALID,
        ),
    ),
    case(
        "partitionable-devices-device-counter-consumption-references-counter-set-in-other-pool",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, _mem("device-1", "8Gi", from_counters=False)),
                rslice("slice-2", NODE1, POOL2, DRIVER_A, counter_sets=[counter_set("counter-set-1", memory="8Gi")]),
            ],
            features=PD,
            **_INVALID,
        ),
    ),
    case(
        "partitionable-devices-devices-on-different-nodes-consume-same-counter-set",
        Case(
            _fa(
                subreq("subReq-0", CLASS_A, 1, mem_at_least("6Gi")), subreq("subReq-1", CLASS_A, 1, mem_at_least("2Gi"))
            ),
            [
                _counters("slice-1", count=3, memory="8Gi"),
                rslice("slice-2", NODE1, POOL1, DRIVER_A, _mem("device-1", "6Gi"), _mem("device-2", "2Gi"), count=3),
                rslice("slice-3", NODE2, POOL1, DRIVER_A, _mem("device-3", "6Gi", from_counters=False), count=3),
            ],
            features=PD_PL,
            allocated=[(DRIVER_A, POOL1, "device-3")],
            expect=picks_a("req-0/subReq-1", "device-2"),
        ),
    ),
    case(
        "partitionable-devices-validation-error-on-non-targeting-slice",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                _counters("slice-1", count=3, memory="8Gi"),
                rslice("slice-2", NODE1, POOL1, DRIVER_A, _mem("device-1", "6Gi"), count=3),
                rslice(
                    "slice-3",
                    NODE2,
                    POOL1,
                    DRIVER_A,
                    device("device-3", consumes=[("counter-set-2", {"memory": "6Gi"})]),
                    count=3,
                ),
            ],
            features=PD,
            **_INVALID,
        ),
    ),
    case(
        "different-resourceslices-in-pool-can-target-different-nodes",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            [
                rslice("slice-1", NODE2, POOL1, DRIVER_A, device("device-1"), count=2),
                rslice("slice-2", NODE1, POOL1, DRIVER_A, device("device-2"), count=2),
            ],
            expect=picks_a("req-0", "device-2"),
        ),
    ),
    case(
        "invalid-pool-is-ok-if-devices-can-be-allocated-from-other",
        Case([claim(CLAIM0, request("req-0", CLASS_A))], _DUP_POOL1, expect=picks_a("req-0", "device-2", pool=POOL2)),
    ),
    case(
        "invalid-pool-is-error-if-no-other-device-can-be-allocated",
        Case(
            [claim(CLAIM0, request("req-0", CLASS_A))],
            _DUP_POOL1,
            allocated=[(DRIVER_A, POOL2, "device-2")],
            **_INVALID,
        ),
    ),
    case("no-allocation-from-incomplete-pools", Case([claim(CLAIM0, request("req-0", CLASS_A))], _each("device-1"))),
    case(
        "check-combinations-within-single-request-single-pool-single-slice",
        Case(_FIVE, [rslice("slice-1", NODE1, POOL1, DRIVER_A, *_FOUR)]),
    ),
    case(
        "check-combinations-within-single-request-single-pool-multiple-slices",
        Case(
            _FIVE,
            [
                rslice("slice-1", NODE1, POOL1, DRIVER_A, *_FOUR[:2], count=2),
                rslice("slice-2", NODE1, POOL1, DRIVER_A, *_FOUR[2:], count=2),
            ],
        ),
    ),
    case(
        "check-combinations-within-single-request-multiple-pools-multiple-slices",
        Case(
            _FIVE,
            [*_each("device-1", "device-2"), rslice("slice-3", NODE1, POOL2, DRIVER_A, *_FOUR[2:])],
        ),
    ),
    case(
        "check-combinations-within-single-request-many-pools",
        Case(
            _FIVE,
            [rslice(f"slice-{i}", NODE1, f"pool-{i}", DRIVER_A, device(f"device-{i}")) for i in range(1, 5)],
        ),
    ),
    case(
        "check-combinations-with-backtracking",
        Case(
            [claim(CLAIM0, request("req-1", CLASS_A, 2), request("req-2", CLASS_A, 1, _TYPE_X))],
            _typed(),
            expect=picks_a("req-1", "device-2", "device-3") + picks_a("req-2", "device-1"),
        ),
    ),
    case(
        "check-combinations-with-prioritized-list",
        Case(
            [
                claim(
                    CLAIM0,
                    prioritized("req-1", subreq("subReq-0", CLASS_A, 3, _TYPE_Y), subreq("subReq-1", CLASS_A, 2)),
                    prioritized("req-2", subreq("subReq-0", CLASS_A, 2), subreq("subReq-1", CLASS_A, 1, _TYPE_X)),
                )
            ],
            _typed(),
            features=PL,
            expect=picks_a("req-1/subReq-1", "device-2", "device-3") + picks_a("req-2/subReq-1", "device-1"),
        ),
    ),
]

# The consumable-capacity cases before "...-with-allocated-capacity-use-remaining" the CONSUMABLE
# list does not hold yet.
CONSUMABLE_MORE = [
    case(
        "consumable-capacity-disabled-feature",
        Case(
            [claim(CLAIM0, _cap_request("req-0", "1"))],
            ONE_SLICE_A,
            features=DB,
            expect=ERROR,
            error="has capacity requests, but the DRAConsumableCapacity feature is disabled",
        ),
    ),
    case(
        "consumable-capacity-disabled-feature-with-prioritized-list",
        Case(
            _fa(
                subreq("subReq-0", CLASS_A, capacity={"requests": {"capacity-0": "1"}}),
                subreq("subReq-1", CLASS_A, capacity={"requests": {"capacity-0": "1"}}),
            ),
            ONE_SLICE_A,
            features=("PrioritizedList", "DeviceBinding"),
            expect=ERROR,
            error="has capacity requests, but the DRAConsumableCapacity feature is disabled",
        ),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-with-missing-capacity-request",
        Case(
            [claim(CLAIM0, all_request("req-0", CLASS_A, capacity={"requests": {"capacity-0": "1"}}))],
            _one_multi(_multi("device-1", {"capacity-1": {"value": "1"}})),
            classes=_MULTI_CLASS,
            features=CC,
        ),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-with-zero-request-policy",
        Case(
            _two_claims(),
            _one_multi(
                _multi(
                    "device-1", {"capacity-0": {"value": "1", "requestPolicy": {"default": "0", "validValues": ["0"]}}}
                )
            ),
            classes=_MULTI_CLASS,
            features=CC,
            expect=_BOTH_DEVICE_1,
        ),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-with-range-policy-with-capacity-request",
        Case(
            _two_claims("1", "1"),
            _one_multi(_multi("device-1", _range("4"))),
            classes=_MULTI_CLASS,
            features=CC,
            expect=_BOTH_DEVICE_1,
        ),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-with-valid-values-policy",
        Case(
            [claim(CLAIM0, _cap_request("req-0", "2"))],
            _one_multi(
                _multi(
                    "device-1",
                    {"capacity-0": {"value": "4", "requestPolicy": {"default": "1", "validValues": ["1", "2"]}}},
                )
            ),
            classes=_MULTI_CLASS,
            features=CC,
            expect=picks_a("req-0", "device-1"),
        ),
    ),
    case(
        "consumable-capacity-multi-allocatable-device-with-valid-values-policy-round-up",
        Case(
            [claim(CLAIM0, _cap_request("req-0", "2"))],
            _one_multi(
                _multi(
                    "device-1",
                    {"capacity-0": {"value": "3", "requestPolicy": {"default": "1", "validValues": ["1", "3"]}}},
                )
            ),
            classes=_MULTI_CLASS,
            features=CC,
            expect=picks_a("req-0", "device-1"),
        ),
    ),
]


CASES = [
    *BASICS,
    *ALL_MODE,
    *ADMIN,
    *NODES,
    *CONSTRAINTS,
    *INPUT,
    *PRIORITIZED,
    *PARTITIONABLE,
    *TAINTS,
    *CONSUMABLE,
    *CONSUMABLE_MORE,
    *DISTINCT,
    *BINDING,
    *REST,
]


@pytest.mark.parametrize("c", CASES)
def test_upstream_case(c: Case) -> None:
    got = run(c)
    expected = sorted(c.expect) if isinstance(c.expect, list) else c.expect
    assert got == expected


def test_case_names_are_unique() -> None:
    names = [p.id for p in CASES]
    assert len(names) == len(set(names)) >= 40
