"""int/uint against double as cel-go compares them: the integer becomes a double first."""

from __future__ import annotations

import pytest

from gpucluster.dra.cel import compile_selector
from gpucluster.dra.cel.view import device_view

VIEW = device_view("gpu.nvidia.com", {"name": "d"})


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # cel-go: compareIntDouble converts 2^63-1 to 2^63.
        ("dyn(9223372036854775807) >= 9223372036854775808.0", True),
        ("dyn(9223372036854775807) == 9223372036854775808.0", True),
        ("dyn(9223372036854775807) < 9223372036854775808.0", False),
        ("9223372036854775808.0 <= dyn(9223372036854775807)", True),
        # beyond the integer's range, the double decides
        ("dyn(9223372036854775807) < 1e19", True),
        ("dyn(-9223372036854775808) > -1e19", True),
        ("dyn(18446744073709551615u) == 18446744073709551616.0", True),
        ("dyn(0u) > -0.5", True),
        ("dyn(18446744073709551615u) < 1e20", True),
        # precision: 2^53 + 1 is not a double
        ("dyn(9007199254740993) == 9007199254740992.0", True),
        ("dyn(1) == 1.0 && dyn(1u) == 1.0 && dyn(2) > 1.5 && dyn(1u) < 1.5", True),
        ("[1.0, 2.0].exists(x, x == dyn(2))", True),
        ("dyn(1) in [1.0]", True),
    ],
)
def test_heterogeneous_numbers(expression: str, expected: bool) -> None:
    assert compile_selector(expression).evaluate(VIEW) is expected
