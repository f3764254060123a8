"""DRAListTypeAttributes (KEP-5491) in CEL, the gate table and the view conversion.

``COMPILE_TEST`` is the list-attribute part of upstream's ``k8s.io/dynamic-resource-allocation/cel``
``compile_test.go`` (v0.36.2, Kubernetes 1.36): (name, gate, expression, attributes as JSON,
expected match / ("error", runtime error) / ("compile", compile error), estimated cost).
Upstream runs them in the NewExpressions environment, where the gate decides whether
``includes`` is declared; so do we, for every environment (see the module docstring of
``gpucluster.dra.gates``).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpucluster.dra import cel, gates
from gpucluster.dra.cel import CelCompileError, CelRuntimeError
from gpucluster.dra.model import AllocatorInputError, Semantics

DRIVER = "dra.example.com"

COMPILE_TEST: list[tuple[str, bool, str, dict[str, Any], Any, int | None]] = [
    (
        "macro-exists-on-int",
        True,
        'device.attributes["dra.example.com"].name.exists(x, x > 0)',
        {"name": {"int": 1}},
        ("error", "got 'types.Int', expected iterable type"),
        389,
    ),
    (
        "macro-exists-on-bool",
        True,
        'device.attributes["dra.example.com"].name.exists(x, x == true)',
        {"name": {"bool": True}},
        ("error", "got 'types.Bool', expected iterable type"),
        389,
    ),
    (
        "macro-exists-on-string",
        True,
        'device.attributes["dra.example.com"].name.exists(x, x == "fish")',
        {"name": {"string": "fish"}},
        ("error", "got 'types.String', expected iterable type"),
        389,
    ),
    (
        "attribute-access-causes-match-error",
        False,
        'device.attributes["dra.example.com"].names',
        {"names": {"strings": ["fish", "bird"]}},
        ("error", "attribute names: unsupported attribute value"),
        4,
    ),
    (
        "list-of-bool",
        True,
        'device.attributes["dra.example.com"].names.size() == 2',
        {"names": {"bools": [True, False]}},
        True,
        6,
    ),
    (
        "list-of-int",
        True,
        'device.attributes["dra.example.com"].names.size() == 2',
        {"names": {"ints": [1, 2]}},
        True,
        6,
    ),
    (
        "list-of-string",
        True,
        'device.attributes["dra.example.com"].names.size() == 2',
        {"names": {"strings": ["fish", "bird"]}},
        True,
        6,
    ),
    (
        "list-of-semver",
        True,
        'device.attributes["dra.example.com"].names.size() == 2',
        {"names": {"versions": ["1.0.0", "2.0.0"]}},
        True,
        6,
    ),
    (
        "macro-on-list-of-int",
        True,
        'device.attributes["dra.example.com"].names.exists(x, x > 0)',
        {"names": {"ints": [1, 2]}},
        True,
        389,
    ),
    (
        "macro-on-list-of-string",
        True,
        'device.attributes["dra.example.com"].names.all(x, x != "")',
        {"names": {"strings": ["fish", "bird"]}},
        True,
        261,
    ),
    (
        "macro-on-list-of-semver",
        True,
        'device.attributes["dra.example.com"].names.all(x, x.isGreaterThan(semver("0.0.1")))',
        {"names": {"versions": ["1.0.0", "2.0.0"]}},
        True,
        389,
    ),
    (
        "includes-function-undeclared-error",
        False,
        'device.attributes["dra.example.com"].name.includes("fish")',
        {},
        ("compile", "undeclared reference to 'includes'"),
        None,
    ),
    (
        "includes-function-on-bool-scalar-positive",
        True,
        'device.attributes["dra.example.com"].name.includes(true)',
        {"name": {"bool": True}},
        True,
        52,
    ),
    (
        "includes-function-on-bool-scalar-negative",
        True,
        'device.attributes["dra.example.com"].name.includes(true)',
        {"name": {"bool": False}},
        False,
        52,
    ),
    (
        "includes-function-on-bool-list-positive",
        True,
        'device.attributes["dra.example.com"].name.includes(true)',
        {"name": {"bools": [True, False]}},
        True,
        52,
    ),
    (
        "includes-function-on-bool-list-negative",
        True,
        'device.attributes["dra.example.com"].name.includes(false)',
        {"name": {"bools": [True, True]}},
        False,
        52,
    ),
    (
        "includes-function-on-int-scalar-positive",
        True,
        'device.attributes["dra.example.com"].name.includes(1)',
        {"name": {"int": 1}},
        True,
        52,
    ),
    (
        "includes-function-on-int-scalar-negative",
        True,
        'device.attributes["dra.example.com"].name.includes(1)',
        {"name": {"int": 2}},
        False,
        52,
    ),
    (
        "includes-function-on-int-list-positive",
        True,
        'device.attributes["dra.example.com"].name.includes(1)',
        {"name": {"ints": [1, 2]}},
        True,
        52,
    ),
    (
        "includes-function-on-int-list-negative",
        True,
        'device.attributes["dra.example.com"].name.includes(3)',
        {"name": {"ints": [1, 2]}},
        False,
        52,
    ),
    (
        "includes-function-on-string-scalar-positive",
        True,
        'device.attributes["dra.example.com"].name.includes("fish")',
        {"name": {"string": "fish"}},
        True,
        52,
    ),
    (
        "includes-function-on-string-scalar-negative",
        True,
        'device.attributes["dra.example.com"].name.includes("bird")',
        {"name": {"string": "fish"}},
        False,
        52,
    ),
    (
        "includes-function-on-string-list-positive",
        True,
        'device.attributes["dra.example.com"].name.includes("fish")',
        {"name": {"strings": ["fish", "bird"]}},
        True,
        52,
    ),
    (
        "includes-function-on-string-list-negative",
        True,
        'device.attributes["dra.example.com"].name.includes("cat")',
        {"name": {"strings": ["fish", "bird"]}},
        False,
        52,
    ),
    (
        "includes-function-on-semver-scalar-positive",
        True,
        'device.attributes["dra.example.com"].name.includes(semver("1.0.0"))',
        {"name": {"version": "1.0.0"}},
        True,
        53,
    ),
    (
        "includes-function-on-semver-scalar-negative",
        True,
        'device.attributes["dra.example.com"].name.includes(semver("2.0.0"))',
        {"name": {"version": "1.0.0"}},
        False,
        53,
    ),
    (
        "includes-function-on-semver-list-positive",
        True,
        'device.attributes["dra.example.com"].name.includes(semver("1.0.0"))',
        {"name": {"versions": ["1.0.0", "2.0.0"]}},
        True,
        53,
    ),
    (
        "includes-function-on-semver-list-negative",
        True,
        'device.attributes["dra.example.com"].name.includes(semver("3.0.0"))',
        {"name": {"versions": ["1.0.0", "2.0.0"]}},
        False,
        53,
    ),
    (
        "includes-function-on-very-long-list-positive",
        True,
        'device.attributes["dra.example.com"].name.includes("value-48")',
        {"name": {"strings": [f"value-{i}" for i in range(48)]}},
        False,
        52,
    ),
    (
        "includes-function-on-very-long-list-runtime-error",
        True,
        'device.attributes["dra.example.com"].name.includes("value-49")',
        {"name": {"strings": [f"value-{i}" for i in range(49)]}},
        ("error", "'includes' function cannot be applied to lists longer than 48 values"),
        52,
    ),
    (
        "in-operator-on-list",
        True,
        '1 in device.attributes["dra.example.com"].names',
        {"names": {"ints": [1, 2, 3]}},
        True,
        68,
    ),
    (
        "macro-exists-on-version",
        True,
        'device.attributes["dra.example.com"].name.exists(x, x.isGreaterThan(semver("0.0.1")))',
        {"name": {"version": "1.0.0"}},
        ("error", "got 'cel.Semver', expected iterable type"),
        453,
    ),
]


def _view(attributes: dict[str, Any], lists: bool) -> cel.DeviceView:
    return cel.device_view(DRIVER, {"name": "d", "attributes": attributes}, list_type_attributes=lists)


@pytest.mark.parametrize(
    ("gate", "expression", "attributes", "expect", "cost"),
    [pytest.param(*c[1:], id=c[0]) for c in COMPILE_TEST],
)
def test_upstream_compile_test(
    gate: bool, expression: str, attributes: dict[str, Any], expect: Any, cost: int | None
) -> None:
    if isinstance(expect, tuple) and expect[0] == "compile":
        with pytest.raises(CelCompileError, match=expect[1]):
            cel.compile_selector(expression, list_type_attributes=gate)
        return
    program = cel.compile_selector(expression, list_type_attributes=gate)
    assert program.max_cost == cost
    view = _view(attributes, gate)
    if isinstance(expect, tuple):
        with pytest.raises(CelRuntimeError) as info:
            program.evaluate(view)
        assert expect[1] in info.value.message
    else:
        assert program.evaluate(view) is expect


def test_list_attributes_are_dyn_only_with_the_gate() -> None:
    result = 'device.attributes["dra.example.com"].name'
    assert cel.compile_selector(result, list_type_attributes=True).evaluate(_view({"name": {"bool": True}}, True))
    # Without the gate the attribute is "any" (accepted as a result, as before).
    assert cel.compile_selector(result).evaluate(_view({"name": {"bool": True}}, False))
    with pytest.raises(CelRuntimeError, match="must evaluate to bool, not list"):
        cel.compile_selector(result, list_type_attributes=True).evaluate(_view({"name": {"bools": [True]}}, True))


def test_list_conversion_and_its_errors() -> None:
    lists = _view({"a": {"ints": [1, 2]}, "b": {"versions": ["1.0.0"]}, "c": {"strings": []}}, True)
    assert cel.list_conversion_error(lists) == ""
    assert lists.attr_value(DRIVER, "a") == [1, 2]
    assert lists.attr_value(DRIVER, "c") == []
    assert str(lists.attr_value(DRIVER, "b")[0]) == "1.0.0"
    assert cel.conversion_error(_view({"a": {"ints": [1, 2]}}, False)) == "attribute a: unsupported attribute value"
    assert cel.list_conversion_error(_view({"a": {}}, True)) == "attribute a: unsupported attribute value"
    assert cel.list_conversion_error(_view({"a": {"ints": ["x"]}}, True)) == "attribute a: unsupported attribute value"
    bad = cel.list_conversion_error(_view({"a": {"versions": ["1.0.0", "01.0.0"]}}, True))
    assert bad.startswith("attribute a: parse semantic version: ")
    # Whole maps (cel.bind, macros over the domain) convert lists too.
    program = cel.compile_selector(
        'cel.bind(a, device.attributes["dra.example.com"], a.a.includes(2) && a.exists(k, k == "c"))',
        list_type_attributes=True,
    )
    assert program.evaluate(lists) is True


def test_the_gate_exists_from_1_36_and_is_off_there() -> None:
    for version in ("1.34", "1.35"):
        with pytest.raises(AllocatorInputError, match="unrecognized feature gate: DRAListTypeAttributes"):
            gates.resolve(version, {gates.LIST_TYPE_ATTRIBUTES: True})
        assert gates.LIST_TYPE_ATTRIBUTES not in gates.resolve(version)
    assert gates.LIST_TYPE_ATTRIBUTES not in gates.defaults("1.36")  # reported only when set
    assert Semantics.for_version("1.36").list_type_attributes is False
    on = Semantics.for_version("1.36", {gates.LIST_TYPE_ATTRIBUTES: True})
    assert on.list_type_attributes is True
    assert (gates.LIST_TYPE_ATTRIBUTES, True) in on.gates
    assert gates.setting("DRAListTypeAttributes=true", "1.36") == {gates.LIST_TYPE_ATTRIBUTES: True}
    with pytest.raises(AllocatorInputError, match=r"known: .*DRASchedulerFilterTimeout, DRAListTypeAttributes\)"):
        gates.resolve("1.36", {"DRAFoo": True})
    with pytest.raises(AllocatorInputError, match=r"known: .*DRASchedulerFilterTimeout\)"):
        gates.resolve("1.35", {"DRAFoo": True})
