"""Day-2 behaviour against the sandbox: objects that are not ours, drift, failures in status, deletion."""

from __future__ import annotations

from typing import Any

import pytest

from gpucluster.kube.client import KubeError
from tests.controller import test_reconcile_e2e as base
from tests.controller.test_reconcile_e2e import GC_PATH, GPUCLUSTER, Env

pytestmark = pytest.mark.integration  # starts servers or processes: `make unit` leaves it out
env = base.env  # the sandbox + controller fixture

NS = "gpu-operator"
DS_PATH = f"/apis/apps/v1/namespaces/{NS}/daemonsets"
DEPLOY_PATH = f"/apis/apps/v1/namespaces/{NS}/deployments"
SERVICE_PATH = f"/api/v1/namespaces/{NS}/services"
CLASS_PATH = "/apis/resource.k8s.io/v1/deviceclasses"
PLUGIN = "nvidia-dra-driver-kubelet-plugin"
MERGE = "application/merge-patch+json"


def conditions(gc: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((gc or {}).get("status") or {}).get("conditions") or []}


async def state_is(env: Env, state: str) -> Any:
    gc = await env.gpucluster()
    return gc if gc and (gc.get("status") or {}).get("state") == state else None


async def wait_ready(env: Env) -> dict[str, Any]:
    async def ready() -> Any:
        await env.make_workloads_ready()
        return await state_is(env, "ready")

    found: dict[str, Any] = await env.wait(ready, timeout=20)
    return found


async def test_objects_an_admin_created_are_left_alone_and_reported(env: Env) -> None:
    admin_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
                   "spec": {"selectors": [{"cel": {"expression": "device.driver == 'admin'"}}]}}  # fmt: skip
    admin_service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nvidia-dcgm-exporter", "namespace": NS},
                     "spec": {"ports": [{"port": 1234}]}}  # fmt: skip
    created_class = await env.kube.request("POST", CLASS_PATH, body=admin_class)
    created_service = await env.kube.request("POST", SERVICE_PATH, body=admin_service)
    await env.start_controller()
    await env.kube.request("POST", GC_PATH, body={**GPUCLUSTER, "spec": {"dcgmExporter": {"enabled": True}}})

    async def conflict() -> Any:
        gc = await env.gpucluster()
        ready = conditions(gc).get("Ready")
        return gc if ready and ready["reason"] == "OperandConflict" else None

    gc = await env.wait(conflict)
    assert gc["status"]["state"] == "notReady"
    assert conditions(gc)["Error"]["status"] == "True"
    message = conditions(gc)["Ready"]["message"]
    assert "DeviceClass gpu.nvidia.com" in message and f"Service {NS}/nvidia-dcgm-exporter" in message

    async def warnings() -> Any:
        events = (await env.kube.get("/api/v1/namespaces/default/events"))["items"]
        found = {e["message"].split(" exists")[0] for e in events if e["reason"] == "OperandConflict"}
        return found if len(found) == 2 else None

    assert await env.wait(warnings) == {"DeviceClass gpu.nvidia.com", f"Service {NS}/nvidia-dcgm-exporter"}
    # Everything else was applied; the admin's objects were not written.
    await env.wait(lambda: _exists(env, f"{DS_PATH}/{PLUGIN}"))
    live_class = await env.kube.get(f"{CLASS_PATH}/gpu.nvidia.com")
    live_service = await env.kube.get(f"{SERVICE_PATH}/nvidia-dcgm-exporter")
    assert live_class["metadata"]["resourceVersion"] == created_class["metadata"]["resourceVersion"]
    assert live_service["metadata"]["resourceVersion"] == created_service["metadata"]["resourceVersion"]
    assert "ownerReferences" not in live_class["metadata"]

    # Disabling the exporter prunes our exporter objects but never the admin's Service.
    await env.kube.request("PATCH", f"{GC_PATH}/gpu-cluster", body={"spec": {"dcgmExporter": {"enabled": False}}},
                           content_type=MERGE)  # fmt: skip
    await env.wait(lambda: _missing(env, f"{DS_PATH}/nvidia-dcgm-exporter"))
    assert await _exists(env, f"{SERVICE_PATH}/nvidia-dcgm-exporter")

    # Hand-over: the admin labels the cluster-scoped DeviceClass as ours; the controller takes it.
    await env.kube.request("PATCH", f"{CLASS_PATH}/gpu.nvidia.com", content_type=MERGE,
                           body={"metadata": {"labels": {"app.kubernetes.io/managed-by": "gpucluster"}}})  # fmt: skip

    async def taken_over() -> Any:
        live = await env.kube.get(f"{CLASS_PATH}/gpu.nvidia.com")
        return live if live["metadata"].get("ownerReferences") else None

    live = await env.wait(taken_over)
    assert "admin" not in str(live["spec"])
    await wait_ready(env)


