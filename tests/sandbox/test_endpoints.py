"""EndpointSlices and Endpoints for Services, and webhook configurations naming a Service reaching
the pod behind it (a process pod serving HTTPS on its own loopback IP)."""

from __future__ import annotations

import asyncio
import base64
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpucluster.certs import authority
from gpucluster.sandbox.apiserver.core import Context
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.webhooks import service_endpoint
from gpucluster.sandbox.server import Sandbox
from tests.sandbox.conftest import KUBECTL, process_sandbox, rt
from tests.sandbox.test_process_kubelet import eventually

NS = "default"
SLICES = ("discovery.k8s.io", "endpointslices")


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[Sandbox]:
    s = await process_sandbox(tmp_path)
    try:
        yield s
    finally:
        await s.stop()


async def create(s: Sandbox, plural: str, body: dict[str, Any], group: str = "", version: str = "v1") -> Any:
    ns = NS if plural not in ("validatingwebhookconfigurations",) else ""
    return await s.core.create(rt(s.core, group, version, plural), ns, body, Context(field_manager="t"))


def slices(s: Sandbox, service: str) -> list[dict[str, Any]]:
    return [
        x
        for x in s.store.iter(SLICES, NS)
        if x["metadata"].get("labels", {}).get("kubernetes.io/service-name") == service
    ]


def agent(name: str, app: str = "agent") -> dict[str, Any]:
    container = {"name": "main", "image": "example.com/agent:1", "ports": [{"name": "metrics", "containerPort": 9400}]}
    return {
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": "gpu-node-0", "containers": [container]},
    }


async def test_slices_follow_the_selected_pods(sandbox: Sandbox) -> None:
    s = sandbox
    service = {
        "metadata": {"name": "agent"},
        "spec": {"selector": {"app": "agent"}, "ports": [{"name": "metrics", "port": 80, "targetPort": "metrics"}]},
    }
    created = await create(s, "services", service)
    await create(s, "pods", agent("a-1"))
    await create(s, "pods", agent("a-2"))
    await create(s, "pods", agent("other", app="other"))

    def two_ready() -> Any:
        found = slices(s, "agent")
        ready = [e for x in found for e in x.get("endpoints") or [] if e["conditions"]["ready"]]
        return len(ready) == 2 and found

    found = await eventually("two ready endpoints", two_ready)
    assert len(found) == 1
    sl = found[0]
    assert sl["addressType"] == "IPv4" and sl["ports"] == [{"name": "metrics", "port": 9400, "protocol": "TCP"}]
    labels = sl["metadata"]["labels"]
    assert labels["endpointslice.kubernetes.io/managed-by"] == "endpointslice-controller.k8s.io"
    assert sl["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    assert {e["targetRef"]["name"] for e in sl["endpoints"]} == {"a-1", "a-2"}
    ip = s.store.get(("", "pods"), NS, "a-1")["status"]["podIP"]  # type: ignore[index]
    assert ip in {e["addresses"][0] for e in sl["endpoints"]}
    endpoints = s.store.get(("", "endpoints"), NS, "agent")
    assert endpoints is not None and len(endpoints["subsets"][0]["addresses"]) == 2
    assert service_endpoint(s.store, NS, "agent", 80) is not None
    # a deleted pod is terminating first, then gone
    await s.core.delete(rt(s.core, "", "v1", "pods"), NS, "a-1", {}, Context(field_manager="t"))
    await eventually(
        "one endpoint left",
        lambda: [e["targetRef"]["name"] for x in slices(s, "agent") for e in x.get("endpoints") or []] == ["a-2"],
    )
    result = await asyncio.to_thread(
        subprocess.run,
        [
            KUBECTL,
            "--kubeconfig",
            str(s.kubeconfig_path),
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=agent",
            "-o",
            "name",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout.startswith("endpointslice.discovery.k8s.io/agent-"), result.stderr
    # the Service goes: so do its slices and Endpoints
    await s.core.delete(rt(s.core, "", "v1", "services"), NS, "agent", {}, Context(field_manager="t"))
    await eventually(
        "no slices", lambda: not slices(s, "agent") and s.store.get(("", "endpoints"), NS, "agent") is None
    )


WEBHOOK = """
import json, os, ssl, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        req = review["request"]
        allowed = req["name"] != "deny-me"
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": req["uid"], "allowed": allowed, "status": {"message": "denied by the pod at " + os.environ["POD_IP"]}}}
        data = json.dumps(body).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1] + "/tls.crt", sys.argv[1] + "/tls.key")
server = HTTPServer((os.environ["GPUCLUSTER_BIND_ADDRESS"], 8443), H)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print("serving", flush=True)
server.serve_forever()
"""


async def test_webhook_service_reaches_the_pod_behind_it(sandbox: Sandbox) -> None:
    s = sandbox
    ca = authority.new_ca()
    serving = authority.new_serving_cert(ca, authority.service_dns_names("hook", NS))
    data = {
        "tls.crt": base64.b64encode(serving.cert_pem).decode(),
        "tls.key": base64.b64encode(serving.key_pem).decode(),
    }
    await create(s, "secrets", {"metadata": {"name": "hook-tls"}, "type": "kubernetes.io/tls", "data": data})
    container = {
        "name": "hook",
        "image": "example.com/python:3",
        "args": ["-c", WEBHOOK, "/certs"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "https", "containerPort": 8443}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "https", "scheme": "HTTPS"}, "periodSeconds": 1},
        "volumeMounts": [{"name": "certs", "mountPath": "/certs"}],
    }
    pod = {
        "metadata": {"name": "hook-0", "labels": {"app": "hook"}},
        "spec": {
            "nodeName": "gpu-node-0",
            "containers": [container],
            "volumes": [{"name": "certs", "secret": {"secretName": "hook-tls"}}],
        },
    }
    await create(s, "pods", pod)
    service = {
        "metadata": {"name": "hook"},
        "spec": {"selector": {"app": "hook"}, "ports": [{"port": 443, "targetPort": "https"}]},
    }
    await create(s, "services", service)
    await eventually("a ready endpoint", lambda: service_endpoint(s.store, NS, "hook", 443), timeout=30)
    config = {
        "metadata": {"name": "deny-me"},
        "webhooks": [
            {
                "name": "deny.example.com",
                "clientConfig": {
                    "service": {"namespace": NS, "name": "hook", "port": 443},
                    "caBundle": base64.b64encode(ca.cert_pem).decode(),
                },
                "rules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
                ],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail",
            }
        ],
    }
    await create(s, "validatingwebhookconfigurations", config, "admissionregistration.k8s.io")
    await create(s, "configmaps", {"metadata": {"name": "fine"}})
    with pytest.raises(ApiError) as denied:
        await create(s, "configmaps", {"metadata": {"name": "deny-me"}})
    pod_ip = s.store.get(("", "pods"), NS, "hook-0")["status"]["podIP"]  # type: ignore[index]
    assert denied.value.message.endswith(f"denied the request: denied by the pod at {pod_ip}")
