"""``gpucluster apply``: waits while the webhook cannot be called, fails at once on a refusal."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpucluster.api.crd import gpucluster_crd
from gpucluster.cli.apply import retryable
from gpucluster.sandbox.server import SandboxThread
from gpucluster.webhook.configurations import webhook_configurations

GPUCLUSTER = "apiVersion: nvidia.com/v1alpha1\nkind: GPUCluster\nmetadata: {name: gpu-cluster}\nspec: {}\n"


def test_only_unreachable_webhooks_and_unavailability_are_retried() -> None:
    unreachable = {
        "reason": "InternalError",
        "message": 'Internal error occurred: failed calling webhook "gpuclusters.validate.gpucluster.nvidia.com": '
        'failed to call webhook: Post "https://gpu-operator-webhook.gpu-operator.svc:443/validate": '
        "dial tcp 10.96.0.12:443: connect: connection refused",
    }
    assert retryable(500, unreachable)
    assert retryable(503, {})
    assert retryable(429, {})
    denied = {"reason": "Forbidden", "message": 'admission webhook "x" denied the request: ClusterPolicy exists'}
    assert not retryable(403, denied)
    assert not retryable(400, denied)
    assert not retryable(422, {"reason": "Invalid", "message": "spec.x: Invalid value"})
    assert not retryable(403, {"reason": "Forbidden", "message": "gpuclusters is forbidden: User ..."})


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpucluster.cli", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def sandbox(tmp_path: Path):  # type: ignore[no-untyped-def]
    with SandboxThread() as sb:
        sb_client = sb
        yield sb_client


def test_apply_waits_until_the_webhook_can_be_called(sandbox, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kubernetes import client, config

    api = config.new_client_from_config(str(sandbox.kubeconfig_path))
    client.ApiextensionsV1Api(api).create_custom_resource_definition(gpucluster_crd())
    admission = client.AdmissionregistrationV1Api(api)
    (validating, _mutating) = webhook_configurations(url="https://127.0.0.1:1/", ca_bundle=b"unused")
    admission.create_validating_webhook_configuration(validating)
    manifest = tmp_path / "defaults"
    manifest.mkdir()
    (manifest / "gpucluster.yaml").write_text(GPUCLUSTER)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpucluster.cli", "apply", "-f", str(manifest), "--timeout", "60",
         "--kubeconfig", str(sandbox.kubeconfig_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the first refusal, retried
    assert "not yet" in first and "failed calling webhook" in first, first
    assert time.monotonic() < deadline
    # The webhook becomes reachable (here: its configuration goes away).
    admission.delete_validating_webhook_configuration(validating["metadata"]["name"])
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "gpuclusters.nvidia.com/gpu-cluster serverside-applied" in out
    live = client.CustomObjectsApi(api).get_cluster_custom_object(
        "nvidia.com", "v1alpha1", "gpuclusters", "gpu-cluster"
    )
    assert live["metadata"]["managedFields"][0]["manager"] == "gpucluster-chart"


def test_apply_fails_at_once_on_an_invalid_object(sandbox, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kubernetes import client, config

    api = config.new_client_from_config(str(sandbox.kubeconfig_path))
    client.ApiextensionsV1Api(api).create_custom_resource_definition(gpucluster_crd())
    bad = tmp_path / "bad.yaml"
    bad.write_text(GPUCLUSTER.replace("name: gpu-cluster", "name: another"))
    started = time.monotonic()
    result = _cli("apply", "-f", str(bad), "--timeout", "60", "--kubeconfig", str(sandbox.kubeconfig_path))
    assert result.returncode == 2
    assert "gpuclusters.nvidia.com/another" in result.stderr and "singleton" in result.stderr
    assert time.monotonic() - started < 20


def test_apply_bad_input_is_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "d"
    empty.mkdir()
    result = _cli("apply", "-f", str(empty))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "no .yaml" in result.stderr


def test_an_object_someone_else_created_is_left_unchanged(sandbox, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kubernetes import client, config

    api = config.new_client_from_config(str(sandbox.kubeconfig_path))
    client.ApiextensionsV1Api(api).create_custom_resource_definition(gpucluster_crd())
    objects = client.CustomObjectsApi(api)
    admin = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "metadata": {"name": "gpu-cluster"},
             "spec": {"dcgm": {"enabled": True}}}  # fmt: skip
    objects.create_cluster_custom_object("nvidia.com", "v1alpha1", "gpuclusters", admin)
    ours = tmp_path / "gpucluster.yaml"
    ours.write_text(
        "apiVersion: nvidia.com/v1alpha1\nkind: GPUCluster\nmetadata:\n  name: gpu-cluster\n"
        "  labels: {app.kubernetes.io/instance: gpu-operator}\nspec:\n  dcgm: {enabled: false}\n"
    )
    result = _cli("apply", "-f", str(ours), "--kubeconfig", str(sandbox.kubeconfig_path))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "already exists and is not this release's" in result.stderr
    assert "app.kubernetes.io/instance=gpu-operator" in result.stderr
    live = objects.get_cluster_custom_object("nvidia.com", "v1alpha1", "gpuclusters", "gpu-cluster")
    assert live["spec"]["dcgm"]["enabled"] is True  # untouched

    # Handed over by the label, the next apply takes it.
    patch = {"metadata": {"labels": {"app.kubernetes.io/instance": "gpu-operator"}}}
    objects.patch_cluster_custom_object("nvidia.com", "v1alpha1", "gpuclusters", "gpu-cluster", patch)
    result = _cli("apply", "-f", str(ours), "--kubeconfig", str(sandbox.kubeconfig_path))
    assert result.returncode == 0, result.stderr
    live = objects.get_cluster_custom_object("nvidia.com", "v1alpha1", "gpuclusters", "gpu-cluster")
    assert live["spec"]["dcgm"]["enabled"] is False
