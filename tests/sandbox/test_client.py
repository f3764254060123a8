"""The official Python client (sync and ``kubernetes.aio``) and raw HTTP against the sandbox."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.informer import SharedInformer

from gpucluster.sandbox.server import Sandbox, SandboxThread

Obj = dict[str, Any]


@pytest.fixture
def api(threaded: SandboxThread) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=str(threaded.sandbox.kubeconfig_path))
    try:
        yield api_client
    finally:
        api_client.close()


def test_list_replace_patch_status_and_stale_write(api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    cm = v1.create_namespaced_config_map("default", {"metadata": {"name": "client-cm"}, "data": {"k": "v"}})
    stale = cm.metadata.resource_version
    cm.data["k"] = "v2"
    replaced = v1.replace_namespaced_config_map("client-cm", "default", cm)
    assert int(replaced.metadata.resource_version) > int(stale)
    cm.metadata.resource_version = stale
    with pytest.raises(ApiException) as exc:
        v1.replace_namespaced_config_map("client-cm", "default", cm)
    assert exc.value.status == 409 and json.loads(exc.value.body)["reason"] == "Conflict"
    patched = v1.patch_namespaced_config_map("client-cm", "default", {"data": {"z": "1"}})
    assert patched.data == {"k": "v2", "z": "1"}
    names = [c.metadata.name for c in v1.list_namespaced_config_map("default", label_selector="").items]
    assert "client-cm" in names
    v1.create_node({"metadata": {"name": "client-node"}, "status": {"capacity": {"cpu": "4"}}})
    status = v1.patch_node_status("client-node", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert status.status.conditions[0].type == "Ready" and status.status.capacity == {"cpu": "4"}
    assert v1.read_node_status("client-node").status.conditions[0].status == "True"
    v1.delete_node("client-node")
    v1.delete_namespaced_config_map("client-cm", "default")
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_config_map("client-cm", "default")
    assert exc.value.status == 404


def test_watch_from_a_resource_version(api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    start = v1.list_namespaced_config_map("kube-system").metadata.resource_version
    v1.create_namespaced_config_map("kube-system", {"metadata": {"name": "watched"}})
    v1.patch_namespaced_config_map("watched", "kube-system", {"data": {"a": "b"}})
    v1.delete_namespaced_config_map("watched", "kube-system")
    seen = [
        (e["type"], e["object"].metadata.name)
        for e in watch.Watch().stream(
            v1.list_namespaced_config_map, "kube-system", resource_version=start, timeout_seconds=1
        )
    ]
    assert seen == [("ADDED", "watched"), ("MODIFIED", "watched"), ("DELETED", "watched")]


def test_informer_relists_after_410(threaded: SandboxThread, api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    v1.create_namespace({"metadata": {"name": "informed"}})
    v1.create_namespaced_config_map("informed", {"metadata": {"name": "before"}})
    informer = SharedInformer(v1.list_namespaced_config_map, namespace="informed")
    errors: list[object] = []
    informer.add_event_handler("ERROR", errors.append)
    informer.start()
    try:
        deadline = time.monotonic() + 10
        while informer.cache.get_by_key("informed/before") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert informer.cache.get_by_key("informed/before") is not None
        # a restart ends the watch; while the informer reconnects (slowed down), an object is
        # created and the history compacted: the re-watch from its old version gets 410 and the
        # informer must relist to see what changed in between
        threaded.sandbox.faults.add_latency(0.5, "configmaps", count=1, verbs=["watch"])
        threaded.call(threaded.sandbox.restart())
        v1.create_namespaced_config_map("informed", {"metadata": {"name": "after"}})
        threaded.call(_compact(threaded.sandbox))
        while informer.cache.get_by_key("informed/after") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert informer.cache.get_by_key("informed/after") is not None
        assert any(isinstance(e, ApiException) and e.status == 410 for e in errors)
    finally:
        _stop(informer, v1)


def _stop(informer: SharedInformer, v1: client.CoreV1Api) -> None:
    """The client's informer looks at its stop flag only between events, and its watch has no
    timeout: send events until the stop has gone through (a quiet watch would block it for good)."""
    stopper = threading.Thread(target=informer.stop, daemon=True)
    stopper.start()
    for n in range(100):
        stopper.join(0.2)
        if not stopper.is_alive():
            return
        v1.create_namespaced_config_map("informed", {"metadata": {"name": f"wake-{n}"}})
    raise AssertionError("the informer did not stop")


def test_faults_fail_then_recover(threaded: SandboxThread, api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    threaded.sandbox.faults.fail_next("configmaps", 500, count=2, verbs=["list"])
    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            v1.list_namespaced_config_map("default")
        assert exc.value.status == 500
    v1.list_namespaced_config_map("default")
    threaded.sandbox.faults.fail_next("configmaps", 409, verbs=["create"])
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_config_map("default", {"metadata": {"name": "f"}})
    assert exc.value.status == 409
    threaded.sandbox.faults.timeout_next("configmaps", seconds=0.2, verbs=["get"])
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_config_map("f", "default")
    assert exc.value.status == 504
    threaded.sandbox.faults.fail_next("configmaps", 410, verbs=["watch"])
    with pytest.raises(ApiException) as exc:
        list(
            watch.Watch().stream(
                v1.list_namespaced_config_map, "default", resource_version="1", timeout_seconds=1, _request_timeout=5
            )
        )
    assert exc.value.status == 410
    threaded.sandbox.faults.add_latency(0.3, "configmaps", count=1)
    started = time.monotonic()
    v1.list_namespaced_config_map("default")
    assert time.monotonic() - started >= 0.3


async def _http(
    sandbox: Sandbox,
    method: str,
    path: str,
    *,
    body: Any = None,
    headers: dict[str, str] | None = None,
    token: bool = True,
) -> tuple[int, Any, Any]:
    assert sandbox.pki is not None
    ctx = ssl.create_default_context(cafile=str(sandbox.pki.ca_file))
    hdrs = {"Authorization": f"Bearer {sandbox.token}"} if token else {}
    hdrs.update(headers or {})
    data = json.dumps(body) if body is not None and not isinstance(body, str) else body
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, sandbox.url + path, data=data, headers=hdrs, ssl=ctx) as resp,
    ):
        text = await resp.text()
        try:
            return resp.status, json.loads(text), resp.headers
        except json.JSONDecodeError:
            return resp.status, text, resp.headers


async def test_http_details(sandbox: Sandbox) -> None:
    status, body, _ = await _http(sandbox, "GET", "/api/v1/namespaces", token=False)
    assert status == 401 and body["reason"] == "Unauthorized"
    status, body, _ = await _http(sandbox, "GET", "/healthz", token=False)
    assert status == 200
    status, body, _ = await _http(sandbox, "GET", "/version")
    assert body["gitVersion"] == "v1.34.2" and body["minor"] == "34"
    status, body, _ = await _http(sandbox, "GET", "/apis/resource.k8s.io/v1")
    kinds = {r["name"]: r for r in body["resources"]}
    assert kinds["resourceclaims/status"]["verbs"] == ["get", "patch", "update"]
    assert kinds["resourceslices"]["namespaced"] is False
    status, body, _ = await _http(
        sandbox, "GET", "/api/v1/namespaces", headers={"Accept": "application/vnd.kubernetes.protobuf"}
    )
    assert status == 406
    status, body, _ = await _http(
        sandbox, "GET", "/api/v1/namespaces", headers={"Accept": "application/vnd.kubernetes.protobuf,application/json"}
    )
    assert status == 200 and body["kind"] == "NamespaceList"
    status, body, _ = await _http(sandbox, "GET", "/api/v1/namespaces?pretty=true")
    assert status == 200
    status, table, _ = await _http(
        sandbox,
        "GET",
        "/api/v1/namespaces",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"},
    )
    assert table["kind"] == "Table" and [c["name"] for c in table["columnDefinitions"]] == ["Name", "Status", "Age"]
    assert table["rows"][0]["cells"][:2] == ["default", "Active"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    status, body, _ = await _http(
        sandbox, "PUT", "/api/v1/namespaces/default/configmaps/x", body={"metadata": {"name": "y"}}
    )
    assert status == 400
    status, body, _ = await _http(sandbox, "POST", "/api/v1/namespaces/default/configmaps/x", body={})
    assert status == 405 and body["reason"] == "MethodNotAllowed"
    status, body, _ = await _http(
        sandbox, "POST", "/api/v1/namespaces/default/configmaps?dryRun=All", body={"metadata": {"name": "d"}}
    )
    assert status == 201 and "resourceVersion" not in body["metadata"]
    status, body, _ = await _http(sandbox, "GET", "/api/v1/namespaces/default/configmaps/d")
    assert status == 404
    status, body, _ = await _http(
        sandbox, "POST", "/sandbox/faults", body={"resource": "configmaps", "code": 503, "count": 1}
    )
    assert status == 201 and body["remaining"] == 1
    status, body, _ = await _http(sandbox, "GET", "/api/v1/namespaces/default/configmaps")
    assert status == 503 and body["reason"] == "ServiceUnavailable"
    status, body, _ = await _http(sandbox, "GET", "/sandbox/faults")
    assert body == {"faults": []}


async def test_http_watch_bookmarks_initial_events_and_restart(sandbox: Sandbox) -> None:
    assert sandbox.pki is not None
    ctx = ssl.create_default_context(cafile=str(sandbox.pki.ca_file))
    headers = {"Authorization": f"Bearer {sandbox.token}"}
    query = (
        "watch=true&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=5"
    )
    events: list[Obj] = []
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{sandbox.url}/api/v1/namespaces?{query}", headers=headers, ssl=ctx) as resp,
    ):
        assert resp.status == 200
        async for line in resp.content:
            event = json.loads(line)
            events.append(event)
            if len([e for e in events if e["type"] == "BOOKMARK"]) == 2:
                await sandbox.restart()
    kinds = [e["type"] for e in events]
    assert kinds[:4] == ["ADDED"] * 4
    assert events[4]["type"] == "BOOKMARK"
    assert events[4]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert kinds[5] == "BOOKMARK" and len(kinds) == 6  # a periodic bookmark, then the restart ends the stream
    started = time.monotonic()
    status, _, _ = await _http(
        sandbox, "GET", "/api/v1/namespaces?watch=true&timeoutSeconds=1&resourceVersion=" + str(sandbox.store.rv)
    )
    assert status == 200 and time.monotonic() - started >= 0.9


async def test_aio_client(sandbox: Sandbox) -> None:
    from kubernetes.aio import client as aclient
    from kubernetes.aio import config as aconfig
    from kubernetes.aio import watch as awatch

    api_client = await aconfig.new_client_from_config(config_file=str(sandbox.kubeconfig_path))
    async with api_client:
        v1 = aclient.CoreV1Api(api_client)
        ns_list = await v1.list_namespace()
        assert {n.metadata.name for n in ns_list.items} >= {"default", "kube-system"}
        rv = ns_list.metadata.resource_version
        await v1.create_namespaced_config_map("default", {"metadata": {"name": "aio"}})
        seen = []
        w = awatch.Watch()
        async for event in w.stream(v1.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=1):
            seen.append((event["type"], event["object"].metadata.name))
        assert seen == [("ADDED", "aio")]
        await v1.delete_namespaced_config_map("aio", "default")


def test_threaded_sandbox_is_reusable_from_threads(threaded: SandboxThread) -> None:
    results: list[int] = []

    def count() -> None:
        results.append(threaded.call(_count(threaded.sandbox)))

    threads = [threading.Thread(target=count) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3


async def _compact(sandbox: Sandbox) -> None:
    sandbox.store.compact()


async def _count(sandbox: Sandbox) -> int:
    await asyncio.sleep(0)
    return sandbox.store.count(("", "namespaces"))
