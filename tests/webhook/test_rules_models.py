"""GPUCluster singleton and validation, ClusterPolicy coexistence, NVIDIADriver auto-upgrade."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest

from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.webhook.admission import Admission, admit
from gpucluster.webhook.review import decode_patch
from tests.webhook.reviews import clusterpolicy, gpucluster, nvidiadriver, review


def run(body: dict[str, Any], *objects: dict[str, Any], path: str = "validate") -> Admission:
    cluster = ClusterState.from_objects(objects)
    return admit(json.dumps(body), path=path, cluster=cluster, settings=Settings())  # type: ignore[arg-type]


def test_gpucluster_named_gpu_cluster_is_allowed() -> None:
    out = run(review(gpucluster()))
    assert out.response["response"]["allowed"] is True
    assert out.rule == "gpuclusters.validate.gpucluster.nvidia.com"


def test_second_gpucluster_name_is_refused_with_the_crd_message() -> None:
    out = run(review(gpucluster("my-gpus")), gpucluster())
    resp = out.response["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 422
    assert "GPUCluster is a singleton, metadata.name must be 'gpu-cluster'" in resp["status"]["message"]


def test_gpucluster_create_refused_while_a_clusterpolicy_exists() -> None:
    out = run(review(gpucluster()), clusterpolicy("cluster-policy"))
    resp = out.response["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    message = resp["status"]["message"]
    assert 'ClusterPolicy "cluster-policy" exists' in message
    assert "one GPU management model" in message
    assert "new installations only" in message and "no in-place migration" in message


def test_gpucluster_update_allowed_even_with_a_clusterpolicy() -> None:
    body = review(gpucluster(), operation="UPDATE", old=gpucluster())
    assert run(body, clusterpolicy()).response["response"]["allowed"] is True


def test_gpucluster_spec_is_validated_with_field_paths() -> None:
    bad = gpucluster(draDriver={"gpus": {"kubeletPlugin": {"healthcheck": {"port": 70000}}}, "imagePullPolicy": "x"})
    resp = run(review(bad)).response["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 422
    message = resp["status"]["message"]
    assert "spec.draDriver.gpus.kubeletPlugin.healthcheck.port: Invalid value: 70000" in message
    assert "spec.draDriver.imagePullPolicy: Unsupported value" in message


def test_gpucluster_values_kube_apiserver_would_refuse_in_the_operands_are_refused() -> None:
    """What the CRD cannot say (hugepages in whole pages) the webhook still refuses, before the
    controller renders a DaemonSet kube-apiserver would answer 422."""
    bad = gpucluster(
        draDriver={"gpus": {"kubeletPlugin": {"resources": {"limits": {"hugepages-2Mi": "3Mi", "memory": "1Gi"}}}}},
        daemonsets={"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]},
    )
    resp = run(review(bad)).response["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 422
    message = resp["status"]["message"]
    assert (
        'spec.draDriver.gpus.kubeletPlugin.resources: limits[hugepages-2Mi]: Invalid value: "3Mi": '
        "3Mi is not positive integer multiple of hugepages-2Mi"
    ) in message
    assert (
        'spec.daemonsets.tolerations[0]: value: Invalid value: "x": value must be empty when operator is Exists'
        in message
    )


def test_unknown_gpucluster_fields_are_warned_about() -> None:
    resp = run(review(gpucluster(dcgmExporters={"enabled": False}))).response["response"]
    assert resp["allowed"] is True
    assert resp["warnings"] == ['unknown field "spec.dcgmExporters"']


def test_gpucluster_delete_and_status_pass_through() -> None:
    assert run(review(None, kind="GPUCluster", operation="DELETE", old=gpucluster()), clusterpolicy()).verdict.allowed
    status = review(gpucluster("bad-name"), operation="UPDATE", old=gpucluster(), sub_resource="status")
    assert run(status).verdict.allowed


def test_clusterpolicy_create_refused_while_a_gpucluster_exists() -> None:
    resp = run(review(clusterpolicy()), gpucluster()).response["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    assert 'GPUCluster "gpu-cluster" exists' in resp["status"]["message"]
    assert "one GPU management model" in resp["status"]["message"]
    assert run(review(clusterpolicy())).verdict.allowed  # no GPUCluster: fine


def test_nvidiadriver_auto_upgrade_refused_on_a_dra_cluster() -> None:
    obj = nvidiadriver(upgradePolicy={"autoUpgrade": True, "maxParallelUpgrades": 1})
    resp = run(review(obj), gpucluster()).response["response"]
    assert resp["allowed"] is False
    assert "spec.upgradePolicy.autoUpgrade" in resp["status"]["message"]
    assert "not supported for DRA nodes" in resp["status"]["message"]
    assert run(review(obj)).verdict.allowed  # no GPUCluster: the device-plugin model may auto-upgrade


def test_nvidiadriver_auto_upgrade_at_the_documented_path_is_refused_too() -> None:
    obj = nvidiadriver(driver={"upgradePolicy": {"autoUpgrade": True}}, upgradePolicy={"autoUpgrade": False})
    resp = run(review(obj, operation="UPDATE", old=nvidiadriver()), gpucluster()).response["response"]
    assert resp["allowed"] is False
    assert "spec.driver.upgradePolicy.autoUpgrade" in resp["status"]["message"]


def test_nvidiadriver_fields_are_type_checked() -> None:
    obj = nvidiadriver(upgradePolicy={"autoUpgrade": "no"})
    resp = run(review(obj), gpucluster()).response["response"]
    assert resp["status"]["code"] == 422
    assert "spec.upgradePolicy.autoUpgrade: Invalid value" in resp["status"]["message"]


def test_nvidiadriver_missing_auto_upgrade_is_defaulted_to_false_with_a_warning() -> None:
    obj = nvidiadriver()
    out = run(review(obj), gpucluster(), path="mutate")
    resp = out.response["response"]
    assert resp["allowed"] is True
    patched = jsonpatch.apply_patch(obj, decode_patch(out.response))
    assert patched["spec"]["upgradePolicy"] == {"autoUpgrade": False}
    assert resp["warnings"] and "autoUpgrade set to false" in resp["warnings"][0]
    # explicit values are left for the validating webhook to judge
    explicit = nvidiadriver(upgradePolicy={"autoUpgrade": True})
    assert "patch" not in run(review(explicit), gpucluster(), path="mutate").response["response"]
    # without a GPUCluster nothing is mutated
    assert "patch" not in run(review(obj), path="mutate").response["response"]


def test_kinds_without_rules_are_allowed_untouched() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}}
    for path in ("validate", "mutate"):
        out = run(review(cm, namespace="default"), path=path)
        assert out.response["response"] == {"uid": out.request.uid, "allowed": True}


@pytest.mark.rule_crash
def test_a_failing_rule_is_answered_per_failure_policy(monkeypatch: Any) -> None:
    import gpucluster.webhook.admission as admission

    def boom(*_: Any) -> Any:
        raise RuntimeError("bug")

    hook = next(h for h in admission.HOOKS if h.kind == "GPUCluster")
    monkeypatch.setattr(admission, "HOOKS", (type(hook)(**{**hook.__dict__, "rule": boom}),))
    resp = run(review(gpucluster())).response["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 500
    assert "internal error" in resp["status"]["message"] and "Traceback" not in resp["status"]["message"]
    ignored = type(hook)(**{**hook.__dict__, "rule": boom, "failure_policy": "Ignore"})
    monkeypatch.setattr(admission, "HOOKS", (ignored,))
    resp = run(review(gpucluster())).response["response"]
    assert resp["allowed"] is True and "not checked" in resp["warnings"][0]
