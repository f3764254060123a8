"""The worst-case cost estimate against Kubernetes' own figures.

``expectCost`` of kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/cel/
compile_test.go (the DRA environment: cel-go's checker.Cost with library.CostEstimator and the
DRA size estimator), and the estimates of k8s.io/apiserver/pkg/cel/library/cost_test.go that do
not depend on that test's own string sizes. The limit check (CELSelectorExpressionMaxCost) is
where it was: compile_selector refuses what exceeds it.
"""

from __future__ import annotations

import pytest

from gpucluster.dra.cel import CelCompileError, compile_selector
from gpucluster.dra.cel.checker import check
from gpucluster.dra.cel.cost import COST_LIMIT, estimate_cost, is_unbounded
from gpucluster.dra.cel.parser import parse

D = 'device.attributes["dra.example.com"]'
C = 'device.capacity["dra.example.com"]'
NESTED = (
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(x, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(y, "
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z2, "
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z3, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z4, "
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z5, int('1'.find('[0-9]*')) < 100)))))))"
)
ALL = " &&\n".join(
    [
        f'{C}.quantity.isGreaterThan(quantity("1Ki"))',
        f"{D}.bool",
        f"{D}.int > 0",
        f'{D}.string == "fish"',
        f'{D}.version.isGreaterThan(semver("0.0.1"))',
        f'{C}["quantity"].isGreaterThan(quantity("1Ki"))',
        f'{D}["bool"]',
        f'{D}["int"] > 0',
        f'{D}["string"] == "fish"',
        f'{D}["version"].isGreaterThan(semver("0.0.1"))',
    ]
)

# compile_test.go scenario -> (expression, expectCost)
COMPILE_TEST = {
    "true": ("true", 0),
    "runtime-error-lookup-identifier": (
        'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))',
        6,
    ),
    "runtime-error-lookup-map": ('device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))', 6),
    "domain-check-negative": ('"no-such-domain" in device.attributes', 3),
    "empty-driver-name": ('device.driver == ""', 2),
    "real-driver-name": ('device.driver == "dra.example.com"', 4),
    "driver-name-qualifier": (f"{D}.name", 4),
    "driver-name-qualifier-map-lookup": (f'{D}["name"]', 4),
    "bind": (f"cel.bind(dra, {D}, dra.name)", 15),
    "int": (f"{D}.name > 0", 5),
    "string": (f'{D}.name == "fish"', 5),
    "version": (f'{D}.name.isGreaterThan(semver("0.0.1"))', 6),
    "version_v": (f'{D}.name.isGreaterThan(semver("v0.0.1", true)) && isSemver("v1.0.0", true)', 7),
    "quantity": (f'{C}.name.isGreaterThan(quantity("1Ki"))', 6),
    "check-positive": (f'"name" in {C} && {C}.name.isGreaterThan(quantity("1Ki"))', 10),
    "check-negative": (f'!("name" in {C}) || {C}.name.isGreaterThan(quantity("1Ki"))', 11),
    "all": (ALL, 52),
    "many": (f"{D}.a && {D}.b && {D}.c", 12),
    "check_attribute_domains": ('device.attributes.exists_one(x, x == "dra.example.com")', 164),
    "check_attribute_ids": (f'{D}.exists_one(x, x == "services")', 133),
    "split_attribute": (f'{D}.services.split("example").size() >= 2', 19),
    "regexp_attribute": (f'{D}.services.matches("[^a]?sym")', 18),
    "check_capacity_domains": ('device.capacity.exists_one(x, x == "dra.example.com")', 164),
    "check_capacity_ids": (f'{C}.exists_one(x, x == "memory")', 133),
    "expensive": (NESTED, 85_555_551),
    "allow_multiple_allocations": ("device.allowMultipleAllocations == true", 3),
}

# library/cost_test.go (TestListsCost, TestIndexOfCost) cases on numbers and bools.
LIBRARY_COST_TEST = {
    "[1, 2, 3, 4, 5].sum()": 15,
    "[uint(1), uint(2), uint(3), uint(4), uint(5)].sum()": 20,
    "[1.0, 2.0, 3.0, 4.0, 5.0].sum()": 15,
    "[1, 2, 3, 4, 5].isSorted()": 15,
    "[false, true, false, true, false].max()": 15,
    "[1.0, 2.0, 3.0, 4.0, 5.0].min()": 15,
    "[1, 2, 3, 4, 5].indexOf(3)": 15,
    "[uint(1), uint(2), uint(3), uint(4), uint(5)].lastIndexOf(uint(3))": 21,
    "'01234567890123456789012345678901234567890123456789'.indexOf('123')": 5,
}


