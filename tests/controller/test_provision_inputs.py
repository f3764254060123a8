"""The provisioner's memo key (translation_inputs): pods that differ in it may get different
templates; pods that differ only in what a pod's life changes, or only in their namespace,
share one answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.clusterstate import ClusterState
from gpucluster.controller.provision import translation_inputs, wanted_templates
from gpucluster.translate import TEMPLATES_ANNOTATION, TRANSLATED_LABEL

RECORD = "gpucluster.nvidia.com/translated-from"
ONE_GPU = "gpucluster-gpu-1-18c4435f83"  # the README's example shape, as the webhook names it
TWO_GPUS = "gpucluster-gpu-2-cc238abfcd"  # 2 GPUs for a container after a 1-GPU init container
TWO_GPUS_BESIDE_SIDECAR = "gpucluster-gpu-2-fe27b22c2a"  # ... the same after a 1-GPU sidecar
VIEW = ClusterState.from_objects(
    [
        {
            "kind": "ResourceSlice",
            "metadata": {"name": "node-0-gpu"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "devices": [{"name": "mig-0", "attributes": {"profile": {"string": "1g.10gb"}}}],
            },
        }
    ]
)

# Each member the translation reads, drawn from a few values so that pods often agree on it.
RECORDS = [
    None,
    "not json",
    json.dumps({"containers": {"c": {"nvidia.com/gpu": "1"}}}),
    json.dumps({"containers": {"c": {"nvidia.com/gpu": "2"}}}),
    json.dumps({"containers": {"c": {"nvidia.com/gpu": "1"}, "i": {"nvidia.com/gpu": "1"}}}),
    json.dumps({"containers": {"c": {"nvidia.com/gpu": "2"}, "i": {"nvidia.com/gpu": "1"}}}),  # sidecar or not
    json.dumps({"containers": {"c": {"nvidia.com/mig-1g.10gb": "1"}}}),
    json.dumps({"containers": {"d": {"nvidia.com/gpu": "1"}}}),
]
RELEVANT = {
    "namespace": st.sampled_from(["ml", "ops"]),
    "record": st.sampled_from(RECORDS),
    "templates": st.sampled_from([None, json.dumps({ONE_GPU: {}, "mine": {}}), "{}"]),
    "containers": st.sampled_from([["c"], ["d"], ["c", "d"], ["d", "c"]]),
    "init": st.sampled_from([[], [("i", None)], [("i", "Always")]]),
    "refs": st.sampled_from(
        [[ONE_GPU], [], ["mine"], [ONE_GPU, "mine"], [TWO_GPUS], [ONE_GPU, TWO_GPUS_BESIDE_SIDECAR]]
    ),
}
# What a pod's life changes: never part of the answer.
LIFE = {
    "name": st.sampled_from(["a", "b"]),
    "version": st.sampled_from(["1", "2"]),
    "team": st.sampled_from([None, "x"]),
    "image": st.sampled_from(["cuda", "busybox"]),
    "node": st.sampled_from([None, "node-0"]),
    "gated": st.booleans(),
    "phase": st.sampled_from([None, "Running"]),
}


def pod(relevant: dict[str, Any], life: dict[str, Any]) -> dict[str, Any]:
    annotations = {
        k: v for k, v in ((RECORD, relevant["record"]), (TEMPLATES_ANNOTATION, relevant["templates"])) if v is not None
    }
    labels = {TRANSLATED_LABEL: "true", **({"team": life["team"]} if life["team"] else {})}
    spec: dict[str, Any] = {
        "containers": [{"name": n, "image": life["image"]} for n in relevant["containers"]],
        "resourceClaims": [{"name": f"r{i}", "resourceClaimTemplateName": r} for i, r in enumerate(relevant["refs"])],
    }
    if relevant["init"]:
        spec["initContainers"] = [
            {"name": n, "image": life["image"], **({"restartPolicy": p} if p else {})} for n, p in relevant["init"]
        ]
    if life["node"]:
        spec["nodeName"] = life["node"]
    if life["gated"]:
        spec["schedulingGates"] = [{"name": "gpucluster.nvidia.com/claim-templates"}]
    out = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": life["name"],
            "namespace": relevant["namespace"],
            "uid": f"uid-{life['name']}",
            "resourceVersion": life["version"],
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }
    if life["phase"]:
        out["status"] = {"phase": life["phase"]}
    return out


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries(RELEVANT), st.fixed_dictionaries(LIFE), st.fixed_dictionaries(LIFE), st.data())
def test_pods_with_one_key_get_one_answer(
    relevant: dict[str, Any], life: dict[str, Any], other_life: dict[str, Any], data: st.DataObject
) -> None:
    # The second pod redraws some of what the translation reads, and lives its own life.
    redrawn = {k: data.draw(v) if data.draw(st.booleans()) else relevant[k] for k, v in RELEVANT.items()}
    a, b = pod(relevant, life), pod(redrawn, other_life)
    if redrawn == relevant:
        assert translation_inputs(a) == translation_inputs(b)
    if wanted_templates(a, VIEW) != wanted_templates(b, VIEW):
        assert translation_inputs(a) != translation_inputs(b)


BASE = {"namespace": "ml", "record": RECORDS[2], "templates": None, "containers": ["c"], "init": [], "refs": []}
LIVED = {"name": "a", "version": "1", "team": None, "image": "x", "node": None, "gated": False, "phase": None}
SIDECAR_RECORD = json.dumps({"containers": {"c": {"nvidia.com/gpu": "2"}, "i": {"nvidia.com/gpu": "1"}}})


@pytest.mark.parametrize(
    ("member", "one", "other", "wanted"),
    [
        # (what differs, its two values, the templates each pod is given, or the refusal)
        ("record", {"record": RECORDS[2]}, {"record": RECORDS[3]}, ({ONE_GPU}, set())),
        ("containers' names", {"containers": ["c"]}, {"containers": ["d"]}, ({ONE_GPU}, "refused")),
        ("sidecar or not", {"init": [("i", None)]}, {"init": [("i", "Always")]}, ({TWO_GPUS}, set())),
        ("references", {"refs": []}, {"refs": [ONE_GPU]}, (set(), {ONE_GPU})),
        ("templates annotation", {"templates": None}, {"templates": json.dumps({ONE_GPU: {}})}, (set(), "refused")),
    ],
)
def test_each_member_the_translation_reads_is_in_the_key(
    member: str, one: dict[str, Any], other: dict[str, Any], wanted: tuple[Any, Any]
) -> None:
    base = {**BASE, "refs": [ONE_GPU]}
    if member == "sidecar or not":
        base = {**BASE, "record": SIDECAR_RECORD, "refs": [TWO_GPUS]}
    if member == "templates annotation":
        base = {**BASE, "record": RECORDS[3], "refs": [ONE_GPU]}
    a, b = pod({**base, **one}, LIVED), pod({**base, **other}, LIVED)
    for p, want in zip((a, b), wanted, strict=True):
        wants, problems = wanted_templates(p, VIEW)
        assert (bool(problems) and not wants) if want == "refused" else (set(wants) == want and not problems)
    assert translation_inputs(a) != translation_inputs(b)


def test_a_pod_whose_containers_are_not_a_list_is_not_keyed() -> None:
    broken = pod(BASE, LIVED)
    broken["spec"]["containers"] = "c"
    assert translation_inputs(broken) is None
