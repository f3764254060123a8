"""The DRA CEL environment (gpucluster.dra.cel) against Kubernetes' behaviour.

Expected outcomes come from the upstream tests and sources cited next to each table:
* kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/cel/compile_test.go
* staging/src/k8s.io/apiserver/pkg/cel/library/{quantity_test,semver_test}.go, lists.go,
  regex.go, quantity.go, semverlib.go; pkg/cel/environment/base.go
* google/cel-go ext/strings.go (version 2), ext/sets.go, ext/lists.go, common/types/*.go
  (overflow.go, err.go, list.go, map.go), interpreter/attributes.go, checker/errors.go
"""

from __future__ import annotations

from typing import Any

import pytest

from gpucluster.dra.cel import (
    MAX_EXPRESSION_LENGTH,
    CelCompileError,
    CelRuntimeError,
    DeviceView,
    Program,
    compile_selector,
    device_view,
    slice_views,
)

DRIVER = "dra.example.com"


def device(
    attributes: dict[str, Any] | None = None,
    capacity: dict[str, str] | None = None,
    driver: str = DRIVER,
    allow_multiple_allocations: bool | None = None,
) -> DeviceView:
    attrs: dict[str, Any] = {}
    for name, value in (attributes or {}).items():
        if isinstance(value, bool):
            attrs[name] = {"bool": value}
        elif isinstance(value, int):
            attrs[name] = {"int": value}
        elif isinstance(value, tuple):
            attrs[name] = {"version": value[1]}
        else:
            attrs[name] = {"string": value}
    caps = {name: {"value": value} for name, value in (capacity or {}).items()}
    raw: dict[str, Any] = {"name": "dev-0", "attributes": attrs, "capacity": caps}
    if allow_multiple_allocations is not None:
        raw["allowMultipleAllocations"] = allow_multiple_allocations
    return device_view(driver, raw)


def version(v: str) -> tuple[str, str]:
    return ("version", v)


EMPTY = device()


def run(expr: str, dev: DeviceView = EMPTY, consumable_capacity: bool = False) -> bool:
    return compile_selector(expr, consumable_capacity=consumable_capacity).evaluate(dev)


def run_uncosted(expr: str) -> bool:
    # The library tables come from the libraries' own tests, which run without the DRA cost
    # estimator; some of their expressions are refused as too complex in a selector
    # (tests/test_cel_cost_upstream.py), their evaluation is what is tested here.
    return compile_selector(expr, disable_cost_estimation=True).evaluate(EMPTY)


def runtime_error(expr: str, dev: DeviceView = EMPTY, consumable_capacity: bool = False) -> str:
    program = compile_selector(expr, consumable_capacity=consumable_capacity)
    with pytest.raises(CelRuntimeError) as info:
        program.evaluate(dev)
    return info.value.message


def compile_error(expr: str, consumable_capacity: bool = False) -> CelCompileError:
    with pytest.raises(CelCompileError) as info:
        compile_selector(expr, consumable_capacity=consumable_capacity)
    return info.value


# -- compile_test.go (dynamic-resource-allocation/cel), scenario by scenario ----------------

ALL_ATTRS = {"bool": True, "int": 1, "string": "fish", "version": version("1.0.0")}

