"""The whole product in the sandbox: GPUCluster -> controller -> DRA driver DaemonSet -> node labels
-> ResourceSlices -> a legacy pod translated by the webhook, allocated by the scheduler, Running."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpucluster.commands.run import RunOptions, Stack, chart_env
from tests.e2e.backends import SANDBOX, backends, kube_run_options, start_kube
from tests.e2e.test_run import GPUCLUSTER, KUBECTL, StackThread, get_json, kubectl, legacy_pod, wait_for

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")


@pytest.fixture(scope="module", params=backends())
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    plane = None
    if request.param == SANDBOX:
        kubeconfig = tmp_path_factory.mktemp("loop") / "kubeconfig"
        options = RunOptions(sandbox=True, kubeconfig_out=kubeconfig, nodes=2, mix="h100,a100-mig")
    else:
        # The chart's operator environment, as the operator Deployment gets it (the sandbox's
        # Stack adds it by itself).
        plane = start_kube(nodes=2, mix="h100,a100-mig")
        options = kube_run_options(plane, environment=chart_env())
    runner = StackThread(options)
    try:
        yield runner.start()
        runner.stop()
    finally:
        if plane is not None:
            plane.stop()


def test_gpucluster_to_running_pod(stack: Stack) -> None:
    if not stack.controller_started:
        pytest.skip("controller not available")
    kubectl(stack, "create", "-f", "-", stdin=GPUCLUSTER)
    started = time.monotonic()
    wait_for(
        "the GPUCluster to be ready",
        lambda: get_json(stack, "gpucluster", "gpu-cluster").get("status", {}).get("state") == "ready",
        timeout=30,
    )
    slices = wait_for(
        "2 ResourceSlices", lambda: len(items := get_json(stack, "resourceslices")["items"]) == 2 and items
    )
    assert {s["spec"]["nodeName"] for s in slices} == {"gpu-node-0", "gpu-node-1"}
    kubectl(stack, "create", "-f", "-", stdin=legacy_pod("cuda", 2))
    pod = wait_for(
        "the pod to run", lambda: (p := get_json(stack, "pod", "cuda"))["status"].get("phase") == "Running" and p
    )
    assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    assert time.monotonic() - started < 30
