"""Selector verdicts kept by the values the selectors read (``cel.read_key``, selection.Scope).

The allocator evaluates a request's selectors once per distinct key of the values they read
and reuses the verdict for every other device with that key. These tests would fail if it
answered wrongly: devices that differ in a value a selector reads, a device whose unread
attribute does not convert, a missing attribute, selectors whose reads are not constant
lookups, and a differential check against evaluating every device on its own.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from typing import Any

import pytest

from gpucluster.dra import allocator, cel
from gpucluster.dra.allocator import explain

from .test_allocator import GPU, Obj, claim, device_class, exact, node, rslice, sel

PRODUCT = f"device.attributes['{GPU}'].productName == 'H100'"


def gpu(name: str, **attributes: Any) -> Obj:
    """A device whose attributes are given raw (``{"string": ...}``), ``type: gpu`` unless set."""
    return {"name": name, "attributes": {"type": {"string": "gpu"}, **attributes}}


def one_node(*devices: Obj) -> list[Obj]:
    return [rslice("s", "n", "n", *devices), node("n"), device_class()]


def reasons(result: allocator.Explanation) -> list[str]:
    return [reason for n in result.nodes for reason in n.reasons]


# ----------------------------------------------------------------------------- read_key


def _keys(expressions: list[str], devices: list[Obj], driver: str = GPU) -> list[Any] | None:
    key = cel.read_key([cel.compile_selector(e) for e in expressions])
    return None if key is None else key(driver, devices)


def test_key_is_the_values_read_as_the_view_resolves_them() -> None:
    keys = _keys(
        [PRODUCT],
        [
            gpu("a", productName={"string": "H100"}, uuid={"string": "1"}),
            gpu("b", productName={"string": "H100"}, uuid={"string": "2"}),  # differs in what is not read
            gpu("c", **{f"{GPU}/productName": {"string": "H100"}}),  # qualified: the same attribute
            gpu("d", productName={"string": "A100"}),
            gpu("e"),  # absent
            gpu("f", productName=None),  # null reads as absent
        ],
    )
    assert keys is not None
    assert keys[0] == keys[1] == keys[2]
    assert len({keys[0], keys[3], keys[4]}) == 3
    assert keys[4] == keys[5]


def test_key_tells_value_types_apart() -> None:
    # 1, true, "1" and version 1.0.0 are different CEL values: never one key.
    keys = _keys(
        [f"device.attributes['{GPU}'].x == 1"],
        [gpu("i", x={"int": 1}), gpu("b", x={"bool": True}), gpu("s", x={"string": "1"}), gpu("v", x={"version": "1"})],
    )
    assert keys is not None and len(set(keys)) == 4


def test_key_includes_the_driver() -> None:
    # An unqualified name belongs to the driver's domain: another driver reads something else.
    devices = [gpu("a", productName={"string": "H100"})]
    assert _keys([PRODUCT], devices) != _keys([PRODUCT], devices, driver="other.example.com")


@pytest.mark.parametrize(
    "attribute",
    [
        {"string": "H100", "int": 1},  # several fields
        {"strings": ["H100"]},  # a list
        {"string": 1},  # the wrong type
        "H100",  # not a map
    ],
)
def test_values_without_a_key_are_evaluated_on_their_own(attribute: Any) -> None:
    keys = _keys([PRODUCT], [gpu("a", productName=attribute), gpu("b", productName={"string": "H100"})])
    assert keys is not None and keys[0] is None and keys[1] is not None


@pytest.mark.parametrize(
    "expression",
    [
        f"device.attributes['{GPU}'].exists(n, n == 'special')",  # a whole domain
        f"device.attributes['{GPU}'].size() > 1",
        "device.attributes.exists(d, d == 'x')",  # the whole map
        f"cel.bind(a, device.attributes['{GPU}'], a.size() > 1)",
        f"device.attributes['{GPU}'][device.driver] == 'x'",  # a name not known statically
    ],
)
def test_reads_not_known_statically_have_no_key(expression: str) -> None:
    assert cel.read_key([cel.compile_selector(PRODUCT), cel.compile_selector(expression)]) is None


def test_capacity_and_allow_multiple_allocations_are_read_too() -> None:
    program = cel.compile_selector(
        f"device.capacity['{GPU}'].memory.compareTo(quantity('40Gi')) >= 0 && device.allowMultipleAllocations",
        consumable_capacity=True,
    )
    key = cel.read_key([program])
    assert key is not None
    devices = [
        {"name": "a", "capacity": {"memory": {"value": "80Gi"}}, "allowMultipleAllocations": True},
        {"name": "b", "capacity": {"memory": {"value": "80Gi", "requestPolicy": {}}}, "allowMultipleAllocations": True},
        {"name": "c", "capacity": {"memory": {"value": "80Gi"}}},
        {"name": "d", "capacity": {"memory": {"value": "40Gi"}}, "allowMultipleAllocations": True},
    ]
    a, b, c, d = key(GPU, devices)
    assert a == b  # a capacity's other fields are never read
    assert len({a, c, d}) == 3


# ----------------------------------------------------------------------------- explanations


def test_devices_that_differ_in_a_value_read_get_their_own_verdicts() -> None:
    cluster = one_node(
        gpu("gpu-0", productName={"string": "H100"}, uuid={"string": "0"}),
        gpu("gpu-1", productName={"string": "A100"}, uuid={"string": "1"}),
        gpu("gpu-2", productName={"string": "H100"}, uuid={"string": "2"}),
    )
    result = explain([claim(exact(count=2, selectors=sel(PRODUCT)))], cluster)
    assert result.satisfiable
    assert [a.device for a in result.nodes[0].allocation] == ["gpu-0", "gpu-2"]
    result = explain([claim(exact(count=3, selectors=sel(PRODUCT)))], cluster)
    assert not result.satisfiable
    assert "request gpu: gpu.nvidia.com/n/gpu-1: selector #0 false" in reasons(result)


@pytest.mark.parametrize("bad_first", [False, True])
def test_an_unread_attribute_that_does_not_convert_still_fails_the_device(bad_first: bool) -> None:
    # Both devices read the same for the selectors; one has an attribute Kubernetes cannot
    # convert (DeviceMatches converts every attribute first): it must fail, whichever comes first.
    good = gpu("good", productName={"string": "H100"})
    bad = gpu("bad", productName={"string": "H100"}, driverVersion={"version": "not-a-version"})
    cluster = one_node(*([bad, good] if bad_first else [good, bad]))
    result = explain([claim(exact(count=2, selectors=sel(PRODUCT)))], cluster)
    assert not result.satisfiable
    assert result.errors and "attribute driverVersion: parse semantic version" in result.errors[0]
    assert any(r.startswith("request gpu: gpu.nvidia.com/n/bad: class selector #0 CEL error") for r in reasons(result))


def test_a_bad_attribute_on_another_node_is_not_hidden_by_a_verdict_found_before() -> None:
    cluster = [
        rslice("s1", "n1", "n1", gpu("gpu-0", productName={"string": "H100"})),
        rslice("s2", "n2", "n2", gpu("gpu-0", productName={"string": "H100"}, bad={"version": "v1"})),
        node("n1"),
        node("n2"),
        device_class(),
    ]
    result = explain([claim(exact(selectors=sel(PRODUCT)))], cluster)
    by_node = {n.node: n for n in result.nodes}
    assert by_node["n1"].satisfiable and not by_node["n1"].error
    assert "attribute bad: parse semantic version" in by_node["n2"].error


def test_a_missing_attribute_is_a_runtime_error_for_that_device_only() -> None:
    cluster = one_node(gpu("gpu-0", productName={"string": "H100"}), gpu("gpu-1"), gpu("gpu-2"))
    result = explain([claim(exact(count=2, selectors=sel(PRODUCT)))], cluster)
    assert result.errors == ["claim default/c: selector #0: CEL runtime error: no such key: productName"]
    lines = reasons(result)
    assert "request gpu: gpu.nvidia.com/n/gpu-1: selector #0 CEL error: no such key: productName" in lines
    assert not any("gpu-0:" in line for line in lines)


def test_the_same_raw_attributes_under_another_driver_read_differently() -> None:
    # device.driver, and the domain of an unqualified name, differ: the memo must not mix drivers.
    same = {"productName": {"string": "H100"}}
    cluster = [
        rslice("s1", "n", "p1", {"name": "a", "attributes": same}),
        rslice("s2", "n", "p2", {"name": "b", "attributes": same}, driver="other.example.com"),
        node("n"),
        device_class("any", "true"),
    ]
    for expression in (f"device.driver == '{GPU}'", f"has(device.attributes['{GPU}'].productName)"):
        result = explain([claim(exact(cls="any", count=2, selectors=sel(expression)))], cluster)
        assert "request gpu: other.example.com/p2/b: selector #0 false" in reasons(result), expression


def test_values_equal_in_python_but_not_in_cel_get_their_own_verdicts() -> None:
    # 1 == True == 1.0 in Python (one dict key); in CEL an int, a bool and a string differ.
    cluster = one_node(
        gpu("gpu-0", x={"bool": True}),
        gpu("gpu-1", x={"string": "1"}),
        gpu("gpu-2", x={"int": 1}),
    )
    result = explain([claim(exact(selectors=sel(f"device.attributes['{GPU}'].x == 1")))], cluster)
    assert [a.device for a in result.nodes[0].allocation] == ["gpu-2"]


def test_a_selector_with_reads_not_known_statically_is_evaluated_per_device() -> None:
    # The same values for every constant lookup; the domain read as a whole tells them apart.
    special = f"device.attributes['{GPU}'].exists(n, n == 'special')"
    cluster = one_node(
        gpu("gpu-0", productName={"string": "H100"}),
        gpu("gpu-1", productName={"string": "H100"}, special={"bool": True}),
        gpu("gpu-2", productName={"string": "H100"}),
    )
    result = explain([claim(exact(selectors=sel(PRODUCT, special)))], cluster)
    assert [a.device for a in result.nodes[0].allocation] == ["gpu-1"]


# ----------------------------------------------------------------------------- differential

_VALUES: list[Any] = [
    {"string": "H100"},
    {"string": "A100"},
    {"string": "1"},
    {"int": 1},
    {"int": 80},
    {"bool": True},
    {"bool": False},
    {"version": "1.2.3"},
    {"version": "2.0.0"},
    {"version": "01.0.0"},  # does not parse
    {"string": "H100", "int": 1},
    {"strings": ["H100"]},
    {},
    None,
]
_NAMES = ["productName", "x", f"{GPU}/x", "example.com/y", "uuid"]
_EXPRESSIONS = [
    PRODUCT,
    f"device.attributes['{GPU}'].x == 1",
    f"has(device.attributes['{GPU}'].x) && device.attributes['{GPU}'].x == 'H100'",
    f"device.attributes['{GPU}'].x.isGreaterThan(semver('1.0.0'))",
    "device.attributes['example.com'].y == true",
    "!has(device.attributes['example.com'].y) || device.attributes['example.com'].y == 80",
    f"device.capacity['{GPU}'].memory.compareTo(quantity('40Gi')) >= 0",
    f"device.driver == '{GPU}' && device.attributes['{GPU}'].productName.startsWith('H')",
    f"device.attributes['{GPU}'].exists(n, n == 'x')",
    "true",
]


def _random_cluster(rng: random.Random) -> list[Obj]:
    objects: list[Obj] = []
    for n in range(rng.randint(1, 4)):
        devices = []
        for i in range(rng.randint(1, 8)):
            attributes = {name: rng.choice(_VALUES) for name in rng.sample(_NAMES, rng.randint(0, len(_NAMES)))}
            device: Obj = {"name": f"gpu-{i}", "attributes": attributes}
            if rng.random() < 0.6:
                device["capacity"] = {"memory": {"value": rng.choice(["40Gi", "80Gi", "1Ki"])}}
            devices.append(device)
        objects += [rslice(f"s{n}", f"n{n}", f"n{n}", *devices), node(f"n{n}")]
    if rng.random() < 0.5:  # a slice every node sees (its verdicts are cached across nodes)
        objects.append(rslice("all", None, "all", {"name": "any", "attributes": {"x": {"int": 1}}}, allNodes=True))
    objects.append(device_class(GPU, *rng.sample(_EXPRESSIONS, rng.randint(0, 2))))
    return objects


def _per_device(backend: allocator.SelectorBackend) -> allocator.SelectorBackend:
    return dataclasses.replace(backend, read_key=None)


@pytest.mark.parametrize("seed", range(40))
def test_verdicts_by_key_are_the_verdicts_of_each_device(seed: int) -> None:
    rng = random.Random(seed)
    cluster = _random_cluster(rng)
    requests = [
        exact(f"r{i}", count=rng.randint(1, 3), selectors=sel(*rng.sample(_EXPRESSIONS, rng.randint(0, 2))))
        for i in range(rng.randint(1, 2))
    ]
    claims = [claim(*requests)]
    backend = allocator.default_backend()
    assert backend.read_key is not None
    memoised = explain(claims, cluster, selectors=backend)
    each = explain(claims, cluster, selectors=_per_device(backend))
    assert memoised.to_json() == each.to_json()


@pytest.mark.parametrize("seed", range(10))
def test_verdicts_by_key_with_consumable_capacity(seed: int) -> None:
    # 1.36: allowMultipleAllocations is declared, and read.
    rng = random.Random(seed)
    cluster = _random_cluster(rng)
    for obj in cluster:
        if obj["kind"] == "ResourceSlice":
            for device in obj["spec"]["devices"]:
                if rng.random() < 0.5:
                    device["allowMultipleAllocations"] = True
    expression = f"device.allowMultipleAllocations || device.attributes['{GPU}'].x == 1"
    claims = [claim(exact(count=rng.randint(1, 2), selectors=sel(expression)))]
    backend = dataclasses.replace(
        allocator.default_backend(), compile=functools.partial(cel.compile_selector, consumable_capacity=True)
    )
    memoised = explain(claims, cluster, selectors=backend, kubernetes_version="1.36")
    each = explain(claims, cluster, selectors=_per_device(backend), kubernetes_version="1.36")
    assert memoised.to_json() == each.to_json()