K8S_MATCHES: list[tuple[str, str, DeviceView, bool]] = [
    ("true", "true", EMPTY, True),
    ("false", "false", EMPTY, False),
    ("domain-check-negative", '"no-such-domain" in device.attributes', EMPTY, False),
    (
        "domain-check-positive",
        '"dra.example.com" in device.attributes',
        device({"dra.example.com/something": True}),
        True,
    ),
    ("empty-driver-name", 'device.driver == ""', device(driver=""), True),
    ("real-driver-name", 'device.driver == "dra.example.com"', device(), True),
    ("driver-name-qualifier", 'device.attributes["dra.example.com"].name', device({"name": True}), True),
    (
        "driver-name-qualifier-map-lookup",
        'device.attributes["dra.example.com"]["name"]',
        device({"name": True}),
        True,
    ),
    ("bind", 'cel.bind(dra, device.attributes["dra.example.com"], dra.name)', device({"name": True}), True),
    (
        "qualified-attribute-name",
        'device.attributes["other.example.com"].name',
        device({"other.example.com/name": True}),
        True,
    ),
    ("bool", 'device.attributes["dra.example.com"].name', device({"name": True}), True),
    ("int", 'device.attributes["dra.example.com"].name > 0', device({"name": 1}), True),
    ("string", 'device.attributes["dra.example.com"].name == "fish"', device({"name": "fish"}), True),
    (
        "version",
        'device.attributes["dra.example.com"].name.isGreaterThan(semver("0.0.1"))',
        device({"name": version("1.0.0")}),
        True,
    ),
    (
        "version_v",
        'device.attributes["dra.example.com"].name.isGreaterThan(semver("v0.0.1", true)) && isSemver("v1.0.0", true)',
        device({"name": version("1.0.0")}),
        True,
    ),
    (
        "quantity",
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        device(capacity={"name": "1Mi"}),
        True,
    ),
    (
        "check-positive",
        '"name" in device.capacity["dra.example.com"] && '
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        device(capacity={"name": "1Mi"}),
        True,
    ),
    (
        "check-negative",
        '!("name" in device.capacity["dra.example.com"]) || '
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        EMPTY,
        True,
    ),
    (
        "all",
        """
device.capacity["dra.example.com"].quantity.isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"].bool &&
device.attributes["dra.example.com"].int > 0 &&
device.attributes["dra.example.com"].string == "fish" &&
device.attributes["dra.example.com"].version.isGreaterThan(semver("0.0.1")) &&
device.capacity["dra.example.com"]["quantity"].isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"]["bool"] &&
device.attributes["dra.example.com"]["int"] > 0 &&
device.attributes["dra.example.com"]["string"] == "fish" &&
device.attributes["dra.example.com"]["version"].isGreaterThan(semver("0.0.1"))
""",
        device(ALL_ATTRS, {"quantity": "1Mi"}),
        True,
    ),
    (
        "many",
        'device.attributes["dra.example.com"].a && device.attributes["dra.example.com"].b && '
        'device.attributes["dra.example.com"].c',
        device({"a": True, "b": True, "c": True}),
        True,
    ),
    (
        "check_attribute_domains",
        'device.attributes.exists_one(x, x == "dra.example.com")',
        device({"services": "some_example_value"}),
        True,
    ),
    (
        "check_attribute_ids",
        'device.attributes["dra.example.com"].exists_one(x, x == "services")',
        device({"services": "some_example_value"}),
        True,
    ),
    (
        "split_attribute",
        'device.attributes["dra.example.com"].services.split("example").size() >= 2',
        device({"services": "some_example_value"}),
        True,
    ),
    (
        "regexp_attribute",
        'device.attributes["dra.example.com"].services.matches("[^a]?sym")',
        device({"services": "asymetric"}),
        True,
    ),
    (
        "check_capacity_domains",
        'device.capacity.exists_one(x, x == "dra.example.com")',
        device(capacity={"memory": "1Mi"}),
        True,
    ),
    (
        "check_capacity_ids",
        'device.capacity["dra.example.com"].exists_one(x, x == "memory")',
        device(capacity={"memory": "1Mi"}),
        True,
    ),
]


@pytest.mark.parametrize(("name", "expr", "dev", "expected"), K8S_MATCHES, ids=[c[0] for c in K8S_MATCHES])
def test_kubernetes_compile_test_matches(name: str, expr: str, dev: DeviceView, expected: bool) -> None:
    assert run(expr, dev) is expected


@pytest.mark.parametrize(
    ("expr", "dev", "message"),
    [
        # compile_test.go "runtime-error-lookup-identifier" / "-map": unknown domain is an empty map,
        # an unknown name in it a runtime error.
        (
            'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))',
            EMPTY,
            "no such key: noSuchAttr",
        ),
        (
            'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))',
            EMPTY,
            "no such key: noSuchAttr",
        ),
        # "macro-exists-on-int" / "-bool" / "-string" / "-version"
        (
            'device.attributes["dra.example.com"].name.exists(x, x > 0)',
            device({"name": 1}),
            "got 'types.Int', expected iterable type",
        ),
        (
            'device.attributes["dra.example.com"].name.exists(x, x == true)',
            device({"name": True}),
            "got 'types.Bool', expected iterable type",
        ),
        (
            'device.attributes["dra.example.com"].name.exists(x, x == "fish")',
            device({"name": "fish"}),
            "got 'types.String', expected iterable type",
        ),
        (
            'device.attributes["dra.example.com"].name.exists(x, x.isGreaterThan(semver("0.0.1")))',
            device({"name": version("1.0.0")}),
            "got 'cel.Semver', expected iterable type",
        ),
        # A known domain with an unknown name.
        ('device.attributes["dra.example.com"].other', device({"name": True}), "no such key: other"),
        ('device.capacity["dra.example.com"].memory.isZero()', EMPTY, ""),
    ][:-1],
)
def test_kubernetes_runtime_errors(expr: str, dev: DeviceView, message: str) -> None:
    assert message in runtime_error(expr, dev)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("?!", "Syntax error"),  # compile_test.go "syntax-error"
        ("1", "must evaluate to bool or the unknown type, not int"),  # "type-error"
        ('device.driver + "x"', "must evaluate to bool or the unknown type, not string"),
        ("dyn(true)", "must evaluate to bool or the unknown type, not dyn"),
        ("device.foo", "undefined field 'foo'"),
        ("device.allowMultipleAllocations == false", "undefined field 'allowMultipleAllocations'"),
        ("foo == 1", "undeclared reference to 'foo'"),
        ("device.driver == 1", "found no matching overload for '_==_' applied to '(string, int)'"),
        ('semver("1.0.0") < semver("2.0.0")', "found no matching overload for '_<_'"),
        ('quantity("1") == "1"', "found no matching overload for '_==_'"),
        ("isSemver([1, 2, 3])", "found no matching overload for 'isSemver'"),  # semver_test.go
        ("isQuantity([1, 2, 3])", "found no matching overload for 'isQuantity'"),  # quantity_test.go
        ('[1, "a"].size() > 0', "expected type 'int' but found 'string'"),  # HomogeneousAggregateLiterals
        ("1 && true", "expected type 'bool' but found 'int'"),
        ("(1).all(x, x > 0)", "cannot be range of a comprehension"),
        ('"abc".reverse() == "cba"', "found no matching overload for 'reverse'"),  # strings v3 only
        ('quantity("1").sign() == 1', "found no matching overload for 'sign'"),  # sign is global
        ('timestamp("2024-01-01T00:00:00Z") > timestamp("2023-01-01T00:00:00Z")', "not supported"),
        ('"abc".matches("(")', "invalid regular expression"),  # ValidateRegexLiterals
        ('"abc".find("[") == ""', "invalid regular expression"),
        ('device.attributes["a"].b == 1 && "x".matches("a(?=b)")', "invalid regular expression"),
        ("9223372036854775808 > 0", "invalid int literal"),
        ('"\\q" == ""', "Syntax error"),
        ("has(device)", "invalid argument to has() macro"),
    ],
)
def test_compile_errors(expr: str, message: str) -> None:
    err = compile_error(expr)
    assert message in err.message
    assert str(err) == f"{err.line}:{err.column}: {err.message}"
    assert err.expression == expr


