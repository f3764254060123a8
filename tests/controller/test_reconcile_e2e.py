"""The controller against the sandbox API server: from a GPUCluster to ready operands and back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from gpucluster.api.crd import gpucluster_crd
from gpucluster.controller.reconcile import FINALIZER
from gpucluster.controller.runtime import Controller
from gpucluster.kube.client import Kube, KubeError
from gpucluster.sandbox.server import Sandbox
from gpucluster.sandbox.sim.gpunodes import cluster_nodes

pytestmark = pytest.mark.integration  # starts servers or processes: `make unit` leaves it out

ENV = {
    "DRA_DRIVER_IMAGE": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0",
    "DCGM_EXPORTER_IMAGE": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
    "DCGM_IMAGE": "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
    "DEFAULT_GPU_ALLOCATION_MODE": "dra",
}
GC_PATH = "/apis/nvidia.com/v1alpha1/gpuclusters"
GPU_NODES = 3
CLUSTERPOLICY_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterpolicies.nvidia.com"},
    "spec": {
        "group": "nvidia.com",
        "names": {"kind": "ClusterPolicy", "listKind": "ClusterPolicyList", "plural": "clusterpolicies", "singular": "clusterpolicy"},
        "scope": "Cluster",
        "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}  # fmt: skip


class Env:
    def __init__(self, sandbox: Sandbox, kube: Kube) -> None:
        self.sandbox = sandbox
        self.kube = kube
        self.controller: Controller | None = None
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start_controller(self, **kwargs: Any) -> Controller:
        self.controller = Controller(self.kube, namespace="gpu-operator", env=ENV, min_interval=0.05, **kwargs)
        self.task = asyncio.create_task(self.controller.run(self.stop))
        return self.controller

    async def wait(self, predicate: Any, timeout: float = 10.0) -> Any:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            value = await predicate()
            if value:
                return value
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("condition not reached in time")
            await asyncio.sleep(0.05)

    async def gpucluster(self) -> dict[str, Any] | None:
        try:
            return await self.kube.get(f"{GC_PATH}/gpu-cluster")
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def make_workloads_ready(self) -> None:
        """Stand in for the DaemonSet/Deployment controllers the core sandbox does not run."""
        for kind, plural in (("DaemonSet", "daemonsets"), ("Deployment", "deployments")):
            listed = await self.kube.get(f"/apis/apps/v1/namespaces/gpu-operator/{plural}")
            for obj in listed.get("items") or []:
                name, generation = obj["metadata"]["name"], obj["metadata"].get("generation", 1)
                if kind == "DaemonSet":
                    n = GPU_NODES  # every operand DaemonSet runs on each GPU node
                    status = {"observedGeneration": generation, "desiredNumberScheduled": n, "currentNumberScheduled": n,
                              "numberReady": n, "numberAvailable": n, "updatedNumberScheduled": n, "numberMisscheduled": 0}  # fmt: skip
                else:
                    replicas = obj["spec"].get("replicas", 1)
                    status = {"observedGeneration": generation, "replicas": replicas, "readyReplicas": replicas,
                              "availableReplicas": replicas, "updatedReplicas": replicas}  # fmt: skip
                await self.kube.request(
                    "PATCH", f"/apis/apps/v1/namespaces/gpu-operator/{plural}/{name}/status",
                    body={"status": status}, content_type="application/merge-patch+json",
                )  # fmt: skip


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    sandbox = Sandbox()
    await sandbox.start()
    kube = await Kube.connect(str(sandbox.kubeconfig_path))
    await kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=gpucluster_crd())
    await kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=CLUSTERPOLICY_CRD)
    await kube.request(
        "POST",
        "/api/v1/namespaces",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
    )
    for node in cluster_nodes(GPU_NODES, 8):
        node["metadata"].pop("uid", None)
        await kube.request("POST", "/api/v1/nodes", body=node)
    cpu = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "cpu-node", "labels": {"kubernetes.io/hostname": "cpu-node"}},
    }
    await kube.request("POST", "/api/v1/nodes", body=cpu)
    e = Env(sandbox, kube)
    try:
        yield e
    finally:
        e.stop.set()
        if e.task is not None:
            await asyncio.wait_for(e.task, 10)
        await kube.close()
        await sandbox.stop()


GPUCLUSTER = yaml.safe_load("""
apiVersion: nvidia.com/v1alpha1
kind: GPUCluster
metadata: {name: gpu-cluster}
spec: {}
""")


async def test_gpucluster_becomes_ready_and_steady_state_writes_nothing(env: Env) -> None:
    controller = await env.start_controller()
    await env.kube.request("POST", GC_PATH, body=GPUCLUSTER)

    async def not_ready() -> Any:
        gc = await env.gpucluster()
        return gc if gc and (gc.get("status") or {}).get("state") == "notReady" else None

    gc = await env.wait(not_ready)
    assert FINALIZER in gc["metadata"]["finalizers"]
    ready_cond = next(c for c in gc["status"]["conditions"] if c["type"] == "Ready")
    assert ready_cond["status"] == "False" and ready_cond["reason"] == "OperandsNotReady"
    assert gc["status"]["namespace"] == "gpu-operator"

    classes = await env.kube.get("/apis/resource.k8s.io/v1/deviceclasses")
    names = sorted(c["metadata"]["name"] for c in classes["items"])
    assert names == ["compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com",
                     "gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"]  # fmt: skip
    ns = await env.kube.get("/api/v1/namespaces/gpu-operator")
    assert ns["metadata"]["labels"]["resource.kubernetes.io/admin-access"] == "true"
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in (await env.kube.get("/api/v1/nodes"))["items"]}
    assert nodes["gpu-node-0"]["nvidia.com/gpu.deploy.dra-driver"] == "true"
    assert nodes["gpu-node-0"]["nvidia.com/gpu.present"] == "true"
    assert "nvidia.com/gpu.deploy.dra-driver" not in nodes["cpu-node"]

    await env.make_workloads_ready()

    async def ready() -> Any:
        gc = await env.gpucluster()
        return gc if gc and (gc.get("status") or {}).get("state") == "ready" else None

    gc = await env.wait(ready)
    assert next(c for c in gc["status"]["conditions"] if c["type"] == "Ready")["status"] == "True"

    # Steady state: three resyncs, zero writes.
    writes = controller.reconciler.api.writes
    passes = controller.passes
    for _ in range(3):
        controller.resync()
        await env.wait(lambda p=passes: _passed(controller, p))
        passes = controller.passes
    assert controller.reconciler.api.writes == writes


async def _passed(controller: Controller, passes: int) -> bool:
    return controller.passes > passes


async def test_clusterpolicy_gives_not_ready_with_prerequisite_condition(env: Env) -> None:
    await env.kube.request("POST", "/apis/nvidia.com/v1/clusterpolicies",
                           body={"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"}, "spec": {}})  # fmt: skip
    await env.start_controller()
    await env.kube.request("POST", GC_PATH, body=GPUCLUSTER)

    async def blocked() -> Any:
        gc = await env.gpucluster()
        conds = {c["type"]: c for c in ((gc or {}).get("status") or {}).get("conditions") or []}
        return conds if conds.get("Error", {}).get("reason") == "PrerequisiteNotMet" else None

    conds = await env.wait(blocked)
    assert conds["Error"]["status"] == "True"
    assert "ClusterPolicy cluster-policy exists" in conds["Error"]["message"]
    assert (await env.kube.get("/apis/resource.k8s.io/v1/deviceclasses"))["items"] == []


async def test_turning_compute_domains_off_removes_their_objects(env: Env) -> None:
    await env.start_controller()
    await env.kube.request("POST", GC_PATH, body=GPUCLUSTER)

    async def has_controller() -> Any:
        got = await env.kube.get("/apis/apps/v1/namespaces/gpu-operator/deployments")
        return [d["metadata"]["name"] for d in got["items"]]

    assert await env.wait(has_controller) == ["nvidia-dra-driver-controller"]
    await env.kube.request("PATCH", f"{GC_PATH}/gpu-cluster", body={"spec": {"draDriver": {"computeDomains": {"enabled": False}}}},
                           content_type="application/merge-patch+json")  # fmt: skip

    async def gone() -> bool:
        deployments = (await env.kube.get("/apis/apps/v1/namespaces/gpu-operator/deployments"))["items"]
        classes = {
            c["metadata"]["name"] for c in (await env.kube.get("/apis/resource.k8s.io/v1/deviceclasses"))["items"]
        }
        return not deployments and classes == {"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"}

    await env.wait(gone)
    ds = await env.kube.get("/apis/apps/v1/namespaces/gpu-operator/daemonsets/nvidia-dra-driver-kubelet-plugin")
    assert [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]] == ["gpus"]


async def test_objects_we_do_not_own_are_never_deleted(env: Env) -> None:
    mine = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "tpu.example.com", "labels": {"app.kubernetes.io/managed-by": "gpucluster"}},
            "spec": {"selectors": [{"cel": {"expression": "true"}}]}}  # fmt: skip
    await env.kube.request("POST", "/apis/resource.k8s.io/v1/deviceclasses", body=mine)
    await env.start_controller()
    await env.kube.request("POST", GC_PATH, body=GPUCLUSTER)

    async def classes() -> Any:
        got = {c["metadata"]["name"] for c in (await env.kube.get("/apis/resource.k8s.io/v1/deviceclasses"))["items"]}
        return got if "gpu.nvidia.com" in got else None

    assert "tpu.example.com" in await env.wait(classes)


async def test_deleting_the_gpucluster_drains_claim_consumers_first(env: Env) -> None:
    await env.start_controller()
    await env.kube.request("POST", GC_PATH, body=GPUCLUSTER)

    async def exporter() -> Any:
        try:
            return await env.kube.get("/apis/apps/v1/namespaces/gpu-operator/daemonsets/nvidia-dcgm-exporter")
        except KubeError:
            return None

    await env.wait(exporter)
    await env.kube.request("DELETE", f"{GC_PATH}/gpu-cluster")

    async def drained_event() -> Any:
        events = (await env.kube.get("/api/v1/namespaces/default/events"))["items"]
        return [e for e in events if e["reason"] == "DrainingClaimConsumers"]

    [event, *_] = await env.wait(drained_event)
    # Named while they drain (one already gone when the status is decided is not named).
    assert "nvidia-dra-validator" in event["message"] or "nvidia-dcgm-exporter" in event["message"]
    assert event["involvedObject"]["kind"] == "GPUCluster"

    async def deleted() -> bool:
        return await env.gpucluster() is None

    await env.wait(deleted)
    remaining = (await env.kube.get("/apis/apps/v1/namespaces/gpu-operator/daemonsets"))["items"]
    assert not [d for d in remaining if d["spec"]["template"]["spec"].get("resourceClaims")]


async def test_a_second_gpucluster_is_disabled(env: Env) -> None:
    await env.start_controller()
    other = {**GPUCLUSTER, "metadata": {"name": "other"}}
    with pytest.raises(KubeError) as err:
        await env.kube.request("POST", GC_PATH, body=other)
    assert err.value.status == 422  # the CRD's singleton rule stops it before the controller sees it


async def test_a_pod_pending_on_an_impossible_claim_gets_an_explaining_event(env: Env) -> None:
    from tests.fixtures import load_fixture

    for resource_slice in load_fixture("h100-node"):
        resource_slice["metadata"].pop("ownerReferences", None)
        await env.kube.request("POST", "/apis/resource.k8s.io/v1/resourceslices", body=resource_slice)
    await env.kube.request("POST", "/apis/resource.k8s.io/v1/deviceclasses", body={
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}})  # fmt: skip
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "b200", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1,
                      "selectors": [{"cel": {"expression": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA B200"'}}]}}]}}}  # fmt: skip
    await env.kube.request("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", body=claim)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wants-b200", "namespace": "default"},
           "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "b200"}],
                    "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}]}}  # fmt: skip
    await env.kube.request("POST", "/api/v1/namespaces/default/pods", body=pod)
    # What kube-scheduler records on a pod it could not place; the controller explains only those.
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "cannot allocate all claims",
    }
    await env.kube.request("PATCH", "/api/v1/namespaces/default/pods/wants-b200/status", body={"status": {"conditions": [unschedulable]}},
                           content_type="application/merge-patch+json")  # fmt: skip
    await env.start_controller()

    async def explained() -> Any:
        events = (await env.kube.get("/api/v1/namespaces/default/events"))["items"]
        return [e for e in events if e["reason"] == "ClaimUnsatisfiable"]

    events = await env.wait(explained)
    kinds = {e["involvedObject"]["kind"] for e in events}
    assert kinds == {"Pod", "ResourceClaim"} or kinds == {"Pod"} or kinds == {"ResourceClaim"}
    await asyncio.sleep(0.3)
    events = await explained()
    assert {e["involvedObject"]["kind"] for e in events} == {"Pod", "ResourceClaim"}
    assert len(events) == 2  # once per object: the reason did not change
    assert events[0]["message"] == (
        '0/8 devices usable for request gpu on 5 nodes, need 1 on one node: 8 selector #0 false (productName == "NVIDIA B200")'
    )


async def test_native_extended_resource_mapping_is_set_when_asked(env: Env) -> None:
    await env.start_controller()
    body = {**GPUCLUSTER, "spec": {"draDriver": {"gpus": {"extendedResourceName": "nvidia.com/gpu"}}}}
    await env.kube.request("POST", GC_PATH, body=body)

    async def mapped() -> Any:
        try:
            dc = await env.kube.get("/apis/resource.k8s.io/v1/deviceclasses/gpu.nvidia.com")
        except KubeError:
            return None
        return dc["spec"].get("extendedResourceName")

    assert await env.wait(mapped) == "nvidia.com/gpu"


async def _objects(env: Env) -> list[tuple[str, str]]:
    out = []
    for path, kind in (("/apis/apps/v1/namespaces/gpu-operator/daemonsets", "DaemonSet"),
                       ("/apis/apps/v1/namespaces/gpu-operator/deployments", "Deployment"),
                       ("/apis/resource.k8s.io/v1/deviceclasses", "DeviceClass"),
                       ("/api/v1/namespaces/gpu-operator/serviceaccounts", "ServiceAccount"),
                       ("/apis/rbac.authorization.k8s.io/v1/clusterroles", "ClusterRole")):  # fmt: skip
        out += [(kind, o["metadata"]["name"]) for o in (await env.kube.get(path))["items"]]
    return sorted(out)


async def test_faults_conflicts_500s_and_a_restart_converge_without_duplicates(env: Env) -> None:
    faults = env.sandbox.faults
    faults.fail_next("daemonsets", 409, 2)
    faults.fail_next("deviceclasses", 500, 3)
    faults.fail_next("gpuclusters", 409, 1, verbs=["patch"])
    await env.start_controller()
    await env.kube.request("POST", GC_PATH, body=GPUCLUSTER)

    async def reconciled() -> Any:
        gc = await env.gpucluster()
        return gc if gc and (gc.get("status") or {}).get("state") == "notReady" else None

    await env.wait(reconciled, timeout=30)
    await env.sandbox.restart(compact=True)  # every watch ends; re-watching gets 410 and relists
    await env.make_workloads_ready()

    async def ready() -> Any:
        gc = await env.gpucluster()
        return gc if gc and (gc.get("status") or {}).get("state") == "ready" else None

    await env.wait(ready, timeout=30)
    objects = await _objects(env)
    assert len(objects) == len(set(objects))
    assert ("DaemonSet", "nvidia-dra-driver-kubelet-plugin") in objects
    assert sum(1 for kind, _ in objects if kind == "DeviceClass") == 5


async def test_owned_namespaced_kinds_are_watched_in_the_operator_namespace_only(env: Env) -> None:
    controller = await env.start_controller()
    await env.wait(lambda: _true(controller.synced))
    paths = {r.resource.kind: r.resource.path for r in controller.reflectors}
    for kind in ("ServiceAccount", "Service", "DaemonSet", "Deployment", "Role", "RoleBinding", "ServiceMonitor"):
        assert "/namespaces/gpu-operator/" in paths[kind], (kind, paths[kind])
    assert paths["ClusterRole"] == "/apis/rbac.authorization.k8s.io/v1/clusterroles"


async def _true(value: bool) -> bool:
    return value


async def test_a_forbidden_watch_keeps_the_controller_unready_and_says_so_on_the_gpucluster(env: Env) -> None:
    message = (
        'services is forbidden: User "system:serviceaccount:gpu-operator:gpu-operator" cannot list resource '
        '"services" in API group "" in the namespace "gpu-operator"'
    )
    env.sandbox.faults.fail_next("services", 403, -1, verbs=["list"], message=message)
    await env.kube.request("POST", GC_PATH, body=GPUCLUSTER)
    controller = await env.start_controller()

    async def reported() -> Any:
        gc = await env.gpucluster()
        conds = {c["type"]: c for c in ((gc or {}).get("status") or {}).get("conditions") or []}
        ready = conds.get("Ready")
        return gc if ready and ready["reason"] == "PermissionDenied" else None

    gc = await env.wait(reported)
    ready = next(c for c in gc["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert 'list resource "services" in API group "" in the namespace "gpu-operator"' in ready["message"]
    assert gc["status"]["state"] == "notReady"
    ok, detail = controller.ready()
    assert not ok and "services" in detail
    assert not controller.synced and controller.passes == 0

    env.sandbox.faults.clear()
    await env.wait(lambda: _true(controller.ready()[0]), timeout=15)
