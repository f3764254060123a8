"""Consumable capacity on plain data (gpucluster/dra/capacity.py): consumption, request policies,
capacity names, as upstream's consumable_capacity.go decides them."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpucluster.dra.capacity import Requests, consumed, demand, violates

RANGE = {"default": "2", "validRange": {"min": "2", "step": "2", "max": "8"}}
VALUES = {"default": "1", "validValues": ["1", "4", "16"]}


@pytest.mark.parametrize(
    ("requested", "policy", "expected"),
    [
        (None, None, 10),  # no request, no policy: the whole capacity
        (None, RANGE, 2),  # no request: the policy's default
        (Fraction(3), None, 3),  # no policy: as requested
        (Fraction(1), RANGE, 2),  # below min: min
        (Fraction(3), RANGE, 4),  # rounded up to the next step above min
        (Fraction(4), RANGE, 4),
        (Fraction(2), VALUES, 4),  # the next listed value
        (Fraction(20), VALUES, 20),  # above every listed value: as requested (then a violation)
        (Fraction(1, 2), {"validRange": {"min": "0", "step": "250m"}}, Fraction(1, 2)),
    ],
)
def test_consumed(requested: Fraction | None, policy: dict[str, object] | None, expected: Fraction) -> None:
    assert consumed(requested, Fraction(10), policy, "c") == expected


def test_policy_violations() -> None:
    assert violates(Fraction(10), RANGE, "c")  # over max
    assert not violates(Fraction(8), RANGE, "c")
    assert violates(Fraction(3), {"validRange": {"min": "2", "step": "2"}}, "c")  # off the step grid
    assert violates(Fraction(20), VALUES, "c")
    assert not violates(Fraction(0), {"default": "0", "validValues": ["1"]}, "c")  # the default is always allowed
    assert not violates(Fraction(5), None, "c")


DEVICE = {
    "name": "d",
    "allowMultipleAllocations": True,
    "capacity": {
        "memory": {"value": "8", "requestPolicy": RANGE},
        "example.com/bandwidth": {"value": "100"},
    },
}


def unfit(device: dict[str, object], driver: str, requests: Requests | None) -> str:
    """Why one allocation of ``device`` cannot serve the requests, on an unused device."""
    found = demand(device, driver, requests)
    return found if isinstance(found, str) else found.over(None)


def test_one_allocation_fits_or_says_why() -> None:
    assert unfit(DEVICE, "gpu.nvidia.com", None) == ""
    assert unfit(DEVICE, "gpu.nvidia.com", [("memory", Fraction(3))]) == ""
    assert unfit(DEVICE, "gpu.nvidia.com", [("gpu.nvidia.com/memory", Fraction(8))]) == ""  # same name, qualified
    assert unfit(DEVICE, "gpu.nvidia.com", [("memory", Fraction(9))]) == (
        "capacity gpu.nvidia.com/memory: 10 is not allowed by its requestPolicy"
    )
    assert unfit(DEVICE, "gpu.nvidia.com", [("bandwidth", Fraction(1))]) == (
        "does not have the requested capacity bandwidth"  # another domain only by its qualified name
    )
    assert unfit(DEVICE, "gpu.nvidia.com", [("example.com/bandwidth", Fraction(101))]) == (
        "capacity example.com/bandwidth: needs 101, has 100"
    )
