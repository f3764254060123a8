"""The JSON diff applies to the original and yields the modified value, shared subtrees or not; clone is deep."""

from __future__ import annotations

from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jsonutil import clone, diff

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["a", "b", "x/y", "t~1"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["a", "b", "c/d", "e~f", ""]), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(json_values, json_values)
def test_diff_applies(original: Any, modified: Any) -> None:
    ops = diff(original, modified)
    assert jsonpatch.apply_patch(original, ops) == modified
    if original == modified and type(original) is type(modified):
        assert ops == []


def test_diff_is_minimal_for_nested_changes() -> None:
    a = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}}
    b = clone(a)
    del b["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert diff(a, b) == [{"op": "remove", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu"}]


def test_scalar_type_changes_are_replaced() -> None:
    assert diff(1, True) == [{"op": "replace", "path": "", "value": True}]
    assert diff({"a": [1]}, {"a": [1, 2]}) == [{"op": "add", "path": "/a/1", "value": 2}]


@given(json_values)
def test_clone_is_equal_and_independent(value: Any) -> None:
    copy = clone(value)
    assert copy == value
    if isinstance(copy, dict):
        copy["__new__"] = 1
        assert "__new__" not in value


def mutate(value: Any, steps: list[int], new: Any) -> Any:
    """A copy-on-write change of ``value``: the subtree that ``steps`` lead to becomes ``new``, its
    ancestors are copied and everything else is shared (the same objects)."""
    if not steps or not isinstance(value, dict | list) or not value:
        return new
    index = steps[0] % len(value)
    if isinstance(value, dict):
        key = list(value)[index]
        return {**value, key: mutate(value[key], steps[1:], new)}
    out = list(value)
    out[index] = mutate(value[index], steps[1:], new)
    return out


@settings(max_examples=500, deadline=None)
@given(json_values, st.lists(st.integers(0, 3), max_size=4), json_values)
def test_shared_subtrees_diff_as_equal_copies(original: Any, steps: list[int], new: Any) -> None:
    modified = mutate(original, steps, new)
    assert diff(original, modified) == diff(clone(original), clone(modified))
    assert jsonpatch.apply_patch(original, diff(original, modified)) == modified
