"""In the sandbox and on the real control plane: the webhook creates nothing, the controller provisions and collects claim templates,
and pods admitted untranslated while the webhook was down get a Warning event."""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucluster.cli.run import SERVICE, Stack
from gpucluster.controller.stranded import REASON as STRANDED_REASON
from gpucluster.translate import PROVISIONED_LABEL
from tests.e2e.backends import backends
from tests.e2e.test_run import KUBECTL, get_json, kubectl, legacy_pod, run_stack, serve_dra_model, wait_for
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review

pytestmark = [
    pytest.mark.integration,  # starts servers or processes: `make unit` leaves it out
    pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed"),
]

GRACE = 1.0  # seconds an unreferenced template is kept in these tests


@pytest.fixture(scope="module", params=backends())
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with run_stack(request.param, tmp_path_factory.mktemp("provision"), nodes=1, template_grace_period=GRACE) as stack:
        if not stack.controller_started:
            pytest.skip("controller not available")
        for ns in ("victim", "team-a", "team-b", "team-c", "team-d"):
            kubectl(stack, "create", "namespace", ns)
        serve_dra_model(stack)
        yield stack


@contextlib.contextmanager
def webhook_unreachable(stack: Stack) -> Iterator[None]:
    """Route the API server's webhook calls to a port nothing listens on, then back."""
    if stack.uses_sandbox:
        sandbox = stack.sandbox
        sandbox.register_service("gpu-operator", SERVICE, 443, ("127.0.0.1", 9))
        try:
            yield
        finally:
            sandbox.register_service("gpu-operator", SERVICE, 443, ("127.0.0.1", stack.webhook_port))
        return
    config = get_json(stack, "mutatingwebhookconfiguration", "gpucluster-mutating-webhook")
    urls = [w["clientConfig"]["url"] for w in config["webhooks"]]

    def point(to: list[str]) -> None:
        patch = [{"op": "replace", "path": f"/webhooks/{i}/clientConfig/url", "value": url} for i, url in enumerate(to)]
        kubectl(stack, "patch", "mutatingwebhookconfiguration", "gpucluster-mutating-webhook",
                "--type=json", "-p", json.dumps(patch))  # fmt: skip

    point([url.replace(f":{stack.webhook_port}/", ":9/") for url in urls])
    try:
        yield
    finally:
        point(urls)


