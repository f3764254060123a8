"""Server-side apply and managedFields: the sandbox and kube-apiserver agree, case for case.

The cases are kube's own (test/integration/apiserver/apply/apply_test.go, the fieldmanager and
structured-merge-diff tests): each runs the same requests on both backends and compares the
answers (code, reason, message, conflict causes) and the resulting managedFields (managers,
operations, fieldsV1; entry times only for being there, as the two clocks differ).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.realkube.api import Api

Obj = dict[str, Any]
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
NS = "agree-apply"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
PODS = f"/api/v1/namespaces/{NS}/pods"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
CONTROLLERS = {"kube-controller-manager"}  # kube's own writers the sandbox has no counterpart of


@pytest.fixture(scope="module")
def both(apis: list[Api]) -> list[Api]:
    for api in apis:
        api.namespace(NS)
    return apis


def on_both(apis: list[Api], case: Callable[[Api], Any]) -> tuple[Any, Any]:
    sandbox, kube = (case(api) for api in apis)
    return sandbox, kube


def answer(status: int, body: Obj) -> Obj:
    """An answer as both must give it: code, and a refusal's reason, message and causes (as a set:
    kube-apiserver lists them in map order)."""
    if body.get("kind") != "Status":
        return {"code": status}
    causes = (body.get("details") or {}).get("causes") or []
    return {
        "code": status,
        "reason": body.get("reason"),
        "message": body.get("message"),
        "causes": sorted((c.get("reason"), c.get("message"), c.get("field")) for c in causes),
    }


def managers(obj: Obj) -> list[tuple[Any, ...]]:
    """managedFields in order: manager, operation, apiVersion, subresource, fieldsV1, whether timed."""
    return [
        (e["manager"], e["operation"], e["apiVersion"], e.get("subresource", ""), e["fieldsV1"], "time" in e)
        for e in obj["metadata"].get("managedFields") or []
        if e["manager"] not in CONTROLLERS
    ]


def apply(api: Api, path: str, body: Obj, manager: str, *, force: bool = False) -> tuple[int, Obj]:
    query = f"?fieldManager={manager}" + ("&force=true" if force else "")
    return api.request("PATCH", path + query, body, content_type=APPLY)


def fresh(api: Api, path: str) -> None:
    """Nothing at ``path`` (deleted, and gone)."""
    api.request("DELETE", path + "?gracePeriodSeconds=0")
    deadline = time.monotonic() + 30
    while api.request("GET", path)[0] != 404:
        assert time.monotonic() < deadline, f"{api.name}: {path} is still there"
        time.sleep(0.1)


def update(api: Api, path: str, manager: str, change: Callable[[Obj], Any]) -> Obj:
    """GET, change, PUT, again while another writer (kube's controllers) got in between."""
    deadline = time.monotonic() + 30
    while True:
        obj = api.ok("GET", path)
        change(obj)
        status, body = api.request("PUT", f"{path}?fieldManager={manager}", obj)
        if status != 409 or time.monotonic() > deadline:
            assert status == 200, (api.name, body)
            return body


def deployment(name: str, containers: list[Obj], **spec: Any) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": "nginx"}},
        "spec": {
            **spec,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": {"containers": containers}},
        },
    }


def configmap(name: str, **extra: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"test-label": "test"}},
        "data": {"key": "value"},
        **extra,
    }


# ---------------------------------------------------------------- defaulted list-map keys


def test_a_port_applied_without_its_defaulted_protocol_conflicts_with_one_applied_with_it(both: list[Api]) -> None:
    """TestDefaultMissingKeys: the first applier's port (no protocol) is keyed with protocol TCP."""
    name = "default-missing-keys"

    def case(api: Api) -> tuple[Obj, Any, Obj]:
        fresh(api, f"{DEPLOYMENTS}/{name}")
        first = deployment(
            name, [{"name": "nginx", "image": "nginx:latest", "ports": [{"name": "foo", "containerPort": 80}]}]
        )
        status, created = apply(api, f"{DEPLOYMENTS}/{name}", first, "test_applier")
        assert status == 201, (api.name, created)
        second = deployment(
            name,
            [
                {
                    "name": "nginx",
                    "image": "nginx:latest",
                    "ports": [{"name": "bar", "containerPort": 80, "protocol": "TCP"}],
                }
            ],
        )
        conflict = answer(*apply(api, f"{DEPLOYMENTS}/{name}", second, "test_applier_conflict"))
        forced_status, forced = apply(api, f"{DEPLOYMENTS}/{name}", second, "test_applier_conflict", force=True)
        return conflict, managers(created), {"code": forced_status, "managers": managers(forced)}

    sandbox, kube = on_both(both, case)
    assert sandbox == kube
    assert kube[0]["code"] == 409 and len(kube[0]["causes"]) == 1


