"""Constraints decided a node at a time (constraints.NodeValues) answer as one device at a time did.

The per-node columns of attribute values (one lookup per device and attribute, not per device,
request and use), the productName shortcut (every device of the node publishes the same raw
attribute: the matchAttribute is settled once per node) and the groups of devices by value the
pcieRoot pruning reads are checked three ways: the columns themselves on hand-built devices; whole
explanations on the bench's claim shapes and on edge nodes (mixed products on one node, devices
lacking the attribute, the same text as a string and as a version, a value of unknown type),
compared with the search run on the reference per-device code; and explanations with their
reasons written out.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from bench import bench_allocator as bench
from gpucluster.dra import constraints
from gpucluster.dra.allocator import explain
from gpucluster.dra.claims import ConstraintSpec
from gpucluster.dra.constraints import (
    MISSING,
    DistinctAttribute,
    MatchAttribute,
    NodeValues,
    static_reason,
    value_of,
)
from gpucluster.dra.pools import Device
from gpucluster.sandbox.sim import gpunodes as simulate
from tests.test_allocator import GPU, claim, device_class, exact, node_of, picks, rslice

Obj = dict[str, Any]
PRODUCT = f"{GPU}/productName"
ROOT = "resource.kubernetes.io/pcieRoot"
H100 = "NVIDIA H100 80GB HBM3"


def _device(i: int, attributes: dict[str, Any], driver: str = GPU) -> Device:
    return Device(f"gpu-{i}", (driver, "pool", f"gpu-{i}"), i, attributes)


def _match(attribute: str) -> MatchAttribute:
    return MatchAttribute(ConstraintSpec("matchAttribute", attribute, frozenset()))


def _distinct(attribute: str) -> DistinctAttribute:
    return DistinctAttribute(ConstraintSpec("distinctAttribute", attribute, frozenset()))


# ----------------------------------------------------------------------------- the columns


def test_column_reads_short_and_qualified_names_of_every_type() -> None:
    devices: list[Device | None] = [
        _device(0, {"productName": {"string": H100}}),
        _device(1, {PRODUCT: {"string": H100}}),  # the qualified name first
        _device(2, {"productName": {"version": "1.2.3"}}),
        _device(3, {"productName": {"int": 7}}),
        _device(4, {"productName": {"bool": False}}),
        _device(5, {}),
        _device(6, {"productName": {"bogus": 1}}),
        _device(7, {"productName": {"string": H100}}, driver="other.example.com"),  # not its domain
        None,  # an invalid pool's entry (1.34)
    ]
    values = NodeValues(devices)
    assert values.column(PRODUCT) == [
        ("string", H100),
        ("string", H100),
        ("version", "1.2.3"),
        ("int", 7),
        ("bool", False),
        MISSING,
        None,
        MISSING,
        MISSING,
    ]
    assert values.groups[PRODUCT] == {
        ("string", H100): [0, 1],
        ("version", "1.2.3"): [2],
        ("int", 7): [3],
        ("bool", False): [4],
    }
    assert values.unset[PRODUCT] is True and values.unknown[PRODUCT] is True
    assert values.known(PRODUCT) == [
        ("string", H100),
        ("string", H100),
        ("version", "1.2.3"),
        ("int", 7),
        ("bool", False),
        None,
        None,
        None,
        None,
    ]
    # The column is value_of's, device by device.
    assert values.column(PRODUCT)[:8] == [value_of(d, PRODUCT) for d in devices if d is not None]


@pytest.mark.parametrize(
    ("attributes", "settled"),
    [
        ([{"productName": {"string": H100}}] * 8, ("string", H100)),
        # Equal raw attributes in distinct objects (a freshly loaded cluster).
        ([{"productName": {"string": "A"}}, {"productName": {"string": "A"}}], ("string", "A")),
        ([{"productName": {"string": H100}}] * 3 + [{"productName": {"string": "NVIDIA A100"}}], None),
        ([{"productName": {"string": H100}}, {}], None),  # one device lacks it
        ([{}, {"productName": {"string": H100}}], None),
        ([{"productName": {"string": "1.0.0"}}, {"productName": {"version": "1.0.0"}}], None),  # string vs version
        ([{"productName": {"version": "1.0.0"}}] * 2, ("version", "1.0.0")),
        ([{"productName": {"bogus": 1}}] * 2, None),  # same raw attribute, of unknown type
        ([{"productName": {"string": ["a"]}}] * 2, None),  # not a value the API stores (unhashable)
        ([], None),
    ],
)
def test_settled_value(attributes: list[dict[str, Any]], settled: Any) -> None:
    devices = [_device(i, copy.deepcopy(a)) for i, a in enumerate(attributes)]
    assert NodeValues(devices).settled_value(PRODUCT) == settled


def test_settled_value_needs_every_entry_to_have_a_device() -> None:
    devices: list[Device | None] = [_device(0, {"productName": {"string": H100}}), None]
    assert NodeValues(devices).settled_value(PRODUCT) is None


def test_equal_values_in_unequal_raw_attributes_are_left_to_the_column() -> None:
    # The raw comparison says "not settled"; the values are still equal (the column's groups).
    devices = [_device(0, {"productName": {"string": "A"}}), _device(1, {"productName": {"string": "A", "int": None}})]
    values = NodeValues(devices)
    assert values.settled_value(PRODUCT) is None
    values.column(PRODUCT)
    assert values.groups[PRODUCT] == {("string", "A"): [0, 1]}


def test_static_reasons_are_static_reason_device_by_device() -> None:
    devices: list[Device | None] = [
        _device(0, {"productName": {"string": H100}, "numa": {"int": 0}}),
        _device(1, {"numa": {"int": 1}}),
        _device(2, {"productName": {"bogus": 1}}),
        _device(3, {"productName": {"string": H100}, "numa": {"bogus": 1}}),
        None,
    ]
    cases = [
        [_match(PRODUCT)],
        [_distinct(PRODUCT)],
        [_match(f"{GPU}/numa"), _match(PRODUCT)],
        [_distinct(f"{GPU}/numa"), _match(PRODUCT)],
        [_match(PRODUCT), _distinct(f"{GPU}/numa")],
    ]
    expected = [
        ["", "constraint matchAttribute gpu.nvidia.com/productName (attribute not set)", "", "", ""],
        [
            "",
            "constraint distinctAttribute gpu.nvidia.com/productName (attribute not set)",
            "constraint distinctAttribute gpu.nvidia.com/productName (unknown attribute type)",
            "",
            "",
        ],
        [
            "",
            "constraint matchAttribute gpu.nvidia.com/productName (attribute not set)",
            "constraint matchAttribute gpu.nvidia.com/numa (attribute not set)",
            "",
            "",
        ],
        [
            "",
            "constraint matchAttribute gpu.nvidia.com/productName (attribute not set)",
            "constraint distinctAttribute gpu.nvidia.com/numa (attribute not set)",
            "constraint distinctAttribute gpu.nvidia.com/numa (unknown attribute type)",
            "",
        ],
        [
            "",
            "constraint matchAttribute gpu.nvidia.com/productName (attribute not set)",
            "constraint distinctAttribute gpu.nvidia.com/numa (attribute not set)",
            "constraint distinctAttribute gpu.nvidia.com/numa (unknown attribute type)",
            "",
        ],
    ]
    for cs, want in zip(cases, expected, strict=True):
        assert NodeValues(devices).static_reasons(cs) == want
        assert [static_reason(cs, d) if d is not None else "" for d in devices] == want
    same = [_device(i, {"productName": {"string": H100}}) for i in range(4)]
    assert NodeValues(same).static_reasons([_match(PRODUCT), _distinct(PRODUCT)]) is None


# ----------------------------------------------------------------------------- with and without


class _Reference:
    """NodeValues as the search read values before: value_of and static_reason per device, no
    node-wide shortcut (settled_value never settles, groups are not shared)."""

    @staticmethod
    def column(self: NodeValues, name: str) -> list[Any]:
        return [MISSING if d is None else value_of(d, name) for d in self.devices]

    @staticmethod
    def settled_value(self: NodeValues, name: str) -> Any:
        self.groups[name] = None  # the pruning builds its own positions
        return None

    @staticmethod
    def static_reasons(self: NodeValues, cs: Any) -> list[str] | None:
        return [static_reason(cs, d) if d is not None else "" for d in self.devices]


def _reference(monkeypatch: pytest.MonkeyPatch) -> None:
    def column(self: NodeValues, name: str) -> list[Any]:
        out = _Reference.column(self, name)
        self.columns[name] = out
        self.groups[name] = None
        self.unset[name] = True
        self.unknown[name] = True
        return out

    monkeypatch.setattr(NodeValues, "column", column)
    monkeypatch.setattr(NodeValues, "settled_value", _Reference.settled_value)
    monkeypatch.setattr(NodeValues, "static_reasons", _Reference.static_reasons)


def _edge_cluster(nodes: int = 12) -> list[Obj]:
    slices = simulate.cluster_slices(nodes, 8, model="H100")

    def attrs(n: int, i: int) -> dict[str, Any]:
        result: dict[str, Any] = slices[n]["spec"]["devices"][i]["attributes"]
        return result

    attrs(1, 3)["productName"] = {"string": "NVIDIA A100-SXM4-80GB"}  # mixed products
    del attrs(2, 0)["productName"]  # lacking the attributes
    del attrs(2, 5)[ROOT]
    attrs(3, 7)["productName"] = {"version": "1.2.3"}  # another type
    attrs(4, 2)[ROOT] = {"int": 15}
    attrs(5, 1)[ROOT] = attrs(5, 0)[ROOT]  # roots shared by two and by three GPUs
    for i in (6, 7):
        attrs(5, i)[ROOT] = attrs(5, 4)[ROOT]
    attrs(6, 1)["productName"] = {"string": H100, "int": 3}  # two value fields
    for i in range(8):
        attrs(7, i)["productName"] = {"version": "9.0.0"}  # a version everywhere
    attrs(8, 0)["productName"] = {"bogus": 1}  # unknown type, first
    attrs(9, 0)["productName"] = {"string": "1.0.0"}
    attrs(9, 1)["productName"] = {"version": "1.0.0"}  # the same text as a version
    return [*slices, *simulate.cluster_nodes(nodes, 8, model="H100")]


def _claims() -> list[Obj]:
    shapes = [c for _, _, c in bench._scenarios()]
    bare = []
    for c in shapes:
        other = copy.deepcopy(c)
        other["spec"]["devices"]["requests"][0]["exactly"].pop("selectors", None)
        bare.append(other)
    more = []
    for attribute in (PRODUCT, ROOT):
        for n1, n2 in ((1, 1), (2, 3), (4, 4)):
            c = bench._claim(n1, match=attribute)
            requests = c["spec"]["devices"]["requests"]
            requests.append({"name": "b", "exactly": {**requests[0]["exactly"], "count": n2}})
            more.append(c)
        for n in (1, 2, 8):
            c = bench._claim(n)
            c["spec"]["devices"]["constraints"] = [{"distinctAttribute": attribute}]
            more.append(c)
        c = bench._claim(2, match=attribute)
        c["spec"]["devices"]["constraints"].insert(0, {"matchAttribute": f"{GPU}/nosuch"})
        more.append(c)
    return shapes + bare + more


@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36"])
@pytest.mark.parametrize("selectors", [True, False], ids=["class-selector", "no-selectors"])
def test_node_values_answer_as_the_per_device_code(
    monkeypatch: pytest.MonkeyPatch, version: str, selectors: bool
) -> None:
    cls = device_class() if selectors else {**device_class(), "spec": {}}
    text = json.dumps([*_edge_cluster(), cls])
    fast = [explain([c], json.loads(text), kubernetes_version=version).to_json() for c in _claims()]
    with monkeypatch.context() as m:
        _reference(m)
        slow = [explain([c], json.loads(text), kubernetes_version=version).to_json() for c in _claims()]
    assert len(fast) == len(slow)
    for i, (a, b) in enumerate(zip(fast, slow, strict=True)):
        assert a == b, f"claim #{i}"


# ----------------------------------------------------------------------------- written out


def _gpus(*attributes: dict[str, Any]) -> list[Obj]:
    devices = []
    for i, extra in enumerate(attributes):
        attrs: dict[str, Any] = {"type": {"string": "gpu"}}
        for key, value in extra.items():
            if value is not None:
                attrs[key] = value
        devices.append({"name": f"gpu-{i}", "attributes": attrs})
    return [rslice("s", "n1", "p1", *devices), device_class()]


def _match_claim(count: int, attribute: str = PRODUCT) -> Obj:
    return claim(exact(count=count), constraints=[{"matchAttribute": attribute}])


def _reasons(cluster: list[Obj], count: int, attribute: str = PRODUCT) -> list[str]:
    return node_of(explain([_match_claim(count, attribute)], cluster), "n1").reasons[1:]


def _h100(n: int) -> list[dict[str, Any]]:
    return [{"productName": {"string": H100}} for _ in range(n)]


def test_mixed_products_on_one_node() -> None:
    cluster = _gpus(*_h100(3), {"productName": {"string": "NVIDIA A100"}}, *_h100(4))
    result = explain([_match_claim(7)], cluster)
    assert picks(result) == [("gpu", GPU, "p1", f"gpu-{i}") for i in (0, 1, 2, 4, 5, 6, 7)]
    assert _reasons(cluster, 8) == [
        "request gpu: gpu.nvidia.com/p1/gpu-0: constraint matchAttribute gpu.nvidia.com/productName "
        "(only 7 usable device(s) from here on share 'NVIDIA H100 80GB HBM3', need 8)"
    ]


def test_a_device_lacking_the_attribute() -> None:
    cluster = _gpus({"productName": None}, *_h100(7))
    result = explain([_match_claim(2)], cluster)
    assert picks(result) == [("gpu", GPU, "p1", "gpu-1"), ("gpu", GPU, "p1", "gpu-2")]
    assert result.nodes[0].reasons == [
        "request gpu: 7/8 devices usable, need 2; 1 constraint matchAttribute gpu.nvidia.com/productName",
        "request gpu: gpu.nvidia.com/p1/gpu-0: constraint matchAttribute gpu.nvidia.com/productName "
        "(attribute not set)",
    ]
    assert not explain([_match_claim(8)], cluster).satisfiable


def test_the_same_text_as_a_string_and_as_a_version() -> None:
    cluster = _gpus({"productName": {"version": "1.0.0"}}, *[{"productName": {"string": "1.0.0"}}] * 7)
    result = explain([_match_claim(7)], cluster)
    assert picks(result) == [("gpu", GPU, "p1", f"gpu-{i}") for i in range(1, 8)]
    assert _reasons(cluster, 8) == [
        "request gpu: gpu.nvidia.com/p1/gpu-0: constraint matchAttribute gpu.nvidia.com/productName "
        "(only 1 usable device(s) from here on share 1.0.0, need 8)"
    ]


def test_a_value_of_unknown_type_first_without_selectors() -> None:
    # No selectors: nothing converts the attributes, the device is usable, its value fixes nothing.
    cluster = _gpus({"productName": {"bogus": 1}}, *_h100(7))
    cluster[-1] = {**cluster[-1], "spec": {}}
    assert _reasons(cluster, 2) == []  # gpu-1 and gpu-2 fit: the search passed gpu-0 over
    result = explain([_match_claim(2)], cluster)
    assert picks(result) == [("gpu", GPU, "p1", "gpu-1"), ("gpu", GPU, "p1", "gpu-2")]
    assert _reasons(cluster, 8) == [
        "request gpu: gpu.nvidia.com/p1/gpu-0: constraint matchAttribute gpu.nvidia.com/productName "
        "(only 0 usable device(s) from here on share ?, need 8)"
    ]
    assert explain([_match_claim(1)], cluster).nodes[0].allocation[0].device == "gpu-0"


def test_pcie_roots_cap_a_request_at_the_largest_group() -> None:
    roots = ["pci0000:15", "pci0000:15", "pci0000:37", "pci0000:48", "pci0000:48", "pci0000:48", "pci0000:59", "x"]
    cluster = _gpus(*[{"resource.kubernetes.io/pcieRoot": {"string": r}} for r in roots])
    for count, chosen in ((1, [0]), (2, [0, 1]), (3, [3, 4, 5])):
        result = explain([_match_claim(count, ROOT)], cluster)
        assert picks(result) == [("gpu", GPU, "p1", f"gpu-{i}") for i in chosen], count
    label = "constraint matchAttribute resource.kubernetes.io/pcieRoot"
    assert _reasons(cluster, 4, ROOT) == [
        f"request gpu: gpu.nvidia.com/p1/gpu-{i}: {label} (only {have} usable device(s) from here on share "
        f"'{root}', need 4)"
        for i, (have, root) in enumerate(
            [(2, "pci0000:15"), (1, "pci0000:15"), (1, "pci0000:37"), (3, "pci0000:48"), (2, "pci0000:48")]
        )
    ]


def test_every_gpu_its_own_pcie_root() -> None:
    cluster = _gpus(*[{"resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{i}0"}} for i in range(8)])
    assert picks(explain([_match_claim(1, ROOT)], cluster)) == [("gpu", GPU, "p1", "gpu-0")]
    label = "constraint matchAttribute resource.kubernetes.io/pcieRoot"
    assert _reasons(cluster, 2, ROOT) == [
        f"request gpu: gpu.nvidia.com/p1/gpu-{i}: {label} (only 1 usable device(s) from here on share "
        f"'pci0000:{i}0', need 2)"
        for i in range(7)
    ]


def test_messages_are_shared_between_nodes_of_one_explanation() -> None:
    # Two nodes with the same roots: the same reasons on both (one message built per value).
    roots = [{"resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{i}0"}} for i in range(2)]
    one = _gpus(*roots)
    two = copy.deepcopy(one[0])
    two["metadata"]["name"] = "s2"
    two["spec"]["nodeName"] = "n2"
    two["spec"]["pool"]["name"] = "p2"
    result = explain([_match_claim(2, ROOT)], [*one, two])
    first, second = node_of(result, "n1").reasons[1:], node_of(result, "n2").reasons[1:]
    assert [r.replace("/p1/", "/p2/") for r in first] == second
    assert first[0].endswith("(only 1 usable device(s) from here on share 'pci0000:00', need 2)")


def test_all_with_match_attribute_over_mixed_products_is_an_error() -> None:
    cluster = _gpus(*_h100(3), {"productName": {"string": "NVIDIA A100"}}, *_h100(4))
    c = claim(exact(allocationMode="All"), constraints=[{"matchAttribute": PRODUCT}])
    result = explain([c], cluster)
    assert not result.satisfiable
    assert result.errors == [
        "claim default/c, request gpu: cannot add device gpu.nvidia.com/p1/gpu-3 because a claim constraint "
        "would not be satisfied"
    ]
    same = explain([c], _gpus(*_h100(8)))
    assert [a.device for a in same.nodes[0].allocation] == [f"gpu-{i}" for i in range(8)]


def test_constraint_labels_are_cached() -> None:
    assert _match(PRODUCT).label is _match(PRODUCT).label
    assert constraints._label("matchAttribute", PRODUCT) == "constraint matchAttribute gpu.nvidia.com/productName"
