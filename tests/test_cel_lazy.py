"""Per-domain attribute maps are converted when read (``cel.bind`` over ``device.attributes[...]``)."""

from __future__ import annotations

import pytest

from gpucluster.dra.cel import compile_selector
from gpucluster.dra.cel.view import LazyDomain, device_view

DEVICE = {
    "name": "gpu-0",
    "attributes": {
        "productName": {"string": "NVIDIA H100"},
        "index": {"int": 0},
        "driverVersion": {"version": "550.54.15"},
        "example.com/rack": {"string": "r1"},
        "gpu.nvidia.com/mig": {"bool": False},
    },
    "capacity": {"memory": {"value": "80Gi"}},
}


def _eval(expression: str) -> object:
    return compile_selector(expression).evaluate(device_view("gpu.nvidia.com", DEVICE))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], a.productName == "NVIDIA H100" && a.index == 0)', True),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], a.driverVersion.isGreaterThan(semver("550.0.0")))', True),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], a.size() == 4)', True),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], "mig" in a && !("rack" in a))', True),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], a.exists(k, k == "index"))', True),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], has(a.mig) && !has(a.rack))', True),
        ('device.attributes["example.com"] == {"rack": "r1"}', True),
        ('device.attributes["example.com"].rack == "r1"', True),
        ('device.attributes["nowhere.com"].size() == 0', True),
        ('cel.bind(c, device.capacity["gpu.nvidia.com"], c.memory.compareTo(quantity("40Gi")) > 0)', True),
        ('device.attributes.exists(d, d == "example.com")', True),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], a.all(k, k != ""))', True),
    ],
)
def test_lazy_domains_behave_as_maps(expression: str, expected: object) -> None:
    assert _eval(expression) == expected


def test_a_missing_key_is_the_usual_error() -> None:
    from gpucluster.dra.cel import CelRuntimeError

    with pytest.raises(CelRuntimeError, match="no such key: nope"):
        _eval('cel.bind(a, device.attributes["gpu.nvidia.com"], a.nope == 1)')


def test_only_the_attribute_read_is_converted() -> None:
    view = device_view("gpu.nvidia.com", DEVICE)
    domain = view.attr_domain("gpu.nvidia.com")
    assert isinstance(domain, LazyDomain)
    assert domain.get("productName") == "NVIDIA H100"
    assert dict.__len__(domain) == 1  # nothing else looked at
    assert len(domain) == 4 and sorted(domain) == ["driverVersion", "index", "mig", "productName"]
    assert all(type(v) is not dict for v in domain.values())


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # the bound name stands for the domain; inner scopes that rebind it or `device` win
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], [1].exists(a, a == 1))', True),
        (
            'cel.bind(a, device.attributes["gpu.nvidia.com"], '
            '[device.attributes["example.com"]].all(device, a.productName == "NVIDIA H100" && device.rack == "r1"))',
            True,
        ),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], cel.bind(b, a, b.index == 0 && b.mig == false))', True),
        # errors are absorbed by || and && exactly as without cel.bind
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], a.nope == 1 || a.index == 0)', True),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], a.nope == 1 && a.index == 1)', False),
        ('device.attributes["gpu.nvidia.com"].exists(k, device.attributes["gpu.nvidia.com"][k] == 0)', True),
        ('device.attributes["nowhere.com"].all(k, false)', True),
        ('device.attributes["nowhere.com"].exists(k, true)', False),
        ('device.attributes["gpu.nvidia.com"].exists(k, k == "mig")', True),  # qualified in the driver's domain
        ('device.attributes["example.com"].all(k, k == "rack")', True),
        ('device.capacity["gpu.nvidia.com"].exists(k, k == "memory")', True),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], a.productName.startsWith("NVIDIA"))', True),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], a.productName.contains("H100"))', True),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], a.productName.endsWith("H100"))', True),
    ],
)
def test_bind_and_macros_keep_cel_semantics(expression: str, expected: object) -> None:
    assert _eval(expression) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], a.nope == 1 && a.index == 0)', "no such key: nope"),
        (
            'device.attributes["gpu.nvidia.com"].exists(k, device.attributes["gpu.nvidia.com"][k] > 5)',
            "no such overload",
        ),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], a.index.startsWith("x"))', "no such overload"),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], a.productName)', "could not be converted to bool"),
        ('device.attributes["gpu.nvidia.com"].productName', "could not be converted to bool"),
    ],
)
def test_bind_and_macros_keep_cel_errors(expression: str, message: str) -> None:
    from gpucluster.dra.cel import CelRuntimeError

    with pytest.raises(CelRuntimeError, match=message):
        _eval(expression)


