"""Pod translation as a pure answer: labels and annotation instead of created objects, mirror pods,
dryRun, zero counts, free names, bounds, kind/object mismatches and warnings that keep their reason."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import celpy  # the CEL the sandbox's API server evaluates matchConditions with
import pytest

from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.translate import TEMPLATES_ANNOTATION, TRANSLATED_LABEL, template_name_matches
from gpucluster.webhook.admission import HOOKS, admit
from gpucluster.webhook.configurations import webhook_configurations
from gpucluster.webhook.review import MAX_WARNING_LENGTH, ReviewDecodeError, decode_review, short_warning
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review
from tests.webhook.test_rules_pods import gpu_left, mutate, patched


def test_translated_pod_records_what_the_controller_provisions() -> None:
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "2"})))
    p = patched(out)
    assert p["metadata"]["labels"][TRANSLATED_LABEL] == "true"
    specs = json.loads(p["metadata"]["annotations"][TEMPLATES_ANNOTATION])
    [template] = out.creates
    assert specs == {template["metadata"]["name"]: template["spec"]}
    assert template_name_matches(template["metadata"]["name"], template["spec"])


def test_pod_hook_declares_no_side_effects() -> None:
    [hook] = [h for h in HOOKS if h.resource == "pods"]
    assert hook.side_effects == "None"
    mutating = webhook_configurations()[1]
    assert {w["sideEffects"] for w in mutating["webhooks"]} == {"None"}


def test_dry_run_is_translated_but_creates_nothing() -> None:
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "1"})), dry_run=True)
    assert out.response["response"]["patchType"] == "JSONPatch" and out.creates == []


def test_offline_admit_lists_no_creates_for_dry_run(tmp_path: Path) -> None:
    results = {}
    for dry_run in (False, True):
        path = tmp_path / f"review-{dry_run}.json"
        path.write_text(
            json.dumps(review(pod(container("cuda", {"nvidia.com/gpu": "1"})), namespace="ml", dry_run=dry_run))
        )
        done = subprocess.run(
            [sys.executable, "-m", "gpucluster.cli", "admit", "-f", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        results[dry_run] = json.loads(done.stdout)
    assert [t["kind"] for t in results[False]["creates"]] == ["ResourceClaimTemplate"]
    assert results[True]["creates"] == [] and results[True]["patchedObject"]["spec"]["resourceClaims"]


@pytest.mark.parametrize(
    ("where", "value"),
    [("annotation", {"metadata": {"annotations": {"kubernetes.io/config.mirror": "abc"}}}), ("user", None)],
)
def test_mirror_pods_are_never_translated(where: str, value: Any) -> None:
    p = pod(container("cuda", {"nvidia.com/gpu": "1"}))
    if value:
        p["metadata"].setdefault("annotations", {}).update(value["metadata"]["annotations"])
    body = review(p, namespace="ml")
    if where == "user":
        body["request"]["userInfo"] = {"username": "system:node:gpu-node-0", "groups": ["system:nodes"]}
    out = admit(json.dumps(body), path="mutate", cluster=ClusterState.from_objects([]), settings=Settings())
    resp = out.response["response"]
    assert "patch" not in resp and out.creates == []
    assert any("mirror" in w for w in resp["warnings"])


def test_zero_gpus_beside_a_mig_request_keeps_the_mig_device() -> None:
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "1"})))
    p = patched(out)
    assert not gpu_left(p)
    [template] = out.creates
    [request] = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "mig.nvidia.com" and request["exactly"]["count"] == 1


def test_zero_alone_is_left_with_a_warning() -> None:
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "0"})))
    assert "patch" not in out.response["response"]
    assert any("asks for no device" in w for w in out.response["response"]["warnings"])


def test_existing_gpu_0_claim_gets_a_free_name() -> None:
    p = pod(container("cuda", {"nvidia.com/gpu": "1"}))
    p["spec"]["resourceClaims"] = [{"name": "gpu-0", "resourceClaimName": "mine"}]
    out = mutate(p)
    names = [rc["name"] for rc in patched(out)["spec"]["resourceClaims"]]
    assert names == ["gpu-0", "gpu-1"]


def test_template_name_taken_by_another_spec_gets_another_name() -> None:
    first = mutate(pod(container("cuda", {"nvidia.com/gpu": "1"})))
    [template] = first.creates
    name = template["metadata"]["name"]
    squatter = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": []}}},
    }
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "1"})), squatter)
    [renamed] = out.creates
    assert renamed["metadata"]["name"] != name and renamed["spec"] == template["spec"]
    assert template_name_matches(renamed["metadata"]["name"], renamed["spec"])
    [ref] = patched(out)["spec"]["resourceClaims"]
    assert ref["resourceClaimTemplateName"] == renamed["metadata"]["name"]
    # Someone else's template with the very same spec is simply shared.
    same = {**squatter, "spec": template["spec"]}
    assert mutate(pod(container("cuda", {"nvidia.com/gpu": "1"})), same).creates[0]["metadata"]["name"] == name


def _slice(*profiles: str) -> dict[str, Any]:
    devices = [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}]
    devices += [
        {"name": f"mig-{i}", "attributes": {"type": {"string": "mig"}, "profile": {"string": p}}}
        for i, p in enumerate(profiles)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-0-gpu"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "node-0", "pool": {"name": "node-0"}, "devices": devices},
    }


def test_mig_profiles_the_cluster_does_not_publish_are_not_translated() -> None:
    published = _slice("1g.10gb")
    assert "patch" in mutate(pod(container("cuda", {"nvidia.com/mig-1g.10gb": "1"})), published).response["response"]
    out = mutate(pod(container("cuda", {"nvidia.com/mig-7g.999gb": "1"})), published)
    resp = out.response["response"]
    assert "patch" not in resp and out.creates == []
    assert any("no node publishes MIG profile 7g.999gb" in w for w in resp["warnings"])


def test_too_many_devices_are_not_translated() -> None:
    containers = [container(f"c{i}", {"nvidia.com/gpu": "32"}) for i in range(3)]
    out = mutate(pod(*containers))
    assert "patch" not in out.response["response"] and out.creates == []
    assert any("96 devices" in w for w in out.response["response"]["warnings"])


def test_kind_and_object_that_disagree_are_a_decode_error() -> None:
    body = review(pod(container("cuda", {"nvidia.com/gpu": "1"})), namespace="ml")
    body["request"]["object"]["kind"] = "ConfigMap"
    with pytest.raises(
        ReviewDecodeError, match=re.escape("request.object.kind is 'ConfigMap' but request.kind.kind is 'Pod'")
    ):
        decode_review(json.dumps(body))
    body["request"]["object"]["kind"] = "Pod"
    body["request"]["object"]["apiVersion"] = "apps/v1"
    with pytest.raises(ReviewDecodeError, match="apiVersion"):
        decode_review(json.dumps(body))


def test_long_warnings_shorten_the_prefix_not_the_reason() -> None:
    name = "x" * 63
    reason = "nvidia.com/gpu request 1 differs from limit 2; container left unchanged"
    text = short_warning(reason, prefix=f"not translated: init container {name}:")
    assert len(text) <= MAX_WARNING_LENGTH and text.endswith(reason) and text.startswith("not translated: ")
    c = container(name, {"nvidia.com/gpu": "2"})
    c["resources"]["requests"]["nvidia.com/gpu"] = "1"
    [warning] = mutate(pod(c)).response["response"]["warnings"]
    assert len(warning) <= MAX_WARNING_LENGTH and warning.endswith(reason)


GATE = {"name": "gpucluster.nvidia.com/claim-templates"}


def test_a_pod_whose_template_the_view_lacks_is_gated_until_the_controller_made_it() -> None:
    out = mutate(pod(container("cuda", {"nvidia.com/gpu": "1"})))
    assert patched(out)["spec"]["schedulingGates"] == [GATE]


def test_a_pod_whose_templates_exist_as_asked_is_not_gated() -> None:
    [template] = mutate(pod(container("cuda", {"nvidia.com/gpu": "1"}))).creates
    existing = {"apiVersion": "resource.k8s.io/v1", **template}
    assert "schedulingGates" not in patched(mutate(pod(container("cuda", {"nvidia.com/gpu": "1"})), existing))["spec"]


def test_the_gate_joins_the_pods_own_gates() -> None:
    p = pod(container("cuda", {"nvidia.com/gpu": "1"}))
    p["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    assert patched(mutate(p))["spec"]["schedulingGates"] == [{"name": "example.com/quota"}, GATE]


def test_a_pod_bound_to_a_node_gets_no_gate() -> None:
    # The API server refuses schedulingGates on a pod whose spec.nodeName is set.
    p = pod(container("cuda", {"nvidia.com/gpu": "1"}), node_name="gpu-node-1")
    assert "schedulingGates" not in patched(mutate(p))["spec"]


@pytest.mark.parametrize(
    ("user", "annotated", "sent"),
    [
        ("system:serviceaccount:kube-system:resource-claim-controller", True, False),
        ("system:kube-controller-manager", True, False),  # kube-controller-manager without per-controller credentials
        ("system:serviceaccount:kube-system:resource-claim-controller", False, True),
        ("jane", True, True),  # the annotation alone, written by hand, does not skip the check
        ("jane", False, True),
    ],
)
def test_claims_the_resourceclaim_controller_makes_from_a_template_are_not_sent(
    user: str, annotated: bool, sent: bool
) -> None:
    [hook] = [h for h in HOOKS if h.resource == "resourceclaims"]
    metadata: dict[str, Any] = {"name": "c"}
    if annotated:
        metadata["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    activation = {
        "object": celpy.json_to_cel({"metadata": metadata, "spec": {}}),
        "request": celpy.json_to_cel({"operation": "CREATE", "userInfo": {"username": user}}),
    }
    env = celpy.Environment()
    results = [bool(env.program(env.compile(expr)).evaluate(activation)) for _, expr in hook.match_conditions]
    assert all(results) is sent


@pytest.mark.parametrize(
    ("user", "sent"),
    [
        ("system:serviceaccount:gpu-operator:gpucluster", False),  # the operator's controller
        ("system:serviceaccount:gpu-operator:other", True),
        ("jane", True),
    ],
)
def test_templates_the_operator_creates_are_not_sent(user: str, sent: bool) -> None:
    validating = webhook_configurations(operator="system:serviceaccount:gpu-operator:gpucluster")[0]
    [hook] = [w for w in validating["webhooks"] if w["name"].startswith("resourceclaimtemplates.")]
    activation = {
        "object": celpy.json_to_cel({"metadata": {"name": "t"}, "spec": {"spec": {}}}),
        "request": celpy.json_to_cel({"operation": "CREATE", "userInfo": {"username": user}}),
    }
    env = celpy.Environment()
    conditions = [c["expression"] for c in hook["matchConditions"]]
    assert all(bool(env.program(env.compile(expr)).evaluate(activation)) for expr in conditions) is sent


def test_without_the_operators_identity_every_template_is_sent() -> None:
    validating = webhook_configurations()[0]
    [hook] = [w for w in validating["webhooks"] if w["name"].startswith("resourceclaimtemplates.")]
    assert "matchConditions" not in hook
