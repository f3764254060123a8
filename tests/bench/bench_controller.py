"""The controller against the sandbox: time to ready and API writes at 100 and 1,000 nodes, and the
controller's memory with 1,000 nodes x 8 GPUs cached.

The sandbox (its simulated controllers off, so that every write counted is the controller's) and
the controller run as their own processes (`gpucluster sandbox --no-simulation`, `gpucluster
controller`); this process creates the ResourceSlices, stands in for the DaemonSet controller
(the workloads' status) and times from the GPUCluster's creation to `status.state: ready`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpucluster.api.crd import gpucluster_crd
from gpucluster.dra.simulate import node_slices
from gpucluster.kube.client import Kube, KubeError

ENV = {
    "DRA_DRIVER_IMAGE": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0",
    "DCGM_EXPORTER_IMAGE": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
    "DEFAULT_GPU_ALLOCATION_MODE": "dra",
}
GPUCLUSTER = {
    "apiVersion": "nvidia.com/v1alpha1",
    "kind": "GPUCluster",
    "metadata": {"name": "gpu-cluster"},
    "spec": {},
}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _ready_workloads(kube: Kube) -> None:
    for plural in ("daemonsets", "deployments"):
        listed = await kube.get(f"/apis/apps/v1/namespaces/gpu-operator/{plural}")
        for obj in listed.get("items") or []:
            generation = obj["metadata"].get("generation", 1)
            if (obj.get("status") or {}).get("observedGeneration") == generation:
                continue
            if plural == "daemonsets":
                status = {"observedGeneration": generation, "desiredNumberScheduled": 1, "currentNumberScheduled": 1,
                          "numberReady": 1, "numberAvailable": 1, "updatedNumberScheduled": 1}  # fmt: skip
            else:
                status = {"observedGeneration": generation, "replicas": 1, "readyReplicas": 1, "availableReplicas": 1,
                          "updatedReplicas": 1}  # fmt: skip
            await kube.request("PATCH", f"/apis/apps/v1/namespaces/gpu-operator/{plural}/{obj['metadata']['name']}/status",
                               body={"status": status}, content_type="application/merge-patch+json")  # fmt: skip


async def _scenario(nodes: int, *, simulate: bool = False) -> dict[str, float]:
    """With ``simulate`` the sandbox's own controllers publish slices, run the operand pods and
    report their status (the whole product end to end); otherwise this process stands in for them."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-controller-"))
    kubeconfig = tmp / "kubeconfig"
    sandbox = subprocess.Popen(
        [sys.executable, "-m", "gpucluster.cli", "sandbox", "--nodes", str(nodes), "--kubeconfig-out", str(kubeconfig),
         "--log-level", "warning", *([] if simulate else ["--no-simulation"])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    controller = None
    kube = None
    try:
        for _ in range(200):
            if kubeconfig.exists():
                break
            await asyncio.sleep(0.05)
        kube = await Kube.connect(str(kubeconfig))
        for _ in range(200):
            try:
                if len((await kube.get("/api/v1/nodes")).get("items") or []) >= nodes:
                    break
            except (KubeError, OSError):
                pass
            await asyncio.sleep(0.05)
        await kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=gpucluster_crd())
        await kube.request(
            "POST",
            "/api/v1/namespaces",
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
        )
        for node in [] if simulate else (await kube.get("/api/v1/nodes"))["items"]:
            for resource_slice in node_slices(node["metadata"]["name"], "H100", 8):
                resource_slice["metadata"].pop("ownerReferences", None)
                await kube.request("POST", "/apis/resource.k8s.io/v1/resourceslices", body=resource_slice)
        controller = subprocess.Popen(
            [sys.executable, "-m", "gpucluster.cli", "controller", "--kubeconfig", str(kubeconfig), "--health-port", "0",
             "--no-leader-election", "--log-level", "warning"],
            env={**os.environ, **ENV}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        await asyncio.sleep(1.0)  # caches fill before the clock starts, as for a running operator
        started = time.perf_counter()
        await kube.request("POST", "/apis/nvidia.com/v1alpha1/gpuclusters", body=GPUCLUSTER)
        ready_at = None
        while time.perf_counter() - started < 120:
            if not simulate:
                await _ready_workloads(kube)
            gc = await kube.get("/apis/nvidia.com/v1alpha1/gpuclusters/gpu-cluster")
            if (gc.get("status") or {}).get("state") == "ready":
                ready_at = time.perf_counter() - started
                break
            await asyncio.sleep(0.02)
        rv_before = int((await kube.get("/api/v1/namespaces"))["metadata"]["resourceVersion"])
        await asyncio.sleep(3.0)  # steady state: watch for any write
        rv_after = int((await kube.get("/api/v1/namespaces"))["metadata"]["resourceVersion"])
        return {
            "ready_s": ready_at if ready_at is not None else float("nan"),
            "steady_writes": float(rv_after - rv_before),
            "rss_mb": _rss_mb(controller.pid),
        }
    finally:
        if kube is not None:
            await kube.close()
        for proc in (controller, sandbox):
            if proc is not None:
                proc.terminate()
                proc.wait(10)


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for nodes in (100, 1000):
        result = asyncio.run(_scenario(nodes))
        rows.append({"name": f"time to ready, {nodes} nodes", "value": result["ready_s"], "unit": "s",
                     "target": "< 5 s" if nodes == 100 else None, "ok": result["ready_s"] < 5 if nodes == 100 else None})  # fmt: skip
        rows.append({"name": f"API writes in steady state (3 s), {nodes} nodes", "value": result["steady_writes"],
                     "unit": "writes", "target": "0", "ok": result["steady_writes"] == 0})  # fmt: skip
        if nodes == 1000:
            rows.append({"name": "controller RSS, 1,000 nodes x 8 GPUs cached", "value": result["rss_mb"], "unit": "MB",
                         "target": "< 250 MB", "ok": result["rss_mb"] < 250})  # fmt: skip
    full = asyncio.run(_scenario(100, simulate=True))
    rows.append({"name": "time to ready, 100 nodes, simulated cluster (operand pods, claims, slices)",
                 "value": full["ready_s"], "unit": "s", "target": "< 5 s", "ok": full["ready_s"] < 5})  # fmt: skip
    return rows