def test_bind_reads_only_what_the_body_reads() -> None:
    program = compile_selector('cel.bind(a, device.attributes["gpu.nvidia.com"], a.productName == "x")')
    assert program.reads == {("attributes", "gpu.nvidia.com", "productName")}
    # an unparsable version is an error only where it is read
    device = {"name": "d", "attributes": {"productName": {"string": "x"}, "driverVersion": {"version": "bad"}}}
    view = device_view("gpu.nvidia.com", device)
    assert program.evaluate(view) is True
    from gpucluster.dra.cel import CelRuntimeError

    with pytest.raises(CelRuntimeError, match="parse semantic version"):
        compile_selector(
            'cel.bind(a, device.attributes["gpu.nvidia.com"], a.driverVersion.isGreaterThan(semver("1.0.0")))'
        ).evaluate(view)


def test_iterating_names_converts_nothing() -> None:
    view = device_view("gpu.nvidia.com", DEVICE)
    domain = view.attr_domain("gpu.nvidia.com")
    assert list(domain) == ["productName", "index", "driverVersion", "mig"]
    assert "mig" in domain and "rack" not in domain and len(domain) == 4
    assert dict.__len__(domain) == 0  # names came from the raw map's shape
    assert view.attr_names("example.com") == ("rack",) and view.attr_names("nowhere.com") == ()


def test_one_shapes_serves_slices_of_different_drivers() -> None:
    from gpucluster.dra.cel import Shapes, slice_views

    def one(driver: str) -> dict[str, object]:
        devices = [{"name": "d", "attributes": {"x": {"int": 1}, "b.com/y": {"int": 2}}}]
        return {"spec": {"driver": driver, "devices": devices}}

    shapes = Shapes()
    a, b = slice_views(one("a.com"), shapes)[0], slice_views(one("b.com"), shapes)[0]
    program = compile_selector('device.attributes["b.com"].exists(k, k == "x")')
    assert program.evaluate(a) is False and program.evaluate(b) is True
    assert a.attr_names("b.com") == ("y",) and b.attr_names("b.com") == ("x", "y")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # A whole capacity domain, not only one of its names.
        ('device.capacity["gpu.nvidia.com"].size() == 1', True),
        ('cel.bind(c, device.capacity["gpu.nvidia.com"], c.size() == 1)', True),
        ('device.capacity["gpu.nvidia.com"] == device.capacity["gpu.nvidia.com"]', True),
        (
            'device.capacity["gpu.nvidia.com"].exists(k, device.capacity["gpu.nvidia.com"][k]'
            '.isGreaterThan(quantity("1")))',
            True,
        ),
        # Macro bodies not typed bool (dyn, a bool attribute) are checked per element.
        ('[1].all(x, device.attributes["gpu.nvidia.com"].mig == false)', True),
        ("[true].all(x, dyn(x))", True),
        ("dyn([true]).exists(x, x)", True),
        ("[1, 2].exists(x, x == 2) || [dyn(1)].exists(y, y)", True),
        ("[dyn(true), dyn(false)].exists_one(x, x)", True),
        ("[dyn(true), dyn(false)].filter(x, x).size() == 1", True),
        # Another domain's qualified name is not a name of the driver's own domain.
        ('"example.com/rack" in device.attributes["gpu.nvidia.com"]', False),
        ('cel.bind(a, device.attributes["gpu.nvidia.com"], "example.com/rack" in a)', False),
        ('has(device.attributes["example.com"].rack)', True),
    ],
)
def test_whole_domains_dyn_bodies_and_qualified_names(expression: str, expected: object) -> None:
    assert _eval(expression) == expected


def test_a_non_bool_macro_body_is_no_such_overload() -> None:
    from gpucluster.dra.cel import CelRuntimeError

    with pytest.raises(CelRuntimeError, match="no such overload"):
        _eval("[dyn(1)].all(x, x)")


def test_a_qualified_name_of_another_domain_is_no_key_of_the_drivers() -> None:
    from gpucluster.dra.cel import CelRuntimeError

    with pytest.raises(CelRuntimeError, match="no such key"):
        _eval('device.attributes["gpu.nvidia.com"]["example.com/rack"] == "r1"')