async def _exists(env: Env, path: str) -> bool:
    return not await _missing(env, path)


async def _missing(env: Env, path: str) -> bool:
    try:
        await env.kube.get(path)
    except KubeError as exc:
        if exc.status == 404:
            return True
        raise
    return False


async def test_hand_edits_are_reverted_and_steady_state_writes_nothing(env: Env) -> None:
    controller = await env.start_controller()
    await env.kube.request("POST", GC_PATH, body=GPUCLUSTER)
    await env.wait(lambda: _exists(env, f"{DS_PATH}/{PLUGIN}"))
    await wait_ready(env)
    plugin = await env.kube.get(f"{DS_PATH}/{PLUGIN}")
    image = plugin["spec"]["template"]["spec"]["containers"][0]["image"]
    patched = plugin["spec"]["template"]["spec"]["containers"][0] | {"image": "example.com/evil:1"}
    await env.kube.request("PATCH", f"{DS_PATH}/{PLUGIN}", content_type="application/strategic-merge-patch+json",
                           body={"spec": {"template": {"spec": {"containers": [patched]}}}})  # fmt: skip
    await env.kube.request("PATCH", f"{DEPLOY_PATH}/nvidia-dra-driver-controller", body={"spec": {"replicas": 0}},
                           content_type=MERGE)  # fmt: skip

    async def reverted() -> bool:
        ds = await env.kube.get(f"{DS_PATH}/{PLUGIN}")
        deploy = await env.kube.get(f"{DEPLOY_PATH}/nvidia-dra-driver-controller")
        return bool(
            ds["spec"]["template"]["spec"]["containers"][0]["image"] == image and deploy["spec"]["replicas"] == 1
        )

    await env.wait(reverted, timeout=10)
    assert controller.reconciler.operands.drifts >= 2
    await wait_ready(env)
    writes, passes = controller.reconciler.api.writes, controller.passes
    for _ in range(3):
        controller.resync()
        await env.wait(lambda p=passes: _true(controller.passes > p))
        passes = controller.passes
    assert controller.reconciler.api.writes == writes


async def _true(value: bool) -> bool:
    return value