# ---------------------------------------------------------------- what an apply body may carry


MANAGED_FIELDS_BODIES = {
    "an entry on create": (
        "mf-create",
        [{"manager": "x", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {}}],
        False,
    ),
    "an empty list on create": ("mf-empty", [], False),
    "an empty entry on an existing object": ("mf-existing", [{}], True),
    "null is fine": ("mf-null", None, False),
}


@pytest.mark.parametrize("name,managed,existing", MANAGED_FIELDS_BODIES.values(), ids=MANAGED_FIELDS_BODIES.keys())
def test_an_apply_body_may_not_carry_managed_fields(both: list[Api], name: str, managed: Any, existing: bool) -> None:
    def case(api: Api) -> Obj:
        fresh(api, f"{CONFIGMAPS}/{name}")
        if existing:
            assert apply(api, f"{CONFIGMAPS}/{name}", configmap(name), "m")[0] == 201
        body = configmap(name)
        body["metadata"]["managedFields"] = managed
        return answer(*apply(api, f"{CONFIGMAPS}/{name}", body, "m"))

    sandbox, kube = on_both(both, case)
    assert sandbox == kube


UID = "88e00824-7f0e-11e8-94a1-c8d3ffb15800"


def test_an_apply_that_would_create_with_a_uid_conflicts(both: list[Api]) -> None:
    """TestCreateOnApplyFailsWithUID."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "test-pod-uid", "uid": UID},
        "spec": {"containers": [{"name": "test-container", "image": "test-image"}]},
    }
    sandbox, kube = on_both(both, lambda api: answer(*apply(api, f"{PODS}/test-pod-uid", pod, "apply_test")))
    assert sandbox == kube
    assert kube["code"] == 409


def test_another_uid_on_an_existing_object(both: list[Api]) -> None:
    """Apply and patches: metadata.uid is immutable (422); an update's uid is a precondition (409)."""

    def case(api: Api) -> list[Obj]:
        fresh(api, f"{CONFIGMAPS}/uid")
        assert apply(api, f"{CONFIGMAPS}/uid", configmap("uid"), "m")[0] == 201
        other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "uid", "uid": UID}}
        live = api.ok("GET", f"{CONFIGMAPS}/uid")
        same = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "uid", "uid": live["metadata"]["uid"]}}
        return [
            answer(*apply(api, f"{CONFIGMAPS}/uid", other, "m")),
            answer(*api.request("PATCH", f"{CONFIGMAPS}/uid", {"metadata": {"uid": UID}}, content_type=MERGE)),
            answer(*api.request("PATCH", f"{CONFIGMAPS}/uid", {"metadata": {"uid": UID}}, content_type=STRATEGIC)),
            answer(*api.request("PUT", f"{CONFIGMAPS}/uid", {**other, "data": {"key": "x"}})),
            answer(*apply(api, f"{CONFIGMAPS}/uid", {**same, "data": {"key": "value"}}, "m")),
        ]

    sandbox, kube = on_both(both, case)
    assert [a["code"] for a in kube] == [422, 422, 422, 409, 200]
    assert _scrub(sandbox) == _scrub(kube)


def _scrub(answers: list[Obj]) -> list[Obj]:
    """The PUT's precondition message names the live object's uid, which differs between servers."""
    out = []
    for a in answers:
        a = dict(a)
        if a.get("message") and "UID in object meta: " in a["message"]:
            a["message"] = a["message"].rsplit("UID in object meta: ", 1)[0]
        out.append(a)
    return out


APPLY_REFUSALS = {
    "another version": {"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "kinds"}},
    "another kind": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kinds"}},
    "no apiVersion": {"kind": "ConfigMap", "metadata": {"name": "kinds"}},
    "no kind": {"apiVersion": "v1", "metadata": {"name": "kinds"}},
    "another name": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}},
}


@pytest.mark.parametrize("body", APPLY_REFUSALS.values(), ids=APPLY_REFUSALS.keys())
def test_an_apply_of_another_kind_or_name_is_refused(both: list[Api], body: Obj) -> None:
    sandbox, kube = on_both(both, lambda api: answer(*apply(api, f"{CONFIGMAPS}/kinds", body, "m")))
    assert sandbox == kube
    assert kube["code"] == 400


# ---------------------------------------------------------------- managedFields bookkeeping


