"""What admission webhooks are sent: the sandbox fills AdmissionReview requests as kube-apiserver does.

One recording HTTPS webhook (tests.realkube.agreement.Recorder) is registered on both backends, as
a mutating and a validating webhook for labelled ConfigMaps and Namespaces. Each case runs one
request on both and compares what each webhook received, field by field as staging apiserver's
pkg/admission/plugin/webhook/request/admissionreview.go (CreateV1AdmissionReview) fills them:
kind, resource, subResource, the request* triple, name, namespace, operation, dryRun, options
(CreateOptions/UpdateOptions with dryRun, fieldManager, fieldValidation; DeleteOptions), whether
object/oldObject are there and the object's name; userInfo where both speak as the same identity.
A generated name reads ``<generateName>*****``, a precondition on the old object's uid
``<the old object's>``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.realkube.agreement import Obj, Recorder, Step, recording_webhook, send
from tests.realkube.api import Api

NS = "agree-hooked"
LABELS = {"agree": "yes"}
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
NAMESPACES = "/api/v1/namespaces"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
FIELDS = (
    "kind",
    "resource",
    "subResource",
    "requestKind",
    "requestResource",
    "requestSubResource",
    "name",
    "namespace",
    "operation",
    "dryRun",
    "options",
)


def configmap(name: str = "", generate: str = "", data: Obj | None = None) -> Obj:
    md: Obj = {"labels": LABELS}
    if name:
        md["name"] = name
    if generate:
        md["generateName"] = generate
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data or {"a": "1"}}


def namespace(generate: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": generate, "labels": LABELS}}


def named_namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": LABELS}}


def webhooks(api: Api, recorder: Recorder) -> None:
    """A mutating and a validating configuration, each with a webhook for ConfigMaps in NS and one
    for Namespaces, all calling the recorder at /<backend>/<mutate|validate>."""
    ca = base64.b64encode(recorder.ca.cert_pem).decode()
    operations = ["CREATE", "UPDATE", "DELETE"]
    for kind, plural, path in (
        ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "mutate"),
        ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations", "validate"),
    ):
        hooks = []
        for resource, selector in (
            ("configmaps", {"matchLabels": {"kubernetes.io/metadata.name": NS}}),
            ("namespaces", {}),
        ):
            hooks.append({
                "name": f"{resource}.{path}.agree.example.com",
                "clientConfig": {"url": recorder.url(f"/{api.name}/{path}"), "caBundle": ca},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": [resource], "operations": operations}],
                "namespaceSelector": selector,
                "objectSelector": {"matchLabels": LABELS},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
            })  # fmt: skip
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": "agree"},
            "webhooks": hooks,
        }
        api.ok("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", body)


@dataclass(frozen=True)
class HookCase:
    id: str
    step: Step
    setup: tuple[Step, ...] = ()
    identity: bool = False
    """Compare userInfo too (both backends speak as the same impersonated user)."""


def _generated(value: Any, prefix: str) -> Any:
    if prefix and isinstance(value, str) and value.startswith(prefix) and len(value) == len(prefix) + 5:
        return prefix + "*****"
    return value


def received(requests: list[Obj], *, identity: bool) -> list[Obj]:
    """The fields of each AdmissionRequest both backends must agree on."""
    out = []
    for request in requests:
        obj = request.get("object") or {}
        prefix = str((obj.get("metadata") or {}).get("generateName") or "")
        seen = {k: _generated(request.get(k), prefix) for k in FIELDS}
        preconditions = (seen.get("options") or {}).get("preconditions") or {}
        if preconditions.get("uid") and preconditions["uid"] == (request.get("oldObject") or {}).get(
            "metadata", {}
        ).get("uid"):
            seen["options"] = {**seen["options"], "preconditions": {**preconditions, "uid": "<the old object's>"}}
        seen["object"] = _generated((obj.get("metadata") or {}).get("name"), prefix) if obj else None
        seen["oldObject"] = bool(request.get("oldObject"))
        if identity:
            user = request.get("userInfo") or {}
            seen["userInfo"] = {"username": user.get("username"), "groups": user.get("groups")}
        out.append(seen)
    return out


def run(api: Api, recorder: Recorder, case: HookCase, tokens: dict[str, str]) -> Obj:
    for step in case.setup:
        status, body = send(api, step, tokens)
        assert 200 <= status < 300 or status == 409, f"{api.name}: setup {step.method} {step.path}: {status} {body}"
    for hook in ("mutate", "validate"):
        recorder.take(f"/{api.name}/{hook}")
    status, body = send(api, case.step, tokens)
    assert 200 <= status < 300, f"{api.name}: {case.step.method} {case.step.path}: {status} {body}"
    return {
        "code": status,
        **{
            hook: received(recorder.take(f"/{api.name}/{hook}"), identity=case.identity)
            for hook in ("mutate", "validate")
        },
    }


AS_JANE = {"Impersonate-User": "jane", "Impersonate-Group": "system:masters"}
CASES = [
    HookCase("create-generate-name", Step("POST", CONFIGMAPS, configmap(generate="gen-"))),
    HookCase("create-dry-run-with-options", Step("POST", f"{CONFIGMAPS}?fieldManager=me&dryRun=All&fieldValidation=Strict", configmap("c1"))),
    HookCase("create-field-manager", Step("POST", f"{CONFIGMAPS}?fieldManager=me", configmap("c1"))),
    HookCase("update-field-manager", Step("PUT", f"{CONFIGMAPS}/c2?fieldManager=upd", configmap("c2", data={"b": "2"})),
             setup=(Step("POST", CONFIGMAPS, configmap("c2")),)),
    HookCase("merge-patch-validation-warn", Step("PATCH", f"{CONFIGMAPS}/c3?fieldManager=pat&fieldValidation=Warn", {"data": {"b": "2"}}, MERGE),
             setup=(Step("POST", CONFIGMAPS, configmap("c3")),)),
    HookCase("merge-patch-dry-run", Step("PATCH", f"{CONFIGMAPS}/c3?dryRun=All", {"data": {"c": "3"}}, MERGE),
             setup=(Step("POST", CONFIGMAPS, configmap("c3")),)),
    HookCase("apply-creates-forced", Step("PATCH", f"{CONFIGMAPS}/c4?fieldManager=ssa&force=true", configmap("c4"), APPLY)),
    HookCase("apply-updates", Step("PATCH", f"{CONFIGMAPS}/c5?fieldManager=ssa", configmap("c5", data={"z": "9"}), APPLY),
             setup=(Step("PATCH", f"{CONFIGMAPS}/c5?fieldManager=ssa", configmap("c5"), APPLY),)),
    HookCase("delete-dry-run", Step("DELETE", f"{CONFIGMAPS}/c6?dryRun=All"), setup=(Step("POST", CONFIGMAPS, configmap("c6")),)),
    HookCase("delete-options-body", Step("DELETE", f"{CONFIGMAPS}/c7", {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background", "gracePeriodSeconds": 0}),
             setup=(Step("POST", CONFIGMAPS, configmap("c7")),)),
    # (not Foreground: the garbage collector's later update would reach the webhooks during another case)
    HookCase("delete-propagation-query", Step("DELETE", f"{CONFIGMAPS}/c8?propagationPolicy=Background&gracePeriodSeconds=0"),
             setup=(Step("POST", CONFIGMAPS, configmap("c8")),)),
    HookCase("impersonated-create", Step("POST", CONFIGMAPS, configmap(generate="jane-"), headers=AS_JANE), identity=True),
    HookCase("impersonated-update", Step("PATCH", f"{CONFIGMAPS}/c9?fieldManager=jane", {"data": {"j": "1"}}, MERGE, headers=AS_JANE),
             setup=(Step("POST", CONFIGMAPS, configmap("c9")),), identity=True),
    HookCase("service-account-create", Step("POST", CONFIGMAPS, configmap("c10"), as_account="editor"), identity=True),
    HookCase("namespace-generate-name", Step("POST", NAMESPACES, namespace("agree-gen-"))),
    HookCase("namespace-update", Step("PATCH", f"{NAMESPACES}/agree-ns", {"metadata": {"labels": {"x": "y"}}}, MERGE),
             setup=(Step("POST", NAMESPACES, named_namespace("agree-ns")),)),
    HookCase("namespace-delete-dry-run", Step("DELETE", f"{NAMESPACES}/agree-ns?dryRun=All"),
             setup=(Step("POST", NAMESPACES, named_namespace("agree-ns")),)),
    HookCase("namespace-dry-run", Step("POST", f"{NAMESPACES}?dryRun=All&fieldManager=me", named_namespace("agree-dry"))),
]  # fmt: skip


@pytest.fixture(scope="module")
def recorder(apis: list[Api]) -> Iterator[Recorder]:
    with recording_webhook() as rec:
        for api in apis:
            api.namespace(NS)
            webhooks(api, rec)
            probe = configmap("probe")
            rec.wait(
                f"/{api.name}/validate",
                lambda api=api, probe=probe: api.request("POST", f"{CONFIGMAPS}?dryRun=All", probe),
            )
        yield rec


@pytest.fixture(scope="module")
def tokens(apis: list[Api]) -> dict[str, dict[str, str]]:
    """ServiceAccount ``editor`` may edit the namespace (the aggregated ``edit`` ClusterRole)."""
    out = {}
    for api in apis:
        api.namespace(NS)
        out[api.name] = {"editor": api.service_account_token(NS, "editor")}
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "editor"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "ServiceAccount", "name": "editor", "namespace": NS}],
        }
        status, _ = api.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings", binding)
        assert status in (201, 409), status
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_webhook_requests_agree_with_kube_apiserver(
    apis: list[Api], recorder: Recorder, tokens: dict[str, dict[str, str]], case: HookCase
) -> None:
    sandbox, kube = (run(api, recorder, case, tokens[api.name]) for api in apis)
    assert sandbox == kube
    assert kube["mutate"] and kube["validate"], "both webhooks were called"