def test_compile_error_positions() -> None:
    err = compile_error("true &&\n  device.foo")
    assert (err.line, err.column) == (2, 10)
    err = compile_error('device.driver == "a" && device.driver == 1')
    assert err.line == 1 and err.column > 20
    err = compile_error("device.driver ==")
    assert err.message.startswith("Syntax error")
    assert err.line == 1


def test_allow_multiple_allocations_needs_consumable_capacity() -> None:
    # compile_test.go "allow_multiple_allocations*"
    assert run("device.allowMultipleAllocations == true", device(allow_multiple_allocations=True), True)
    assert run("device.allowMultipleAllocations == false", device(), True)
    assert run("device.allowMultipleAllocations == false", device(allow_multiple_allocations=False), True)
    assert compile_error("device.allowMultipleAllocations").message == "undefined field 'allowMultipleAllocations'"
    view = device_view(DRIVER, {"name": "x"}, allow_multiple_allocations=True)
    assert run("device.allowMultipleAllocations", view, True)


def test_expression_length_limit() -> None:
    long = "true || " * (MAX_EXPRESSION_LENGTH // 8) + "true"
    assert len(long) > MAX_EXPRESSION_LENGTH
    assert compile_error(long).message.startswith("expression too long")
    ok = ("true || " * ((MAX_EXPRESSION_LENGTH - 4) // 8)) + "true"
    assert len(ok) <= MAX_EXPRESSION_LENGTH
    assert run(ok)


def test_cost_limit() -> None:
    # compile_test.go "expensive": the worst case exceeds CELSelectorExpressionMaxCost, which
    # pkg/apis/resource/validation rejects as "too complex, exceeds cost limit".
    expensive = (
        "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(x, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(y, "
        "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z2, "
        "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z3, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z4, "
        "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z5, int('1'.find('[0-9]*')) < 100)))))))"
    )
    assert "too complex, exceeds cost limit" in compile_error(expensive).message
    # Bounded comprehensions over the device are fine.
    program = compile_selector('device.attributes["dra.example.com"].exists(x, x.startsWith("a"))')
    assert program.max_cost < 10_000
    assert "too complex" in compile_error("lists.range(100000000).all(x, x >= 0)").message


def test_deep_nesting_is_a_compile_error() -> None:
    assert "recursion limit" in compile_error("(" * 300 + "true" + ")" * 300).message


# -- error semantics (CEL spec; cel-go interpreter/interpretable.go evalAnd/evalOr) ----------

ERR = 'device.attributes["dra.example.com"].missing > 1'


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (f"{ERR} || true", True),
        (f"true || {ERR}", True),
        (f"{ERR} && false", False),
        (f"false && {ERR}", False),
        (f"{ERR} || {ERR} || true", True),
        (f"{ERR} && true && false", False),
        (f"true ? true : {ERR}", True),
        (f"false ? {ERR} : false", False),
        (f"[1, 0].exists(x, 1 / x > 0) || {ERR}", True),
        (f"!({ERR} && false)", True),
        # all() keeps going past an error and a later false wins (cel-go's fold with &&).
        ("[0, 1].all(x, 10 / x > 20)", False),
        ("[0, 1].exists(x, 10 / x > 5)", True),
    ],
)
def test_logical_operators_absorb_errors(expr: str, expected: bool) -> None:
    assert run(expr) is expected


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (f"{ERR} || false", "no such key: missing"),
        (f"true && {ERR}", "no such key: missing"),
        (f"{ERR} || {ERR.replace('missing', 'other')}", "no such key: missing"),  # first error wins
        (f"{ERR} ? true : false", "no such key: missing"),
        ("[0, 1].all(x, 10 / x > 0)", "division by zero"),
        ("[1, 0].exists_one(x, 10 / x > 0)", "division by zero"),
        ('device.attributes["dra.example.com"].name', "could not be converted to bool"),
        ('device.attributes["dra.example.com"].name', "must evaluate to bool"),
    ],
)
def test_errors_that_propagate(expr: str, message: str) -> None:
    assert message in runtime_error(expr, device({"name": "fish"}))