def test_update_managers_are_capped_and_the_oldest_merged_into_ancient_changes(both: list[Api]) -> None:
    """TestApplyGroupsManySeparateUpdates (managers named so their age and name orders agree)."""

    def case(api: Api) -> list[tuple[Any, ...]]:
        fresh(api, f"{WEBHOOKS}/webhook")
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "webhook", "labels": {"applier": "true"}},
        }
        assert apply(api, f"{WEBHOOKS}/webhook", body, "apply_test")[0] == 201
        obj: Obj = {}
        for i in range(20):
            updater = f"updater{i:02d}"
            obj = api.ok(
                "PATCH", f"{WEBHOOKS}/webhook?fieldManager={updater}",
                {"metadata": {"labels": {updater: "new"}}}, content_type=MERGE,
            )  # fmt: skip
        return managers(obj)

    sandbox, kube = on_both(both, case)
    assert sandbox == kube
    assert len(kube) == 11 and kube[0][0] == "apply_test" and kube[1][0] == "ancient-changes"


def test_updates_of_one_manager_merge_into_its_entry(both: list[Api]) -> None:
    """TestApplyManagedFields: an applier's and an updater's entries, the updater's grouped."""

    def case(api: Api) -> list[tuple[Any, ...]]:
        fresh(api, f"{CONFIGMAPS}/test-cm")
        assert apply(api, f"{CONFIGMAPS}/test-cm", configmap("test-cm"), "apply_test")[0] == 201
        api.ok(
            "PATCH", f"{CONFIGMAPS}/test-cm?fieldManager=updater", {"data": {"new-key": "value"}}, content_type=MERGE
        )
        obj = api.ok(
            "PATCH", f"{CONFIGMAPS}/test-cm?fieldManager=updater", {"data": {"key": "new value"}}, content_type=MERGE
        )
        return managers(obj)

    sandbox, kube = on_both(both, case)
    assert sandbox == kube


