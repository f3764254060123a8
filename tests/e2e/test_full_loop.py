"""The whole product in the sandbox: GPUCluster -> controller -> DRA driver DaemonSet -> node labels
-> ResourceSlices -> a legacy pod translated by the webhook, allocated by the scheduler, Running."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpucluster.cli.run import Stack
from tests.e2e.backends import backends
from tests.e2e.test_run import GPUCLUSTER, KUBECTL, get_json, kubectl, legacy_pod, run_stack, wait_for

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")


@pytest.fixture(scope="module", params=backends())
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with run_stack(request.param, tmp_path_factory.mktemp("loop"), nodes=2, mix="h100,a100-mig") as stack:
        yield stack


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