async def test_persistent_write_failures_show_in_status_and_clear(env: Env) -> None:
    controller = await env.start_controller(max_backoff=0.5)
    await env.kube.request("POST", GC_PATH, body=GPUCLUSTER)
    await env.wait(lambda: _exists(env, f"{DS_PATH}/{PLUGIN}"))
    await wait_ready(env)
    env.sandbox.faults.fail_next("daemonsets", 500, -1, verbs=["patch"])
    # A hand edit (an update: only patches fail) makes the controller apply the DaemonSet again: it fails.
    plugin = await env.kube.get(f"{DS_PATH}/{PLUGIN}")
    plugin["metadata"]["labels"]["nvidia.com/gpu-operator.state"] = "x"
    await env.kube.request("PUT", f"{DS_PATH}/{PLUGIN}", body=plugin)

    async def failing() -> Any:
        gc = await env.gpucluster()
        conds = conditions(gc)
        error = conds.get("Error", {})
        return gc if error.get("status") == "True" and error.get("reason") == "ReconcileFailed" else None

    gc = await env.wait(failing, timeout=20)
    # The failure is reported once, not on every failed pass (a status write that is read back as
    # a change would start the next pass at once, skipping the back-off).
    statuses, passes = controller.reconciler.status.writes, controller.passes
    await env.wait(lambda p=passes: _true(controller.passes >= p + 3), timeout=20)
    assert controller.reconciler.status.writes - statuses <= 1
    assert conditions(gc)["Ready"]["status"] == "False" and gc["status"]["state"] == "notReady"
    assert "reconcile passes keep failing; last error:" in conditions(gc)["Error"]["message"]
    events = (await env.kube.get("/api/v1/namespaces/default/events"))["items"]
    assert [e for e in events if e["reason"] == "ReconcileFailed" and e["type"] == "Warning"]
    env.sandbox.faults.clear()
    gc = await wait_ready(env)
    assert conditions(gc)["Error"]["status"] == "False"
    assert controller.passes > 0


async def test_deletion_reports_not_ready_and_aggregates_its_events(env: Env) -> None:
    await env.start_controller()
    await env.kube.request("POST", GC_PATH, body=GPUCLUSTER)
    await env.wait(lambda: _exists(env, f"{DS_PATH}/nvidia-dcgm-exporter"))
    # Something else holds the exporter (as pods still terminating would): deletion drains.
    await env.kube.request("PATCH", f"{DS_PATH}/nvidia-dcgm-exporter", body={"metadata": {"finalizers": ["example.com/hold"]}},
                           content_type=MERGE)  # fmt: skip
    await env.kube.request("DELETE", f"{GC_PATH}/gpu-cluster")

    async def deleting() -> Any:
        gc = await env.gpucluster()
        ready = conditions(gc).get("Ready", {})
        return gc if ready.get("reason") == "Deleting" else None

    gc = await env.wait(deleting)
    assert gc["status"]["state"] == "notReady" and conditions(gc)["Error"]["status"] == "False"

    async def repeated() -> Any:
        events = (await env.kube.get("/api/v1/namespaces/default/events"))["items"]
        draining = [e for e in events if e["reason"] == "DrainingClaimConsumers"]
        return draining if any(e.get("count", 1) >= 2 for e in draining) else None

    draining = await env.wait(repeated, timeout=20)
    # One Event per distinct message (the validator may finish first), repeats counted on it.
    assert len(draining) == len({e["message"] for e in draining})
    repeat = next(e for e in draining if e["count"] >= 2)
    assert repeat["lastTimestamp"] >= repeat["firstTimestamp"]
    await env.kube.request(
        "PATCH", f"{DS_PATH}/nvidia-dcgm-exporter", body={"metadata": {"finalizers": []}}, content_type=MERGE
    )

    async def deleted() -> bool:
        return await env.gpucluster() is None

    await env.wait(deleted, timeout=20)


async def test_a_version_only_bump_rolls_the_kubelet_plugin(env: Env) -> None:
    await env.start_controller()
    await env.kube.request("POST", GC_PATH, body=GPUCLUSTER)
    await env.wait(lambda: _exists(env, f"{DS_PATH}/{PLUGIN}"))
    await env.kube.request("PATCH", f"{GC_PATH}/gpu-cluster", body={"spec": {"draDriver": {"version": "v25.12.1"}}},
                           content_type=MERGE)  # fmt: skip

    async def rolled() -> Any:
        ds = await env.kube.get(f"{DS_PATH}/{PLUGIN}")
        image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
        return image if image.endswith(":v25.12.1") else None

    assert await env.wait(rolled) == "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.1"
    gc = await wait_ready(env)
    assert conditions(gc)["Error"]["status"] == "False"
