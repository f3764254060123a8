"""The chart's life cycle beyond install and upgrade, as an admin runs it, on both backends.

- ``helm uninstall`` while GPU pods run is refused by the pre-delete hook, naming the pods, and
  changes nothing; forced (``cleanup.force=true``), it deletes those pods while the kubelet
  plugin still runs, so every claim is released before the driver goes, and the claim templates
  the operator created go with the release.
- ``helm rollback`` restores the GPUCluster's spec (the defaults hook runs on post-rollback).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import pytest

from tests.chart.helm import DOCS_PREINSTALLED
from tests.e2e.chart_install import KUBECTL, NAMESPACE, RELEASE, Cluster, wait_for

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")

WORKLOADS = "team-a"


def gpu_workloads(namespace: str) -> str:
    """A bare pod and a Deployment (which recreates its pod) asking for GPUs the legacy way, running until deleted."""
    container = """
      - name: cuda
        image: nvcr.io/nvidia/cuda:12.9.0-base-ubuntu24.04
        command: [sleep, infinity]
        resources:
          limits: {nvidia.com/gpu: 1}"""
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: trainer, namespace: {namespace}}}
spec:
  containers:{container.replace(chr(10) + "      ", chr(10) + "  ")}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: server, namespace: {namespace}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: server}}}}
  template:
    metadata: {{labels: {{app: server}}}}
    spec:
      containers:{container}
"""


def _reserved_claims(cluster: Cluster) -> list[dict[str, Any]]:
    claims = cluster.get("resourceclaims", "-A")["items"]
    return [c for c in claims if (c.get("status") or {}).get("reservedFor")]


def _running(cluster: Cluster, namespace: str) -> list[str] | None:
    pods = cluster.get("pods", "-n", namespace)["items"]
    running = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
    return running if len(running) == 2 else None


def test_uninstall_refuses_while_gpu_pods_run_then_forced_releases_every_claim_first(cluster: Cluster) -> None:
    cluster.install(DOCS_PREINSTALLED)
    cluster.wait_ready(timeout=180)
    cluster.kubectl("create", "namespace", WORKLOADS)
    cluster.kubectl("create", "-f", "-", stdin=gpu_workloads(WORKLOADS))
    pods = wait_for("the GPU workloads to run", lambda: _running(cluster, WORKLOADS), 90)
    node = cluster.get("node", cluster.get("pod", "-n", WORKLOADS, pods[0])["spec"]["nodeName"])
    assert node["metadata"]["labels"]["nvidia.com/gpu.deploy.dra-driver"] == "true"
    assert cluster.get("namespace", NAMESPACE)["metadata"]["labels"]["resource.kubernetes.io/admin-access"] == "true"
    held = _reserved_claims(cluster)
    assert {c["metadata"]["namespace"] for c in held} >= {WORKLOADS}, held
    templates = cluster.get("resourceclaimtemplates", "-n", WORKLOADS)["items"]
    assert templates  # the operator provisioned the translated pods' templates

    # Refused: the uninstall fails, the hook's log names every GPU pod, and nothing changed.
    with pytest.raises(helm.HelmError) as refused:
        cluster.uninstall(timeout=120)
    # Helm names the failed hook Job; its log says why.
    assert f"Job/{NAMESPACE}/{RELEASE}-gpucluster-cleanup" in str(refused.value), refused.value
    log = cluster.kubectl("logs", "-n", NAMESPACE, f"job/{RELEASE}-gpucluster-cleanup")
    assert "refusing to remove the NVIDIA DRA driver: 2 pod(s)" in log, log
    for pod in pods:
        assert f"{WORKLOADS}/{pod} (claim" in log, log
    assert "--set cleanup.force=true" in log
    gpucluster = cluster.get("gpucluster", "gpu-cluster")
    assert not gpucluster["metadata"].get("deletionTimestamp")
    assert sorted(_running(cluster, WORKLOADS) or []) == sorted(pods)
    assert cluster.get("deviceclass", "gpu.nvidia.com")["metadata"]["name"] == "gpu.nvidia.com"
    # Helm marks the release "uninstalling" before the hook runs; the rollback the hook prints deploys it again.
    assert cluster.helm.status(RELEASE)["status"] == "uninstalling"
    summary = cluster.helm.status(RELEASE)
    revision = summary.get("revision")
    assert isinstance(revision, int), sorted(summary)
    assert f"helm rollback {RELEASE} {revision} --namespace {NAMESPACE}" in log, log
    cluster.helm.rollback(RELEASE, version=revision, timeout=240)
    assert cluster.helm.status(RELEASE)["status"] == "deployed"

    # Forced: the pods go while the kubelet plugin runs, every claim is released, then the driver goes.
    cluster.upgrade(DOCS_PREINSTALLED, "cleanup.force=true")
    refused_calls = cluster.forbidden(f"system:serviceaccount:{NAMESPACE}:")
    assert not refused_calls, refused_calls
    cluster.uninstall(timeout=240)
    assert cluster.get("gpuclusters")["items"] == []
    assert not [p for p in cluster.get("pods", "-n", WORKLOADS)["items"] if p["metadata"]["name"] in pods]
    assert _reserved_claims(cluster) == []
    # The Deployment's new pod stays Pending: no NVIDIA DeviceClass is left to allocate from.
    assert not [d for d in cluster.get("deviceclasses")["items"] if d["metadata"]["name"].endswith("nvidia.com")]
    # The operator's templates for translated pods went before its finalizer; its operands' go with the
    # GPUCluster (garbage collector).
    assert cluster.get("resourceclaimtemplates", "-n", WORKLOADS)["items"] == []
    wait_for("no claim template left", lambda: not cluster.get("resourceclaimtemplates", "-A")["items"], 60)
    wait_for("the operator's pods to be gone", lambda: not cluster.get("pods", "-n", NAMESPACE)["items"], 90)
    assert cluster.get("daemonsets", "-n", NAMESPACE)["items"] == []
    # The labels the operator set go too: the GPU nodes' deploy labels, its namespace's admin-access label.
    for node in cluster.get("nodes")["items"]:
        labels = node["metadata"].get("labels") or {}
        assert not [k for k in labels if k.startswith("nvidia.com/gpu.deploy.")], labels
    namespace = cluster.get("namespace", NAMESPACE)["metadata"]
    assert "resource.kubernetes.io/admin-access" not in (namespace.get("labels") or {}), namespace
    # The operator's leader-election Lease goes with its pods (the post-delete hook).
    assert cluster.get("leases", "-n", NAMESPACE)["items"] == []
    # The hook did all that within its rights (the operator's own calls while Helm deletes its Role
    # are refused, as on any uninstall).
    refused_calls = cluster.forbidden(f"system:serviceaccount:{NAMESPACE}:{RELEASE}-gpucluster-hooks")
    assert not refused_calls, refused_calls


