"""The server answers a translated pod with a patch only: it has no way to create anything."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import jsonpatch
from aiohttp.test_utils import TestClient, TestServer

from gpucluster.certs.authority import new_ca, new_serving_cert
from gpucluster.clusterstate import ClusterState
from gpucluster.kube.client import Kube
from gpucluster.policy import Settings
from gpucluster.sandbox.apiserver.context import Attributes
from gpucluster.sandbox.ports import free_port
from gpucluster.sandbox.server import SandboxThread
from gpucluster.translate import TEMPLATES_ANNOTATION, TRANSLATED_LABEL
from gpucluster.webhook.review import decode_patch
from gpucluster.webhook.server import build_app
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review


async def _post(body: dict[str, Any]) -> dict[str, Any]:
    app = build_app(ClusterState.from_objects([]), Settings())
    async with TestClient(TestServer(app)) as client:
        resp = await client.post("/mutate", data=json.dumps(body), headers={"Content-Type": "application/json"})
        assert resp.status == 200
        result: dict[str, Any] = await resp.json()
        return result


async def _create_namespace(kubeconfig: str, name: str) -> None:
    """The namespace, and NVIDIA's DeviceClass: the DRA model serves the cluster (pods are
    translated only where it does)."""
    kube = await Kube.connect(kubeconfig)
    try:
        await kube.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})  # fmt: skip
        device_class = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
        }
        await kube.request("POST", "/apis/resource.k8s.io/v1/deviceclasses", body=device_class)
    finally:
        await kube.close()


def test_the_webhook_writes_nothing_to_the_api_server(sb: SandboxThread, tmp_path: Path) -> None:
    """``gpucluster webhook`` connected to an API server answers a translated pod (no dry run)
    with the patch alone: no write of any kind reaches the API server, before the answer or after
    (the templates the pod refers to are the controller's to create, from the annotation)."""
    s = sb.sandbox
    writes: list[tuple[str, str, str, str]] = []

    async def record(attrs: Attributes) -> None:
        writes.append((attrs.operation, attrs.resource.plural, attrs.namespace, attrs.name))

    ca = new_ca()
    pair = new_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"])
    for name, data in (("ca.crt", ca.cert_pem), ("tls.crt", pair.cert_pem), ("tls.key", pair.key_pem)):
        (tmp_path / name).write_bytes(data)
    trust = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    base = f"https://127.0.0.1:{free_port()}"
    s.core.admission.mutating.insert(0, record)  # first: sees every write, even one a later hook refuses
    try:
        sb.call(_create_namespace(str(s.kubeconfig_path), "ml"))
        assert writes == [("CREATE", "namespaces", "", "ml"), ("CREATE", "deviceclasses", "", "gpu.nvidia.com")]
        writes.clear()
        webhook = subprocess.Popen(
            [
                sys.executable, "-m", "gpucluster.cli", "webhook", "--kubeconfig", str(s.kubeconfig_path),
                "--cert-dir", str(tmp_path), "--cert-dns-names", "localhost", "--host", "127.0.0.1",
                "--port", base.rsplit(":", 1)[1], "--kubernetes-version", "1.34", "--shutdown-delay", "0.1",
            ],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:  # ready: serving, and its view of the cluster synced
                assert webhook.poll() is None, webhook.communicate()[0]
                try:
                    with urllib.request.urlopen(f"{base}/readyz", context=trust, timeout=5) as resp:
                        if resp.status == 200:
                            break
                except (urllib.error.URLError, ConnectionError):
                    pass
                assert time.monotonic() < deadline, "the webhook never became ready"
                time.sleep(0.1)
            body = review(pod(container("cuda", {"nvidia.com/gpu": "1"})), namespace="ml")
            assert body["request"]["dryRun"] is False
            request = urllib.request.Request(
                f"{base}/mutate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, context=trust, timeout=30) as resp:
                answer = json.load(resp)
        finally:
            webhook.terminate()
            output = webhook.communicate(timeout=60)[0]
    finally:
        s.core.admission.mutating.remove(record)
    assert answer["response"]["allowed"] is True
    patched = jsonpatch.apply_patch(body["request"]["object"], decode_patch(answer))
    [ref] = patched["spec"]["resourceClaims"]
    assert list(json.loads(patched["metadata"]["annotations"][TEMPLATES_ANNOTATION])) == [
        ref["resourceClaimTemplateName"]
    ]
    assert writes == [], output


async def test_translated_pod_is_labelled_and_records_its_templates() -> None:
    body = review(pod(container("cuda", {"nvidia.com/gpu": "1"})), namespace="ml")
    out = await _post(body)
    patched = jsonpatch.apply_patch(body["request"]["object"], decode_patch(out))
    meta = patched["metadata"]
    assert meta["labels"][TRANSLATED_LABEL] == "true"
    specs = json.loads(meta["annotations"][TEMPLATES_ANNOTATION])
    [ref] = patched["spec"]["resourceClaims"]
    assert list(specs) == [ref["resourceClaimTemplateName"]]


async def test_dry_run_is_translated_the_same() -> None:
    out = await _post(review(pod(container("cuda", {"nvidia.com/gpu": "1"})), namespace="ml", dry_run=True))
    assert out["response"]["patchType"] == "JSONPatch"