# -- device variable ----------------------------------------------------------------------


def test_unqualified_and_qualified_names() -> None:
    dev = device(
        {
            "productName": "H100",
            "resource.kubernetes.io/pciBusID": "0000:3b:00.0",
            "dra.example.com/index": 3,
        },
        {"memory": "80Gi", "other.example.com/slots": "4"},
    )
    assert run('device.attributes["dra.example.com"].productName == "H100"', dev)
    assert run('device.attributes["dra.example.com"].index == 3', dev)
    assert run('device.attributes["resource.kubernetes.io"].pciBusID == "0000:3b:00.0"', dev)
    assert run('device.attributes["resource.kubernetes.io"]["pciBusID"].startsWith("0000")', dev)
    assert run('has(device.attributes["dra.example.com"].productName)', dev)
    assert not run('has(device.attributes["dra.example.com"].pciBusID)', dev)
    assert run('"pciBusID" in device.attributes["resource.kubernetes.io"]', dev)
    assert not run('"x" in device.attributes["unknown.example.com"]', dev)
    assert run('device.attributes["unknown.example.com"].size() == 0', dev)
    assert run("device.attributes.size() == 2", dev)
    assert run('device.capacity["other.example.com"].slots == quantity("4")', dev)
    assert run('device.capacity["dra.example.com"].memory == quantity("81920Mi")', dev)
    assert run('cel.bind(a, device.attributes["dra.example.com"], a.productName == "H100" && a.index > 2)', dev)
    assert run("device.attributes.all(d, device.attributes[d].size() > 0)", dev)
    assert run('device.attributes["dra.example.com"].?productName.orValue("") == "H100"', dev)
    assert run('!device.attributes["dra.example.com"].?nothing.hasValue()', dev)
    assert run('device.attributes[?"dra.example.com"].hasValue()', dev)
    # has() on the outer map sees every domain (Kubernetes' wrapper only overrides Find).
    assert run("has(device.attributes.unknown)", dev)
    assert run('"unknown" in device.attributes == false', dev)


def test_strict_typing_of_versions_and_quantities() -> None:
    dev = device({"v": version("1.2.3"), "s": "1.2.3", "i": 1}, {"m": "1Gi"})
    # Semver.Equal / Quantity.Equal return "no such overload" for another type (apiserver pkg/cel).
    assert "no such overload" in runtime_error('device.attributes["dra.example.com"].v == "1.2.3"', dev)
    assert "no such overload" in runtime_error('device.attributes["dra.example.com"].v == 1', dev)
    assert "no such overload" in runtime_error(
        'device.attributes["dra.example.com"].s.compareTo(semver("1.2.3")) == 0', dev
    )
    assert "no such overload" in runtime_error(
        'device.attributes["dra.example.com"].v.compareTo(quantity("1")) == 0', dev
    )
    assert "no such overload" in runtime_error('device.attributes["dra.example.com"].v > 1', dev)
    # The other way round it is the string's Equal, which is simply false.
    assert run('"1.2.3" != device.attributes["dra.example.com"].v', dev)
    assert run('device.attributes["dra.example.com"].v == semver("1.2.3+build")', dev)
    assert run('device.attributes["dra.example.com"].v != null', dev)
    assert run('device.capacity["dra.example.com"].m == quantity("1024Mi")', dev)
    # Heterogeneous equality of plain values (cel-go types.Equal): false, or numeric equality.
    assert run('device.attributes["dra.example.com"].i != "1"', dev)
    assert run('device.attributes["dra.example.com"].i == 1.0', dev)
    assert run('device.attributes["dra.example.com"].s != 1', dev)
    assert "no such overload" in runtime_error('device.attributes["dra.example.com"].s > 1', dev)
    assert run('device.attributes["dra.example.com"].i < 1.5', dev)  # cross-type numeric ordering


def test_slice_views_are_built_per_call() -> None:
    metadata = {"name": "node-1-gpu", "uid": "u1", "generation": 1, "resourceVersion": "7"}
    resource_slice: dict[str, Any] = {
        "metadata": metadata,
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": "node-1", "generation": 1},
            "devices": [
                {"name": "gpu-0", "attributes": {"index": {"int": 0}}, "capacity": {"memory": {"value": "80Gi"}}},
                {"name": "gpu-1", "attributes": {"index": {"int": 1}}, "capacity": {"memory": {"value": "80Gi"}}},
            ],
        },
    }
    views = slice_views(resource_slice)
    assert [v.name for v in views] == ["gpu-0", "gpu-1"]
    program = compile_selector('device.attributes["gpu.nvidia.com"].index == 1')
    assert [program.evaluate(v) for v in views] == [False, True]
    # No process-wide cache: a slice edited in place (same name and version) is seen as it is now.
    resource_slice["spec"]["devices"][1]["attributes"]["index"] = {"int": 2}
    again = slice_views(resource_slice)
    assert again is not views
    assert [program.evaluate(v) for v in again] == [False, False]


