"""The sandbox: start time, and memory with 1,000 simulated nodes x 8 GPUs publishing ResourceSlices.

`gpucluster sandbox` runs as its own process; this process times it from exec to a served
kubeconfig with every node registered, then labels the nodes for the DRA driver and creates the
kubelet-plugin DaemonSet, so that every node publishes its slices, and reads the server's RSS.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpucluster.kube.client import Kube, KubeError

NODES = 1000
DAEMONSET = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "nvidia-dra-driver-kubelet-plugin", "namespace": "gpu-operator"},
    "spec": {
        "selector": {"matchLabels": {"app": "kubelet-plugin"}},
        "template": {
            "metadata": {"labels": {"app": "kubelet-plugin"}},
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.deploy.dra-driver": "true"},
                "containers": [{"name": "gpus", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0"}],
            },
        },
    },
}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _scenario() -> dict[str, float]:
    kubeconfig = Path(tempfile.mkdtemp(prefix="bench-sandbox-")) / "kubeconfig"
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpucluster.cli", "sandbox", "--nodes", str(NODES), "--gpus-per-node", "8",
         "--kubeconfig-out", str(kubeconfig), "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    kube = None
    try:
        while not kubeconfig.exists():
            await asyncio.sleep(0.01)
        kube = await Kube.connect(str(kubeconfig))
        while True:
            try:
                if len((await kube.get("/api/v1/nodes")).get("items") or []) >= NODES:
                    break
            except (KubeError, OSError):
                pass
            await asyncio.sleep(0.01)
        start_s = time.perf_counter() - started
        names = [n["metadata"]["name"] for n in (await kube.get("/api/v1/nodes"))["items"]]
        for name in names:
            await kube.request("PATCH", f"/api/v1/nodes/{name}", body={"metadata": {"labels": {"nvidia.com/gpu.deploy.dra-driver": "true"}}},
                               content_type="application/merge-patch+json")  # fmt: skip
        await kube.request(
            "POST",
            "/api/v1/namespaces",
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
        )
        await kube.request("POST", "/apis/apps/v1/namespaces/gpu-operator/daemonsets", body=DAEMONSET)
        deadline = time.perf_counter() + 120
        slices = 0
        while time.perf_counter() < deadline:
            slices = len((await kube.get("/apis/resource.k8s.io/v1/resourceslices")).get("items") or [])
            if slices >= NODES:
                break
            await asyncio.sleep(0.5)
        return {"start_s": start_s, "rss_mb": _rss_mb(proc.pid), "slices": float(slices)}
    finally:
        if kube is not None:
            await kube.close()
        proc.terminate()
        proc.wait(10)


def run() -> list[dict[str, Any]]:
    result = asyncio.run(_scenario())
    return [
        {"name": f"sandbox start with {NODES} nodes (exec to nodes served)", "value": result["start_s"], "unit": "s",
         "target": "< 2 s", "ok": result["start_s"] < 2},
        {"name": f"sandbox RSS, {NODES} nodes x 8 GPUs, slices published", "value": result["rss_mb"], "unit": "MB",
         "target": "< 500 MB", "ok": result["rss_mb"] < 500 and result["slices"] >= NODES},
    ]  # fmt: skip
