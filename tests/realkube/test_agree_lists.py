"""List and watch options: the sandbox and kube-apiserver answer the same query the same way.

Cases after apimachinery's own tests (pkg/apis/meta/internalversion/validation/validation_test.go
for ValidateListOptions, pkg/labels/selector_test.go and pkg/fields/selector_test.go for the
selector grammars, apiserver/pkg/storage continue-token tests): a refused query must get the same
code, reason and message from both; an accepted one the same items. Everything lists the
ConfigMaps of one namespace holding three of them, labelled for the selector cases.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import pytest

from tests.realkube.api import Api

NS = "agree-lists"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
LABELS = {"a": {"x": "2", "tier": "web"}, "b": {"x": "abc"}, "c": {}}


@pytest.fixture(scope="module")
def listed(apis: list[Api]) -> list[Api]:
    for api in apis:
        api.namespace(NS)
        for name, labels in LABELS.items():
            status, body = api.request(
                "POST", CONFIGMAPS,
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}},
            )  # fmt: skip
            assert status in (201, 409), (api.name, body)
    return apis


def essence(status: int, body: dict[str, Any]) -> dict[str, Any]:
    """What must agree: a refusal's code, reason and message; a list's code and item names (of the
    case's ConfigMaps: kube-controller-manager adds kube-root-ca.crt to every namespace)."""
    if body.get("kind") == "Status":
        return {"code": status, "reason": body.get("reason"), "message": body.get("message")}
    names = [item["metadata"]["name"] for item in body.get("items", [])]
    return {"code": status, "items": [name for name in names if name in LABELS]}


def q(**params: str) -> str:
    return urllib.parse.urlencode(params, quote_via=urllib.parse.quote)


LIST_CASES = {
    # ValidateListOptions (422 ListOptions.meta.k8s.io "" is invalid)
    "match without version": q(resourceVersionMatch="NotOlderThan"),
    "exact without version": q(resourceVersionMatch="Exact"),
    "exact at version 0": q(resourceVersionMatch="Exact", resourceVersion="0"),
    "not older than 0": q(resourceVersionMatch="NotOlderThan", resourceVersion="0"),
    "unknown match": q(resourceVersionMatch="Bogus", resourceVersion="1"),
    "unknown match, no version": q(resourceVersionMatch="Bogus"),
    "match with continue": q(resourceVersionMatch="NotOlderThan", resourceVersion="1", **{"continue": "abc"}),
    "sendInitialEvents on a list": q(sendInitialEvents="true"),
    "sendInitialEvents=false on a list": q(sendInitialEvents="false"),
    "validation before field labels": q(resourceVersionMatch="Bogus", fieldSelector="spec.foo=a"),
    # resourceVersion and continue (storage: 400)
    "version not a number": q(resourceVersion="abc"),
    "negative version": q(resourceVersion="-1"),
    "exact, version not a number": q(resourceVersionMatch="Exact", resourceVersion="abc"),
    "empty version": q(resourceVersion=""),
    "continue not base64 JSON": q(**{"continue": "abc"}),
    "continue with a version": q(resourceVersion="1", **{"continue": "abc"}),
    "continue with version 0": q(resourceVersion="0", **{"continue": "abc"}),
    "continue padded": q(**{"continue": "abc="}),
    # integers (the parameter codec: strconv.ParseInt)
    "limit not a number": q(limit="abc"),
    "limit empty": q(limit=""),
    "limit fractional": q(limit="1.5"),
    "limit out of range": q(limit="99999999999999999999"),
    "negative limit lists all": q(limit="-1"),
    "timeoutSeconds not a number": q(timeoutSeconds="abc"),
    "integers before selectors": q(labelSelector="x<a", limit="b"),
    "timeoutSeconds before limit": q(timeoutSeconds="a", limit="b"),
    # label selectors (labels.Parse)
    "lt needs an integer": q(labelSelector="x<a"),
    "lt a negative non-label": q(labelSelector="x<-a"),
    "gt": q(labelSelector="x>1"),
    "lt and exists": q(labelSelector="x<3,tier"),
    "value with a space": q(labelSelector="x=a b"),
    "unclosed set": q(labelSelector="x in (a"),
    "set without parentheses": q(labelSelector="x in a"),
    "notin the empty set": q(labelSelector="x notin ()"),
    "in the empty set": q(labelSelector="x in ()"),
    "in a set of empties": q(labelSelector="x in (,)"),
    "set with a gap": q(labelSelector="x in (a b)"),
    "operator in a set": q(labelSelector="x in (=)"),
    "not with a value": q(labelSelector="!x=a"),
    "trailing comma": q(labelSelector="x,"),
    "leading comma": q(labelSelector=",x"),
    "two operators": q(labelSelector="x=a=b"),
    "no operator": q(labelSelector="x a"),
    "empty value": q(labelSelector="x=="),
    "empty value not equal": q(labelSelector="x!="),
    "greater or equal": q(labelSelector="x>=1"),
    "double not": q(labelSelector="!!x"),
    "lone not": q(labelSelector="!"),
    "bad key": q(labelSelector="Bad_Key-=a"),
    "two slashes": q(labelSelector="a/b/c"),
    "empty prefix": q(labelSelector="/x"),
    "empty name": q(labelSelector="a/"),
    "bad prefix": q(labelSelector="A_B.com/x"),
    "long key": q(labelSelector="x" * 64),
    "long value": q(labelSelector="x=" + "a" * 64),
    "bad value": q(labelSelector="x=-a"),
    "keyword as key": q(labelSelector="in"),
    "keyword as value": q(labelSelector="x in (in)"),
    "blank": q(labelSelector=" "),
    "after a set": q(labelSelector="x in (a,b) y"),
    # field selectors (fields.ParseSelector and the kind's field label conversion)
    "field lt": q(fieldSelector="x<a"),
    "field without operator": q(fieldSelector="metadata.name"),
    "field unknown": q(fieldSelector="spec.foo=a"),
    "field sorted terms": q(fieldSelector="b=1,a=2"),
    "field with spaces": q(fieldSelector="metadata.name = x"),
    "field unescaped equals": q(fieldSelector="a=b=c"),
    "field bang in the name": q(fieldSelector="a!b=c"),
    "field trailing backslash": q(fieldSelector="metadata.name=a\\"),
    "field bad escape": q(fieldSelector="metadata.name=a\\x"),
    "field not equal and double equal": q(fieldSelector="metadata.name!=a,metadata.namespace==" + NS),
    "field only commas": q(fieldSelector=","),
    # the watch parameter: only "0" and "false" are false
    "watch=0 lists": q(watch="0"),
    "watch=false lists": q(watch="False"),
}


@pytest.mark.parametrize("query", LIST_CASES.values(), ids=LIST_CASES.keys())
def test_list_options_agree(listed: list[Api], query: str) -> None:
    sandbox, kube = (essence(*api.request("GET", f"{CONFIGMAPS}?{query}")) for api in listed)
    assert sandbox == kube


FIELD_PATHS = [
    "/api/v1/pods",
    "/api/v1/nodes",
    "/api/v1/namespaces",
    "/api/v1/services",
    "/api/v1/secrets",
    "/api/v1/events",
    "/apis/events.k8s.io/v1/events",
    "/apis/batch/v1/jobs",
    "/apis/resource.k8s.io/v1/resourceslices",
]
FIELDS = ["spec.foo=a", "spec.host=a", "metadata.namespace=a", "status.phase=Running", "spec.nodeName=x"]


@pytest.mark.parametrize("selector", FIELDS)
@pytest.mark.parametrize("path", FIELD_PATHS)
def test_field_labels_agree_per_kind(listed: list[Api], path: str, selector: str) -> None:
    sandbox, kube = (essence(*api.request("GET", f"{path}?{q(fieldSelector=selector)}")) for api in listed)
    if sandbox["code"] == 200 == kube["code"]:  # what each lists differs (kube has its own pods, nodes ...)
        return
    assert sandbox == kube


WATCH_CASES = {
    "match without sendInitialEvents": q(resourceVersionMatch="NotOlderThan"),
    "sendInitialEvents without match": q(sendInitialEvents="true"),
    "sendInitialEvents=false without match": q(sendInitialEvents="false"),
    "exact match": q(resourceVersionMatch="Exact", sendInitialEvents="false"),
    "exact match, no sendInitialEvents": q(resourceVersionMatch="Exact", resourceVersion="5"),
    "continue (defaulted to initial events)": q(**{"continue": "abc"}),
    "continue with sendInitialEvents": q(
        resourceVersionMatch="NotOlderThan", sendInitialEvents="true", **{"continue": "x"}
    ),
    "label selector": q(labelSelector="x<a"),
    "label selector before the version": q(labelSelector="x<a", resourceVersion="abc"),
    "version not a number": q(resourceVersion="abc"),
    "negative version": q(resourceVersion="-1"),
    "unknown field": q(fieldSelector="spec.x=1"),
}


@pytest.mark.parametrize("query", WATCH_CASES.values(), ids=WATCH_CASES.keys())
def test_watch_options_agree(listed: list[Api], query: str) -> None:
    sandbox, kube = (
        essence(*api.request("GET", f"{CONFIGMAPS}?watch=1&timeoutSeconds=1&{query}", timeout=10)) for api in listed
    )
    assert sandbox == kube


def events(api: Api, query: str) -> list[tuple[str, str]]:
    """The (type, name or initial-events-end marker) of a short watch's events."""
    status, body = api.request("GET", f"{CONFIGMAPS}?timeoutSeconds=1&{query}", timeout=10)
    assert status == 200, (api.name, body)
    raw = body.get("raw") or (json.dumps(body) if body else "")
    out = []
    for line in raw.splitlines():
        event = json.loads(line)
        md = event["object"]["metadata"]
        if md.get("name") and md["name"] not in LABELS:
            continue
        out.append((event["type"], md.get("name") or md.get("annotations", {}).get("k8s.io/initial-events-end", "")))
    return out


WATCH_STREAMS = {
    "a plain watch with bookmarks ends its initial events with a bookmark": q(watch="1", allowWatchBookmarks="true"),
    "a plain watch without bookmarks": q(watch="1"),
    "any watch value but false and 0 watches": q(watch="yes"),
    "initial events asked for": q(
        watch="1", sendInitialEvents="true", resourceVersionMatch="NotOlderThan", allowWatchBookmarks="true"
    ),
    "no initial events": q(
        watch="1", sendInitialEvents="false", resourceVersionMatch="NotOlderThan", allowWatchBookmarks="true"
    ),
    "a label selector on the initial events": q(watch="1", labelSelector="x>1", allowWatchBookmarks="true"),
}


@pytest.mark.parametrize("query", WATCH_STREAMS.values(), ids=WATCH_STREAMS.keys())
def test_watch_streams_agree(listed: list[Api], query: str) -> None:
    sandbox, kube = (events(api, query) for api in listed)
    assert sandbox == kube


def test_continue_tokens_page_through_on_both(listed: list[Api]) -> None:
    pages: dict[str, list[list[str]]] = {}
    for api in listed:
        names, token = [], ""
        while True:
            body = api.ok("GET", f"{CONFIGMAPS}?{q(limit='2', **({'continue': token} if token else {}))}")
            names.append(essence(200, body)["items"])
            token = body["metadata"].get("continue", "")
            if not token:
                break
        pages[api.name] = names
    assert pages["sandbox"] == pages["kube"] == [["a", "b"], ["c"]]