def test_program_reads_and_cache() -> None:
    program = compile_selector(
        'device.attributes["gpu.nvidia.com"].productName == "x" && '
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("1Gi")) > 0'
    )
    assert ("attributes", "gpu.nvidia.com", "productName") in program.reads
    assert ("capacity", "gpu.nvidia.com", "memory") in program.reads
    assert compile_selector(program.expression) is program
    assert isinstance(program, Program)
    assert compile_selector(program.expression, consumable_capacity=True) is not program


# -- standard library ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        "1 + 2 == 3",
        "-7 / 2 == -3",  # truncation toward zero (Go)
        "-7 % 2 == -1",
        "7 % -2 == 1",
        "3u / 2u == 1u",
        "2.0 / 0.0 > 1e308",
        "1.5 * 2.0 == 3.0",
        "-9223372036854775808 < 0",
        "9223372036854775807 - 1 > 0",
        "18446744073709551615u > 0u",
        '"ab" + "c" == "abc"',
        'b"ab" + b"c" == b"abc"',
        "[1, 2] + [3] == [1, 2, 3]",
        "size([1, 2, 3]) == 3 && [1].size() == 1 && size({'a': 1}) == 1 && 'abc'.size() == 3",
        "size('é') == 1 && size(b'\\xc3\\xa9') == 2",
        "int('-12') == -12 && uint('12') == 12u && double('1.5') == 1.5",
        "int(2.9) == 2 && int(-2.9) == -2 && int(3u) == 3",
        "string(1) == '1' && string(2.5) == '2.5' && string(true) == 'true' && string(1u) == '1'",
        "string(1e6) == '1e+06' && string(123456.0) == '123456' && string(0.0001) == '0.0001'",
        "bool('true') && !bool('f')",
        "bytes('é') == b'\\xc3\\xa9' && string(b'abc') == 'abc'",
        "double(1) == 1.0 && double(2u) == 2.0",
        "type(1) == int && type('a') == string && type([]) == list && type({}) == map",
        "type(1u) == uint && type(1.0) == double && type(true) == bool && type(null) == null_type",
        "type(quantity('1')) != type(semver('1.0.0'))",
        "'hello'.contains('ell') && 'hello'.startsWith('he') && 'hello'.endsWith('lo')",
        "'abc'.matches('^a.c$') && matches('abc', 'b') && !'abc'.matches('^b')",
        "'aaa'.matches('a{3}') && !'Hello'.matches('hello') && 'Hello'.matches('(?i)hello')",
        "'\\u00e9'.matches('^\\\\pL$')",  # RE2 Unicode classes
        "2 in [1, 2, 3] && !(4 in [1, 2, 3]) && 'a' in {'a': 1}",
        "dyn(1) in [1.0] && dyn(1u) in [1]",  # heterogeneous numeric equality in lists
        "[1, 2, 3].all(x, x > 0) && [1, 2, 3].exists(x, x == 2) && [1, 2, 3].exists_one(x, x > 2)",
        "[1, 2, 3].map(x, x * 2) == [2, 4, 6] && [1, 2, 3].filter(x, x % 2 == 1) == [1, 3]",
        "[1, 2, 3].map(x, x > 1, x * 10) == [20, 30]",
        "{'a': 1, 'b': 2}.all(k, k.size() == 1) && {'a': 1}.map(k, k + k) == ['aa']",
        "[1, 2].all(i, v, v > i) && {'a': 'a'}.exists(k, v, k == v)",
        "[10, 20].transformList(i, v, v + i) == [10, 21] && {'a': 1}.transformMap(k, v, v + 1) == {'a': 2}",
        "true ? true : false",
        "(1 < 2 ? 'a' : 'b') == 'a'",
        "null == null && [] == [] && {} == {} && [[1]] == [[1]] && {'a': [1]} == {'a': [1]}",
        "{'a': 1} != {'a': 2} && [1, 2] != [2, 1]",
        "1 == 1 && 1u == 1u && 'a' < 'b' && b'a' < b'b' && false < true && 1.5 > 1.0",
        "dyn(1) == 1.0 && dyn(1u) == 1 && dyn('a') != 1 && dyn(true) != 1",
        "1 < 1.5 && 2u > 1 && 1.0 <= 1u",
        "cel.bind(x, [1, 2, 3], x.size() == 3 && x[0] == 1)",
        "has({'a': 1}.a) && !has({'a': 1}.b)",
        "{'a': {'b': 1}}.a.b == 1",
        "[1, 2, 3][2] == 3 && {1: 'x'}[1] == 'x' && {true: 'y'}[true] == 'y'",
        "r'\\d' == '\\\\d' && '''multi\nline'''.size() == 10",
        "0x1F == 31 && 1e3 == 1000.0 && .5 == 0.5",
        "!false && !!true",
    ],
)
def test_standard_library(expr: str) -> None:
    assert run_uncosted(expr), expr


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("9223372036854775807 + 1 > 0", "integer overflow"),
        ("-9223372036854775808 - 1 < 0", "integer overflow"),
        ("9223372036854775807 * 2 > 0", "integer overflow"),
        ("-(-9223372036854775808) > 0", "integer overflow"),
        ("-9223372036854775808 / -1 < 0", "integer overflow"),
        ("0u - 1u > 0u", "unsigned integer overflow"),
        ("18446744073709551615u + 1u > 0u", "unsigned integer overflow"),
        ("1 / 0 == 0", "division by zero"),
        ("1 % 0 == 0", "modulus by zero"),
        ("uint(-1) > 0u", "unsigned integer overflow"),
        ("int(1e19) > 0", "integer overflow"),
        ("int('abc') > 0", "type conversion error from 'string' to 'int'"),
        ("int(' 1') > 0", "type conversion error"),
        ("string(b'\\xff') == ''", "invalid UTF-8"),
        ("[1, 2][2] == 0", "index out of bounds: 2"),
        ("{'a': 1}['b'] == 1", "no such key: b"),
        ("{'a': 1}.b == 1", "no such key: b"),
        ("{1: 'x'}[2] == 'x'", "no such key: 2"),
        ("dyn({true: 1})[1] == 1", "no such key: 1"),  # bool keys never match ints
        ("optional.none().value() == 1", "optional.none() dereference"),
        ("dyn(1) + dyn('a') == 1", "no such overload"),
        ("dyn('a') < dyn(1)", "no such overload"),
        ("{'a': 1, 'a': 2}.size() == 1", "repeated key"),
        ("dyn(1.0) < double('NaN')", "NaN values cannot be ordered"),
    ],
)
def test_standard_library_errors(expr: str, message: str) -> None:
    assert message in runtime_error(expr)


