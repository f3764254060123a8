"""On the real control plane (kube-apiserver with RBAC, kube-controller-manager's resourceclaim
controller): a namespace-scoped identity that may create pods but not ResourceClaimTemplates
forges translated pods and gets no template; a squatted template name gets a true Warning and
the pod stays gated; the
README's migration steps in order never leave a pod without its template."""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.claimtemplates import CLAIM_TEMPLATES_GATE
from gpucluster.cli.run import Stack
from gpucluster.controller.provision import CONFLICT_REASON, REFUSED_REASON
from gpucluster.migrate import migrate_text
from gpucluster.policy import TRANSLATE_LABEL, WEBHOOK_CONFIG
from tests.e2e.backends import KUBE
from tests.e2e.test_run import KUBECTL, get_json, kubectl, legacy_pod, run_stack, serve_dra_model, wait_for

pytestmark = [
    pytest.mark.integration,  # starts servers or processes: `make unit` leaves it out
    pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed"),
]

GRACE = 1.0
TENANT = "system:serviceaccount:tenant:dev"
RECORD = "gpucluster.nvidia.com/translated-from"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with run_stack(KUBE, tmp_path_factory.mktemp("trust"), nodes=1, template_grace_period=GRACE) as stack:
        if not stack.controller_started:
            pytest.skip("controller not available")
        for ns in ("tenant", "team-a", "squat", "migrate"):
            kubectl(stack, "create", "namespace", ns)
        serve_dra_model(stack)
        rbac = [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "dev", "namespace": "tenant"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "pods", "namespace": "tenant"},
             "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "dev", "namespace": "tenant"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
             "subjects": [{"kind": "ServiceAccount", "name": "dev", "namespace": "tenant"}]},
        ]  # fmt: skip
        kubectl(stack, "apply", "-f", "-", stdin=yaml.safe_dump_all(rbac))
        yield stack


def templates(stack: Stack, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(stack, "resourceclaimtemplates", "-n", namespace)["items"]
    return items


def events(stack: Stack, namespace: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in get_json(stack, "events", "-n", namespace)["items"] if e.get("reason") == reason]


def forged(name: str, containers: dict[str, dict[str, str]], refs: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"gpucluster.nvidia.com/translated": "true"},
            "annotations": {
                RECORD: json.dumps({"containers": containers}),
                "gpucluster.nvidia.com/claim-templates": "{}",
            },
        },
        "spec": {
            "containers": [{"name": c, "image": "busybox"} for c in containers],
            "resourceClaims": [{"name": f"gpu-{i}", "resourceClaimTemplateName": r} for i, r in enumerate(refs)],
        },
    }


def gated(pod: dict[str, Any]) -> dict[str, Any]:
    pod["spec"]["schedulingGates"] = [{"name": CLAIM_TEMPLATES_GATE}]
    return pod


def test_a_namespace_scoped_identity_gets_no_template_for_forged_annotations(stack: Stack) -> None:
    can = kubectl(
        stack, "auth", "can-i", "create", "resourceclaimtemplates", "-n", "tenant", "--as", TENANT, check=False
    )
    assert can.stdout.strip() == "no"
    pods = [
        forged("chosen", {"c": {"nvidia.com/gpu": "1"}}, ["gpucluster-owned-by-attacker-1a2b3c4d5e"]),
        forged("big", {f"c{i}": {"nvidia.com/gpu": "32"} for i in range(3)},
               ["gpucluster-gpu-32-aaaaaaaaaa", "gpucluster-gpu-32-bbbbbbbbbb", "gpucluster-gpu-32-cccccccccc"]),
        forged("mig", {"c": {"nvidia.com/mig-7g.99gb": "1"}}, ["gpucluster-mig-7g-99gb-1-d92ce2280d"]),
        forged("salted", {"c": {"nvidia.com/gpu": "1"}}, ["gpucluster-gpu-1-18c4435f83", "gpucluster-gpu-1-34f14df515"]),
    ]  # fmt: skip
    for pod in pods:
        kubectl(stack, "create", "-n", "tenant", "--as", TENANT, "-f", "-", stdin=json.dumps(pod))
    # A real pod elsewhere gets its template: the controller has acted since the forged ones.
    kubectl(stack, "create", "-n", "team-a", "-f", "-", stdin=legacy_pod("real", 1))
    wait_for("the real pod's template", lambda: templates(stack, "team-a"), 10)
    wait_for("a refusal event per forged pod", lambda: len(events(stack, "tenant", REFUSED_REASON)) >= 3, 10)
    time.sleep(1.0)
    assert templates(stack, "tenant") == []


def reviews(stack: Stack, hook: str) -> float:
    """The webhook's reviews answered for ``hook`` so far, from its metrics (on its own port)."""
    context = ssl.create_default_context(cadata=stack.ca_pem.decode())
    context.check_hostname = False  # the serving certificate names the Service; the CA is checked
    url = f"https://127.0.0.1:{stack.webhook_port}/metrics"
    with urllib.request.urlopen(url, timeout=5, context=context) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("gpucluster_webhook_reviews_total{") and f'rule="{hook}"' in line)  # fmt: skip


