"""Deleting a GPUCluster never needs the webhook: with the webhook unreachable (fail-closed), the
finalizer removal still goes through, while creates and spec changes are still refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpucluster.api.crd import gpucluster_crd
from gpucluster.controller.reconcile import FINALIZER
from gpucluster.kube.client import Kube, KubeError
from gpucluster.sandbox.controlplane.cluster import ClusterOptions, ControlPlane
from gpucluster.sandbox.server import Sandbox
from gpucluster.webhook.configurations import webhook_configurations
from tests.e2e.backends import SANDBOX, backends, kube_version, require_kube

GC_PATH = "/apis/nvidia.com/v1alpha1/gpuclusters"
UNREACHABLE = "https://127.0.0.1:1/"  # nothing listens on port 1


@pytest.fixture(params=backends())
async def kube(request: pytest.FixtureRequest) -> AsyncIterator[Kube]:
    sandbox, plane = None, None
    if request.param == SANDBOX:
        sandbox = Sandbox()
        await sandbox.start()
        kubeconfig = str(sandbox.kubeconfig_path)
    else:
        require_kube()
        plane = await asyncio.to_thread(ControlPlane(ClusterOptions(version=kube_version(), node_agent=False)).up)
        kubeconfig = str(plane.admin_kubeconfig)
    client = await Kube.connect(kubeconfig)
    try:
        await client.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=gpucluster_crd())
        await _established(client)
        yield client
    finally:
        await client.close()
        if sandbox is not None:
            await sandbox.stop()
        if plane is not None:
            await asyncio.to_thread(plane.stop)


async def _established(kube: Kube) -> None:
    """kube-apiserver serves a new CRD's objects only once it is Established."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        crd = await kube.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gpuclusters.nvidia.com")
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return
        assert asyncio.get_running_loop().time() < deadline, "the GPUCluster CRD never became Established"
        await asyncio.sleep(0.05)


async def _register_unreachable_webhooks(kube: Kube) -> None:
    for config in webhook_configurations(url=UNREACHABLE, ca_bundle=b"not-used"):
        plural = (
            "validatingwebhookconfigurations"
            if config["kind"].startswith("Validating")
            else "mutatingwebhookconfigurations"
        )
        await kube.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", body=config)


async def _merge(kube: Kube, body: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = await kube.request(
        "PATCH", f"{GC_PATH}/gpu-cluster", body=body, content_type="application/merge-patch+json"
    )
    return result


async def test_finalizer_removal_and_metadata_writes_skip_the_webhook(kube: Kube) -> None:
    body = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "metadata": {"name": "gpu-cluster"}}
    await kube.request("POST", GC_PATH, body={**body, "metadata": {"name": "gpu-cluster", "finalizers": [FINALIZER]}})
    await _register_unreachable_webhooks(kube)

    # A metadata-only update of a live object (the controller adding a label or a finalizer) passes.
    await _merge(kube, {"metadata": {"labels": {"team": "gpu"}}})
    # A spec change is still checked, and the webhook being down refuses it (fail closed).
    with pytest.raises(KubeError) as refused:
        await _merge(kube, {"spec": {"dcgm": {"enabled": True}}})
    assert refused.value.status >= 500 or "failed calling webhook" in str(refused.value)
    assert "gpuclusters.validate.gpucluster.nvidia.com" in str(refused.value)

    await kube.request("DELETE", f"{GC_PATH}/gpu-cluster")
    live = await kube.get(f"{GC_PATH}/gpu-cluster")
    assert live["metadata"]["deletionTimestamp"]
    # What the controller does once the operands are drained: drop its finalizer.
    await _merge(kube, {"metadata": {"finalizers": None}})
    with pytest.raises(KubeError) as gone:
        await kube.get(f"{GC_PATH}/gpu-cluster")
    assert gone.value.status == 404


async def test_creates_still_need_the_webhook(kube: Kube) -> None:
    await _register_unreachable_webhooks(kube)
    body = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "metadata": {"name": "gpu-cluster"}}
    with pytest.raises(KubeError) as refused:
        await kube.request("POST", GC_PATH, body=body)
    assert "gpuclusters.validate.gpucluster.nvidia.com" in str(refused.value)