# -- optional types (cel.OptionalTypes) ------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        "optional.of(1).hasValue() && optional.of(1).value() == 1",
        "!optional.none().hasValue() && optional.none().orValue(5) == 5",
        "!optional.ofNonZeroValue(0).hasValue() && optional.ofNonZeroValue(1).hasValue()",
        "!optional.ofNonZeroValue('').hasValue() && !optional.ofNonZeroValue([]).hasValue()",
        "optional.none().or(optional.of(2)).value() == 2",
        "optional.of(1).or(optional.of(2)).value() == 1",
        "{'a': 1}.?a.orValue(0) == 1 && {'a': 1}.?b.orValue(0) == 0",
        "{'a': 1}[?'a'].value() == 1 && !{'a': 1}[?'b'].hasValue()",
        "[1, 2][?1].value() == 2 && ![1, 2][?5].hasValue()",
        "{'a': {'b': 1}}.?a.b.value() == 1 && !{'a': {'b': 1}}.?x.b.hasValue()",
        "[?optional.of(1), ?optional.none(), 2] == [1, 2]",
        "{?'a': optional.of(1), ?'b': optional.none()} == {'a': 1}",
        "optional.of(2).optMap(x, x * 2).value() == 4",
        "!optional.none().optMap(x, x * 2).hasValue()",
        "optional.of(2).optFlatMap(x, optional.of(x + 1)).value() == 3",
    ],
)
def test_optional_types(expr: str) -> None:
    assert run(expr), expr


