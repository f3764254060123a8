"""How the API server calls our pods webhook, on the sandbox and on the real kube-apiserver: a
server-side dry run is translated and leaves nothing behind, a later webhook's change reinvokes
ours (reinvocationPolicy IfNeeded), and a webhook that does not answer in its timeoutSeconds is
skipped (failurePolicy Ignore) within that time."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucluster.cli.run import Stack
from tests.e2e.backends import backends
from tests.e2e.test_run import (
    KUBECTL,
    dra_driver_manifests,
    get_json,
    kubectl,
    legacy_pod,
    run_stack,
    wait_for,
)
from tests.review_server import ReviewServer, json_patch

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")
PODS_HOOK = "pods.mutate.gpucluster.nvidia.com"


@pytest.fixture(scope="module", params=backends())
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with run_stack(request.param, tmp_path_factory.mktemp("admission"), nodes=1, controller=False) as stack:
        kubectl(stack, "apply", "--server-side", "-f", "-", stdin=dra_driver_manifests("gpu-operator"))
        kubectl(stack, "label", "nodes", "--all", "nvidia.com/gpu.deploy.dra-driver=true")
        yield stack


def _add_gpu_sidecar(request: dict[str, Any], path: str) -> dict[str, Any]:
    """A mutating webhook's answer: pods labelled add-gpu=true get a sidecar asking for one GPU."""
    pod = request["object"]
    labels = pod["metadata"].get("labels") or {}
    if labels.get("add-gpu") != "true" or "sidecar" in [c["name"] for c in pod["spec"]["containers"]]:
        return {}
    sidecar = {"name": "sidecar", "image": "nvcr.io/nvidia/cuda:12.9.0-base-ubuntu24.04",
               "resources": {"limits": {"nvidia.com/gpu": "1"}}}  # fmt: skip
    return json_patch([{"op": "add", "path": "/spec/containers/-", "value": sidecar}])


@pytest.fixture
def sidecar_webhook(stack: Stack) -> Iterator[None]:
    server = ReviewServer(_add_gpu_sidecar, "add-gpu-sidecar").start()
    # Named to sort after ours: the API server calls mutating webhooks in name order.
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "zz-add-gpu-sidecar"},
        "webhooks": [{
            "name": "sidecar.example.com",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "objectSelector": {"matchLabels": {"add-gpu": "true"}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}],
            "clientConfig": {"url": server.url("/mutate"), "caBundle": server.ca_bundle},
        }],
    }  # fmt: skip
    kubectl(stack, "create", "-f", "-", stdin=json.dumps(config))
    try:
        yield
    finally:
        kubectl(stack, "delete", "mutatingwebhookconfiguration", "zz-add-gpu-sidecar")
        server.stop()


def _templates(stack: Stack) -> list[str]:
    return [t["metadata"]["name"] for t in get_json(stack, "resourceclaimtemplates")["items"]]


def test_a_server_side_dry_run_is_translated_and_leaves_nothing(stack: Stack) -> None:
    done = kubectl(stack, "create", "--dry-run=server", "-o", "json", "-f", "-", stdin=legacy_pod("dry", 2))
    pod = json.loads(done.stdout)
    [claim] = pod["spec"]["resourceClaims"]
    assert claim["resourceClaimTemplateName"].startswith("gpucluster-")
    assert kubectl(stack, "get", "pod", "dry", check=False).returncode != 0
    # Nothing was provisioned for it: a real pod afterwards is the only one with a template.
    kubectl(stack, "create", "-f", "-", stdin=legacy_pod("real", 1))
    real = get_json(stack, "pod", "real")["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    wait_for("the real pod's template", lambda: real in _templates(stack), timeout=30)
    assert _templates(stack) == [real]
    kubectl(stack, "delete", "pod", "real", "--wait=false")


@pytest.mark.usefixtures("sidecar_webhook")
def test_a_later_webhook_adding_a_gpu_container_reinvokes_ours(stack: Stack) -> None:
    manifest = legacy_pod("reinvoked", 1).replace(
        "metadata: {name: reinvoked}", "metadata: {name: reinvoked, labels: {add-gpu: 'true'}}"
    )
    done = kubectl(stack, "create", "-f", "-", stdin=manifest)
    pod = get_json(stack, "pod", "reinvoked")
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    assert set(containers) == {"cuda", "sidecar"}
    # Called again after the sidecar webhook changed the pod (reinvocationPolicy IfNeeded): our
    # webhook sees the sidecar's GPU request and, the pod being translated already, says so.
    assert containers["cuda"]["resources"].get("claims"), containers["cuda"]
    assert "nvidia.com/gpu" not in json.dumps(containers["cuda"]["resources"])
    assert containers["sidecar"]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "pod already translated" in done.stderr and "sidecar" in done.stderr, done.stderr
    kubectl(stack, "delete", "pod", "reinvoked", "--wait=false")


def test_a_webhook_that_never_answers_is_skipped_within_its_timeout(stack: Stack) -> None:
    # A listener that accepts the TLS connection's TCP and then says nothing.
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    port = silent.getsockname()[1]
    config = get_json(stack, "mutatingwebhookconfiguration", "gpucluster-mutating-webhook")
    index = next(i for i, w in enumerate(config["webhooks"]) if w["name"] == PODS_HOOK)
    hook = config["webhooks"][index]
    assert hook["timeoutSeconds"] == 5 and hook["failurePolicy"] == "Ignore"
    original = hook["clientConfig"]
    silenced = {k: v for k, v in original.items() if k not in ("service", "url")}
    silenced["url"] = f"https://127.0.0.1:{port}/mutate-pods"
    path = f"/webhooks/{index}/clientConfig"

    def point(to: dict[str, Any]) -> None:
        patch = json.dumps([{"op": "replace", "path": path, "value": to}])
        kubectl(
            stack, "patch", "mutatingwebhookconfiguration", "gpucluster-mutating-webhook", "--type=json", "-p", patch
        )

    point(silenced)
    try:
        started = time.monotonic()
        kubectl(stack, "create", "-f", "-", stdin=legacy_pod("skipped", 1))
        took = time.monotonic() - started
    finally:
        point(original)
        silent.close()
    assert 4.5 <= took < 20, took
    assert "resourceClaims" not in get_json(stack, "pod", "skipped")["spec"]  # admitted untranslated
    kubectl(stack, "delete", "pod", "skipped", "--wait=false")
