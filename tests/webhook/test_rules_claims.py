"""ResourceClaim / ResourceClaimTemplate validation: CEL compile errors, adminAccess, warnings."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.webhook.admission import Admission, admit
from tests.fixtures import load_fixture
from tests.webhook.reviews import review

GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ]
    },
}
NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml", "labels": {}}}
ADMIN_NS = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "gpu-operator", "labels": {"resource.kubernetes.io/admin-access": "true"}},
}


def claim(
    *selectors: str, count: int = 1, admin: bool = False, kind: str = "ResourceClaim", namespace: str = "ml"
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if admin:
        exactly["adminAccess"] = True
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}
    meta = {"name": "train", "namespace": namespace}
    if kind == "ResourceClaimTemplate":
        return {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": meta, "spec": {"spec": spec}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": meta, "spec": spec}


def check(obj: dict[str, Any], *, slices: bool = True) -> Admission:
    objects: list[dict[str, Any]] = [NS, ADMIN_NS, GPU_CLASS]
    if slices:
        objects += load_fixture("h100-node") + load_fixture("l4-node")
    state = ClusterState.from_objects(objects)
    body = review(obj, namespace=obj["metadata"]["namespace"])
    return admit(json.dumps(body), path="validate", cluster=state, settings=Settings())


@pytest.mark.parametrize("kind", ["ResourceClaim", "ResourceClaimTemplate"])
def test_satisfiable_claim_is_allowed_without_warnings(kind: str) -> None:
    out = check(claim('device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"', count=2, kind=kind))
    assert out.response["response"] == {"uid": out.request.uid, "allowed": True}


@pytest.mark.parametrize("kind", ["ResourceClaim", "ResourceClaimTemplate"])
def test_compile_error_is_denied_with_request_index_and_position(kind: str) -> None:
    out = check(claim("true", 'device.attributes["gpu.nvidia.com"].productName == ', kind=kind))
    resp = out.response["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 422
    assert "request gpu: selector #1: compile error at 1:" in resp["status"]["message"]


def test_unknown_device_field_is_a_compile_error() -> None:
    resp = check(claim("device.allowMultipleAllocations")).response["response"]
    assert resp["allowed"] is False and "selector #0" in resp["status"]["message"]


def test_expression_over_10_kib_is_denied() -> None:
    long = " || ".join(['device.driver == "x"'] * 600)
    resp = check(claim(long)).response["response"]
    assert resp["allowed"] is False and "10 KiB" in resp["status"]["message"]


def test_unpublished_attribute_warns() -> None:
    # The driver stopped publishing `index` (dra-driver-nvidia-gpu, Sept 2025): every pod using it would fail.
    resp = check(claim('device.attributes["gpu.nvidia.com"].index == 0')).response["response"]
    assert resp["allowed"] is True
    assert resp["warnings"] == [
        "no device publishes attribute gpu.nvidia.com/index: reading it fails scheduling of every pod"
    ]


def test_unsatisfiable_claim_warns_with_the_reason() -> None:
    resp = check(claim('device.attributes["gpu.nvidia.com"].productName == "NVIDIA B200"')).response["response"]
    assert resp["allowed"] is True
    [warning] = resp["warnings"]
    assert warning.startswith(
        "unsatisfiable: 0/12 devices usable for request gpu on 2 nodes, need 1 on one node: 12 selector #0"
    )
    assert len(warning) < 120


def test_too_many_gpus_warns() -> None:
    [warning] = check(claim(count=16)).response["response"]["warnings"]
    assert warning == "unsatisfiable: 12/12 devices usable for request gpu on 2 nodes, need 16 on one node"


def test_no_slices_means_no_judgement() -> None:
    assert "warnings" not in check(claim(count=16), slices=False).response["response"]


def test_missing_device_class_warns() -> None:
    obj = claim()
    obj["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "tpu.example.com"
    [warning] = check(obj).response["response"]["warnings"]
    assert "device class tpu.example.com does not exist" in warning


def test_admin_access_needs_the_namespace_label() -> None:
    resp = check(claim(admin=True)).response["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    assert 'resource.kubernetes.io/admin-access="true"' in resp["status"]["message"]
    assert "kubectl label namespace ml" in resp["status"]["message"]
    assert check(claim(admin=True, namespace="gpu-operator")).verdict.allowed


def test_claims_generated_for_pods_are_not_rechecked() -> None:
    obj = claim(count=16)
    obj["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu-0"}
    assert "warnings" not in check(obj).response["response"]


def test_updates_pass_through() -> None:
    obj = claim("syntax error (")
    out = admit(json.dumps(review(obj, operation="UPDATE", old=obj, namespace="ml")), path="validate",
                cluster=ClusterState.from_objects([]), settings=Settings())  # fmt: skip
    assert out.verdict.allowed


def test_includes_compiles_only_where_the_list_attributes_gate_is_on() -> None:
    # DRAListTypeAttributes (1.36 alpha) declares includes(); without it, a compile error, as the
    # API server's validation has it.
    obj = claim('device.attributes["gpu.nvidia.com"].type.includes("gpu")')
    state = ClusterState.from_objects([NS, ADMIN_NS, GPU_CLASS, *load_fixture("h100-node")])

    def allowed(settings: Settings) -> bool:
        body = review(obj, namespace="ml")
        return bool(
            admit(json.dumps(body), path="validate", cluster=state, settings=settings).response["response"]["allowed"]
        )

    assert not allowed(Settings(kubernetes_version="1.36"))
    assert allowed(Settings(kubernetes_version="1.36", feature_gates=(("DRAListTypeAttributes", True),)))