# -- ext.Strings version 2 (cel-go ext/strings.go) --------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        "'hello'.charAt(4) == 'o' && 'hello'.charAt(5) == ''",
        "'hello mellow'.indexOf('') == 0 && 'hello mellow'.indexOf('ello') == 1",
        "'hello mellow'.indexOf('jello') == -1 && 'hello mellow'.indexOf('', 2) == 2",
        "'hello mellow'.indexOf('ello', 2) == 7 && 'hello mellow'.indexOf('ello', 20) == -1",
        "'hello mellow'.lastIndexOf('') == 12 && 'hello mellow'.lastIndexOf('ello') == 7",
        "'hello mellow'.lastIndexOf('jello') == -1 && 'hello mellow'.lastIndexOf('ello', 6) == 1",
        "'hello mellow'.lastIndexOf('ello', 20) == -1",
        "'TacoCat'.lowerAscii() == 'tacocat' && 'TacoCÆt Xii'.lowerAscii() == 'tacocÆt xii'",
        "'TacoCat'.upperAscii() == 'TACOCAT' && 'TacoCÆt Xii'.upperAscii() == 'TACOCÆT XII'",
        "'hello hello'.replace('he', 'we') == 'wello wello'",
        "'hello hello'.replace('he', 'we', 1) == 'wello hello' && 'hello hello'.replace('he', 'we', 0) == 'hello hello'",
        "'hello hello'.replace('', '_') == '_h_e_l_l_o_ _h_e_l_l_o_' && 'hello hello'.replace('h', '') == 'ello ello'",
        "'hello hello hello'.split(' ') == ['hello', 'hello', 'hello']",
        "'hello hello hello'.split(' ', 0) == [] && 'hello hello hello'.split(' ', 1) == ['hello hello hello']",
        "'hello hello hello'.split(' ', 2) == ['hello', 'hello hello'] && 'abc'.split('') == ['a', 'b', 'c']",
        "'tacocat'.substring(4) == 'cat' && 'tacocat'.substring(0, 4) == 'taco'",
        "'  \\ttrim\\n    '.trim() == 'trim'",
        "['hello', 'mellow'].join() == 'hellomellow' && ['hello', 'mellow'].join(' ') == 'hello mellow'",
        "[].join() == '' && [].join('/') == ''",
        'strings.quote(\'single-quote with "double quote"\') == \'"single-quote with \\\\"double quote\\\\""\'',
        "strings.quote('two escape sequences \\a\\n') == '\"two escape sequences \\\\a\\\\n\"'",
        "'%s and %d'.format(['str', dyn(42)]) == 'str and 42'",
        "'%.2f|%x|%X|%o|%b|%%'.format([3.14159, dyn(26), dyn(26), dyn(30), dyn(5)]) == '3.14|1a|1A|36|101|%'",
    ],
)
def test_strings_extension(expr: str) -> None:
    assert run_uncosted(expr), expr


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("'hello'.charAt(-1) == ''", "index out of range: -1"),
        ("'hello'.charAt(6) == ''", "index out of range: 6"),
        ("'hello mellow'.indexOf('ello', -1) == 0", "index out of range: -1"),
        ("'hello mellow'.lastIndexOf('ello', -1) == 0", "index out of range: -1"),
        ("'tacocat'.substring(-1) == ''", "index out of range: -1"),
        ("'tacocat'.substring(2, 1) == ''", "invalid substring range. start: 2, end: 1"),
        ("dyn([1]).join() == ''", "join: invalid input: 1"),
        ("'%d'.format(['a']) == ''", "decimal clause can only be used on integers"),
        ("'%s %s'.format(['a']) == ''", "index 1 out of range"),
    ],
)
def test_strings_extension_errors(expr: str, message: str) -> None:
    assert message in runtime_error(expr)


# -- Kubernetes lists, sets and ext.Lists -----------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        # apiserver pkg/cel/library/lists.go examples
        "[1, 2, 3].isSorted() && ['a', 'b', 'b', 'c'].isSorted() && ![2.0, 1.0].isSorted()",
        "[1].isSorted() && [].isSorted()",
        "[1, 3].sum() == 4 && [1.0, 3.0].sum() == 4.0 && [1u, 2u].sum() == 3u",
        "[1, 3].min() == 1 && [1, 3].max() == 3 && [1].min() == 1 && ['b', 'a'].min() == 'a'",
        "[1, 2, 2, 3].indexOf(2) == 1 && ['a', 'b', 'b', 'c'].lastIndexOf('b') == 2",
        "[1.0].indexOf(1.1) == -1",
        # cel-go ext/sets.go
        "sets.contains([1, 2, 3], [2, 3]) && !sets.contains([1], [2])",
        "sets.equivalent([1, 2], [2, 1, 1]) && sets.intersects([1, 2], [2, 5]) && !sets.intersects([1], [])",
        # cel-go ext/lists.go (version 3 in Kubernetes 1.34)
        "[1, 2, 3, 4].slice(1, 3) == [2, 3] && [[1], [2, 3]].flatten() == [1, 2, 3]",
        "[1, 2, 2, 1].distinct() == [1, 2] && [1, 2].reverse() == [2, 1] && [3, 1, 2].sort() == [1, 2, 3]",
        "lists.range(3) == [0, 1, 2]",
        # Kubernetes regex library (regex.go)
        "'abc 123'.find('[0-9]+') == '123' && 'abc 123'.find('xyz') == ''",
        "'123 abc 456'.findAll('[0-9]+') == ['123', '456'] && '123 abc 456'.findAll('[0-9]+', 1) == ['123']",
        "'123 abc 456'.findAll('xyz') == []",
        # Go's FindAllString drops an empty match right after a match.
        "'123 abc 456'.findAll('[0-9]*') == ['123', '', '', '', '', '456']",
    ],
)
def test_lists_sets_regex(expr: str) -> None:
    assert run_uncosted(expr), expr


def test_list_errors() -> None:
    assert "min called on empty list" in runtime_error("dyn([]).min() == 0")
    assert "max called on empty list" in runtime_error("dyn([]).max() == 0")
    assert "error parsing regexp" in runtime_error("'a'.matches(dyn('('))")


# -- quantity library (apiserver pkg/cel/library/quantity_test.go) --------------------------


