"""Writes: the sandbox creates, updates, authorizes and defaults them as kube-apiserver does.

- A dry-run create still meets the storage: an existing name is 409 AlreadyExists (after
  validation, so an invalid object is 422 first); a generated name is fine.
- A PUT's body needs a name, the URL's (staging apiserver pkg/endpoints/handlers/update.go: the
  namespace check, then rest.go checkName: ``... (<url name> based on URL) was undeterminable: name
  must be provided``).
- Whether a list request is a watch (pkg/endpoints/request/requestinfo.go): ListOptions.Watch
  decodes as a Go query bool, so any value but ``0``/``false`` (``yes``, ``TRUE``, even empty) is a
  watch, refused to a ServiceAccount allowed only to list.
- Pods (not pod templates) default a container's missing requests to its limits
  (pkg/apis/core/v1/defaults.go SetDefaults_Pod), also after a mutating webhook's patch (the
  admission dispatcher defaults the patched object).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.realkube.agreement import Case, Obj, Step, answer
from tests.realkube.api import Api
from tests.review_server import ReviewServer, json_patch

NS = "agree-writes"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
PODS = f"/api/v1/namespaces/{NS}/pods"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
NAMESPACES = "/api/v1/namespaces"
ROLES = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles"
DRY = "?dryRun=All"
PATCHED = {"agree-writes-patch": "yes"}
SIDECAR = {"name": "sidecar", "image": "busybox:1.36", "resources": {"limits": {"cpu": "250m", "memory": "32Mi"}}}


def configmap(name: str | None = "exists", *, data: Obj | None = None, **metadata: Any) -> Obj:
    md: Obj = {**({"name": name} if name else {}), **metadata}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data or {"a": "1"}}


def namespace_obj(name: str | None, **metadata: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {**({"name": name} if name else {}), **metadata}}


def kept_name(body: Obj) -> Any:
    name = str(body["metadata"].get("name"))
    generate = str(body["metadata"].get("generateName") or "")
    return generate + "*****" if generate and name.startswith(generate) else name


def kept_data(body: Obj) -> Any:
    return {"name": body["metadata"].get("name"), "data": body.get("data")}


def kind(body: Obj) -> Any:
    return body.get("kind")


def role(rules: list[Obj]) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "exists"},
        "rules": rules,
    }


EXISTS = Step("POST", CONFIGMAPS, configmap())
EXISTING_NS = Step("POST", NAMESPACES, namespace_obj("agree-writes-other"))
DRY_RUN_CREATES = [
    Case("dry-run-create-existing", Step("POST", CONFIGMAPS + DRY, configmap()), (EXISTS,)),
    Case("dry-run-create-existing-with-options", Step("POST", f"{CONFIGMAPS}{DRY}&fieldManager=me&fieldValidation=Strict", configmap()), (EXISTS,)),
    Case("dry-run-create-existing-namespace", Step("POST", NAMESPACES + DRY, namespace_obj("agree-writes-other")), (EXISTING_NS,)),
    Case("dry-run-create-existing-service-account", Step("POST", f"/api/v1/namespaces/{NS}/serviceaccounts{DRY}",
         {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "lister"}})),
    Case("dry-run-create-existing-invalid-is-422-first", Step("POST", ROLES + DRY, role([{"resources": ["pods"]}])),
         (Step("POST", ROLES, role([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])),)),
    Case("dry-run-create-new", Step("POST", CONFIGMAPS + DRY, configmap("fresh")), keep=kept_name),
    Case("dry-run-create-generated", Step("POST", CONFIGMAPS + DRY, configmap(None, generateName="exists-")), keep=kept_name),
    Case("create-existing", Step("POST", CONFIGMAPS, configmap()), (EXISTS,)),
]  # fmt: skip

UPDATES = [
    Case("put-without-name", Step("PUT", f"{CONFIGMAPS}/exists", configmap(None, labels={"x": "y"})), (EXISTS,)),
    Case("put-without-metadata", Step("PUT", f"{CONFIGMAPS}/exists", {"apiVersion": "v1", "kind": "ConfigMap", "data": {"b": "2"}}), (EXISTS,)),
    Case("put-empty-name", Step("PUT", f"{CONFIGMAPS}/exists", configmap("")), (EXISTS,)),
    Case("put-generate-name-only", Step("PUT", f"{CONFIGMAPS}/exists", configmap(None, generateName="exists-")), (EXISTS,)),
    Case("put-without-name-missing-object", Step("PUT", f"{CONFIGMAPS}/absent", configmap(None))),
    Case("put-without-name-other-namespace", Step("PUT", f"{CONFIGMAPS}/exists", configmap(None, namespace="elsewhere")), (EXISTS,)),
    Case("put-other-name", Step("PUT", f"{CONFIGMAPS}/exists", configmap("other")), (EXISTS,)),
    Case("put-namespace-without-name", Step("PUT", f"{NAMESPACES}/agree-writes-other", namespace_obj(None, labels={"x": "y"})), (EXISTING_NS,)),
    Case("put-namespace-status-without-name", Step("PUT", f"{NAMESPACES}/agree-writes-other/status", namespace_obj(None)), (EXISTING_NS,)),
    Case("put-with-name", Step("PUT", f"{CONFIGMAPS}/exists", configmap(data={"a": "1"})), (EXISTS,), keep=kept_data),
]  # fmt: skip

LISTER = "lister"
WATCHES = [
    Case(f"list-watch-{label}", Step("GET", f"{CONFIGMAPS}?{query}timeoutSeconds=1", as_account=LISTER), keep=kind)
    for label, query in (
        ("yes", "watch=yes&"),
        ("empty", "watch=&"),
        ("bare", "watch&"),
        ("upper-true", "watch=TRUE&"),
        ("one", "watch=1&"),
        ("two", "watch=2&"),
        ("false", "watch=false&"),
        ("capital-false", "watch=False&"),
        ("zero", "watch=0&"),
        ("absent", ""),
    )
] + [
    Case("named-get-watch-yes", Step("GET", f"{CONFIGMAPS}/exists?watch=yes&timeoutSeconds=1", as_account=LISTER), (EXISTS,)),
    Case("field-selected-watch-yes", Step("GET", f"{CONFIGMAPS}?watch=yes&fieldSelector=metadata.name%3Dexists&timeoutSeconds=1", as_account=LISTER)),
]  # fmt: skip


def container(name: str, **resources: Obj) -> Obj:
    return {"name": name, "image": "busybox:1.36", "resources": resources}


def pod(name: str, *containers: Obj, init: tuple[Obj, ...] = (), labels: Obj | None = None) -> Obj:
    spec: Obj = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    md: Obj = {"name": name, **({"labels": labels} if labels else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec}


def resources(body: Obj) -> Any:
    spec = body.get("spec") or {}
    if "template" in spec:
        spec = spec["template"].get("spec") or {}
    return {
        key: [(c.get("name"), c.get("resources")) for c in spec.get(key) or []]
        for key in ("initContainers", "containers")
    }


CPU_MEM = {"cpu": "500m", "memory": "64Mi"}
DEFAULT_SA = Step(
    "POST",
    f"/api/v1/namespaces/{NS}/serviceaccounts",
    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
)
PODS_CASES = [
    Case(case, Step("POST", PODS + DRY, body), (DEFAULT_SA,), keep=resources)
    for case, body in (
        ("limits-only", pod("p", container("c", limits=CPU_MEM))),
        ("limits-and-some-requests", pod("p", container("c", limits=CPU_MEM, requests={"cpu": "100m"}))),
        ("requests-only", pod("p", container("c", requests=CPU_MEM))),
        ("no-resources", pod("p", container("c"))),
        ("extended-resource-limit", pod("p", container("c", limits={"nvidia.com/gpu": "1"}))),
        ("init-container-limits", pod("p", container("c"), init=(container("i", limits=CPU_MEM),))),
        ("two-containers", pod("p", container("a", limits={"cpu": "1"}), container("b", limits={"memory": "1Gi"}, requests={"memory": "512Mi"}))),
    )
] + [
    Case("deployment-template-keeps-limits-only", Step("POST", DEPLOYMENTS + DRY, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {"metadata": {"labels": {"app": "d"}},
                 "spec": {"containers": [container("c", limits=CPU_MEM)]}}}}), keep=resources),
    Case("patched-by-webhook", Step("POST", PODS + DRY, pod("p", container("c", limits={"cpu": "1"}), labels=PATCHED)), (DEFAULT_SA,), keep=resources),
]  # fmt: skip


class Patcher(ReviewServer):
    """An HTTPS mutating webhook on 127.0.0.1 adding SIDECAR (limits only) to each pod it sees."""

    def __init__(self) -> None:
        patch = json_patch([{"op": "add", "path": "/spec/containers/-", "value": SIDECAR}])
        super().__init__(lambda request, path: patch, "agree-writes")
        self.start()

    def register(self, api: Api) -> None:
        hook = {
            "name": "pods.agree-writes.example.com",
            "clientConfig": {
                "url": self.url("/patch"),
                "caBundle": self.ca_bundle,
            },
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
            "objectSelector": {"matchLabels": PATCHED},
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
        }
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "agree-writes"},
            "webhooks": [hook],
        }
        status, answer = api.request(
            "POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", body
        )
        assert status in (201, 409), answer
        probe = pod("probe", container("c"), labels=PATCHED)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # kube-apiserver picks configurations up a moment later
            status, answer = api.request("POST", PODS + DRY, probe)
            if status == 201 and len(answer["spec"]["containers"]) == 2:
                return
            time.sleep(0.2)
        raise AssertionError(f"{api.name}: the patching webhook was never called: {status} {answer}")


@pytest.fixture(scope="module")
def tokens(apis: list[Api]) -> dict[str, dict[str, str]]:
    """Namespace NS, its default ServiceAccount, and ServiceAccount ``lister`` allowed only to list ConfigMaps."""
    out = {}
    for api in apis:
        api.namespace(NS)
        status, _ = api.request("POST", DEFAULT_SA.path, DEFAULT_SA.body)
        assert status in (201, 409), status
        out[api.name] = {LISTER: api.service_account_token(NS, LISTER)}
        rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}"
        for plural, body in (
            ("roles", {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
            ("rolebindings", {
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": LISTER},
                "subjects": [{"kind": "ServiceAccount", "name": LISTER, "namespace": NS}],
            }),
        ):  # fmt: skip
            kind_name = "Role" if plural == "roles" else "RoleBinding"
            full = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind_name, "metadata": {"name": LISTER}}
            status, _ = api.request("POST", f"{rbac}/{plural}", {**full, **body})
            assert status in (201, 409), status
        deadline = time.monotonic() + 30
        while api.request("GET", CONFIGMAPS, token=out[api.name][LISTER])[0] != 200:  # the authorizer's cache
            assert time.monotonic() < deadline, f"{api.name}: {LISTER} never got to list"
            time.sleep(0.2)
    return out


@pytest.fixture(scope="module")
def patcher(apis: list[Api], tokens: dict[str, dict[str, str]]) -> Iterator[Patcher]:
    hook = Patcher()
    try:
        for api in apis:
            hook.register(api)
        yield hook
    finally:
        hook.stop()


@pytest.mark.parametrize("case", DRY_RUN_CREATES + UPDATES + WATCHES, ids=lambda c: c.id)
def test_writes_agree_with_kube_apiserver(apis: list[Api], tokens: dict[str, dict[str, str]], case: Case) -> None:
    sandbox, kube = (answer(api, case, tokens[api.name]) for api in apis)
    assert sandbox == kube


@pytest.mark.parametrize("case", PODS_CASES, ids=lambda c: c.id)
def test_pod_defaults_agree_with_kube_apiserver(apis: list[Api], patcher: Patcher, case: Case) -> None:
    sandbox, kube = (answer(api, case, {}) for api in apis)
    assert sandbox == kube
