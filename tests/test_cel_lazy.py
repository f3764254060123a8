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
