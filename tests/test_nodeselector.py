"""The one node-selector requirement matcher, as nodeaffinity reads requirements."""

from __future__ import annotations

import pytest

from gpucluster.nodeselector import parse_int64, requirement_matches

LABELS = {"zone": "a", "gpus": "8", "odd": "1_0"}


@pytest.mark.parametrize(
    ("key", "operator", "values", "expected"),
    [
        ("zone", "In", ["a", "b"], True),
        ("zone", "In", ["b"], False),
        ("missing", "In", ["a"], False),
        ("zone", "NotIn", ["b"], True),
        ("missing", "NotIn", ["a"], True),  # an absent label is not in any set
        ("zone", "Exists", [], True),
        ("missing", "DoesNotExist", [], True),
        ("gpus", "Gt", ["4"], True),
        ("gpus", "Lt", ["4"], False),
        ("gpus", "Gt", ["+7"], True),  # strconv.ParseInt takes a sign
        ("zone", "Gt", ["1"], False),  # not an integer label: no match
        ("odd", "Gt", ["1"], False),  # Python's int() would read 1_0 as 10; Go does not
        ("gpus", "Gt", ["1", "2"], False),
        ("missing", "Lt", ["9"], False),
        ("zone", "Matches", ["a"], False),  # unknown operator
    ],
)
def test_requirements(key: str, operator: str, values: list[str], expected: bool) -> None:
    assert requirement_matches(key, operator, values, LABELS) is expected


def test_int64_bounds() -> None:
    assert parse_int64("9223372036854775807") == 2**63 - 1
    assert parse_int64("9223372036854775808") is None
    assert parse_int64(" 1") is None