def estimate(expression: str) -> float:
    root = parse(expression)
    check(expression, root, True)
    return estimate_cost(root)


@pytest.mark.parametrize("name", sorted(COMPILE_TEST))
def test_compile_test_costs(name: str) -> None:
    expression, expected = COMPILE_TEST[name]
    assert estimate(expression) == expected, name


@pytest.mark.parametrize("expression", sorted(LIBRARY_COST_TEST))
def test_library_cost_test_estimates(expression: str) -> None:
    assert estimate(expression) == LIBRARY_COST_TEST[expression]


def test_limit_is_checked_at_compile() -> None:
    with pytest.raises(CelCompileError) as info:
        compile_selector(NESTED)
    assert info.value.message == (f"too complex, exceeds cost limit (estimated cost 85555551, limit {COST_LIMIT})")
    assert compile_selector(ALL).max_cost == 52
    # Without the estimate, as Kubernetes' DisableCostEstimation, the same expression compiles and
    # runs; behind a short-circuit it runs at once (the estimate counts both sides of ||, so
    # estimated it is refused just the same), where the bare nested loops take 10^7 steps.
    compile_selector(NESTED, disable_cost_estimation=True)
    short = f"true || {NESTED}"
    with pytest.raises(CelCompileError, match="exceeds cost limit"):
        compile_selector(short)
    assert compile_selector(short, disable_cost_estimation=True).evaluate(None) is True  # type: ignore[arg-type]


def test_macro_expansion_costs() -> None:
    # all: range (a literal: 10) + result (accu: 1) + n * (condition 2 + step 1 + predicate)
    assert estimate("[1, 1, 1].all(x, x > 0)") == 10 + 1 + 3 * (3 + 2)
    inner = 10 + 1 + 2 * (3 + 3)  # x == y: two identifiers and ceil(0.1 * 1)
    assert estimate("[1, 2].all(x, [1, 2].all(y, x == y))") == 10 + 1 + 2 * (3 + inner)
    # exists: the condition negates the accumulator (3), the step is accu || p
    assert estimate("[1, 2].exists(x, x > 0)") == 10 + 1 + 2 * (4 + 2)
    # map: init [] (10), step accu + [e] (1 + accu + list literal 10 + e)
    assert estimate("[1, 2].map(x, x + 1).size() == 2") == 10 + 10 + 1 + 2 * (12 + 2) + 1 + 1


@pytest.mark.parametrize(
    "expression",
    [
        # Sizes nobody declares: equality of types and != of opaque values compare values of
        # unknown size, and string lists built in the expression have no element bound.
        "type(1) == int",
        'semver("1.2.3") != semver("1.0.0")',
        'quantity("1") != quantity("2")',
        "['a', 'b'].isSorted()",
        "['hello', 'mellow'].join() == 'hellomellow'",
        # A comprehension over a list of unknown length.
        f"{D}.s.split(',').all(x, x.split(';').all(y, y.size() > 0))",
    ],
)
def test_unbounded_as_in_kubernetes(expression: str) -> None:
    assert is_unbounded(estimate(expression)) or estimate(expression) > COST_LIMIT
    with pytest.raises(CelCompileError) as info:
        compile_selector(expression)
    assert info.value.message.startswith("too complex, exceeds cost limit")


def test_presence_tests_are_free() -> None:
    # environment/base.go: cel.CostEstimatorOptions(checker.PresenceTestHasCost(false))
    assert estimate(f"has({D}.name)") == 3
    assert estimate(f'has({D}.name) && {D}.name == "x"') == 3 + 5


def test_quantity_and_semver_equality_cost_one() -> None:
    # library.CostEstimator: == on Quantity and Semver is O(1).
    assert estimate('quantity("1Gi") == quantity("1024Mi")') == 1 + 1 + 1
    assert estimate(f'{C}["memory"] == quantity("80Gi")') == 4 + 1 + 1
    assert estimate('semver("1.0.0") == semver("1.0.0")') == 3
