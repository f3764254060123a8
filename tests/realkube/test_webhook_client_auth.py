"""Client authentication end to end: kube-apiserver (and the sandbox, which does the same) presents
its webhook client certificate (an AdmissionConfiguration kubeConfigFile), the webhook requires it
at the handshake and checks its common name; a webhook allowing another name refuses the call."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucluster.certs.authority import new_ca, new_serving_cert
from gpucluster.clusterstate import ClusterState
from gpucluster.policy import Settings
from gpucluster.webhook.clientauth import DEFAULT_ALLOWED_NAMES, load_ca_bundle, protect
from gpucluster.webhook.server import build_app, serve
from gpucluster.webhook.tls import ReloadingTLS
from tests.realkube.api import Api
from tests.webhook.pods import container, pod


class Webhook:
    """``gpucluster.webhook.server.serve`` with client authentication, on its own event loop in a thread."""

    def __init__(self, tmp: Path, client_ca: Path, allowed: tuple[str, ...]) -> None:
        self.ca = new_ca()
        pair = new_serving_cert(self.ca, ["localhost"], ip_addresses=["127.0.0.1"])
        (tmp / "tls.crt").write_bytes(pair.cert_pem)
        (tmp / "tls.key").write_bytes(pair.key_pem)
        self.tls = ReloadingTLS(tmp / "tls.crt", tmp / "tls.key")
        self.client_ca, self.allowed = load_ca_bundle(client_ca), allowed
        self.port = 0
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        app = build_app(ClusterState.from_objects([]), Settings())
        self.tls.reload_if_changed()
        protect(app, self.tls, self.client_ca, self.allowed)

        def started(port: int) -> None:
            self.port = port
            self._started.set()

        await serve(
            app, self.tls, host="127.0.0.1", port=0, stop=self._stop, on_started=started, shutdown_timeout=1,
            health_port=0,
        )  # fmt: skip

    def __enter__(self) -> Webhook:
        self._thread.start()
        assert self._started.wait(20), "webhook did not start"
        return self

    def __exit__(self, *_: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(20)


def _configuration(name: str, hook: Webhook, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "pods.mutate.gpucluster.nvidia.com",
            "clientConfig": {"url": f"https://127.0.0.1:{hook.port}/mutate",
                             "caBundle": base64.b64encode(hook.ca.cert_pem).decode()},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 10,
        }],
    }  # fmt: skip


def _create_pod(api: Api, namespace: str) -> tuple[int, dict[str, Any]]:
    api.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    api.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
    )  # fmt: skip
    body = pod(container("cuda", {"nvidia.com/gpu": "1"}), name="legacy", namespace=namespace)
    return api.request("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", body)


@pytest.fixture(params=["sandbox", "kube"])
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield request.getfixturevalue(f"{request.param}_api")


CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


@contextlib.contextmanager
def _pod_created_through(
    api: Api, tmp_path: Path, allowed: tuple[str, ...], name: str
) -> Iterator[tuple[int, dict[str, Any]]]:
    """A pod created (dry run) in namespace ``name`` through a webhook that requires the API
    server's client certificate with one of the ``allowed`` names: (status, answer)."""
    assert api.webhook_client_ca is not None
    with Webhook(tmp_path, api.webhook_client_ca, allowed) as hook:
        api.ok("POST", CONFIGURATIONS, _configuration(name, hook, name))
        try:
            yield _create_pod(api, name)
        finally:
            api.request("DELETE", f"{CONFIGURATIONS}/{name}")


def test_the_api_server_presents_its_webhook_client_certificate(api: Api, tmp_path: Path) -> None:
    with _pod_created_through(api, tmp_path, DEFAULT_ALLOWED_NAMES, f"client-auth-{api.name}") as (status, answer):
        assert status == 201, answer
        assert answer["spec"].get("resourceClaims"), "not translated: the webhook was not called with its certificate"


def test_a_webhook_allowing_another_name_refuses_the_api_server(api: Api, tmp_path: Path) -> None:
    with _pod_created_through(api, tmp_path, ("someone-else",), f"client-auth-refused-{api.name}") as (status, answer):
        assert status >= 400 and "failed calling webhook" in str(answer.get("message")), (status, answer)
