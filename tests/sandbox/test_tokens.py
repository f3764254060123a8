"""ServiceAccount tokens: TokenRequest (``kubectl create token``), what they authenticate as, and
when they stop (expiry, ServiceAccount deleted or recreated, bound pod gone, foreign audience)."""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from gpucluster.sandbox.apiserver.auth import Authenticator
from gpucluster.sandbox.server import Sandbox, SandboxThread
from tests.sandbox.conftest import KUBECTL

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")
Obj = dict[str, Any]
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip


def kubectl(sandbox: Sandbox, *args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig or sandbox.kubeconfig_path), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def token_kubeconfig(sandbox: Sandbox, token: str, path: Path) -> Path:
    cfg = yaml.safe_load(sandbox.kubeconfig_path.read_text())
    cfg["users"][0]["user"] = {"token": token}
    path.write_text(yaml.safe_dump(cfg))
    return path


def token_client(sandbox: Sandbox, token: str) -> client.ApiClient:
    conf = client.Configuration()
    conf.host = sandbox.url
    conf.ssl_ca_cert = sandbox.client_config()["ca_file"]
    conf.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(conf)


def raw(sandbox: Sandbox, token: str, method: str, path: str, body: Obj | None = None) -> tuple[int, Obj]:
    """One HTTP request with a bearer token: (status, decoded JSON body)."""
    ctx = ssl.create_default_context(cafile=sandbox.client_config()["ca_file"])
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    request = urllib.request.Request(sandbox.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def admin(sandbox: Sandbox) -> client.CoreV1Api:
    return client.CoreV1Api(token_client(sandbox, sandbox.token))


def authn(sandbox: Sandbox) -> Authenticator:
    assert sandbox.core.authn is not None
    return sandbox.core.authn


def whoami(sandbox: Sandbox, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    return kubectl(sandbox, "auth", "whoami", "-o", "json", kubeconfig=kubeconfig)


def test_kubectl_create_token_authenticates_as_the_service_account(sb: SandboxThread, tmp_path: Path) -> None:
    s = sb.sandbox
    assert kubectl(s, "create", "serviceaccount", "robot").returncode == 0
    made = kubectl(s, "create", "token", "robot", "--duration", "20m")
    assert made.returncode == 0, made.stderr
    cfg = token_kubeconfig(s, made.stdout.strip(), tmp_path / "robot")
    info = json.loads(whoami(s, cfg).stdout)["status"]["userInfo"]
    uid = admin(s).read_namespaced_service_account("robot", "default").metadata.uid
    assert info["username"] == "system:serviceaccount:default:robot"
    assert info["uid"] == uid
    assert info["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]
    assert json.loads(whoami(s, s.kubeconfig_path).stdout)["status"]["userInfo"]["groups"] == [
        "system:masters",
        "system:authenticated",
    ]


def test_token_request_status_and_validation(sb: SandboxThread) -> None:
    s = sb.sandbox
    v1 = admin(s)
    v1.create_namespaced_service_account("default", {"metadata": {"name": "tr"}})
    answer = v1.create_namespaced_service_account_token(
        "tr", "default", {"spec": {"audiences": ["https://kubernetes.default.svc.cluster.local"]}}
    )
    assert answer.status.token.count(".") == 2 and answer.status.expiration_timestamp is not None
    assert answer.spec.expiration_seconds == 3600
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_service_account_token("tr", "default", {"spec": {"expirationSeconds": 60}})
    body = json.loads(exc.value.body)
    assert exc.value.status == 422 and "may not specify a duration less than 10 minutes" in body["message"]
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_service_account_token("missing", "default", {"spec": {}})
    assert exc.value.status == 404 and json.loads(exc.value.body)["message"] == 'serviceaccounts "missing" not found'


def test_unknown_and_expired_tokens_get_401(sb: SandboxThread, tmp_path: Path) -> None:
    s = sb.sandbox
    admin(s).create_namespaced_service_account("default", {"metadata": {"name": "short"}})
    token, _ = authn(s).issue_service_account_token("default", "short", expiration_seconds=600)
    cfg = token_kubeconfig(s, token, tmp_path / "short")
    assert whoami(s, cfg).returncode == 0
    core = client.CoreV1Api(token_client(s, "not-a-token"))
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_pod("default")
    assert exc.value.status == 401
    assert json.loads(exc.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }
    real_now = authn(s).now
    authn(s).now = lambda: real_now() + 601
    try:
        expired = kubectl(s, "get", "pods", kubeconfig=cfg)
    finally:
        authn(s).now = real_now
    assert expired.returncode == 1
    assert "error: You must be logged in to the server" in expired.stderr


def test_deleting_or_recreating_the_service_account_revokes_its_tokens(sb: SandboxThread, tmp_path: Path) -> None:
    s = sb.sandbox
    v1 = admin(s)
    v1.create_namespaced_service_account("default", {"metadata": {"name": "gone"}})
    token = kubectl(s, "create", "token", "gone").stdout.strip()
    cfg = token_kubeconfig(s, token, tmp_path / "gone")
    assert whoami(s, cfg).returncode == 0
    v1.delete_namespaced_service_account("gone", "default")
    assert "(Unauthorized)" in whoami(s, cfg).stderr
    v1.create_namespaced_service_account("default", {"metadata": {"name": "gone"}})  # a new uid
    assert "(Unauthorized)" in whoami(s, cfg).stderr


def test_a_pod_bound_token_dies_with_its_pod(sb: SandboxThread, tmp_path: Path) -> None:
    s = sb.sandbox
    v1 = admin(s)
    v1.create_namespaced_service_account("default", {"metadata": {"name": "podsa"}})
    pod = v1.create_namespaced_pod("default", POD)
    made = kubectl(s, "create", "token", "podsa", "--bound-object-kind", "Pod", "--bound-object-name", "p")
    assert made.returncode == 0, made.stderr
    cfg = token_kubeconfig(s, made.stdout.strip(), tmp_path / "bound")
    extra = json.loads(whoami(s, cfg).stdout)["status"]["userInfo"]["extra"]
    assert extra["authentication.kubernetes.io/pod-name"] == ["p"]
    assert extra["authentication.kubernetes.io/pod-uid"] == [pod.metadata.uid]
    # the in-process interface the kubelet uses for projected tokens
    stored = s.store.get(("", "pods"), "default", "p")
    assert stored is not None
    token, expires = authn(s).issue_service_account_token("default", "podsa", bound_pod=stored)
    assert expires.endswith("Z") and "T" in expires
    assert authn(s).authenticate(token) is not None
    v1.delete_namespaced_pod("p", "default", grace_period_seconds=0)
    assert s.store.get(("", "pods"), "default", "p") is None
    assert "(Unauthorized)" in whoami(s, cfg).stderr
    assert authn(s).authenticate(token) is None
    missing = kubectl(s, "create", "token", "podsa", "--bound-object-kind", "Pod", "--bound-object-name", "p")
    assert missing.returncode == 1 and 'pods "p" not found' in missing.stderr


def test_a_token_for_another_audience_does_not_authenticate_here(sb: SandboxThread) -> None:
    s = sb.sandbox
    admin(s).create_namespaced_service_account("default", {"metadata": {"name": "vault"}})
    token, _ = authn(s).issue_service_account_token("default", "vault", audiences=["vault"])
    assert authn(s).authenticate(token) is None
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
    code, review = raw(s, s.token, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body)
    assert code == 201 and review["status"]["authenticated"] is False
