"""RBAC objects, escalation checks and impersonation: the sandbox answers as kube-apiserver does.

Each case runs on both backends and must get the same answer (code, reason, message, causes, and
the stored form of what is accepted). The validation cases follow the tables of
pkg/apis/rbac/validation/validation_test.go (TestValidateClusterRoleBinding, TestValidateRoleBinding,
TestValidateRoleBindingUpdate, TestValidateRole*, TestValidateClusterRole*), the escalation cases
pkg/registry/rbac/role/policybased/storage_test.go (TestEscalation: superuser, bob without rights,
steve holding ``escalate``, alice holding everything) and helpers_test.go (TestIsOnlyMutatingGCFields),
the impersonation cases staging apiserver pkg/endpoints/filters/impersonation_test.go.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.realkube.agreement import Case, Obj, Step, answer
from tests.realkube.api import Api

NS = "agree-rbac"
G = "rbac.authorization.k8s.io"
API = f"/apis/{G}/v1"
ROLES = f"{API}/namespaces/{NS}/roles"
BINDINGS = f"{API}/namespaces/{NS}/rolebindings"
CLUSTER_ROLES = f"{API}/clusterroles"
CLUSTER_BINDINGS = f"{API}/clusterrolebindings"
DRY = "?dryRun=All"
MERGE = "application/merge-patch+json"
PODS = f"/api/v1/namespaces/{NS}/pods"
WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}


def obj(kind: str, name: str | None, **fields: Any) -> Obj:
    return {"apiVersion": f"{G}/v1", "kind": kind, "metadata": {"name": name} if name else {}, **fields}


def ref(kind: str = "ClusterRole", name: str = "valid", api_group: str = G) -> Obj:
    return {"apiGroup": api_group, "kind": kind, "name": name}


def rule(**fields: Any) -> Obj:
    return {"verbs": ["get"], **fields}


POD_RULE = rule(apiGroups=[""], resources=["pods"])
VALID_SUBJECTS = [
    {"kind": "ServiceAccount", "name": "validsaname", "namespace": "foo"},
    {"kind": "User", "name": "valid@username", "apiGroup": G},
    {"kind": "Group", "name": "valid@groupname", "apiGroup": G},
]


def stored(body: Obj) -> Any:
    return {k: body.get(k) for k in ("rules", "aggregationRule", "roleRef", "subjects") if k in body}


def who(body: Obj) -> Any:
    return body.get("status", {}).get("userInfo")


def create(path: str, body: Obj, **step: Any) -> Case:
    name = (body.get("metadata") or {}).get("name") or "unnamed"
    return Case(f"{body['kind']}-{name}", Step("POST", path + DRY, body, **step), keep=stored)


def crb(case: str, **fields: Any) -> Case:
    body = obj("ClusterRoleBinding", fields.pop("name", "master"), roleRef=fields.pop("roleRef", ref()), **fields)
    return Case(f"ClusterRoleBinding-{case}", Step("POST", CLUSTER_BINDINGS + DRY, body), keep=stored)


def rb(case: str, **fields: Any) -> Case:
    body = obj("RoleBinding", fields.pop("name", "master"), roleRef=fields.pop("roleRef", ref("Role")), **fields)
    return Case(f"RoleBinding-{case}", Step("POST", BINDINGS + DRY, body), keep=stored)


def role(case: str, *rules: Obj, name: str | None = "default") -> Case:
    return Case(f"Role-{case}", Step("POST", ROLES + DRY, obj("Role", name, rules=list(rules))), keep=stored)


def cluster_role(case: str, *rules: Obj, **fields: Any) -> Case:
    body = obj("ClusterRole", fields.pop("name", "default"), rules=list(rules), **fields)
    return Case(f"ClusterRole-{case}", Step("POST", CLUSTER_ROLES + DRY, body), keep=stored)


def update(case: str, path: str, old: Obj, new: Obj) -> Case:
    name = old["metadata"]["name"]
    return Case(case, Step("PUT", f"{path}/{name}{DRY}", new), setup=(Step("POST", path, old),), keep=stored)


VALIDATION = [
    # TestValidateClusterRoleBinding
    crb("valid", subjects=VALID_SUBJECTS),
    crb("bad-group", name="default", roleRef=ref(api_group="rbac.GroupName")),
    crb("bad-kind", name="default", roleRef=ref("Type")),
    crb("reference-role", name="default", roleRef=ref("Role")),
    crb("zero-length-name", name=None),
    crb("bad-role", name="default", roleRef={"apiGroup": G, "kind": "ClusterRole"}),
    crb("bad-subject-kind", subjects=[{"name": "subject"}]),
    crb("bad-subject-name", subjects=[{"namespace": "foo", "name": "subject:bad", "kind": "ServiceAccount"}]),
    crb("missing-sa-namespace", subjects=[{"name": "good", "kind": "ServiceAccount"}]),
    crb("missing-subject-name", subjects=[{"namespace": "foo", "kind": "ServiceAccount"}]),
    crb("defaulted-api-groups", roleRef={"kind": "ClusterRole", "name": "x"}, subjects=[{"kind": "User", "name": "u"}]),
    crb(
        "every-subject-error",
        roleRef={"kind": "Role", "name": "x/y"},
        subjects=[
            {"kind": "ServiceAccount", "name": "sa"},
            {"kind": "User", "name": "u", "apiGroup": "foo"},
            {"kind": "Bot", "name": ""},
            {"kind": "ServiceAccount", "name": "Bad_Name", "namespace": "x", "apiGroup": G},
        ],
    ),
    crb("role-name-segment", roleRef=ref(name="..")),
    # TestValidateRoleBinding
    rb("valid", subjects=[{"name": "validsaname", "kind": "ServiceAccount"}, *VALID_SUBJECTS[1:]]),
    rb("bad-group", name="default", roleRef=ref(api_group="rbac.GroupName")),
    rb("bad-kind", name="default", roleRef=ref("Type")),
    rb("zero-length-name", name=None),
    rb("bad-role", name="default", roleRef={"apiGroup": G, "kind": "Role"}),
    rb("bad-subject-kind", subjects=[{"name": "subject"}]),
    rb("bad-subject-name", subjects=[{"name": "subject:bad", "kind": "ServiceAccount"}]),
    rb("missing-subject-name", subjects=[{"kind": "ServiceAccount"}]),
    rb("cluster-role-reference", roleRef=ref("ClusterRole")),
    # TestValidateRole*
    role("valid-role", POD_RULE),
    role("zero-length-name", name=None),
    role("namespaced-non-resource-url", rule(nonResourceURLs=["/*"])),
    role("mixed-non-resource-and-resource", rule(nonResourceURLs=["/*"], apiGroups=["v1"], resources=["pods"])),
    role("valid-resource", rule(apiGroups=["v1"], resources=["pods"])),
    role("no-api-group", rule(resources=["pods"])),
    role("no-resources", rule(apiGroups=["v1"])),
    role("no-verbs", {"apiGroups": [""], "resources": ["pods"]}),
    role("url-and-no-verbs-and-empty", rule(nonResourceURLs=["/foo"]), {"apiGroups": [""], "resources": ["pods"]}, {}),
    role("name-with-percent", name="a%b"),
    cluster_role("valid-no-namespace", POD_RULE),
    cluster_role("non-resource-url", rule(nonResourceURLs=["/*"])),
    cluster_role("non-resource-url-no-verbs", {"verbs": [], "nonResourceURLs": ["/*"]}),
    cluster_role("mixed-resource-names-and-url", rule(nonResourceURLs=["/healthz"], resourceNames=["x"])),
    cluster_role("aggregation-without-selectors", aggregationRule={}),
    cluster_role(
        "aggregation-bad-selectors",
        aggregationRule={
            "clusterRoleSelectors": [
                {"matchLabels": {"ok": "yes"}},
                {
                    "matchExpressions": [
                        {"key": "a", "operator": "In"},
                        {"key": "b/c/d", "operator": "Foo", "values": ["x y"]},
                        {"key": "/x", "operator": "Exists", "values": ["v"]},
                    ]
                },
                {"matchLabels": {"bad key": "v"}},
            ]
        },
    ),
    # TestValidateRoleBindingUpdate and its ClusterRoleBinding twin
    update(
        "RoleBinding-changed-ref",
        BINDINGS,
        obj("RoleBinding", "updated", roleRef=ref("Role")),
        obj("RoleBinding", "updated", roleRef=ref("Role", "changed")),
    ),
    update(
        "RoleBinding-changed-ref-and-bad-subject",
        BINDINGS,
        obj("RoleBinding", "updated", roleRef=ref("Role")),
        obj("RoleBinding", "updated", roleRef=ref("ClusterRole"), subjects=[{"kind": "Bot", "name": "x"}]),
    ),
    update(
        "RoleBinding-same-ref-defaulted",
        BINDINGS,
        obj("RoleBinding", "updated", roleRef=ref("Role")),
        obj(
            "RoleBinding",
            "updated",
            roleRef={"kind": "Role", "name": "valid"},
            subjects=[{"kind": "User", "name": "u"}],
        ),
    ),
    update(
        "ClusterRoleBinding-changed-ref",
        CLUSTER_BINDINGS,
        obj("ClusterRoleBinding", "agree-master", roleRef=ref()),
        obj("ClusterRoleBinding", "agree-master", roleRef=ref(name="other")),
    ),
    update(
        "Role-invalid-update",
        ROLES,
        obj("Role", "updated", rules=[POD_RULE]),
        obj("Role", "updated", rules=[rule(nonResourceURLs=["/x"])]),
    ),
    update(
        "ClusterRole-invalid-update",
        CLUSTER_ROLES,
        obj("ClusterRole", "agree-updated", rules=[POD_RULE]),
        obj("ClusterRole", "agree-updated", rules=[{"resources": ["pods"]}]),
    ),
]


# ---------------------------------------------------------------- escalation (through impersonation)

# Bob, steve and alice may write Roles (group "agree:writers"); steve may also escalate, alice holds
# everything, carol may only create ClusterRoles. Each speaks through the admin's impersonation headers.
WRITERS = "agree:writers"
ESCALATION_SETUP = (
    Step("POST", CLUSTER_ROLES, obj("ClusterRole", "agree-role-writer", rules=[rule(
        verbs=["create", "update", "patch", "get"], apiGroups=[G], resources=["roles", "rolebindings"])]),
    ),
    Step("POST", CLUSTER_ROLES, obj("ClusterRole", "agree-clusterrole-writer", rules=[rule(
        verbs=["create"], apiGroups=[G], resources=["clusterroles"])]),
    ),
    Step("POST", CLUSTER_BINDINGS, obj("ClusterRoleBinding", "agree-clusterrole-writers",
        roleRef=ref(name="agree-clusterrole-writer"), subjects=[{"kind": "User", "name": "carol", "apiGroup": G}])),
    Step("POST", CLUSTER_BINDINGS, obj("ClusterRoleBinding", "agree-role-writers", roleRef=ref(name="agree-role-writer"),
        subjects=[{"kind": "Group", "name": WRITERS, "apiGroup": G}])),
    Step("POST", CLUSTER_ROLES, obj("ClusterRole", "agree-escalator", rules=[rule(
        verbs=["escalate", "bind"], apiGroups=[G], resources=["roles"])])),
    Step("POST", CLUSTER_BINDINGS, obj("ClusterRoleBinding", "agree-steve", roleRef=ref(name="agree-escalator"),
        subjects=[{"kind": "User", "name": "steve", "apiGroup": G}])),
    Step("POST", CLUSTER_ROLES, obj("ClusterRole", "agree-alice-role", rules=[rule(
        verbs=["*"], apiGroups=["*"], resources=["*"])])),
    Step("POST", CLUSTER_BINDINGS, obj("ClusterRoleBinding", "agree-alice", roleRef=ref(name="agree-alice-role"),
        subjects=[{"kind": "User", "name": "alice", "apiGroup": G}])),
    Step("POST", ROLES, obj("Role", "myrole", rules=[POD_RULE])),
)  # fmt: skip


def acting(user: str, group: str = "") -> dict[str, str]:
    headers = {"Impersonate-User": user}
    if group:
        headers["Impersonate-Group"] = group
    return headers


def escalation(user: str) -> list[Case]:
    headers = acting(user, WRITERS)
    more = obj("Role", "myrole", rules=[POD_RULE, rule(apiGroups=[""], resources=["secrets"], verbs=["list", "watch"])])
    binding = obj("RoleBinding", "bind-myrole", roleRef=ref("Role", "myrole"), subjects=[{"kind": "User", "name": "x"}])
    created = obj("Role", "myrole-2", rules=[POD_RULE])
    finalizers = {"metadata": {"finalizers": ["example.com/keep"]}}
    return [
        Case(f"escalation-{user}-create", Step("POST", ROLES + DRY, created, headers=headers), ESCALATION_SETUP, stored),
        Case(f"escalation-{user}-update", Step("PUT", f"{ROLES}/myrole{DRY}", more, headers=headers), ESCALATION_SETUP),
        Case(f"escalation-{user}-bind", Step("POST", BINDINGS + DRY, binding, headers=headers), ESCALATION_SETUP),
        Case(f"escalation-{user}-gc-fields-only", Step("PATCH", f"{ROLES}/myrole{DRY}", finalizers, MERGE, headers), ESCALATION_SETUP),
    ]  # fmt: skip


ESCALATION = [c for user in ("bob", "steve", "alice") for c in escalation(user)] + [
    Case("escalation-superuser", Step("POST", ROLES + DRY, obj("Role", "myrole-2", rules=[POD_RULE])), keep=stored),
    Case(
        "escalation-aggregation-rule-needs-full-authority",
        Step(
            "POST",
            CLUSTER_ROLES + DRY,
            obj("ClusterRole", "agg", aggregationRule={"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]}),
            headers=acting("carol"),
        ),
        ESCALATION_SETUP,
    ),
    Case(
        "escalation-aggregation-rule-with-escalate",
        Step(
            "POST",
            CLUSTER_ROLES + DRY,
            obj("ClusterRole", "agg", aggregationRule={"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]}),
            headers=acting("alice"),
        ),
        ESCALATION_SETUP,
    ),
]


# ---------------------------------------------------------------- impersonation

IMPERSONATION_SETUP = (
    Step("POST", CLUSTER_ROLES, obj("ClusterRole", "agree-impersonate-jane", rules=[
        rule(verbs=["impersonate"], apiGroups=[""], resources=["users"], resourceNames=["jane"]),
        rule(verbs=["impersonate"], apiGroups=["authentication.k8s.io"], resources=["userextras/scopes", "uids"]),
    ])),
    Step("POST", CLUSTER_BINDINGS, obj("ClusterRoleBinding", "agree-impersonator", roleRef=ref(name="agree-impersonate-jane"),
        subjects=[{"kind": "ServiceAccount", "name": "impersonator", "namespace": NS}])),
    Step("POST", ROLES, obj("Role", "impersonate-sa", rules=[
        rule(verbs=["impersonate"], apiGroups=[""], resources=["serviceaccounts"], resourceNames=["robot"])])),
    Step("POST", BINDINGS, obj("RoleBinding", "impersonator-sa", roleRef=ref("Role", "impersonate-sa"),
        subjects=[{"kind": "ServiceAccount", "name": "impersonator"}])),
)  # fmt: skip


def impersonating(case: str, headers: dict[str, str], *, as_account: str = "", step: Step | None = None) -> Case:
    request = step or Step("POST", WHOAMI, REVIEW)
    request = Step(request.method, request.path, request.body, headers=headers, as_account=as_account)
    return Case(f"impersonate-{case}", request, IMPERSONATION_SETUP, who)


LIST_PODS = Step("GET", PODS)
IMPERSONATION = [
    impersonating("user-without-right", {"Impersonate-User": "jane"}, as_account="nobody"),
    impersonating("serviceaccount-without-right", {"Impersonate-User": f"system:serviceaccount:{NS}:robot"}, as_account="nobody"),
    impersonating("group-without-user", {"Impersonate-Group": "system:masters"}, as_account="nobody"),
    impersonating("uid-and-extra-without-user", {"Impersonate-Uid": "1", "Impersonate-Extra-Scopes": "a"}, step=LIST_PODS),
    impersonating("allowed-user", {"Impersonate-User": "jane"}, as_account="impersonator"),
    impersonating("allowed-user-lists-as-herself", {"Impersonate-User": "jane"}, as_account="impersonator", step=LIST_PODS),
    impersonating("other-user-not-in-resource-names", {"Impersonate-User": "bob"}, as_account="impersonator"),
    impersonating("allowed-user-but-not-the-group", acting("jane", "devs"), as_account="impersonator"),
    impersonating("allowed-extra-and-uid", {"Impersonate-User": "jane", "Impersonate-Extra-Scopes": "view", "Impersonate-Uid": "42"}, as_account="impersonator"),
    impersonating("extra-key-not-allowed", {"Impersonate-User": "jane", "Impersonate-Extra-Other": "x"}, as_account="impersonator"),
    impersonating("serviceaccount-by-namespaced-role", {"Impersonate-User": f"system:serviceaccount:{NS}:robot"}, as_account="impersonator"),
    impersonating("other-serviceaccount", {"Impersonate-User": f"system:serviceaccount:{NS}:other"}, as_account="impersonator"),
    impersonating("not-a-serviceaccount-name", {"Impersonate-User": "system:serviceaccount:Bad_NS:robot"}, as_account="impersonator"),
    impersonating("admin-as-user-with-groups-extra-uid", {**acting("jane", "g1"), "Impersonate-Extra-Foo%2Fbar": "v", "Impersonate-Uid": "123"}),
    impersonating("admin-as-serviceaccount", {"Impersonate-User": f"system:serviceaccount:{NS}:robot"}),
    impersonating("admin-as-serviceaccount-with-groups", acting(f"system:serviceaccount:{NS}:robot", "g1")),
    impersonating("admin-as-user-in-authenticated", acting("jane", "system:authenticated")),
    impersonating("admin-as-user-unauthenticated", acting("jane", "system:unauthenticated")),
    impersonating("admin-as-anonymous", {"Impersonate-User": "system:anonymous"}),
    impersonating("admin-as-user-lists", {"Impersonate-User": "jane"}, step=LIST_PODS),
    impersonating("admin-as-masters-lists", acting("jane", "system:masters"), step=LIST_PODS),
]  # fmt: skip

CASES = VALIDATION + ESCALATION + IMPERSONATION


@pytest.fixture(scope="module")
def tokens(apis: list[Api]) -> Iterator[dict[str, dict[str, str]]]:
    out: dict[str, dict[str, str]] = {}
    for api in apis:
        api.namespace(NS)
        out[api.name] = {name: api.service_account_token(NS, name) for name in ("nobody", "impersonator")}
    yield out


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rbac_agrees_with_kube_apiserver(apis: list[Api], tokens: dict[str, dict[str, str]], case: Case) -> None:
    sandbox, kube = (answer(api, case, tokens[api.name]) for api in apis)
    assert sandbox == kube
