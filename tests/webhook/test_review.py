"""AdmissionReview decoding and response building."""

from __future__ import annotations

import base64
import json

import jsonpatch
import pytest

from gpucluster.webhook.review import (
    MAX_WARNING_LENGTH,
    Patch,
    ReviewDecodeError,
    Verdict,
    build_response,
    decode_patch,
    decode_review,
    short_warning,
)
from tests.webhook.reviews import gpucluster, review


def test_decodes_a_real_review_shape() -> None:
    body = review(gpucluster(), namespace="")
    req = decode_review(json.dumps(body))
    assert req.uid == body["request"]["uid"]
    assert (req.group, req.version, req.kind) == ("nvidia.com", "v1alpha1", "GPUCluster")
    assert req.operation == "CREATE" and req.name == "gpu-cluster" and not req.dry_run
    assert req.user == "kubernetes-admin"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"not json", "body is not JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"apiVersion": "v1", "kind": "Pod"}', "expected apiVersion admission.k8s.io/v1 kind AdmissionReview"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "has no request"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"kind": {"kind": "Pod"}, "operation": "CREATE"}}', "request.uid"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "PATCH"}}', "request.operation"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": 3}}', "request.object must be an object"),
        (b"\xff\xfe", "body is not JSON"),
    ],
)  # fmt: skip
def test_undecodable_bodies_raise_a_clear_error(body: bytes, fragment: str) -> None:
    with pytest.raises(ReviewDecodeError, match=fragment.replace(".", r"\.")):
        decode_review(body)


@pytest.mark.parametrize("metadata", ["gpu-cluster", ["a"], 3, True])
@pytest.mark.parametrize("field", ["object", "oldObject"])
def test_metadata_that_is_not_an_object_is_refused_at_decode(metadata: object, field: str) -> None:
    body = review(gpucluster(), operation="UPDATE")
    body["request"]["oldObject"] = gpucluster()
    body["request"][field]["metadata"] = metadata
    with pytest.raises(ReviewDecodeError, match=rf"request\.{field}\.metadata must be an object"):
        decode_review(json.dumps(body))


def test_response_echoes_uid_api_version_and_kind() -> None:
    req = decode_review(json.dumps(review(gpucluster())))
    out = build_response(req, Verdict.allow(), mutating=False)
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    assert out["response"] == {"uid": req.uid, "allowed": True}


def test_v1beta1_reviews_are_answered_in_v1beta1() -> None:
    body = review(gpucluster())
    body["apiVersion"] = "admission.k8s.io/v1beta1"
    req = decode_review(json.dumps(body))
    assert build_response(req, Verdict.allow(), mutating=False)["apiVersion"] == "admission.k8s.io/v1beta1"


def test_denial_carries_status_code_reason_and_message() -> None:
    req = decode_review(json.dumps(review(gpucluster())))
    out = build_response(req, Verdict.invalid("spec.x: bad"), mutating=False)["response"]
    assert out["allowed"] is False
    assert out["status"]["code"] == 422 and out["status"]["reason"] == "Invalid"
    assert out["status"]["message"] == "spec.x: bad"
    assert build_response(req, Verdict.deny("no"), mutating=False)["response"]["status"]["code"] == 403


def test_validating_responses_never_carry_a_patch() -> None:
    obj = gpucluster()
    req = decode_review(json.dumps(review(obj)))
    patched = {**obj, "metadata": {"name": "gpu-cluster", "labels": {"a": "b"}}}
    patch = Patch.between(obj, patched)
    assert "patch" not in build_response(req, Verdict(patch=patch), mutating=False)["response"]
    resp = build_response(req, Verdict(patch=patch), mutating=True)
    assert resp["response"]["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(resp["response"]["patch"]))
    assert ops == decode_patch(resp)
    assert jsonpatch.apply_patch(obj, ops) == patched


def test_no_patch_when_nothing_changed_or_denied() -> None:
    obj = gpucluster()
    req = decode_review(json.dumps(review(obj)))
    assert "patch" not in build_response(req, Verdict(patch=Patch.between(obj, dict(obj))), mutating=True)["response"]
    denied = Verdict.deny("no")
    denied.patch = Patch.between(obj, {**obj, "spec": {"x": 1}})
    assert denied.patch.ops
    assert "patch" not in build_response(req, denied, mutating=True)["response"]


def test_warnings_are_short_single_lines_and_deduplicated() -> None:
    long = "word " * 60
    assert len(short_warning(long)) <= MAX_WARNING_LENGTH < 120
    assert "\n" not in short_warning("a\nb")
    req = decode_review(json.dumps(review(gpucluster())))
    out = build_response(req, Verdict.allow("same", "same", " "), mutating=False)["response"]
    assert out["warnings"] == ["same"]
