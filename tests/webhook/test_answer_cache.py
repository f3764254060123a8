"""The pod rule's whole-answer cache: pods of one workload share an answer, never their names, and
a change of the cluster view is seen at once."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch

from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.webhook.admission import Admission, admit
from gpucluster.webhook.review import decode_patch
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}


def answer(obj: dict[str, Any], state: ClusterState, *, user: str | None = None) -> Admission:
    body = review(obj, namespace="ml")
    if user is not None:
        body["request"]["userInfo"] = {"username": user}
    return admit(json.dumps(body), path="mutate", cluster=state, settings=Settings())


def replica(i: int, **kw: Any) -> dict[str, Any]:
    return pod(container("cuda", {"nvidia.com/gpu": "2"}), name=f"train-{i}", **kw)


def test_pods_of_one_workload_share_one_patch_that_keeps_each_pods_own_name() -> None:
    state = ClusterState.from_objects([NAMESPACE])
    first, second = answer(replica(1), state), answer(replica(2), state)
    assert first.response["response"]["patch"] == second.response["response"]["patch"]
    assert first.response["response"]["uid"] != second.response["response"]["uid"]
    assert second.verdict.patch is first.verdict.patch  # encoded once for the shape
    patched = jsonpatch.apply_patch(replica(2), decode_patch(second.response))
    assert patched["metadata"]["name"] == "train-2"
    assert patched["spec"]["resourceClaims"] and "nvidia.com/gpu" not in str(patched["spec"]["containers"])
    assert second.creates == first.creates and second.creates is not first.creates


def test_labels_annotations_and_requester_are_part_of_the_answer() -> None:
    state = ClusterState.from_objects([NAMESPACE])
    answer(replica(1), state)
    opted_out = answer(replica(2, labels={"gpucluster.nvidia.com/translate": "false"}), state)
    assert decode_patch(opted_out.response) == []
    mirror = answer(replica(3), state, user="system:node:gpu-1")
    assert decode_patch(mirror.response) == [] and "mirror" in mirror.response["response"]["warnings"][0]


def test_a_change_of_the_cluster_view_is_seen_by_the_next_review() -> None:
    state = ClusterState.from_objects([NAMESPACE])
    before = answer(replica(1), state)
    (template,) = before.creates
    taken = {**template, "spec": {"spec": {"devices": {"requests": []}}}}
    state.upsert("ResourceClaimTemplate", taken)
    after = answer(replica(2), state)
    (renamed,) = after.creates
    assert renamed["metadata"]["name"] != template["metadata"]["name"]
    state.upsert(
        "Namespace", {**NAMESPACE, "metadata": {"name": "ml", "labels": {"gpucluster.nvidia.com/translate": "false"}}}
    )
    assert decode_patch(answer(replica(3), state).response) == []