def test_an_apply_owning_nothing_leaves_no_entry(both: list[Api]) -> None:
    """TestApplyRemovesEmptyManagedFields."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "empty-cm"}}

    def case(api: Api) -> Any:
        fresh(api, f"{CONFIGMAPS}/empty-cm")
        apply(api, f"{CONFIGMAPS}/empty-cm", body, "apply_test")
        apply(api, f"{CONFIGMAPS}/empty-cm", body, "apply_test")
        return api.ok("GET", f"{CONFIGMAPS}/empty-cm")["metadata"].get("managedFields")

    sandbox, kube = on_both(both, case)
    assert sandbox == kube is None


CLEARINGS: dict[str, tuple[str, Any, str]] = {
    "merge patch [{}]": ("PATCH", {"metadata": {"managedFields": [{}]}}, MERGE),
    "strategic merge patch [{}]": ("PATCH", {"metadata": {"managedFields": [{}]}}, STRATEGIC),
    "json patch [{}]": ("PATCH", [{"op": "replace", "path": "/metadata/managedFields", "value": [{}]}], JSON_PATCH),
    "merge patch []": ("PATCH", {"metadata": {"managedFields": []}}, MERGE),
    "json patch []": ("PATCH", [{"op": "replace", "path": "/metadata/managedFields", "value": []}], JSON_PATCH),
    "merge patch null keeps them": ("PATCH", {"metadata": {"managedFields": None}}, MERGE),
    "update [{}]": (
        "PUT",
        configmap("clear", metadata={"name": "clear", "managedFields": [{}], "labels": {"test-label": "test"}}),
        "",
    ),
    "update []": (
        "PUT",
        configmap("clear", metadata={"name": "clear", "managedFields": [], "labels": {"test-label": "test"}}),
        "",
    ),
    "update [{}, {}] keeps them": (
        "PUT",
        configmap("clear", metadata={"name": "clear", "managedFields": [{}, {}], "labels": {"test-label": "test"}}),
        "",
    ),
    "update with an entry replaces them": (
        "PUT",
        configmap(
            "clear",
            metadata={
                "name": "clear",
                "labels": {"test-label": "test"},
                "managedFields": [
                    {
                        "manager": "someone",
                        "operation": "Update",
                        "apiVersion": "v1",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:data": {"f:key": {}}},
                    }
                ],
            },
        ),
        "",
    ),
    "update with a bad entry keeps them": (
        "PUT",
        configmap(
            "clear",
            metadata={
                "name": "clear",
                "labels": {"test-label": "test"},
                "managedFields": [
                    {"manager": "someone", "operation": "Bogus", "apiVersion": "v1", "fieldsType": "FieldsV1"}
                ],
            },
        ),
        "",
    ),
}


@pytest.mark.parametrize("method,body,content_type", CLEARINGS.values(), ids=CLEARINGS.keys())
def test_managed_fields_are_cleared_by_an_empty_list_or_entry(
    both: list[Api], method: str, body: Any, content_type: str
) -> None:
    """TestClearManagedFieldsWith{MergePatch,StrategicMergePatch,JSONPatch,Update,UpdateEmptyList}:
    once cleared, later updates are not tracked either."""

    def case(api: Api) -> tuple[Obj, list[tuple[Any, ...]], list[tuple[Any, ...]], Any]:
        fresh(api, f"{CONFIGMAPS}/clear")
        assert apply(api, f"{CONFIGMAPS}/clear", configmap("clear"), "apply_test")[0] == 201
        status, cleared = api.request(
            method, f"{CONFIGMAPS}/clear", copy.deepcopy(body), content_type=content_type or "application/json"
        )
        later = api.ok(
            "PATCH",
            f"{CONFIGMAPS}/clear?fieldManager=later",
            {"metadata": {"labels": {"test-label": "v1"}}},
            content_type=MERGE,
        )
        return answer(status, cleared), managers(cleared), managers(later), later["metadata"].get("labels")

    sandbox, kube = on_both(both, case)
    assert sandbox == kube


def test_the_first_apply_to_an_untracked_object_meets_before_first_apply(both: list[Api]) -> None:
    """skipNonAppliedManager: an object without managers gets a before-first-apply entry owning
    what it holds, which conflicts, is forced, and keeps what it still owns."""

    def case(api: Api) -> list[Any]:
        fresh(api, f"{CONFIGMAPS}/bfa")
        api.ok(
            "POST",
            CONFIGMAPS,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "bfa", "labels": {"l": "1"}},
                "data": {"key": "value"},
            },
        )
        api.ok("PATCH", f"{CONFIGMAPS}/bfa", {"metadata": {"managedFields": [{}]}}, content_type=MERGE)
        mine = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bfa", "labels": {"l": "2"}}}
        conflict = answer(*apply(api, f"{CONFIGMAPS}/bfa", mine, "x"))
        forced = apply(api, f"{CONFIGMAPS}/bfa", mine, "x", force=True)[1]
        given_up = apply(api, f"{CONFIGMAPS}/bfa", {**mine, "metadata": {"name": "bfa"}}, "x")[1]
        return [conflict, managers(forced), managers(given_up), given_up.get("data")]

    sandbox, kube = on_both(both, case)
    assert sandbox == kube


def test_conflicts_are_listed_per_manager(both: list[Api]) -> None:
    """NewConflictError: managers sorted, each with its paths; appliers print no version."""

    def case(api: Api) -> tuple[Any, ...]:
        fresh(api, f"{CONFIGMAPS}/multi")
        cfg = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "multi", "labels": {"x": "1", "y": "2"}},
            "data": {"a": "1", "b": "2"},
        }
        apply(api, f"{CONFIGMAPS}/multi", cfg, "alice")
        noop = apply(api, f"{CONFIGMAPS}/multi", cfg, "bob")[1]  # owns the same values: changes nothing
        api.ok("PATCH", f"{CONFIGMAPS}/multi?fieldManager=upd", {"data": {"c": "3"}}, content_type=MERGE)
        cfg2 = {
            **cfg,
            "metadata": {"name": "multi", "labels": {"x": "9", "y": "9"}},
            "data": {"a": "9", "b": "2", "c": "9"},
        }
        return managers(noop), answer(*apply(api, f"{CONFIGMAPS}/multi", cfg2, "carol"))

    sandbox, kube = on_both(both, case)
    assert sandbox == kube


# ---------------------------------------------------------------- what an apply leaves


def test_apply_removes_and_keeps_what_it_should(both: list[Api]) -> None:
    """TestApplyRemoveContainerPort, TestApplyUnsetExclusivelyOwnedFields, TestApplyUnsetSharedFields,
    TestApplyCanTransferFieldOwnershipToController, TestApplyUpdateApplyConflictForced."""
    nginx: Obj = {"name": "nginx", "image": "nginx:latest"}
    with_port = [{**nginx, "ports": [{"containerPort": 80, "protocol": "TCP"}]}]

    def spec(obj: Obj) -> Obj:
        s = obj.get("spec") or {}
        pod = s.get("template", {}).get("spec", {})
        return {
            "replicas": s.get("replicas"),
            "hostname": pod.get("hostname"),
            "ports": pod.get("containers", [{}])[0].get("ports"),
        }

    def case(api: Api) -> list[Any]:
        out: list[Any] = []
        for name in ("remove-port", "exclusive-unset", "shared-unset", "transfer", "conflict-forced"):
            fresh(api, f"{DEPLOYMENTS}/{name}")
        path = f"{DEPLOYMENTS}/remove-port"
        apply(api, path, deployment("remove-port", with_port, replicas=3), "apply_test")
        out.append(spec(apply(api, path, deployment("remove-port", [nginx], replicas=3), "apply_test")[1]))
        path = f"{DEPLOYMENTS}/exclusive-unset"
        first = deployment("exclusive-unset", [nginx], replicas=3)
        first["spec"]["template"]["spec"]["hostname"] = "test-hostname"
        apply(api, path, first, "apply_test")
        out.append(spec(apply(api, path, deployment("exclusive-unset", [nginx]), "apply_test")[1]))
        path = f"{DEPLOYMENTS}/shared-unset"
        shared = {**first, "metadata": {**first["metadata"], "name": "shared-unset"}}
        for manager in ("shared_owner_1", "shared_owner_2"):
            apply(api, path, shared, manager)
        out.append(spec(apply(api, path, deployment("shared-unset", [nginx]), "shared_owner_1")[1]))
        path = f"{DEPLOYMENTS}/transfer"
        apply(api, path, deployment("transfer", [nginx], replicas=3), "test_applier")
        update(api, path, "test_updater", lambda obj: obj["spec"].update(replicas=4))
        transferred = apply(api, path, deployment("transfer", [nginx]), "test_applier")[1]
        out.append((spec(transferred), managers(transferred)))
        path = f"{DEPLOYMENTS}/conflict-forced"
        body = deployment("conflict-forced", [nginx], replicas=3)
        apply(api, path, body, "apply_test")
        api.ok("PATCH", path, {"spec": {"replicas": 5}}, content_type=MERGE)
        out.append(answer(*apply(api, path, body, "apply_test")))
        status, forced = apply(api, path, body, "apply_test", force=True)
        out.append((status, spec(forced)))
        return out

    sandbox, kube = on_both(both, case)
    assert sandbox == kube


# ---------------------------------------------------------------- authorization


def test_an_apply_that_creates_needs_the_create_verb(both: list[Api]) -> None:
    """TestCreateOnApplyFailsWithForbidden: patch alone may change an object but not create one."""
    ns = "agree-apply-rbac"

    def role(api: Api, name: str, verbs: list[str]) -> None:
        rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns
        api.ok("POST", f"{rbac}/roles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}],
        })  # fmt: skip
        api.ok("POST", f"{rbac}/rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "panda", "namespace": ns}],
        })  # fmt: skip

    def until(api: Api, token: str, body: Obj, done: Callable[[int, Obj], bool]) -> tuple[int, Obj]:
        """Apply as panda until ``done`` (RBAC changes reach kube-apiserver's authorizer shortly after)."""
        deadline = time.monotonic() + 30
        while True:
            status, answered = api.request(
                "PATCH", f"/api/v1/namespaces/{ns}/configmaps/{body['metadata']['name']}?fieldManager=apply_test",
                body, content_type=APPLY, token=token,
            )  # fmt: skip
            if done(status, answered) or time.monotonic() > deadline:
                return status, answered
            time.sleep(0.2)

    def case(api: Api) -> list[Obj]:
        api.namespace(ns)
        token = api.service_account_token(ns, "panda")
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "test-cm"}, "data": {"a": "b"}}
        out = [answer(*until(api, token, body, lambda s, b: True))]  # nothing granted: cannot patch
        role(api, "can-patch", ["get", "patch"])
        out.append(answer(*until(api, token, body, lambda s, b: "cannot patch" not in str(b.get("message")))))
        dry = api.request(
            "PATCH", f"/api/v1/namespaces/{ns}/configmaps/test-cm?fieldManager=apply_test&dryRun=All",
            body, content_type=APPLY, token=token,
        )  # fmt: skip
        out.append(answer(*dry))
        api.ok("POST", f"/api/v1/namespaces/{ns}/configmaps", {**body, "metadata": {"name": "existing"}})
        existing = {**body, "metadata": {"name": "existing"}, "data": {"a": "c"}}
        out.append(answer(*until(api, token, existing, lambda s, b: True)))  # Update-owned a: a conflict
        role(api, "can-create", ["create"])
        out.append(answer(*until(api, token, body, lambda s, b: s != 403)))
        return out

    sandbox, kube = on_both(both, case)
    assert sandbox == kube
    assert [a["code"] for a in kube] == [403, 403, 403, 409, 201]
