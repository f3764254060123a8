"""Pods are translated only where the DRA model serves NVIDIA GPUs.

The chart's default install (gpuCluster.enabled=false) runs the webhook with no GPUCluster, and on
a device-plugin cluster (a ClusterPolicy, or the device plugin on its own) a translated pod's
claims would never be allocated: it would wait forever where it would have run as written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from gpucluster.clusterstate import KINDS, ClusterState
from gpucluster.controller.stranded import StrandedPods, stranded_resources
from gpucluster.policy import Settings
from gpucluster.webhook.admission import Admission, admit
from tests.controller.test_provision import stranded_pod
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}
CLUSTER_POLICY = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"}}
GPU_CLUSTER = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "metadata": {"name": "gpu-cluster"}}
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-1"},
    "status": {"allocatable": {"nvidia.com/gpu": "8"}},
}


def device_class(name: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": {}}


def nvidia_slice(driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"node-1-{driver}"},
        "spec": {"driver": driver, "nodeName": "node-1", "pool": {"name": "node-1"}, "devices": [{"name": "gpu-0"}]},
    }


def live(*objects: Mapping[str, Any], unsynced: tuple[str, ...] = ()) -> ClusterState:
    """A view as the webhook and the controller keep it by list and watch: every kind listed."""
    state = ClusterState()
    for kind in KINDS:
        if kind not in unsynced:
            state.replace(kind, [dict(o) for o in (NAMESPACE, *objects) if o["kind"] == kind])
    assert not state.static
    return state


def mutate(state: ClusterState, mode: str = "auto") -> Admission:
    body = review(pod(container("cuda", {"nvidia.com/gpu": "2"})), namespace="ml")
    return admit(json.dumps(body), path="mutate", cluster=state, settings=Settings(translation_mode=mode))  # type: ignore[arg-type]


def translated(out: Admission) -> bool:
    return "patch" in out.response["response"]


def test_audit_mode_says_what_would_be_translated_once_the_dra_model_serves() -> None:
    # The migration guide's first step ("watch first") runs before the cluster serves DRA.
    [warning] = mutate(live(CLUSTER_POLICY, NODE), "audit").response["response"]["warnings"]
    assert warning.startswith("audit: would translate")


@pytest.mark.parametrize("mode", ["auto", "always"])
def test_a_device_plugin_cluster_keeps_its_gpu_pods_as_written(mode: str) -> None:
    out = mutate(live(CLUSTER_POLICY, NODE), mode)
    response = out.response["response"]
    assert response["allowed"] is True and not translated(out) and out.creates == []
    [warning] = response["warnings"]
    assert warning.startswith("not translated:")
    assert "device-plugin model (ClusterPolicy cluster-policy)" in warning


def test_a_cluster_without_any_dra_model_keeps_its_gpu_pods_as_written() -> None:
    out = mutate(live(NODE))
    assert not translated(out)
    [warning] = out.response["response"]["warnings"]
    assert "no GPUCluster, NVIDIA DeviceClass or NVIDIA ResourceSlice" in warning
    # Another driver's devices are not NVIDIA's DRA model, nor an NVIDIA slice with no devices.
    assert not translated(mutate(live(nvidia_slice("gpu.example.com"), device_class("gpu.example.com"))))
    empty = nvidia_slice()
    empty["spec"]["devices"] = []
    assert not translated(mutate(live(empty)))


@pytest.mark.parametrize(
    "evidence",
    [
        [GPU_CLUSTER],  # the GPUCluster deploys the driver and the DeviceClasses
        [GPU_CLUSTER, CLUSTER_POLICY],  # refused by the webhook, but the GPUCluster is there
        [device_class("gpu.nvidia.com")],  # NVIDIA's DRA driver installed on its own
        [device_class("mig.nvidia.com")],
        [nvidia_slice()],
    ],
    ids=["gpucluster", "both-models", "deviceclass", "mig-deviceclass", "resourceslice"],
)
def test_any_sign_of_the_dra_model_translates(evidence: list[dict[str, Any]]) -> None:
    out = mutate(live(NODE, *evidence))
    assert translated(out) and len(out.creates) == 1, out.response


def test_a_view_that_cannot_tell_translates_as_before() -> None:
    # Not yet listed: the webhook cannot say a GPUCluster (a DeviceClass, a slice) is absent.
    for kind in ("GPUCluster", "DeviceClass", "ResourceSlice"):
        assert translated(mutate(live(CLUSTER_POLICY, unsynced=(kind,))))
    # Offline (gpucluster admit, --cluster FILE): the file holds what it was given.
    assert translated(mutate(ClusterState.from_objects([NAMESPACE, CLUSTER_POLICY])))
    assert translated(mutate(ClusterState.from_objects([])))


def test_the_answer_follows_the_view_when_a_gpucluster_is_created() -> None:
    state = live(NODE)
    assert not translated(mutate(state))
    state.upsert("GPUCluster", GPU_CLUSTER)
    assert translated(mutate(state))
    state.delete("GPUCluster", GPU_CLUSTER)
    assert not translated(mutate(state))


async def test_an_untranslated_pod_on_a_device_plugin_cluster_is_not_stranded() -> None:
    # Pending for want of free GPUs on a device-plugin cluster: no "recreate it", never deleted.
    state = live(CLUSTER_POLICY, NODE)
    pod = stranded_pod("train", owned=True)
    assert stranded_resources(pod, state, "gpu-operator") == []
    events: list[str] = []
    deleted: list[str] = []

    async def event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        events.append(reason)

    async def delete(obj: Mapping[str, Any]) -> None:
        deleted.append(obj["metadata"]["name"])

    stranded = StrandedPods(state, "gpu-operator", delete=True)
    await stranded.check(pod, "ml/train", event, delete)
    assert events == [] and deleted == []
    # Once the DRA model serves the cluster, the same pod is stranded.
    state.upsert("GPUCluster", GPU_CLUSTER)
    assert stranded_resources(pod, state, "gpu-operator") == ["nvidia.com/gpu"]
    await stranded.check(pod, "ml/train", event, delete)
    assert set(events) == {"UntranslatedGPURequest"} and deleted == ["train"]


async def test_the_servers_kept_answers_follow_the_view() -> None:
    # The server keeps each pod shape's answer: it must not keep "not translated" once NVIDIA's
    # DeviceClass appears, nor the patch once it is gone.
    from aiohttp.test_utils import TestClient, TestServer

    from gpucluster.webhook.server import build_app

    state = live(CLUSTER_POLICY, NODE)
    body = json.dumps(review(pod(container("cuda", {"nvidia.com/gpu": "2"})), namespace="ml"))
    async with TestClient(TestServer(build_app(state, Settings()))) as client:

        async def answer() -> dict[str, Any]:
            resp = await client.post("/mutate", data=body, headers={"Content-Type": "application/json"})
            assert resp.status == 200
            result: dict[str, Any] = (await resp.json())["response"]
            return result

        for _ in range(2):
            assert "patch" not in await answer()
        state.upsert("DeviceClass", device_class("gpu.nvidia.com"))
        for _ in range(2):
            assert "patch" in await answer()
        state.delete("DeviceClass", device_class("gpu.nvidia.com"))
        assert "patch" not in await answer()
