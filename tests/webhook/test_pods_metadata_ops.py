"""The pod rule's metadata operations are exactly those of diffing the pod with its translated
metadata (the label and annotations merged in), whatever metadata the pod had."""

from __future__ import annotations

from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jsonutil import diff
from gpucluster.translate import TEMPLATES_ANNOTATION, TRANSLATED_LABEL
from gpucluster.webhook.rules.pods import _metadata_ops

LABELS = {TRANSLATED_LABEL: "true"}
ANNOTATIONS = {"gpucluster.nvidia.com/translated-from": '{"containers":{}}', TEMPLATES_ANNOTATION: "{}"}

keys = st.sampled_from([TRANSLATED_LABEL, TEMPLATES_ANNOTATION, "gpucluster.nvidia.com/translated-from", "app", "a~b"])
values = st.sampled_from(["true", "false", "{}", "x"])
member = st.none() | st.dictionaries(keys, values, max_size=4)


def whole_diff(pod: dict[str, Any], labels: dict[str, Any], annotations: dict[str, Any]) -> list[dict[str, Any]]:
    """What the rule diffed before: the pod's metadata against the metadata with both merged in."""
    meta = pod.get("metadata", {})
    current_labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    current_annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    new_meta = {
        **meta,
        "labels": {**current_labels, **labels},
        "annotations": {**current_annotations, **annotations},
    }
    return diff({"metadata": pod["metadata"]} if "metadata" in pod else {}, {"metadata": new_meta})


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    pod: dict[str, Any] = {"spec": {}}
    if draw(st.booleans()):
        meta: dict[str, Any] = {"name": "p"}
        # labels and annotations absent, null or objects, in either order
        for name in draw(st.permutations(["labels", "annotations"])):
            if draw(st.booleans()):
                meta[name] = draw(member)
        pod["metadata"] = meta
    return pod


@settings(max_examples=400, deadline=None)
@given(pods())
def test_metadata_ops_are_the_diff_of_the_merged_metadata(pod: dict[str, Any]) -> None:
    ops = _metadata_ops(pod, LABELS, ANNOTATIONS)
    assert ops == whole_diff(pod, LABELS, ANNOTATIONS)
    patched = jsonpatch.apply_patch(pod, ops)
    assert patched["metadata"]["labels"][TRANSLATED_LABEL] == "true"
    assert patched["metadata"]["annotations"][TEMPLATES_ANNOTATION] == "{}"


def test_metadata_already_translated_the_same_way_needs_no_operation() -> None:
    pod = {"metadata": {"name": "p", "labels": dict(LABELS), "annotations": dict(ANNOTATIONS)}}
    assert _metadata_ops(pod, LABELS, ANNOTATIONS) == []


def test_the_operations_do_not_share_the_callers_dicts() -> None:
    labels = dict(LABELS)
    [op, _] = _metadata_ops({"metadata": {"name": "p"}}, labels, ANNOTATIONS)
    op["value"]["extra"] = "x"
    [op] = _metadata_ops({"spec": {}}, labels, ANNOTATIONS)
    op["value"]["labels"]["extra"] = "x"
    assert labels == LABELS
