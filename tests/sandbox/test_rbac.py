"""RBAC: 403s worded like kube-apiserver's, resourceNames (watch of one object), subresources,
scopes, non-resource URLs, the review APIs, escalation prevention and the bootstrap policy."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from gpucluster.sandbox.apiserver import rbac
from gpucluster.sandbox.apiserver.auth import UserInfo
from gpucluster.sandbox.apiserver.core import Attributes
from gpucluster.sandbox.server import Sandbox, SandboxThread
from tests.sandbox.test_tokens import KUBECTL, admin, kubectl, raw, token_client, token_kubeconfig

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")
Obj = dict[str, Any]
RBAC_API = "rbac.authorization.k8s.io"
SA_GROUPS = '["system:serviceaccounts" "system:serviceaccounts:default" "system:authenticated"]'


def service_account(s: Sandbox, name: str, namespace: str = "default") -> str:
    """A new ServiceAccount and a token for it."""
    admin(s).create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    assert s.core.authn is not None
    return s.core.authn.issue_service_account_token(namespace, name)[0]


def rbac_api(s: Sandbox, token: str | None = None) -> client.RbacAuthorizationV1Api:
    return client.RbacAuthorizationV1Api(token_client(s, token or s.token))


def role(name: str, rules: list[Obj], namespace: str = "default") -> Obj:
    return {"metadata": {"name": name, "namespace": namespace}, "rules": rules}


def binding(name: str, role_kind: str, role_name: str, sa: str, namespace: str = "default") -> Obj:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": RBAC_API, "kind": role_kind, "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": "default"}],
    }


def grant(s: Sandbox, sa: str, rules: list[Obj], namespace: str = "default") -> None:
    api = rbac_api(s)
    api.create_namespaced_role(namespace, role(f"{sa}-role", rules, namespace))
    api.create_namespaced_role_binding(namespace, binding(f"{sa}-binding", "Role", f"{sa}-role", sa, namespace))


def status_of(exc: pytest.ExceptionInfo[ApiException]) -> Obj:
    body: Obj = json.loads(exc.value.body)
    return body


# ------------------------------------------------------------------ pure parts


def test_request_info_follows_kube_apiserver() -> None:
    ri = rbac.request_info
    assert ri("GET", "/api/v1/namespaces/ns/pods", {}) == rbac.RequestInfo(
        "list", "/api/v1/namespaces/ns/pods", True, "", "v1", "ns", "pods"
    )
    watch_one = ri("GET", "/apis/apps/v1/namespaces/ns/deployments", {"watch": "1", "fieldSelector": "metadata.name=x"})
    assert (watch_one.verb, watch_one.api_group, watch_one.name) == ("watch", "apps", "x")
    assert ri("GET", "/api/v1/namespaces/ns", {}).namespace == "ns"  # a namespace is in itself
    status = ri("PUT", "/api/v1/namespaces/ns/status", {})
    assert (status.resource, status.name, status.subresource, status.verb) == ("namespaces", "ns", "status", "update")
    log = ri("GET", "/api/v1/namespaces/ns/pods/p/log", {})
    assert (log.resource, log.name, log.subresource, log.verb) == ("pods", "p", "log", "get")
    assert ri("DELETE", "/api/v1/namespaces/ns/pods", {}).verb == "deletecollection"
    assert ri("POST", "/api/v1/namespaces/ns/serviceaccounts/sa/token", {}).subresource == "token"
    assert not ri("GET", "/apis/apps/v1", {}).resource_request
    assert ri("GET", "/openapi/v3", {}) == rbac.RequestInfo("get", "/openapi/v3")


def test_rules_match_subresources_wildcards_and_urls() -> None:
    scale = rbac.Rule.of({"verbs": ["get"], "apiGroups": ["*"], "resources": ["*/scale"]})
    info = rbac.request_info("GET", "/apis/apps/v1/namespaces/n/deployments/d/scale", {})
    assert scale.allows(info)
    assert not scale.allows(rbac.request_info("GET", "/apis/apps/v1/namespaces/n/deployments/d", {}))
    urls = rbac.Rule.of({"verbs": ["get"], "nonResourceURLs": ["/apis/*"]})
    assert urls.allows(rbac.RequestInfo("get", "/apis/apps/v1"))
    assert not urls.allows(rbac.RequestInfo("get", "/version"))


def test_escalation_message_is_compacted_and_sorted_like_upstream() -> None:
    user = UserInfo("u", ("g1", "g2"))
    owner = rbac.RuleSet([rbac.Rule.of({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]})], [])
    wanted = [{"verbs": ["get", "list", "delete"], "apiGroups": [""], "resources": ["pods", "secrets"]}]
    assert rbac.escalation_message(user, owner, wanted) == (
        'user "u" (groups=["g1" "g2"]) is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:[""], Resources:["pods"], Verbs:["list" "delete"]}\n'
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list" "delete"]}'
    )
    assert rbac.escalation_message(user, owner, [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]) == ""


# ------------------------------------------------------------------ against the server


def test_a_missing_verb_is_forbidden_with_kube_apiservers_words(sb: SandboxThread, tmp_path: Path) -> None:
    s = sb.sandbox
    cfg = token_kubeconfig(s, service_account(s, "nobody"), tmp_path / "nobody")
    listed = kubectl(s, "get", "pods", kubeconfig=cfg)
    assert listed.returncode == 1
    assert listed.stderr.strip() == (
        'Error from server (Forbidden): pods is forbidden: User "system:serviceaccount:default:nobody" '
        'cannot list resource "pods" in API group "" in the namespace "default"'
    )
    nodes = kubectl(s, "get", "node", "n1", kubeconfig=cfg)
    assert nodes.stderr.strip() == (
        'Error from server (Forbidden): nodes "n1" is forbidden: User "system:serviceaccount:default:nobody" '
        'cannot get resource "nodes" in API group "" at the cluster scope'
    )
    assert kubectl(s, "auth", "can-i", "list", "pods", kubeconfig=cfg).stdout.strip() == "no"
    assert kubectl(s, "version", "-o", "json", kubeconfig=cfg).returncode == 0  # system:discovery
    assert kubectl(s, "api-resources", kubeconfig=cfg).returncode == 0
    code, body = raw(s, service_account(s, "nofaults"), "GET", "/sandbox/faults")
    assert code == 403 and body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'forbidden: User "system:serviceaccount:default:nofaults" cannot get path "/sandbox/faults"',
        "reason": "Forbidden",
        "details": {},
        "code": 403,
    }


def test_a_resource_names_role_lets_a_watch_of_that_object_through(sb: SandboxThread) -> None:
    s = sb.sandbox
    token = service_account(s, "watcher")
    grant(s, "watcher", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "watch"], "resourceNames": ["x"]}])  # fmt: skip
    v1 = admin(s)
    v1.create_namespaced_config_map("default", {"metadata": {"name": "x"}, "data": {"k": "1"}})
    v1.create_namespaced_config_map("default", {"metadata": {"name": "y"}})
    mine = client.CoreV1Api(token_client(s, token))
    assert mine.read_namespaced_config_map("x", "default").data == {"k": "1"}
    with pytest.raises(ApiException) as exc:
        mine.read_namespaced_config_map("y", "default")
    assert status_of(exc)["message"] == (
        'configmaps "y" is forbidden: User "system:serviceaccount:default:watcher" cannot get resource '
        '"configmaps" in API group "" in the namespace "default"'
    )
    with pytest.raises(ApiException) as exc:
        mine.list_namespaced_config_map("default")
    assert exc.value.status == 403 and "cannot list resource" in status_of(exc)["message"]
    with pytest.raises(ApiException) as exc:  # another name in the selector is another object
        next(iter(watch.Watch().stream(mine.list_namespaced_config_map, "default", field_selector="metadata.name=y")))
    assert exc.value.status == 403
    w = watch.Watch()
    seen = []
    for event in w.stream(mine.list_namespaced_config_map, "default", field_selector="metadata.name=x", timeout_seconds=10):  # fmt: skip
        seen.append(event["object"].metadata.name)
        if event["type"] == "ADDED":
            v1.patch_namespaced_config_map("x", "default", {"data": {"k": "2"}})
        else:
            assert event["type"] == "MODIFIED" and event["object"].data == {"k": "2"}
            w.stop()
    assert seen == ["x", "x"]


def test_a_cluster_role_bound_in_a_namespace_grants_there_only(sb: SandboxThread) -> None:
    s = sb.sandbox
    token = service_account(s, "viewer")
    v1 = admin(s)
    v1.create_namespace({"metadata": {"name": "other"}})
    rbac_api(s).create_namespaced_role_binding("default", binding("viewer-view", "ClusterRole", "view", "viewer"))
    mine = client.CoreV1Api(token_client(s, token))
    assert mine.list_namespaced_pod("default").items == []
    with pytest.raises(ApiException) as exc:
        mine.list_namespaced_pod("other")
    assert exc.value.status == 403 and 'in the namespace "other"' in status_of(exc)["message"]
    with pytest.raises(ApiException) as exc:
        mine.list_pod_for_all_namespaces()
    assert status_of(exc)["message"].endswith('cannot list resource "pods" in API group "" at the cluster scope')
    with pytest.raises(ApiException) as exc:  # view does not read secrets
        mine.list_namespaced_secret("default")
    assert exc.value.status == 403


def test_subresources_are_separate_targets(sb: SandboxThread) -> None:
    s = sb.sandbox
    token = service_account(s, "statuser")
    grant(s, "statuser", [{"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get", "patch"]}])
    admin(s).create_namespaced_pod("default", {"metadata": {"name": "sp"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})  # fmt: skip
    mine = client.CoreV1Api(token_client(s, token))
    assert mine.read_namespaced_pod_status("sp", "default").metadata.name == "sp"
    with pytest.raises(ApiException) as exc:
        mine.read_namespaced_pod("sp", "default")
    assert exc.value.status == 403
    with pytest.raises(ApiException) as exc:
        mine.replace_namespaced_pod_status("sp", "default", {"metadata": {"name": "sp"}})
    assert status_of(exc)["message"].startswith(
        'pods "sp" is forbidden: User "system:serviceaccount:default:statuser" cannot update resource "pods/status"'
    )


def test_a_new_binding_takes_effect_at_once_and_a_missing_role_is_the_reason(sb: SandboxThread) -> None:
    s = sb.sandbox
    token = service_account(s, "late")
    mine = client.CoreV1Api(token_client(s, token))
    with pytest.raises(ApiException):
        mine.list_namespaced_service_account("default")
    rbac_api(s).create_namespaced_role_binding("default", binding("late-b", "Role", "late-r", "late"))
    with pytest.raises(ApiException) as exc:
        mine.list_namespaced_service_account("default")
    assert status_of(exc)["message"].endswith(': RBAC: role.rbac.authorization.k8s.io "late-r" not found')
    rbac_api(s).create_namespaced_role("default", role("late-r", [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["list"]}]))  # fmt: skip
    assert mine.list_namespaced_service_account("default").items


def test_access_reviews_and_can_i(sb: SandboxThread, tmp_path: Path) -> None:
    s = sb.sandbox
    token = service_account(s, "asker")
    grant(s, "asker", [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}])
    cfg = token_kubeconfig(s, token, tmp_path / "asker")
    assert kubectl(s, "auth", "can-i", "get", "deployments.apps", kubeconfig=cfg).stdout.strip() == "yes"
    assert kubectl(s, "auth", "can-i", "delete", "deployments.apps", kubeconfig=cfg).stdout.strip() == "no"
    listed = kubectl(s, "auth", "can-i", "--list", kubeconfig=cfg).stdout
    assert "deployments.apps" in listed and "/version" in listed
    authz = client.AuthorizationV1Api(token_client(s, s.token))
    review = authz.create_subject_access_review(
        {
            "spec": {
                "user": "system:serviceaccount:default:asker",
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "resourceAttributes": {
                    "namespace": "default",
                    "verb": "get",
                    "group": "apps",
                    "resource": "deployments",
                },
            }
        }
    )
    assert review.status.allowed is True
    assert review.status.reason == (
        'RBAC: allowed by RoleBinding "asker-binding/default" of Role "asker-role" to ServiceAccount "asker/default"'
    )
    with pytest.raises(ApiException) as exc:  # reviewing others needs create on subjectaccessreviews
        client.AuthorizationV1Api(token_client(s, token)).create_subject_access_review(
            {"spec": {"user": "x", "nonResourceAttributes": {"path": "/version", "verb": "get"}}}
        )
    assert exc.value.status == 403


def test_the_requester_reaches_admission(sb: SandboxThread) -> None:
    s = sb.sandbox
    token = service_account(s, "writer")
    grant(s, "writer", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}])
    seen: list[Obj] = []

    async def hook(attrs: Attributes) -> None:
        if attrs.resource.plural == "configmaps" and attrs.name == "from-writer":
            seen.append(attrs.user)

    s.core.admission.validating.append(hook)
    try:
        client.CoreV1Api(token_client(s, token)).create_namespaced_config_map("default", {"metadata": {"name": "from-writer"}})  # fmt: skip
    finally:
        s.core.admission.validating.remove(hook)
    assert seen[0]["username"] == "system:serviceaccount:default:writer" and seen[0]["uid"]
    assert "system:serviceaccounts:default" in seen[0]["groups"]


def test_escalation_is_refused_unless_escalate_or_bind_is_held(sb: SandboxThread) -> None:
    s = sb.sandbox
    token = service_account(s, "delegate")
    can_write_rbac = {"apiGroups": [RBAC_API], "resources": ["roles", "rolebindings"], "verbs": ["create", "update"]}
    pods_read = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}
    grant(s, "delegate", [can_write_rbac, pods_read])
    mine = rbac_api(s, token)
    mine.create_namespaced_role("default", role("reader", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]))  # fmt: skip
    deleter = role("deleter", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]}])
    with pytest.raises(ApiException) as exc:
        mine.create_namespaced_role("default", deleter)
    assert status_of(exc)["message"] == (
        'roles.rbac.authorization.k8s.io "deleter" is forbidden: user "system:serviceaccount:default:delegate" '
        f"(groups={SA_GROUPS}) is attempting to grant RBAC permissions not currently held:\n"
        '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}'
    )
    rbac_api(s).create_namespaced_role("default", deleter)  # the admin may
    refused = binding("bind-deleter", "Role", "deleter", "delegate")
    with pytest.raises(ApiException) as exc:
        mine.create_namespaced_role_binding("default", refused)
    assert status_of(exc)["message"].startswith(
        'rolebindings.rbac.authorization.k8s.io "bind-deleter" is forbidden: user "system:serviceaccount:default:delegate"'
    )
    mine.create_namespaced_role_binding("default", binding("bind-reader", "Role", "reader", "other-sa"))
    with pytest.raises(ApiException) as exc:
        mine.create_namespaced_role_binding("default", binding("bind-ghost", "Role", "ghost", "other-sa"))
    assert status_of(exc)["message"] == (
        'rolebindings.rbac.authorization.k8s.io "bind-ghost" is forbidden: role.rbac.authorization.k8s.io "ghost" not found'
    )
    # bind on that one role (resourceNames apply) and escalate on roles lift the checks
    extra = [
        {"apiGroups": [RBAC_API], "resources": ["roles"], "verbs": ["bind"], "resourceNames": ["deleter"]},
        {"apiGroups": [RBAC_API], "resources": ["roles"], "verbs": ["escalate"]},
    ]
    rbac_api(s).create_namespaced_role("default", role("delegate-extra", extra))
    rbac_api(s).create_namespaced_role_binding("default", binding("delegate-extra", "Role", "delegate-extra", "delegate"))  # fmt: skip
    mine.create_namespaced_role_binding("default", refused)
    mine.create_namespaced_role("default", role("deleter2", deleter["rules"]))


def test_aggregation_rule_needs_full_authority_and_aggregates(sb: SandboxThread) -> None:
    s = sb.sandbox
    token = service_account(s, "clusterroler")
    rbac_api(s).create_cluster_role({"metadata": {"name": "clusterroler"}, "rules": [{"apiGroups": [RBAC_API], "resources": ["clusterroles"], "verbs": ["create"]}]})  # fmt: skip
    rbac_api(s).create_cluster_role_binding(
        {
            "metadata": {"name": "clusterroler"},
            "roleRef": {"apiGroup": RBAC_API, "kind": "ClusterRole", "name": "clusterroler"},
            "subjects": [{"kind": "ServiceAccount", "name": "clusterroler", "namespace": "default"}],
        }
    )
    aggregated = {"metadata": {"name": "gathers"}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}}  # fmt: skip
    with pytest.raises(ApiException) as exc:
        rbac_api(s, token).create_cluster_role(aggregated)
    assert status_of(exc)["message"] == (
        'clusterroles.rbac.authorization.k8s.io "gathers" is forbidden: must have cluster-admin privileges to use the aggregationRule'
    )
    rbac_api(s).create_cluster_role({"metadata": {"name": "gpu-viewer", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}, "rules": [{"apiGroups": ["nvidia.com"], "resources": ["gpuclusters"], "verbs": ["get"]}]})  # fmt: skip
    deadline = time.monotonic() + 10
    for name in ("view", "edit", "admin"):  # view aggregates into edit and admin
        while not any(r.api_groups == ["nvidia.com"] for r in rbac_api(s).read_cluster_role(name).rules):
            assert time.monotonic() < deadline, f"{name} did not aggregate gpu-viewer"
            time.sleep(0.02)


def test_bootstrap_policy(sb: SandboxThread) -> None:
    api = rbac_api(sb.sandbox)
    names = {r.metadata.name for r in api.list_cluster_role().items}
    assert {"cluster-admin", "system:discovery", "system:basic-user", "system:public-info-viewer", "admin", "edit", "view"} <= names  # fmt: skip
    public = api.read_cluster_role_binding("system:public-info-viewer")
    assert [x.name for x in public.subjects] == ["system:authenticated", "system:unauthenticated"]
    view = {v for r in api.read_cluster_role("view").rules for v in r.verbs}
    assert view == {"get", "list", "watch"}
