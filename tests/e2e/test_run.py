"""End to end, as a user would: ``gpucluster run``'s stack (sandbox, CRDs, webhook over real TLS
registered through real webhook configurations) driven by real kubectl."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from gpucluster.cli.run import RunOptions, Stack, chart_env
from gpucluster.controller.operands.dra_driver import GPU_DEVICE_CLASSES
from tests.e2e.backends import SANDBOX, backends, kube_run_options, start_kube

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")
T = TypeVar("T")


class StackThread:
    """``Stack`` on its own event loop in a background thread."""

    def __init__(self, options: RunOptions) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="gpucluster-run", daemon=True)
        self.stack = Stack.__new__(Stack)
        self.options = options

    def call(self, fn: Callable[[], Any], timeout: float = 30) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(fn(), self.loop)
        return future.result(timeout)

    def start(self) -> Stack:
        self.thread.start()

        async def make() -> Stack:
            stack = Stack(self.options)
            await stack.start()
            return stack

        self.stack = self.call(make)
        return self.stack

    def stop(self) -> None:
        try:
            self.call(self.stack.stop)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


@contextlib.contextmanager
def run_stack(backend: str, directory: Path, *, nodes: int, mix: str = "h100", **options: Any) -> Iterator[Stack]:
    """``gpucluster run``'s stack on ``backend``: in the sandbox it starts, or against the real
    control plane (CRDs applied, the chart's operator environment for the controller)."""
    plane = None
    if backend == SANDBOX:
        run = RunOptions(sandbox=True, kubeconfig_out=directory / "kubeconfig", nodes=nodes, mix=mix, **options)
    else:
        plane = start_kube(nodes=nodes, mix=mix)
        run = kube_run_options(plane, environment=chart_env(), **options)
    runner = StackThread(run)
    try:
        yield runner.start()
        runner.stop()
    finally:
        if plane is not None:
            plane.stop()


@pytest.fixture(scope="module", params=backends())
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with run_stack(request.param, tmp_path_factory.mktemp("run"), nodes=3, controller=False) as stack:
        yield stack


def on_kube(stack: Stack) -> bool:
    return not stack.uses_sandbox


def kubectl(stack: Stack, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [KUBECTL, "--kubeconfig", str(stack.kubeconfig), *args]
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    return done


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 15.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def get_json(stack: Stack, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(kubectl(stack, "get", *args, "-o", "json").stdout)
    return out


GPUCLUSTER = "apiVersion: nvidia.com/v1alpha1\nkind: GPUCluster\nmetadata: {name: gpu-cluster}\nspec: {}\n"
CLUSTERPOLICY = "apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata: {name: cluster-policy}\nspec: {}\n"


def legacy_pod(name: str, gpus: int) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  restartPolicy: Never
  containers:
  - name: cuda
    image: nvcr.io/nvidia/cuda:12.9.0-base-ubuntu24.04
    command: [nvidia-smi, -L]
    resources:
      limits: {{nvidia.com/gpu: {gpus}}}
"""


def device_classes() -> str:
    """NVIDIA's DeviceClasses, as the controller creates them for a GPUCluster."""
    return yaml.safe_dump_all(
        [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expression}}]},
            }
            for name, expression in GPU_DEVICE_CLASSES.items()
        ]
    )


def serve_dra_model(stack: Stack) -> None:
    """NVIDIA's DeviceClasses, seen by the webhook: pods are translated only where the DRA model
    serves NVIDIA GPUs, and the stacks these tests start have no GPUCluster."""
    kubectl(stack, "apply", "--server-side", "-f", "-", stdin=device_classes())
    wait_for("the webhook to see gpu.nvidia.com", lambda: stack.cluster.get("DeviceClass", "gpu.nvidia.com"))


def dra_driver_manifests(namespace: str) -> str:
    """What the controller deploys for the DRA driver, reduced to what the simulation reads."""
    docs: list[dict[str, Any]] = list(yaml.safe_load_all(device_classes()))
    labels = {"app.kubernetes.io/name": "nvidia-dra-driver-gpu"}
    docs.append(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "nvidia-dra-driver-kubelet-plugin", "namespace": namespace},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"nvidia.com/gpu.deploy.dra-driver": "true"},
                        "containers": [{"name": "gpus", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0"}],
                    },
                },
            },
        }
    )
    return yaml.safe_dump_all(docs)