def test_rollback_restores_the_gpucluster_spec(cluster: Cluster) -> None:
    cluster.install(DOCS_PREINSTALLED)
    cluster.wait_ready(timeout=180)
    assert cluster.get("gpucluster", "gpu-cluster")["spec"]["draDriver"]["version"] == "v0.4.1"
    cluster.upgrade(DOCS_PREINSTALLED, "gpuCluster.draDriver.version=v0.4.2")
    assert cluster.get("gpucluster", "gpu-cluster")["spec"]["draDriver"]["version"] == "v0.4.2"
    cluster.helm.rollback(RELEASE, version=1, timeout=240)
    spec = cluster.get("gpucluster", "gpu-cluster")["spec"]
    assert spec["draDriver"]["version"] == "v0.4.1", spec
    cluster.wait_ready(timeout=180)
    assert cluster.helm.history(RELEASE)[-1]["revision"] == 3
    cluster.uninstall()
    assert cluster.get("gpuclusters")["items"] == []


def test_cleanup_disabled_leaves_the_stack_running_and_a_reinstall_takes_it_back(cluster: Cluster) -> None:
    """cleanup.enabled=false: uninstall keeps the GPUCluster (with its finalizer) and its operands; as
    README says, installing the chart again takes them over in place, and an uninstall with the hook
    removes them."""
    cluster.install(DOCS_PREINSTALLED, "cleanup.enabled=false")
    cluster.wait_ready(timeout=180)
    daemonsets = {d["metadata"]["uid"] for d in cluster.get("daemonsets", "-n", NAMESPACE)["items"]}
    assert len(daemonsets) == 3
    cluster.uninstall()
    left = cluster.get("gpucluster", "gpu-cluster")
    assert "gpucluster.nvidia.com/dra-resourceclaim" in left["metadata"]["finalizers"]
    assert not left["metadata"].get("deletionTimestamp")
    assert {d["metadata"]["uid"] for d in cluster.get("daemonsets", "-n", NAMESPACE)["items"]} == daemonsets
    wait_for(
        "the operator's pods to be gone",
        lambda: not cluster.get("pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator")["items"],
        90,
    )

    cluster.install(DOCS_PREINSTALLED)
    gc = cluster.wait_ready(timeout=180)
    assert gc["metadata"]["uid"] == left["metadata"]["uid"]
    assert {d["metadata"]["uid"] for d in cluster.get("daemonsets", "-n", NAMESPACE)["items"]} == daemonsets
    cluster.uninstall()
    assert cluster.get("gpuclusters")["items"] == []
    wait_for("the operands to be gone", lambda: not cluster.get("daemonsets", "-n", NAMESPACE)["items"], 90)