def templates(stack: Stack, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(stack, "resourceclaimtemplates", "-n", namespace)["items"]
    return items


def template_of(stack: Stack, name: str, namespace: str) -> str:
    spec = get_json(stack, "pod", name, "-n", namespace)["spec"]
    [ref] = spec["resourceClaims"]
    return str(ref["resourceClaimTemplateName"])


def wait_provisioned(stack: Stack, name: str, namespace: str, timeout: float = 5.0) -> str:
    template = template_of(stack, name, namespace)
    wait_for(
        f"template {template}",
        lambda: any(t["metadata"]["name"] == template for t in templates(stack, namespace)),
        timeout,
    )
    return template


def post_review(stack: Stack, body: dict[str, Any]) -> dict[str, Any]:
    context = ssl.create_default_context(cadata=stack.ca_pem.decode())
    conn = http.client.HTTPSConnection("127.0.0.1", stack.webhook_port, context=context, timeout=10)
    try:
        conn.request("POST", "/mutate", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        answer: dict[str, Any] = json.loads(resp.read())
        return answer
    finally:
        conn.close()


def test_forged_reviews_create_nothing(stack: Stack) -> None:
    for i in range(20):
        for namespace in ("victim", "kube-system"):
            forged = review(
                pod(container("cuda", {f"nvidia.com/mig-{i}g.{i}gb": "1"}), name=f"f{i}"), namespace=namespace
            )
            assert post_review(stack, forged)["response"]["patchType"] == "JSONPatch"  # answered, translated
    # A real pod afterwards gets its template: the controller has acted since the forged reviews.
    kubectl(stack, "create", "-n", "team-a", "-f", "-", stdin=legacy_pod("real", 1))
    wait_provisioned(stack, "real", "team-a")
    assert templates(stack, "victim") == []
    assert [t for t in templates(stack, "kube-system") if t["metadata"]["name"].startswith("gpucluster-")] == []


def test_template_is_provisioned_and_collected_after_the_grace_period(stack: Stack) -> None:
    # How fast is make bench's to say (bench_provision: p99 from the pod's create); here, that it happens.
    kubectl(stack, "create", "-n", "team-b", "-f", "-", stdin=legacy_pod("job", 2))
    template = wait_provisioned(stack, "job", "team-b", timeout=30.0)
    [live] = templates(stack, "team-b")
    assert live["metadata"]["labels"][PROVISIONED_LABEL] == "true"
    kubectl(stack, "delete", "pod", "job", "-n", "team-b", "--wait=false")
    deleted = time.monotonic()
    wait_for("the template to be collected", lambda: templates(stack, "team-b") == [], timeout=GRACE + 10)
    assert time.monotonic() - deleted >= GRACE * 0.9, f"{template} collected before its grace period"


def test_foreign_template_with_the_name_is_never_overwritten(stack: Stack) -> None:
    kubectl(stack, "create", "-n", "team-c", "-f", "-", stdin=legacy_pod("first", 1))
    name = wait_provisioned(stack, "first", "team-c")
    # Someone else's template under the name a later pod of the same shape will get, another spec.
    kubectl(stack, "delete", "pod", "first", "-n", "team-c", "--wait=false")
    wait_for("collection", lambda: templates(stack, "team-c") == [], timeout=GRACE + 10)
    foreign = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "team-c"},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "x", "exactly": {"deviceClassName": "other.example.com"}}]}}
        },
    }
    kubectl(stack, "create", "-f", "-", stdin=json.dumps(foreign))
    wait_for("the webhook to see it", lambda: stack.cluster.get("ResourceClaimTemplate", name, "team-c"))
    kubectl(stack, "create", "-n", "team-c", "-f", "-", stdin=legacy_pod("second", 1))
    other = wait_provisioned(stack, "second", "team-c")
    assert other != name  # a free name, chosen at admission
    [kept] = [t for t in templates(stack, "team-c") if t["metadata"]["name"] == name]
    [request] = kept["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "other.example.com"
    assert PROVISIONED_LABEL not in (kept["metadata"].get("labels") or {})


def test_pod_refused_after_the_webhook_leaves_nothing_behind(stack: Stack) -> None:
    refused = legacy_pod("refused", 1).replace(
        "limits: {nvidia.com/gpu: 1}",
        "limits: {nvidia.com/gpu: 1, example.com/fpga: 2}\n      requests: {example.com/fpga: 1}",
    )
    done = kubectl(stack, "create", "-n", "team-d", "-f", "-", stdin=refused, check=False)
    assert done.returncode != 0 and "example.com/fpga" in done.stderr  # validation, after mutation
    kubectl(stack, "create", "-n", "team-a", "-f", "-", stdin=legacy_pod("sentinel", 1))
    wait_provisioned(stack, "sentinel", "team-a")
    assert templates(stack, "team-d") == []


def test_pod_admitted_while_the_webhook_was_down_gets_a_warning(stack: Stack) -> None:
    with webhook_unreachable(stack):  # the pods webhook fails open
        kubectl(stack, "create", "-n", "team-d", "-f", "-", stdin=legacy_pod("stranded", 1))
    assert "resourceClaims" not in get_json(stack, "pod", "stranded", "-n", "team-d")["spec"]

    def warning() -> dict[str, Any] | None:
        events = get_json(stack, "events", "-n", "team-d", "--field-selector", "involvedObject.name=stranded")["items"]
        return next((e for e in events if e.get("reason") == STRANDED_REASON), None)

    event = wait_for("the stranded-pod event", warning, timeout=10)
    assert event["type"] == "Warning"
    assert "admitted without translation while the webhook was unavailable; recreate it" in event["message"]