def test_webhook_denies_gpucluster_beside_clusterpolicy(stack: Stack) -> None:
    configs = kubectl(stack, "get", "validatingwebhookconfigurations,mutatingwebhookconfigurations", "-o", "name")
    assert "gpucluster-validating-webhook" in configs.stdout and "gpucluster-mutating-webhook" in configs.stdout
    kubectl(stack, "create", "-f", "-", stdin=CLUSTERPOLICY)
    wait_for("the webhook to see the ClusterPolicy", lambda: stack.cluster.list("ClusterPolicy"))
    denied = kubectl(stack, "create", "-f", "-", stdin=GPUCLUSTER, check=False)
    assert denied.returncode == 1
    assert (
        'Error from server (Forbidden): error when creating "STDIN": admission webhook '
        '"gpuclusters.validate.gpucluster.nvidia.com" denied the request: ClusterPolicy "cluster-policy" exists'
    ) in denied.stderr
    assert kubectl(stack, "get", "gpuclusters", "-o", "name").stdout == ""


def test_legacy_pod_is_translated_scheduled_and_runs(stack: Stack) -> None:
    kubectl(stack, "apply", "--server-side", "-f", "-", stdin=dra_driver_manifests("gpu-operator"))
    kubectl(stack, "label", "nodes", "--all", "nvidia.com/gpu.deploy.dra-driver=true")
    wait_for("3 ResourceSlices", lambda: len(get_json(stack, "resourceslices")["items"]) == 3)
    kubectl(stack, "create", "-f", "-", stdin=legacy_pod("legacy", 2))
    pod = get_json(stack, "pod", "legacy")
    [claim_ref] = pod["spec"]["resourceClaims"]
    template = claim_ref["resourceClaimTemplateName"]
    assert "nvidia.com/gpu" not in json.dumps(pod["spec"]["containers"][0]["resources"].get("limits", {}))
    # The controller side provisions the template once the pod exists (the webhook creates nothing).
    wait_for(
        "the claim template",
        lambda: kubectl(stack, "get", "resourceclaimtemplate", template, check=False).returncode == 0,
    )
    assert get_json(stack, "resourceclaimtemplate", template)["spec"]["spec"]["devices"]["requests"]
    running = wait_for(
        "the pod to run", lambda: (p := get_json(stack, "pod", "legacy"))["status"].get("phase") == "Running" and p
    )
    [status] = running["status"]["resourceClaimStatuses"]
    claim = get_json(stack, "resourceclaim", status["resourceClaimName"])
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2 and {r["pool"] for r in results} == {running["spec"]["nodeName"]}
    assert {r["driver"] for r in results} == {"gpu.nvidia.com"}
    assert claim["status"]["reservedFor"][0]["name"] == "legacy"
    table = kubectl(stack, "get", "pod", "legacy").stdout.splitlines()
    assert table[1].split()[1:3] == ["1/1", "Running"]


def test_unsatisfiable_pod_gets_a_failed_scheduling_event(stack: Stack) -> None:
    wait_for("3 ResourceSlices", lambda: len(get_json(stack, "resourceslices")["items"]) == 3)
    kubectl(stack, "create", "-f", "-", stdin=legacy_pod("too-big", 9))

    def described() -> str | None:
        out = kubectl(stack, "describe", "pod", "too-big").stdout
        return out if "FailedScheduling" in out else None

    text = wait_for("a FailedScheduling event", described)
    events = text[text.index("Events:") :]
    assert "Warning  FailedScheduling" in events and "default-scheduler" in events
    flat = " ".join(events.split())
    assert "0/3 nodes are available: 3 cannot allocate all claims." in flat
    if not on_kube(stack):  # the sandbox's scheduler also says why; kube-scheduler does not
        assert "request gpu: 8/8 devices usable, need 9" in flat or "devices usable, need 9" in flat
    assert get_json(stack, "pod", "too-big")["status"]["phase"] == "Pending"