def test_claims_made_from_a_pods_template_never_reach_the_webhook(stack: Stack) -> None:
    # kube-apiserver evaluates the hook's matchCondition: kube-controller-manager's claim of a pod
    # is not sent (the template was checked), a claim written by hand with the same annotation is.
    hook = "resourceclaims.validate.gpucluster.nvidia.com"
    before = reviews(stack, hook)
    kubectl(stack, "create", "-n", "team-a", "-f", "-", stdin=legacy_pod("claimed", 1))
    wait_for("the pod's claim", lambda: get_json(stack, "resourceclaims", "-n", "team-a")["items"], 20)
    assert reviews(stack, hook) == before
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "by-hand", "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"}},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }  # fmt: skip
    kubectl(stack, "create", "-n", "team-a", "-f", "-", stdin=json.dumps(claim))
    assert reviews(stack, hook) == before + 1


def test_a_squatted_name_gets_a_true_warning_and_the_pod_stays_gated(stack: Stack) -> None:
    # The race's outcome, made deterministic: the pod's template name is taken by another spec
    # before the controller's POST (the pod is created translated and gated, as the webhook
    # leaves a pod whose template its view does not show).
    name = "gpucluster-gpu-7-df3119dd05"
    squatter = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "squat"},
        "spec": {"spec": {"devices": {"requests": [{"name": "x", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}},
    }
    kubectl(stack, "create", "-f", "-", stdin=json.dumps(squatter))
    kubectl(
        stack,
        "create",
        "-n",
        "squat",
        "-f",
        "-",
        stdin=json.dumps(gated(forged("seven", {"c": {"nvidia.com/gpu": "7"}}, [name]))),
    )
    [event] = wait_for("the conflict event", lambda: events(stack, "squat", CONFLICT_REASON), 10)
    assert event["type"] == "Warning" and f"squat/{name}" in event["message"]
    assert "instead of the 7 of gpu.nvidia.com it asked for, so the pod stays gated" in event["message"]
    time.sleep(1.0)  # the controller has passed over the pod since: the gate is still there
    pod = get_json(stack, "pod", "seven", "-n", "squat")
    assert pod["spec"]["schedulingGates"] == [{"name": CLAIM_TEMPLATES_GATE}] and not pod["spec"].get("nodeName")
    [kept] = templates(stack, "squat")
    # Left as the squatter wrote it (the API server defaults count 1), never overwritten or adopted.
    [request] = kept["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "x" and request["exactly"]["count"] == 1
    assert "gpucluster.nvidia.com/provisioned" not in (kept["metadata"].get("labels") or {})


DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {name: train, namespace: migrate}
spec:
  replicas: 2
  selector: {matchLabels: {app: train}}
  template:
    metadata: {labels: {app: train}}
    spec:
      containers:
      - name: cuda
        image: busybox
        command: [sleep, "3600"]
        resources:
          limits: {nvidia.com/gpu: 1}
"""


def test_the_readme_migration_steps_in_order_never_delete_a_template_in_use(stack: Stack) -> None:
    def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = get_json(stack, "pods", "-n", "migrate", "-l", "app=train")["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    # 3. Let the webhook translate: the controller provisions the template.
    kubectl(stack, "apply", "-f", "-", stdin=DEPLOYMENT)
    wait_for("2 translated pods", lambda: len(pods()) == 2 and all(p["spec"].get("resourceClaims") for p in pods()), 30)
    [template] = wait_for("the provisioned template", lambda: templates(stack, "migrate"), 10)
    name = template["metadata"]["name"]
    # 4. Migrate the manifest and apply it: the Deployment's pods are replaced by migrated ones.
    migrated = migrate_text(DEPLOYMENT, "train.yaml", config=WEBHOOK_CONFIG, opt_out_label=TRANSLATE_LABEL).text
    assert name in migrated
    kubectl(stack, "apply", "-f", "-", stdin=migrated)
    # Then roll the Deployment; all along, every pod's template exists, grace periods included.
    kubectl(stack, "rollout", "restart", "deployment/train", "-n", "migrate")
    deadline = time.monotonic() + GRACE + 8
    while time.monotonic() < deadline:
        assert [t["metadata"]["name"] for t in templates(stack, "migrate")] == [name]
        time.sleep(0.3)
    # No DeviceClass in this stack, so no pod becomes ready and the rollout holds at its surge: every
    # pod, old and new, got its claim from the template.
    wait_for("every pod with its claim", lambda: len(pods()) >= 2 and all(
        (p.get("status") or {}).get("resourceClaimStatuses") for p in pods()), 30)  # fmt: skip
    [kept] = templates(stack, "migrate")
    assert kept["metadata"]["labels"]["gpucluster.nvidia.com/provisioned"] == "false"  # the manifest owns it now
