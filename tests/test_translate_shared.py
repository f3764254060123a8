"""The translation's fast paths answer exactly as the general ones.

* ``translate_pod_spec(share=True)`` copies only what it changes: the same translation as the
  deep copy, its input untouched, the containers it leaves alone shared;
* ``translated_part``: the part of a spec a translation reads translates as the whole spec (the
  same templates, names, annotations, problems and JSON patch), and pods that differ elsewhere
  (env, args, images) share it;
* a count in plain digits is read as the quantity parser reads it;
* template names hash orjson's bytes when they are the canonical JSON's, else the canonical JSON:
  the same names (the controller and ``gpucluster migrate`` check names against specs).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import jsonpatch
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.jsonutil import diff
from gpucluster.translate import (
    _MISSING,
    _check,
    _check_quantities,
    _digest,
    _spec_digest,
    template_name_matches,
    translate_pod_spec,
    translated_part,
)
from tests.test_translate_properties import pods

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def containers_of(value: Any, found: dict[int, Any]) -> dict[int, Any]:
    """Every dict and list inside ``value``, by id."""
    if isinstance(value, dict | list):
        found[id(value)] = value
        for item in value.values() if isinstance(value, dict) else value:
            containers_of(item, found)
    return found


def fields(translation: Any) -> dict[str, Any]:
    """A translation's fields but the translated spec."""
    return {f.name: getattr(translation, f.name) for f in dataclasses.fields(translation) if f.name != "pod_spec"}


@st.composite
def workload_pods(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod spec and another of the same workload: each container's env, args and image its own,
    and spec fields in another order."""
    spec = draw(pods(valid=False))["spec"]
    other = copy.deepcopy(spec)
    for i, c in enumerate([*other.get("initContainers", []), *other["containers"]]):
        c["env"] = [{"name": "JOB_COMPLETION_INDEX", "value": str(draw(st.integers(0, 10_000)))}]
        c["image"] = f"registry.example.com/job:{i}-{draw(st.integers(0, 10_000))}"
        c["args"] = draw(st.lists(st.sampled_from(["--rank", "0", "--lr=1e-3"]), max_size=3))
    if draw(st.booleans()):
        other = dict(reversed(other.items()))
    return spec, other


@SETTINGS
@given(workload_pods())
def test_the_translated_part_translates_and_patches_as_the_whole_spec(pair: tuple[dict, dict]) -> None:
    for spec in pair:
        before = copy.deepcopy(spec)
        whole = translate_pod_spec(spec, namespace="ml")
        part = translated_part(spec)
        of_part = translate_pod_spec(part, namespace="ml", share=True)
        assert spec == before
        assert fields(of_part) == fields(whole)
        ops = diff(part, of_part.pod_spec, "/spec")
        assert ops == diff(spec, whole.pod_spec, "/spec")
        assert jsonpatch.apply_patch({"spec": spec}, ops) == {"spec": whole.pod_spec}
    first, second = pair
    # What tells the two pods apart is outside the part: they share it, key order aside.
    assert json.dumps(translated_part(first), sort_keys=True) == json.dumps(translated_part(second), sort_keys=True)


def test_the_part_keeps_every_item_at_its_index_and_what_is_not_a_container_as_it_is() -> None:
    spec = {
        "volumes": [{"name": "data"}],
        "containers": ["odd", {"name": "a", "image": "x", "resources": {}, "env": []}, {"image": "y"}],
        "initContainers": "not a list",
        "nodeName": "n1",
        "resourceClaims": None,
    }
    assert translated_part(spec) == {
        "containers": ["odd", {"name": "a", "resources": {}}, {}],
        "initContainers": "not a list",
        "resourceClaims": None,
    }
    assert list(translated_part(spec)) == ["containers", "initContainers", "resourceClaims"]


@SETTINGS
@given(pods(valid=False))
def test_a_shared_translation_is_the_copied_one_and_leaves_its_input_alone(pod: dict[str, Any]) -> None:
    spec = pod["spec"]
    before = copy.deepcopy(spec)
    copied = translate_pod_spec(spec, namespace="ml")
    shared = translate_pod_spec(spec, namespace="ml", share=True)
    assert spec == before
    assert shared.pod_spec == copied.pod_spec and fields(shared) == fields(copied)
    assert not set(containers_of(copied.pod_spec, {})) & set(containers_of(spec, {}))  # a deep copy
    # Shared: whatever the translation did not change is the input's own object.
    for key in ("initContainers", "containers"):
        for c0, c1 in zip(spec.get(key, []), shared.pod_spec.get(key, []), strict=True):
            assert (c1 is c0) == (c1 == c0)
            if c1 is not c0:
                assert c1["image"] is c0["image"] and c1.get("volumeMounts") is c0.get("volumeMounts")


quantities = st.one_of(
    st.from_regex(r"\A[0-9]{1,24}\Z"),
    st.from_regex(r"\A[+-]?[0-9]{0,20}(\.[0-9]{0,3})?([eE][+-]?[0-9]{1,3}|[numkMGTPE]|[KMGTPE]i)?\Z"),
    st.text(max_size=6),
    st.integers(-3, 10**20),
    st.sampled_from(["٣", "²", "1_000", " 1", "1 ", "0x1", "", "00", "007"]),
    # Around the largest count (2^63 - 1, 19 digits) and the fast path's 18 digits.
    st.sampled_from([str(2**63 - 1), str(2**63), "9" * 18, "9" * 19, "1" + "0" * 18, "0" * 18, "0" * 24 + "1"]),
)


@settings(max_examples=2000, deadline=None)
@given(quantities, st.one_of(st.just(_MISSING), quantities), st.booleans())
def test_plain_counts_are_read_as_the_quantity_parser_reads_them(limit: Any, request: Any, same: bool) -> None:
    if same:
        request = limit
    assert _check("nvidia.com/gpu", limit, request) == _check_quantities("nvidia.com/gpu", limit, request)


def no_floats(strings: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none() | st.booleans() | st.integers(-(2**70), 2**70) | strings,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(strings, inner, max_size=4),
        max_leaves=12,
    )


@settings(max_examples=1000, deadline=None)
@given(no_floats(st.text(max_size=6)) | no_floats(st.text(st.characters(max_codepoint=0x7F), max_size=6)))
def test_spec_digests_are_the_canonical_ones(value: Any) -> None:
    assert _spec_digest(value) == _digest(value)


@SETTINGS
@given(pods(valid=False))
def test_template_names_are_the_canonical_hashes_of_their_specs(pod: dict[str, Any]) -> None:
    for template in translate_pod_spec(pod["spec"], namespace="ml").templates:
        name, spec = template["metadata"]["name"], template["spec"]
        canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
        assert orjson.dumps(spec, option=orjson.OPT_SORT_KEYS) == canonical
        assert name.endswith(_digest(spec)[:10]) and template_name_matches(name, spec)
