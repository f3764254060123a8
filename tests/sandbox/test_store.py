"""The store and the API semantics, without HTTP."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from gpucluster.sandbox.apiserver import errors
from gpucluster.sandbox.apiserver.core import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, ApiCore, Context
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.gc import GarbageCollector
from gpucluster.sandbox.apiserver.selectors import (
    label_selector_from_object,
    matches_labels,
    parse_fields,
    parse_labels,
)
from gpucluster.sandbox.apiserver.store import Store
from tests.sandbox.conftest import gpucluster_crd, rt

Obj = dict[str, Any]
CTX = Context(field_manager="test")


def pod(name: str = "p", **labels: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "env": [{"name": "A", "value": "1"}]}]},
    }


async def test_create_sets_system_metadata(core: ApiCore) -> None:
    pods = rt(core, "", "v1", "pods")
    a = await core.create(pods, "default", pod("a"), CTX)
    b = await core.create(pods, "default", {**pod(""), "metadata": {"generateName": "web-"}}, CTX)
    md = a["metadata"]
    assert md["uid"] and md["creationTimestamp"].endswith("Z") and md["namespace"] == "default"
    assert md["generation"] == 1
    assert int(b["metadata"]["resourceVersion"]) > int(md["resourceVersion"])
    assert b["metadata"]["name"].startswith("web-") and len(b["metadata"]["name"]) == len("web-") + 5
    assert a["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert a["spec"]["restartPolicy"] == "Always"


async def test_error_statuses_are_shaped_like_the_real_server(core: ApiCore) -> None:
    pods = rt(core, "", "v1", "pods")
    await core.create(pods, "default", pod("a"), CTX)
    with pytest.raises(ApiError) as exc:
        await core.create(pods, "default", pod("a"), CTX)
    assert exc.value.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "a" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "a", "kind": "pods"},
        "code": 409,
    }
    with pytest.raises(ApiError) as exc:
        core.get(pods, "default", "zz")
    assert exc.value.code == 404 and exc.value.status()["details"] == {"name": "zz", "kind": "pods"}
    with pytest.raises(ApiError) as exc:
        await core.create(pods, "nowhere", pod("b"), CTX)
    assert exc.value.code == 404 and exc.value.message == 'namespaces "nowhere" not found'
    with pytest.raises(ApiError) as exc:
        await core.create(pods, "default", {**pod("b"), "metadata": {"name": "b", "namespace": "team"}}, CTX)
    assert exc.value.code == 400
    with pytest.raises(ApiError) as exc:
        await core.create(pods, "default", {"metadata": {"name": "c"}, "spec": {"containers": []}}, CTX)
    assert exc.value.code == 422 and exc.value.message == 'Pod "c" is invalid: spec.containers: Required value'
    assert exc.value.status()["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}
    ]


async def test_update_conflicts_generation_and_status(core: ApiCore) -> None:
    deploys = rt(core, "apps", "v1", "deployments")
    d = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": pod()["spec"]},
        },
        "status": {"replicas": 9},
    }
    created = await core.create(deploys, "default", d, CTX)
    assert "status" not in created and created["metadata"]["generation"] == 1
    # metadata-only change: same generation
    labelled = copy.deepcopy(created)
    labelled["metadata"]["labels"] = {"x": "y"}
    updated = await core.update(deploys, "default", "d", labelled, CTX)
    assert updated["metadata"]["generation"] == 1
    # a stale resourceVersion is a 409
    with pytest.raises(ApiError) as exc:
        await core.update(deploys, "default", "d", created, CTX)
    assert exc.value.code == 409 and exc.value.reason == "Conflict"
    assert exc.value.message.endswith(errors.STALE)
    # spec change bumps generation; status in a main-resource write is ignored
    spec_change = copy.deepcopy(updated)
    spec_change["spec"]["replicas"] = 3
    spec_change["status"] = {"replicas": 5}
    bumped = await core.update(deploys, "default", "d", spec_change, CTX)
    assert bumped["metadata"]["generation"] == 2 and "status" not in bumped
    # the status subresource writes only status
    status_write = copy.deepcopy(bumped)
    status_write["status"] = {"replicas": 3, "observedGeneration": 2}
    status_write["spec"]["replicas"] = 100
    after = await core.update(deploys, "default", "d", status_write, CTX, subresource="status")
    assert after["status"]["replicas"] == 3 and after["spec"]["replicas"] == 3
    assert after["metadata"]["generation"] == 2
    # a no-op update keeps the resourceVersion
    same = await core.update(deploys, "default", "d", after, CTX)
    assert same["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]


async def test_patches(core: ApiCore) -> None:
    pods = rt(core, "", "v1", "pods")
    await core.create(pods, "default", pod("a"), CTX)
    smp = {"spec": {"containers": [{"name": "c", "image": "busybox:1.37", "env": [{"name": "B", "value": "2"}]}]}}
    patched, _ = await core.patch(pods, "default", "a", STRATEGIC_PATCH, smp, CTX)
    container = patched["spec"]["containers"][0]
    assert container["image"] == "busybox:1.37"
    assert [e["name"] for e in container["env"]] == ["A", "B"]
    delete_env = {"spec": {"containers": [{"name": "c", "env": [{"name": "A", "$patch": "delete"}]}]}}
    patched, _ = await core.patch(pods, "default", "a", STRATEGIC_PATCH, delete_env, CTX)
    assert [e["name"] for e in patched["spec"]["containers"][0]["env"]] == ["B"]
    patched, _ = await core.patch(pods, "default", "a", MERGE_PATCH, {"metadata": {"labels": {"x": "1"}}}, CTX)
    assert patched["metadata"]["labels"] == {"x": "1"}
    patched, _ = await core.patch(
        pods, "default", "a", JSON_PATCH, [{"op": "remove", "path": "/metadata/labels/x"}], CTX
    )
    assert patched["metadata"]["labels"] == {}
    with pytest.raises(ApiError) as exc:
        await core.patch(pods, "default", "a", MERGE_PATCH, {"metadata": {"resourceVersion": "1"}}, CTX)
    assert exc.value.code == 409
    with pytest.raises(ApiError) as exc:
        await core.patch(
            pods, "default", "a", JSON_PATCH, [{"op": "test", "path": "/metadata/name", "value": "b"}], CTX
        )
    assert exc.value.code == 422


async def test_server_side_apply_owns_fields_and_conflicts(core: ApiCore) -> None:
    cms = rt(core, "", "v1", "configmaps")
    cfg = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}
    with pytest.raises(ApiError) as exc:
        await core.patch(cms, "default", "c", APPLY_PATCH, cfg, Context())
    assert exc.value.code == 400
    created, was_created = await core.patch(cms, "default", "c", APPLY_PATCH, cfg, Context(field_manager="alice"))
    assert was_created and created["data"] == {"a": "1", "b": "2"}
    [entry] = created["metadata"]["managedFields"]
    assert entry["manager"] == "alice" and entry["operation"] == "Apply"
    assert entry["fieldsV1"] == {"f:data": {"f:a": {}, "f:b": {}}}
    # bob co-owns b with the same value: no conflict; changing a conflicts with alice
    bob = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "X", "b": "2"}}
    with pytest.raises(ApiError) as exc:
        await core.patch(cms, "default", "c", APPLY_PATCH, bob, Context(field_manager="bob"))
    assert exc.value.code == 409
    # an applier is named without its version
    assert exc.value.message == 'Apply failed with 1 conflict: conflict with "alice": .data.a'
    forced, _ = await core.patch(cms, "default", "c", APPLY_PATCH, bob, Context(field_manager="bob"), force=True)
    assert forced["data"]["a"] == "X"
    owners = {e["manager"]: e["fieldsV1"] for e in forced["metadata"]["managedFields"]}
    assert owners == {"alice": {"f:data": {"f:b": {}}}, "bob": {"f:data": {"f:a": {}, "f:b": {}}}}
    # alice stops applying b: bob still owns it, so it stays; bob drops a: nobody owns it, it goes
    await core.patch(
        cms,
        "default",
        "c",
        APPLY_PATCH,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
        Context(field_manager="alice"),
    )
    final, _ = await core.patch(
        cms,
        "default",
        "c",
        APPLY_PATCH,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": "2"}},
        Context(field_manager="bob"),
    )
    assert final["data"] == {"b": "2"}


async def test_dry_run_stores_nothing(core: ApiCore) -> None:
    pods = rt(core, "", "v1", "pods")
    events: list[object] = []
    core.store.subscribe(events.append)
    rv = core.store.rv
    dry = Context(field_manager="t", dry_run=True)
    out = await core.create(pods, "default", pod("a"), dry)
    assert out["metadata"]["uid"] and core.store.get(pods.key, "default", "a") is None
    await core.create(pods, "default", pod("a"), CTX)
    await core.delete(pods, "default", "a", {}, dry)
    assert core.store.get(pods.key, "default", "a") is not None
    assert core.store.rv == rv + 1 and len(events) == 1


async def test_list_selectors_and_pagination(core: ApiCore) -> None:
    pods = rt(core, "", "v1", "pods")
    for i in range(5):
        await core.create(pods, "default", pod(f"p{i}", app="a" if i % 2 else "b", tier=str(i)), CTX)
    await core.create(pods, "team", pod("other", app="a"), CTX)
    names = lambda r: [o["metadata"]["name"] for o in r.items]  # noqa: E731
    assert names(core.list(pods, "default", labels=parse_labels("app=a"))) == ["p1", "p3"]
    assert names(core.list(pods, None, labels=parse_labels("app in (a),tier notin (3)"))) == ["p1", "other"]
    assert names(core.list(pods, "default", labels=parse_labels("!tier"))) == []
    assert names(core.list(pods, "default", labels=parse_labels("app!=a,tier"))) == ["p0", "p2", "p4"]
    assert names(core.list(pods, None, fields=parse_fields("metadata.namespace=team", "", "Pod"))) == ["other"]
    assert names(core.list(pods, None, fields=parse_fields("status.phase=Pending,metadata.name!=p0", "", "Pod")))[
        :2
    ] == ["p1", "p2"]
    with pytest.raises(ApiError) as exc:
        parse_fields("spec.bogus=1", "", "Pod")
    assert exc.value.code == 400
    first = core.list(pods, "default", limit=2)
    assert names(first) == ["p0", "p1"] and first.continue_token
    second = core.list(pods, "default", limit=2, continue_token=first.continue_token)
    third = core.list(pods, "default", limit=2, continue_token=second.continue_token)
    assert names(second) == ["p2", "p3"] and names(third) == ["p4"] and not third.continue_token


def test_label_selector_grammar() -> None:
    labels = {"metadata": {"labels": {"a": "1", "b": "x"}}}
    assert matches_labels(parse_labels("a==1,b"), labels)
    assert not matches_labels(parse_labels("a=1,!b"), labels)
    assert matches_labels(parse_labels("a in (1, 2), c notin (z)"), labels)
    selector = label_selector_from_object({"matchExpressions": [{"key": "b", "operator": "Exists"}]})
    assert selector is not None and matches_labels(selector, labels)
    with pytest.raises(ApiError):
        parse_labels("a in 1")


async def test_watch_from_version_and_gone() -> None:
    store = Store(history_limit=3)
    key = ("", "configmaps")

    def obj(name: str, value: str) -> Obj:
        return {"metadata": {"name": name, "namespace": "default"}, "data": {"v": value}}

    store.create(key, obj("a", "1"))
    start = store.rv
    store.update(key, obj("a", "2"))
    store.create(key, obj("b", "1"))
    watcher = store.watch(key, "default", resource_version=start)
    assert (await watcher.next(1))[0] == "MODIFIED"
    assert (await watcher.next(1))[0] == "ADDED"
    store.delete(key, "default", "a")
    kind, gone = await watcher.next(1)  # type: ignore[misc]
    assert kind == "DELETED" and gone["metadata"]["resourceVersion"] == str(store.rv)
    for i in range(5):
        store.update(key, obj("b", str(i)))
    old = store.watch(key, None, resource_version=start)
    kind, status = await old.next(1)  # type: ignore[misc]
    assert kind == "ERROR" and status["code"] == 410 and status["reason"] == "Expired"
    assert await old.next(1) is None
    assert store.break_watches() == 1
    while await watcher.next(1) is not None:
        pass


async def test_watch_selector_transitions() -> None:
    store = Store()
    key = ("", "pods")
    watcher = store.watch(key, None, labels=parse_labels("app=a"))
    store.create(key, {"metadata": {"name": "p", "namespace": "x", "labels": {"app": "b"}}})
    store.update(key, {"metadata": {"name": "p", "namespace": "x", "labels": {"app": "a"}}})
    store.update(key, {"metadata": {"name": "p", "namespace": "x", "labels": {"app": "c"}}})
    assert [(await watcher.next(1))[0] for _ in range(2)] == ["ADDED", "DELETED"]  # type: ignore[index]


async def test_finalizers_and_deletion_timestamp(core: ApiCore) -> None:
    cms = rt(core, "", "v1", "configmaps")
    await core.create(cms, "default", {"metadata": {"name": "f", "finalizers": ["example.com/hold"]}}, CTX)
    pending, deleted = await core.delete(cms, "default", "f", {}, CTX)
    assert not deleted and pending["metadata"]["deletionTimestamp"]
    again = copy.deepcopy(pending)
    again["metadata"]["finalizers"].append("example.com/more")
    with pytest.raises(ApiError) as exc:
        await core.update(cms, "default", "f", again, CTX)
    assert exc.value.code == 422
    await core.patch(cms, "default", "f", MERGE_PATCH, {"metadata": {"finalizers": None}}, CTX)
    assert core.store.get(cms.key, "default", "f") is None


async def test_owner_reference_garbage_collection(core: ApiCore) -> None:
    gc = GarbageCollector(core)
    gc.start()
    cms = rt(core, "", "v1", "configmaps")

    async def owner_and_child(name: str, block: bool = False) -> tuple[Obj, Obj]:
        owner = await core.create(cms, "default", {"metadata": {"name": name}}, CTX)
        ref = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": name,
            "uid": owner["metadata"]["uid"],
            "blockOwnerDeletion": block,
        }
        child = await core.create(
            cms, "default", {"metadata": {"name": f"{name}-child", "ownerReferences": [ref]}}, CTX
        )
        return owner, child

    await owner_and_child("bg")
    await core.delete(cms, "default", "bg", {"propagationPolicy": "Background"}, CTX)
    await gc.idle()
    assert core.store.get(cms.key, "default", "bg-child") is None

    await owner_and_child("fg", block=True)
    pending, deleted = await core.delete(cms, "default", "fg", {"propagationPolicy": "Foreground"}, CTX)
    assert not deleted and "foregroundDeletion" in pending["metadata"]["finalizers"]
    await gc.idle()
    assert core.store.get(cms.key, "default", "fg-child") is None
    assert core.store.get(cms.key, "default", "fg") is None

    await owner_and_child("or")
    await core.delete(cms, "default", "or", {"propagationPolicy": "Orphan"}, CTX)
    await gc.idle()
    orphan = core.store.get(cms.key, "default", "or-child")
    assert orphan is not None and "ownerReferences" not in orphan["metadata"]
    assert core.store.get(cms.key, "default", "or") is None

    dangling = {"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "no-such-uid"}
    await core.create(cms, "default", {"metadata": {"name": "dangling", "ownerReferences": [dangling]}}, CTX)
    await gc.idle()
    assert core.store.get(cms.key, "default", "dangling") is None

    # namespace deletion removes its content, then the namespace
    ns = rt(core, "", "v1", "namespaces")
    await core.create(cms, "team", {"metadata": {"name": "inside"}}, CTX)
    terminating, _ = await core.delete(ns, "", "team", {}, CTX)
    assert terminating["status"]["phase"] == "Terminating"
    with pytest.raises(ApiError) as exc:
        await core.create(cms, "team", {"metadata": {"name": "late"}}, CTX)
    assert exc.value.code == 403
    await gc.idle()
    assert core.store.get(ns.key, "", "team") is None and core.store.get(cms.key, "team", "inside") is None
    await gc.stop()


async def test_crd_serves_defaults_prunes_and_validates(core: ApiCore) -> None:
    crds = rt(core, "apiextensions.k8s.io", "v1", "customresourcedefinitions")
    crd = await core.create(crds, "", gpucluster_crd(), CTX)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    gcs = rt(core, "nvidia.com", "v1alpha1", "gpuclusters")
    assert gcs.has_status and not gcs.namespaced and gcs.short_names == ("gc",)
    body = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "GPUCluster",
        "metadata": {"name": "gpu-cluster"},
        "spec": {"bogus": 1},
        "status": {"state": "ready"},
    }
    obj = await core.create(gcs, "", body, CTX)
    assert "bogus" not in obj["spec"] and "status" not in obj
    assert obj["spec"]["dcgm"]["hostPort"] == 5555  # a schema default
    with pytest.raises(ApiError) as exc:
        await core.create(gcs, "", {**body, "metadata": {"name": "other"}}, CTX)
    assert exc.value.code == 422
    assert exc.value.message == (
        'GPUCluster.nvidia.com "other" is invalid: <nil>: Invalid value: "object": GPUCluster is a singleton, metadata.name must be \'gpu-cluster\''
    )
    with pytest.raises(ApiError) as exc:
        await core.patch(gcs, "", "gpu-cluster", MERGE_PATCH, {"status": {"state": "bogus"}}, CTX, subresource="status")
    assert exc.value.code == 422 and 'status.state: Unsupported value: "bogus"' in exc.value.message
    ok, _ = await core.patch(
        gcs, "", "gpu-cluster", MERGE_PATCH, {"status": {"state": "ready"}}, CTX, subresource="status"
    )
    assert ok["status"]["state"] == "ready" and ok["metadata"]["generation"] == 1
    with pytest.raises(ApiError) as exc:
        await core.patch(gcs, "", "gpu-cluster", MERGE_PATCH, {"spec": {"dcgm": {"hostPort": 0}}}, CTX)
    assert (
        "spec.dcgm.hostPort: Invalid value: 0: spec.dcgm.hostPort in body should be greater than or equal to 1"
        in exc.value.message
    )
    # deleting the CRD removes its objects and stops serving it
    await core.delete(crds, "", "gpuclusters.nvidia.com", {}, CTX)
    assert core.registry.get("nvidia.com", "v1alpha1", "gpuclusters") is None


async def test_admission_hooks_see_and_change_writes(core: ApiCore) -> None:
    seen: list[tuple[str, str]] = []

    async def mutate(attrs: Any) -> None:
        seen.append((attrs.operation, attrs.name))
        if attrs.operation == "CREATE":
            attrs.object["metadata"].setdefault("labels", {})["mutated"] = "true"

    async def deny(attrs: Any) -> None:
        if attrs.name == "forbidden":
            raise ApiError(400, "BadRequest", 'admission webhook "deny.example.com" denied the request: no')

    core.admission.mutating.append(mutate)
    core.admission.validating.append(deny)
    cms = rt(core, "", "v1", "configmaps")
    created = await core.create(cms, "default", {"metadata": {"name": "ok"}}, CTX)
    assert created["metadata"]["labels"] == {"mutated": "true"}
    with pytest.raises(ApiError):
        await core.create(cms, "default", {"metadata": {"name": "forbidden"}}, CTX)
    assert core.store.get(cms.key, "default", "forbidden") is None
    await core.delete(cms, "default", "ok", {}, CTX)
    assert seen == [("CREATE", "ok"), ("CREATE", "forbidden"), ("DELETE", "ok")]


async def test_resource_claim_admin_access_needs_the_namespace_label(core: ApiCore) -> None:
    claims = rt(core, "resource.k8s.io", "v1", "resourceclaims")
    claim = {
        "metadata": {"name": "admin"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}}]
            }
        },
    }
    with pytest.raises(ApiError) as exc:
        await core.create(claims, "default", claim, CTX)
    assert exc.value.code == 422 and "spec.devices.requests[0].exactly.adminAccess: Forbidden" in exc.value.message
    ns = rt(core, "", "v1", "namespaces")
    await core.patch(
        ns, "", "team", MERGE_PATCH, {"metadata": {"labels": {"resource.kubernetes.io/admin-access": "true"}}}, CTX
    )
    created = await core.create(claims, "team", claim, CTX)
    assert created["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] == "ExactCount"


async def test_concurrent_patches_retry_instead_of_conflicting(core: ApiCore) -> None:
    cms = rt(core, "", "v1", "configmaps")
    await core.create(cms, "default", {"metadata": {"name": "n"}, "data": {}}, CTX)

    async def slow(attrs: Any) -> None:
        await asyncio.sleep(0.001)

    core.admission.validating.append(slow)
    await asyncio.gather(
        *(core.patch(cms, "default", "n", MERGE_PATCH, {"data": {f"k{i}": "v"}}, CTX) for i in range(10))
    )
    stored = core.store.get(cms.key, "default", "n")
    assert stored is not None and len(stored["data"]) == 10


async def test_field_validation_of_custom_resources(core: ApiCore) -> None:
    await core.create(rt(core, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), "", gpucluster_crd(), CTX)
    gcs = rt(core, "nvidia.com", "v1alpha1", "gpuclusters")
    body = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "GPUCluster",
        "metadata": {"name": "gpu-cluster"},
        "spec": {"bogus": 1},
    }
    with pytest.raises(ApiError) as exc:
        await core.create(gcs, "", body, Context(field_manager="t", field_validation="Strict"))
    assert exc.value.code == 400 and exc.value.message.endswith('strict decoding error: unknown field "spec.bogus"')
    warn = Context(field_manager="t", field_validation="Warn")
    await core.create(gcs, "", body, warn)
    assert warn.warnings == ['unknown field "spec.bogus"']


async def test_transition_rules_and_printer_columns(core: ApiCore) -> None:
    from gpucluster.sandbox.apiserver.tables import table

    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "size": {
                                            "type": "integer",
                                            "x-kubernetes-validations": [
                                                {"rule": "self >= oldSelf", "message": "size may not shrink"}
                                            ],
                                        }
                                    },
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    await core.create(rt(core, "apiextensions.k8s.io", "v1", "customresourcedefinitions"), "", crd, CTX)
    widgets = rt(core, "example.com", "v1", "widgets")
    w = await core.create(widgets, "default", {"metadata": {"name": "w"}, "spec": {"size": 3}}, CTX)
    assert w["apiVersion"] == "example.com/v1" and w["kind"] == "Widget"
    await core.patch(widgets, "default", "w", MERGE_PATCH, {"spec": {"size": 4}}, CTX)
    with pytest.raises(ApiError) as exc:
        await core.patch(widgets, "default", "w", MERGE_PATCH, {"spec": {"size": 1}}, CTX)
    assert (
        exc.value.message
        == 'Widget.example.com "w" is invalid: spec.size: Invalid value: "integer": size may not shrink'
    )
    stored = core.get(widgets, "default", "w")
    rendered = table(widgets, [stored], include_object="None", list_meta={})
    assert [c["name"] for c in rendered["columnDefinitions"]] == ["Name", "Size"]
    assert rendered["rows"] == [{"cells": ["w", 4]}]