@pytest.mark.parametrize(
    "expr",
    [
        'isQuantity("20") && isQuantity("20M") && isQuantity("20Mi")',
        '!isQuantity("20Mo") && !isQuantity("10Mm")',
        'quantity("200M") == quantity("200M")',
        'quantity("200M") == quantity("0.2G") && quantity("0.2G") == quantity("200M")',
        'quantity("2M") == quantity("0.002G") && quantity("2000k") == quantity("2M")',
        'quantity("200M") != quantity("0.3G")',
        'quantity("50M").isLessThan(quantity("50Mi"))',
        'quantity("50M").isLessThan(quantity("100M")) && !quantity("100M").isLessThan(quantity("50M"))',
        'quantity("50Mi").isGreaterThan(quantity("50M")) && quantity("150Mi").isGreaterThan(quantity("100Mi"))',
        '!quantity("50M").isGreaterThan(quantity("100M"))',
        'quantity("200M").compareTo(quantity("0.2G")) == 0',
        'quantity("50M").compareTo(quantity("50Mi")) == -1 && quantity("50Mi").compareTo(quantity("50M")) == 1',
        'quantity("50k").add(quantity("20")) == quantity("50.02k")',
        '!quantity("50k").add(20).isLessThan(quantity("50020"))',
        'quantity("50k").sub(quantity("20")) == quantity("49.98k") && quantity("50k").sub(20) == quantity("49980")',
        'quantity("50k").add(20).sub(quantity("100k")).asInteger() == -49980',
        'quantity("50k").add(20).sub(quantity("100k")).sub(-50000).asInteger() == 20',
        'quantity("50k").asInteger() == 50000',
        '!quantity("9999999999999999999999999999999999999G").isInteger() && quantity("50").isInteger()',
        'quantity("50.703k").asApproximateFloat() == 50703.0',
        '[quantity("9999999999999999999999999999999999999")].all(x, '
        'x.add(quantity("1")).compareTo(x.add(quantity("2"))) == -1)',
        'sign(quantity("-1")) == -1 && sign(quantity("0")) == 0 && sign(quantity("5m")) == 1',
        'quantity("1Gi") == quantity("1024Mi")',
    ],
)
def test_quantity_library(expr: str) -> None:
    assert run_uncosted(expr), expr


def test_quantity_errors() -> None:
    assert "quantities must match the regular expression" in runtime_error('quantity("10Mo") == quantity("1")')
    assert runtime_error('quantity("10Mm") == quantity("1")')  # "unable to parse quantity's suffix"
    assert "cannot convert value to integer" in runtime_error(
        'quantity("9999999999999999999999999999999999999G").asInteger() > 0'
    )


# -- semver library (apiserver pkg/cel/library/semver_test.go, SemverLib version 1) ----------


@pytest.mark.parametrize(
    "expr",
    [
        'isSemver("1.2.3-beta.1+build.1")',
        '!isSemver("") && !isSemver("v1.0.0") && !isSemver(" 1.0.0") && !isSemver("1. 0.0")',
        '!isSemver("1.0.0 ") && !isSemver("01.01.01") && !isSemver("1") && !isSemver("1.1")',
        '!isSemver("", true) && !isSemver(" 1.0.0", true) && !isSemver("1. 0.0", true) && !isSemver("1.0.0 ", true)',
        'isSemver("v1.0.0", true) && isSemver("01.01.01", true) && isSemver("1", true) && isSemver("1.1", true)',
        'semver("v01.01", true) == semver("1.1.0")',
        'semver("1.2.3") == semver("1.2.3") && semver("1.2.3") != semver("1.0.0")',
        'semver("1.0.0").isLessThan(semver("1.2.3")) && !semver("1.0.0").isLessThan(semver("1.0.0"))',
        'semver("1.2.3").isGreaterThan(semver("1.0.0")) && !semver("1.0.0").isGreaterThan(semver("1.0.0"))',
        'semver("1.2.3").compareTo(semver("1.2.3")) == 0 && semver("1.0.0").compareTo(semver("1.2.3")) == -1',
        'semver("1.2.3").compareTo(semver("1.0.0")) == 1',
        'semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3',
        'semver("1.0.0-alpha").isLessThan(semver("1.0.0")) && semver("1.0.0-alpha").isLessThan(semver("1.0.0-beta"))',
    ],
)
def test_semver_library(expr: str) -> None:
    assert run_uncosted(expr), expr


def test_semver_errors() -> None:
    assert runtime_error('semver("v1.0") == semver("1.0.0")')
    dev = device({"driverVersion": version("580.82.7")})
    assert run('device.attributes["dra.example.com"].driverVersion.compareTo(semver("550.0.0")) >= 0', dev)
    assert run('device.attributes["dra.example.com"].driverVersion.major() == 580', dev)
    bad = device({"driverVersion": version("580.82.07")})  # strict semver rejects leading zeros
    assert "parse semantic version" in runtime_error(
        'device.attributes["dra.example.com"].driverVersion.major() > 0', bad
    )


# -- the three benchmark selectors over simulated slices --------------------------------------


def test_benchmark_selectors_on_simulated_cluster() -> None:
    from gpucluster.sandbox.sim.gpunodes import cluster_slices

    slices = cluster_slices(2, 8, model="H100", seed=0)
    views = [v for s in slices for v in slice_views(s)]
    assert views
    exprs = [
        'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"',
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
        'device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("550.0.0")) >= 0',
    ]
    for expr in exprs:
        assert all(compile_selector(expr).evaluate(v) for v in views), expr
    assert not any(
        compile_selector('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("1Ti"))').evaluate(v)
        for v in views
    )
