"""The sandbox's admission webhook chain against a real HTTPS webhook server in the test."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gpucluster.certs.authority import new_ca, new_serving_cert
from gpucluster.sandbox.apiserver.core import Context
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.server import Sandbox
from tests.sandbox.conftest import rt

Obj = dict[str, Any]
Handler = Callable[[Obj], Any]


@dataclass
class HookServer:
    """An HTTPS AdmissionReview server; ``handlers[path](request) -> response fields``."""

    port: int = 0
    ca_pem: bytes = b""
    handlers: dict[str, Handler] = field(default_factory=dict)
    calls: list[tuple[str, Obj]] = field(default_factory=list)
    delay: float = 0.0

    def bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode()

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}/{path}"

    def called(self, path: str) -> list[Obj]:
        return [r for p, r in self.calls if p == path]


def allow(request: Obj) -> Obj:
    return {"allowed": True}


@pytest.fixture
async def hooks(tmp_path: Path) -> AsyncIterator[HookServer]:
    ca = new_ca("test-webhook-ca")
    pair = new_serving_cert(ca, ["localhost", "hook.webhooks.svc"], ip_addresses=["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    server = HookServer(ca_pem=ca.cert_pem)

    async def handle(request: web.Request) -> web.Response:
        review = await request.json()
        path = request.match_info["path"]
        server.calls.append((path, review["request"]))
        if server.delay:
            await asyncio.sleep(server.delay)
        handler: Handler = server.handlers.get(path, allow)
        answer = handler(review["request"])
        if isinstance(answer, web.Response):
            return answer
        body = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], **answer},
        }
        return web.json_response(body)

    app = web.Application()
    app.router.add_post("/{path}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    server.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield server
    finally:
        await runner.cleanup()


def patch_of(ops: list[Obj]) -> Obj:
    return {"allowed": True, "patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}


def webhook(name: str, client: Obj, **extra: Any) -> Obj:
    hook: Obj = {
        "name": name,
        "clientConfig": client,
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 2,
    }
    hook.update(extra)
    return hook


async def configure(sandbox: Sandbox, kind: str, name: str, *webhooks: Obj) -> Obj:
    plural = "mutatingwebhookconfigurations" if kind == "mutating" else "validatingwebhookconfigurations"
    body = {"metadata": {"name": name}, "webhooks": list(webhooks)}
    created: Obj = await sandbox.core.create(
        rt(sandbox.core, "admissionregistration.k8s.io", "v1", plural), "", body, Context(field_manager="test")
    )
    return created


POD = {"metadata": {"name": "p", "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}


async def create_pod(sandbox: Sandbox, body: Obj | None = None, ns: str = "default", ctx: Context | None = None) -> Obj:
    pod: Obj = await sandbox.core.create(
        rt(sandbox.core, "", "v1", "pods"), ns, body or POD, ctx or Context(field_manager="test")
    )
    return pod


async def test_request_is_built_like_kube_apiserver(sandbox: Sandbox, hooks: HookServer) -> None:
    await configure(
        sandbox, "validating", "v", webhook("check.example.com", {"url": hooks.url("v"), "caBundle": hooks.bundle()})
    )
    await create_pod(sandbox)
    [req] = hooks.called("v")
    assert req["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert req["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert req["requestKind"] == req["kind"] and req["requestResource"] == req["resource"]
    assert "subResource" not in req
    assert (req["name"], req["namespace"], req["operation"]) == ("p", "default", "CREATE")
    assert req["userInfo"]["username"] == "sandbox-admin"
    assert req["object"]["metadata"]["uid"] and req["oldObject"] is None
    assert req["dryRun"] is False and req["options"]["kind"] == "CreateOptions"
    # generateName: mutating webhooks get no request name and see no name/uid yet, validating ones
    # the generated name (AdmissionToValidateObjectFunc)
    await configure(
        sandbox, "mutating", "m", webhook("mutate.example.com", {"url": hooks.url("m"), "caBundle": hooks.bundle()})
    )
    await create_pod(sandbox, {**POD, "metadata": {"generateName": "gen-"}})
    [mreq] = hooks.called("m")
    assert "name" not in mreq and "name" not in mreq["object"]["metadata"] and "uid" not in mreq["object"]["metadata"]
    vreq = hooks.called("v")[-1]
    assert vreq["name"] == vreq["object"]["metadata"]["name"] and vreq["name"].startswith("gen-")


async def test_rules_selectors_and_subresources(sandbox: Sandbox, hooks: HookServer) -> None:
    client = {"url": hooks.url("v"), "caBundle": hooks.bundle()}
    ns_rt = rt(sandbox.core, "", "v1", "namespaces")
    ctx = Context(field_manager="test")
    await sandbox.core.create(ns_rt, "", {"metadata": {"name": "gpu", "labels": {"team": "ml"}}}, ctx)
    status_rule = {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["pods/status"], "operations": ["UPDATE"]}
    await configure(
        sandbox,
        "validating",
        "v",
        webhook("ns.example.com", client, namespaceSelector={"matchLabels": {"team": "ml"}}),
        webhook(
            "obj.example.com",
            client,
            objectSelector={"matchExpressions": [{"key": "app", "operator": "In", "values": ["y"]}]},
        ),
        webhook("status.example.com", client, rules=[status_rule]),
        webhook(
            "cluster.example.com",
            client,
            rules=[
                {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"], "scope": "Cluster"}
            ],
        ),
    )
    await create_pod(sandbox)  # default namespace, app=x: none of the pod webhooks match
    await create_pod(sandbox, ns="gpu")
    await create_pod(sandbox, {**POD, "metadata": {"name": "q", "labels": {"app": "y"}}})
    names = [(r["namespace"], r["name"]) for r in hooks.called("v") if r["resource"]["resource"] == "pods"]
    assert names == [("gpu", "p"), ("default", "q")]
    pods = rt(sandbox.core, "", "v1", "pods")
    pod = sandbox.core.get(pods, "default", "p")
    await sandbox.core.update(
        pods, "default", "p", {**pod, "status": {**pod["status"], "phase": "Running"}}, ctx, subresource="status"
    )
    last = hooks.called("v")[-1]
    assert last["subResource"] == "status" and last["kind"]["kind"] == "Pod" and last["operation"] == "UPDATE"
    # cluster scope: a Namespace (its request namespace is its own name) and a Node match
    before = len(hooks.calls)
    await sandbox.core.create(ns_rt, "", {"metadata": {"name": "other"}}, ctx)
    ns_req = hooks.called("v")[-1]
    assert len(hooks.calls) == before + 1 and ns_req["namespace"] == "other" and ns_req["kind"]["kind"] == "Namespace"


async def test_denial_message_code_and_warnings(sandbox: Sandbox, hooks: HookServer) -> None:
    hooks.handlers["v"] = lambda r: {
        "allowed": False,
        "status": {"code": 422, "reason": "Invalid", "message": "no GPUs for you"},
        "warnings": ["think twice"],
    }
    await configure(
        sandbox, "validating", "v", webhook("deny.example.com", {"url": hooks.url("v"), "caBundle": hooks.bundle()})
    )
    with pytest.raises(ApiError) as err:
        await create_pod(sandbox)
    assert err.value.code == 422 and err.value.reason == "Invalid"
    assert err.value.message == 'admission webhook "deny.example.com" denied the request: no GPUs for you'
    assert err.value.warnings == ["think twice"]  # sent with the error, as kube-apiserver does
    hooks.handlers["v"] = lambda r: {"allowed": False}
    with pytest.raises(ApiError) as err:
        await create_pod(sandbox)
    assert err.value.code == 400
    assert err.value.message == 'admission webhook "deny.example.com" denied the request without explanation'
    # warnings of an allowed request reach the client as Warning headers
    hooks.handlers["v"] = lambda r: {"allowed": True, "warnings": ["GPU pods should set limits", "second"]}
    assert sandbox.pki is not None
    context = ssl.create_default_context(cafile=str(sandbox.pki.ca_file))
    headers = {"Authorization": f"Bearer {sandbox.token}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        url = f"{sandbox.url}/api/v1/namespaces/default/pods"
        async with session.post(url, data=json.dumps(POD), headers=headers, ssl=context) as resp:
            assert resp.status == 201
            assert resp.headers.getall("Warning") == ['299 - "GPU pods should set limits"', '299 - "second"']


async def test_jsonpatch_and_reinvocation(sandbox: Sandbox, hooks: HookServer) -> None:
    def add_label(key: str) -> Handler:
        def answer(req: Obj) -> Obj:
            labels = req["object"]["metadata"].get("labels") or {}
            if key in labels:
                return {"allowed": True}
            return patch_of([{"op": "add", "path": f"/metadata/labels/{key}", "value": "yes"}])

        return answer

    hooks.handlers.update(a=add_label("a"), b=add_label("b"), c=lambda r: {"allowed": True})
    client = {"caBundle": hooks.bundle()}
    await configure(
        sandbox,
        "mutating",
        "1-first",
        webhook("a.example.com", {**client, "url": hooks.url("a")}, reinvocationPolicy="IfNeeded"),
        webhook("c.example.com", {**client, "url": hooks.url("c")}),
    )
    await configure(sandbox, "mutating", "2-second", webhook("b.example.com", {**client, "url": hooks.url("b")}))
    pod = await create_pod(sandbox)
    assert pod["metadata"]["labels"] == {"app": "x", "a": "yes", "b": "yes"}
    assert [p for p, _ in hooks.calls] == ["a", "c", "b", "a"]  # only the IfNeeded webhook runs again
    assert hooks.calls[-1][1]["object"]["metadata"]["labels"]["b"] == "yes"
    stored = sandbox.core.get(rt(sandbox.core, "", "v1", "pods"), "default", "p")
    assert stored["metadata"]["uid"] and stored["spec"]["restartPolicy"] == "Always"  # re-defaulted, system fields kept


async def test_failure_policy_on_timeout_and_connection_refused(sandbox: Sandbox, hooks: HookServer) -> None:
    hooks.delay = 1.5
    slow = webhook("slow.example.com", {"url": hooks.url("slow"), "caBundle": hooks.bundle()}, timeoutSeconds=1)
    await configure(sandbox, "validating", "slow", slow)
    with pytest.raises(ApiError) as err:
        await create_pod(sandbox)
    assert err.value.code == 500
    assert err.value.message == (
        f'Internal error occurred: failed calling webhook "slow.example.com": failed to call webhook: '
        f'Post "{hooks.url("slow")}?timeout=1s": context deadline exceeded'
    )
    vwc = rt(sandbox.core, "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations")
    ctx = Context(field_manager="test")
    await sandbox.core.delete(vwc, "", "slow", {}, ctx)
    await configure(sandbox, "validating", "slow", {**slow, "failurePolicy": "Ignore"})
    await create_pod(sandbox)  # allowed: the failure is ignored
    hooks.delay = 0
    await sandbox.core.delete(vwc, "", "slow", {}, ctx)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    gone = webhook("gone.example.com", {"url": f"https://127.0.0.1:{closed}/x"})
    await configure(sandbox, "validating", "gone", gone)
    with pytest.raises(ApiError) as err:
        await create_pod(sandbox, {**POD, "metadata": {"name": "q"}})
    assert err.value.code == 500 and f"dial tcp 127.0.0.1:{closed}: connect: connection refused" in err.value.message
    await sandbox.core.delete(vwc, "", "gone", {}, ctx)
    await configure(sandbox, "validating", "gone", {**gone, "failurePolicy": "Ignore"})
    await create_pod(sandbox, {**POD, "metadata": {"name": "q"}})


async def test_ca_bundle_and_service_resolution(sandbox: Sandbox, hooks: HookServer) -> None:
    other = base64.b64encode(new_ca("someone-else").cert_pem).decode()
    await configure(sandbox, "validating", "v", webhook("tls.example.com", {"url": hooks.url("v"), "caBundle": other}))
    with pytest.raises(ApiError) as err:
        await create_pod(sandbox)
    assert err.value.code == 500
    assert "tls: failed to verify certificate: x509: certificate signed by unknown authority" in err.value.message
    assert hooks.calls == []
    vwc = rt(sandbox.core, "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations")
    await sandbox.core.delete(vwc, "", "v", {}, Context(field_manager="test"))
    service = {"service": {"namespace": "webhooks", "name": "hook", "path": "/svc"}, "caBundle": hooks.bundle()}
    await configure(sandbox, "validating", "svc", webhook("svc.example.com", service))
    with pytest.raises(ApiError) as err:
        await create_pod(sandbox)
    assert "lookup hook.webhooks.svc" in err.value.message and "no such host" in err.value.message
    sandbox.register_service("webhooks", "hook", 443, f"127.0.0.1:{hooks.port}")
    await create_pod(sandbox)
    assert len(hooks.called("svc")) == 1  # verified as hook.webhooks.svc, reached on the local port
    stored = sandbox.core.get(vwc, "", "svc")
    assert stored["webhooks"][0]["clientConfig"]["service"]["port"] == 443  # defaulted


async def test_match_conditions_and_failure_policy(sandbox: Sandbox, hooks: HookServer) -> None:
    client = {"url": hooks.url("v"), "caBundle": hooks.bundle()}
    gpu = "object.spec.containers.exists(c, has(c.resources) && has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits)"
    await configure(
        sandbox,
        "validating",
        "v",
        webhook("gpu.example.com", client, matchConditions=[{"name": "gpu", "expression": gpu}]),
        webhook(
            "user.example.com",
            client,
            matchConditions=[{"name": "not-admin", "expression": "request.userInfo.username != 'sandbox-admin'"}],
        ),
    )
    await create_pod(sandbox)
    assert hooks.calls == []
    gpu_pod = {
        "metadata": {"name": "g"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    await create_pod(sandbox, gpu_pod)
    assert [r["name"] for r in hooks.called("v")] == ["g"]
    broken = webhook(
        "broken.example.com", client, matchConditions=[{"name": "m", "expression": "object.metadata.nope == 'x'"}]
    )
    await configure(sandbox, "validating", "w", broken)
    with pytest.raises(ApiError) as err:
        await create_pod(sandbox, {**POD, "metadata": {"name": "q"}})
    assert err.value.code == 403 and err.value.message.startswith('pods "q" is forbidden: m: ')
    vwc = rt(sandbox.core, "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations")
    await sandbox.core.delete(vwc, "", "w", {}, Context(field_manager="test"))
    await configure(sandbox, "validating", "w", {**broken, "failurePolicy": "Ignore"})
    await create_pod(sandbox, {**POD, "metadata": {"name": "q"}})


async def test_configurations_are_defaulted_and_validated(sandbox: Sandbox, hooks: HookServer) -> None:
    client = {"url": hooks.url("m"), "caBundle": hooks.bundle()}
    created = await configure(sandbox, "mutating", "m", webhook("m.example.com", client))
    hook = created["webhooks"][0]
    assert (hook["failurePolicy"], hook["matchPolicy"], hook["reinvocationPolicy"]) == ("Fail", "Equivalent", "Never")
    assert hook["namespaceSelector"] == {} and hook["rules"][0]["scope"] == "*"
    bad = webhook(
        "nodots", {"url": "http://127.0.0.1/x"}, sideEffects=None, matchConditions=[{"name": "x", "expression": "1 +"}]
    )
    with pytest.raises(ApiError) as err:
        await configure(sandbox, "validating", "bad", bad)
    fields = {c["field"] for c in (err.value.details or {}).get("causes", [])}
    assert err.value.code == 422
    assert {"webhooks[0].name", "webhooks[0].sideEffects", "webhooks[0].clientConfig.url"} <= fields
    assert "webhooks[0].matchConditions[0].expression" in fields
    # dry run: NoneOnDryRun webhooks are called with dryRun true, nothing is stored
    await configure(
        sandbox,
        "validating",
        "dry",
        webhook("dry.example.com", {"url": hooks.url("dry"), "caBundle": hooks.bundle()}, sideEffects="NoneOnDryRun"),
    )
    await create_pod(sandbox, ctx=Context(field_manager="test", dry_run=True))
    assert hooks.called("dry")[0]["dryRun"] is True
    assert sandbox.core.store.get(("", "pods"), "default", "p") is None
