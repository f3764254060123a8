"""The test kit itself: the fake API server answers as kube-apiserver does where the tests rely on
it, and the defaulted pod agrees with the sandbox's defaulting."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from gpucluster.kube.client import Kube, KubeError
from gpucluster.sandbox.apiserver.builtins import apply_defaults
from tests.kit.fakekube import JSON_PATCH, MERGE_PATCH, Call, FakeKube
from tests.kit.pods import SERVICE_ACCOUNT_PATH, defaulted_container, defaulted_pod

SECRETS = "/api/v1/namespaces/ns/secrets"
CLUSTERS = "/apis/nvidia.com/v1alpha1/gpuclusters"


def secret(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": labels}, "data": {}}


async def refused(kube: Kube, method: str, path: str, **kwargs: Any) -> KubeError:
    with pytest.raises(KubeError) as caught:
        await kube.request(method, path, **kwargs)
    return caught.value


# --- the fake API server ------------------------------------------------------------------------


async def test_writes_bump_the_resource_version_and_refuse_as_the_server_does() -> None:
    kube = FakeKube()
    created = await kube.request("POST", SECRETS, body=secret("a"))
    meta = created["metadata"]
    assert meta["namespace"] == "ns" and meta["uid"] and meta["creationTimestamp"]
    assert (await kube.get(f"{SECRETS}/a")) == created == kube.object(f"{SECRETS}/a")

    exists = await refused(kube, "POST", SECRETS, body=secret("a"))
    assert (exists.status, exists.reason) == (409, "AlreadyExists")
    assert exists.body["message"] == 'secrets "a" already exists'
    missing = await refused(kube, "GET", f"{SECRETS}/b")
    assert (missing.status, missing.reason, missing.body["message"]) == (404, "NotFound", 'secrets "b" not found')

    updated = await kube.request("PUT", f"{SECRETS}/a", body={**created, "type": "Opaque"})
    assert int(updated["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert updated["metadata"]["uid"] == meta["uid"]
    stale = await refused(kube, "PUT", f"{SECRETS}/a", body=created)
    assert (stale.status, stale.reason) == (409, "Conflict")
    # A JSON patch's test of the resourceVersion, and a merge patch that carries one, are preconditions.
    test = [{"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}]
    assert (await refused(kube, "PATCH", f"{SECRETS}/a", body=test, content_type=JSON_PATCH)).status == 422
    pinned = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "type": "x"}
    assert (await refused(kube, "PATCH", f"{SECRETS}/a", body=pinned, content_type=MERGE_PATCH)).status == 409
    merged = await kube.request("PATCH", f"{SECRETS}/a", body={"data": {"k": "dg=="}}, content_type=MERGE_PATCH)
    assert merged["type"] == "Opaque" and merged["data"] == {"k": "dg=="}

    await kube.request("DELETE", f"{SECRETS}/a")
    assert not kube.has(f"{SECRETS}/a")
    assert [c.method for c in kube.calls] == [
        "POST",
        "GET",
        "POST",
        "GET",
        "PUT",
        "PUT",
        "PATCH",
        "PATCH",
        "PATCH",
        "DELETE",
    ]


async def test_generated_names_generation_and_the_status_subresource() -> None:
    kube = FakeKube()
    made = await kube.request("POST", CLUSTERS, body={"metadata": {"generateName": "gc-"}, "spec": {"a": 1}})
    path = f"{CLUSTERS}/{made['metadata']['name']}"
    assert made["metadata"]["name"].startswith("gc-") and made["metadata"]["generation"] == 1
    assert made["apiVersion"] == "nvidia.com/v1alpha1" and "kind" not in made  # a custom kind's is as given
    status = await kube.request(
        "PATCH", f"{path}/status", body={"spec": {"a": 2}, "status": {"state": "ready"}}, content_type=MERGE_PATCH
    )
    assert status["spec"] == {"a": 1} and status["status"] == {"state": "ready"}  # the status only
    spec = await kube.request(
        "PATCH", path, body={"spec": {"a": 2}, "status": {"state": "x"}}, content_type=MERGE_PATCH
    )
    assert spec["spec"] == {"a": 2} and spec["status"] == {"state": "ready"}  # all but the status
    assert spec["metadata"]["generation"] == 2


async def test_lists_select_and_page_and_watches_see_later_writes() -> None:
    kube = FakeKube([secret(f"s{i}", app="x" if i % 2 else "y") | {"metadata": {"name": f"s{i}", "namespace": "ns",
                     "labels": {"app": "x" if i % 2 else "y"}}} for i in range(5)])  # fmt: skip
    listed = await kube.get(SECRETS, [("labelSelector", "app=x")])
    assert [i["metadata"]["name"] for i in listed["items"]] == ["s1", "s3"]
    assert listed["kind"] == "SecretList" and all("kind" not in i for i in listed["items"])
    first = await kube.get(SECRETS, [("limit", "2")])
    rest = await kube.get(SECRETS, [("limit", "2"), ("continue", first["metadata"]["continue"])])
    assert [i["metadata"]["name"] for i in first["items"] + rest["items"]] == ["s0", "s1", "s2", "s3"]
    named = await kube.get("/api/v1/secrets", [("fieldSelector", "metadata.name=s4")])  # every namespace
    assert [i["metadata"]["name"] for i in named["items"]] == ["s4"]

    since = listed["metadata"]["resourceVersion"]
    seen: list[tuple[str, str]] = []

    async def watch() -> None:
        async for event in kube.watch(SECRETS, [("resourceVersion", since), ("labelSelector", "app=x")]):
            seen.append((event["type"], event["object"]["metadata"]["name"]))

    task = asyncio.create_task(watch())
    kube.put(secret("s9", app="x") | {"metadata": {"name": "s9", "namespace": "ns", "labels": {"app": "x"}}})
    kube.put(secret("s8", app="y") | {"metadata": {"name": "s8", "namespace": "ns", "labels": {"app": "y"}}})
    await kube.request("DELETE", f"{SECRETS}/s1")
    async with asyncio.timeout(5):
        while len(seen) < 2:
            await asyncio.sleep(0.01)
    task.cancel()
    assert seen == [("ADDED", "s9"), ("DELETED", "s1")]
    ended = [e async for e in kube.watch(SECRETS, [("resourceVersion", since), ("timeoutSeconds", "0.05")])]
    assert [e["type"] for e in ended] == ["ADDED", "ADDED", "DELETED"]  # s9, s8, s1; then the server ends it


async def test_finalizers_hold_a_deleted_object_until_they_are_gone() -> None:
    kube = FakeKube([{**secret("f"), "metadata": {"name": "f", "namespace": "ns", "finalizers": ["x/y"]}}])
    held = await kube.request("DELETE", f"{SECRETS}/f")
    assert held["metadata"]["deletionTimestamp"] and kube.has(f"{SECRETS}/f")
    await kube.request("PATCH", f"{SECRETS}/f", body={"metadata": {"finalizers": None}}, content_type=MERGE_PATCH)
    assert not kube.has(f"{SECRETS}/f")
    wrong = await refused(kube, "DELETE", f"{SECRETS}/g", body={"preconditions": {"uid": "u"}})
    assert wrong.status == 404


async def test_hooks_inject_failures_race_writes_and_served_paths_answer_the_rest() -> None:
    kube = FakeKube(
        [secret("a") | {"metadata": {"name": "a", "namespace": "ns"}}], served={"/version": {"minor": "34"}}
    )
    assert await kube.get("/version") == {"minor": "34"}
    assert (await refused(kube, "GET", "/apis/unknown")).status == 404

    once = kube.fail("GET", SECRETS, 403, times=1, message="no")
    forbidden = await refused(kube, "GET", f"{SECRETS}/a")
    assert (forbidden.status, forbidden.reason, forbidden.body["message"]) == (403, "Forbidden", "no")
    assert once not in kube.hooks and (await kube.get(f"{SECRETS}/a"))["metadata"]["name"] == "a"

    down = kube.fail("*", "", OSError("connection refused"))
    with pytest.raises(OSError):
        await kube.get(f"{SECRETS}/a")
    kube.off(down)

    # Someone else writes first: the client's PUT of what it read is stale.
    read = await kube.get(f"{SECRETS}/a")
    kube.on("PUT", SECRETS, lambda call: kube.put(kube.object(call.path)), times=1)
    assert (await refused(kube, "PUT", f"{SECRETS}/a", body=read)).status == 409

    # A held request waits for the test.
    gate = asyncio.Event()
    kube.on("POST", SECRETS, lambda call: gate.wait())
    task = asyncio.create_task(kube.request("POST", SECRETS, body=secret("b")))
    await asyncio.sleep(0.01)
    assert not task.done() and not kube.has(f"{SECRETS}/b")
    gate.set()
    await task
    assert kube.has(f"{SECRETS}/b")
    assert kube.calls[-1] == Call("POST", SECRETS, (), secret("b"), "application/json")


def test_it_is_a_kube_without_a_connection() -> None:
    kube = FakeKube()
    assert isinstance(kube, Kube) and "FakeKube" in repr(kube) and kube == kube and {kube: 1}
    assert not hasattr(kube, "api")  # no ApiClient: what is not overridden cannot reach a network
    asyncio.run(kube.close())


# --- the defaulted pod --------------------------------------------------------------------------


def test_the_defaulted_pod_is_what_the_sandbox_defaults() -> None:
    containers: list[dict[str, Any]] = [
        {"name": "a", "image": "nvcr.io/nvidia/cuda:12.6.2-base-ubi9", "resources": {"limits": {"cpu": "1"}},
         "ports": [{"containerPort": 80}]},
        {"name": "b", "image": "busybox"},
    ]  # fmt: skip
    inits = [{"name": "i", "image": "busybox@sha256:abc", "restartPolicy": "Always"}]
    raw = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "p-"},
           "spec": {"containers": copy.deepcopy(containers), "initContainers": copy.deepcopy(inits)}}  # fmt: skip
    apply_defaults("", "pods", raw)
    ours = defaulted_pod(containers, inits, metadata={"generateName": "p-"}, service_account=None)
    assert ours == {**raw, "status": {}}
    assert ours["spec"]["containers"][1]["imagePullPolicy"] == "Always"  # untagged
    assert ours["spec"]["initContainers"][0]["imagePullPolicy"] == "IfNotPresent"  # by digest


def test_the_service_account_plugin_and_the_knobs() -> None:
    pod = defaulted_pod([{"name": "c", "image": "x:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                        spec={"restartPolicy": "Never", "tolerations": [{"operator": "Exists"}]})  # fmt: skip
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["tolerations"] == [{"operator": "Exists"}]  # tolerates all
    assert [v["name"] for v in spec["volumes"]] == ["kube-api-access-x7k2p"]
    assert spec["containers"][0]["volumeMounts"][0]["mountPath"] == SERVICE_ACCOUNT_PATH
    assert spec["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1"}
    assert defaulted_container(spec["containers"][0]) == spec["containers"][0]  # idempotent
    as_written = defaulted_pod([{"name": "c", "resources": {"limits": {"cpu": "1"}}}], requests_from_limits=False)
    assert as_written["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "1"}}
