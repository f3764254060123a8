"""The project's main end-to-end test: what a cluster admin runs, in the sandbox.

For both documented recipes: real Helm (helm-python-sdk) installs the chart with OpenAPI
validation on -> the operator's pods run as processes under their ServiceAccount (RBAC enforced)
-> the GPUCluster reaches ready -> a legacy nvidia.com/gpu pod is translated, allocated and
Running -> a helm upgrade with one changed value rolls the affected operand -> helm uninstall runs
the pre-delete hook, drains, and leaves nothing of the release but the CRDs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpucluster.sandbox.controlplane.build import VERSIONS
from tests.chart.helm import DOCS_OPERATOR_MANAGED, DOCS_PREINSTALLED, Recipe
from tests.e2e.backends import KUBE, image_facts
from tests.e2e.chart_install import KUBECTL, NAMESPACE, RELEASE, Cluster, wait_for
from tests.e2e.test_run import legacy_pod

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")

PLUGIN = "nvidia-dra-driver-kubelet-plugin"


def _ready_operator_pods(cluster: Cluster) -> list[str] | None:
    pods = cluster.operator_pods()
    ready = [
        p["metadata"]["name"]
        for p in pods
        if p["status"].get("phase") == "Running"
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
    ]
    return ready if len(ready) == len(pods) == 2 else None


def _plugin_images(cluster: Cluster) -> set[str]:
    selector = cluster.get("daemonset", "-n", NAMESPACE, PLUGIN)["spec"]["selector"]["matchLabels"]
    labels = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    pods = cluster.get("pods", "-n", NAMESPACE, "-l", labels)["items"]
    return {c["image"] for p in pods if not p["metadata"].get("deletionTimestamp") for c in p["spec"]["containers"]}


@pytest.mark.parametrize(
    ("recipe", "wait"),
    [(DOCS_PREINSTALLED, None), (DOCS_OPERATOR_MANAGED, None), (DOCS_PREINSTALLED, "watcher")],
    ids=["pre-installed", "operator-managed", "pre-installed-wait"],
)
def test_install_use_upgrade_uninstall(cluster: Cluster, recipe: Recipe, wait: str | None) -> None:
    cluster.prepare(recipe)
    started = time.monotonic()
    # Without --wait the install hook waits for the webhook itself; with it, Helm waits first.
    release = cluster.install(recipe, wait=wait)
    assert release["status"] == "deployed"
    # Applied by the hook, not a release object (the ConfigMap carries it indented).
    assert "\nkind: GPUCluster" not in release["manifest"]
    # The hook applied the defaults once the webhook answered: they exist when helm returns.
    assert cluster.get("gpucluster", "gpu-cluster")["metadata"]["name"] == "gpu-cluster"
    _assert_no_hook_identity(cluster)  # its ServiceAccount and roles went with the hook
    if recipe is DOCS_OPERATOR_MANAGED:
        driver = cluster.get("nvidiadrivers", "default")
        assert driver["spec"]["upgradePolicy"]["autoUpgrade"] is False

    gc = cluster.wait_ready(timeout=180)
    ready_after = time.monotonic() - started
    conditions = {c["type"]: c for c in gc["status"]["conditions"]}
    assert conditions["Ready"]["status"] == "True" and conditions["Error"]["status"] == "False", gc["status"]
    operator_pods = wait_for("2 operator pods Running and Ready", lambda: _ready_operator_pods(cluster), 60)
    built = image_facts()
    for name in operator_pods:
        pod = cluster.get("pod", "-n", NAMESPACE, name)
        assert pod["spec"]["serviceAccountName"] == f"{RELEASE}-gpucluster"
        if built is not None:  # what runs is the image users deploy, not this checkout
            statuses = [*pod["status"].get("initContainerStatuses", []), *pod["status"]["containerStatuses"]]
            assert {s["imageID"] for s in statuses} == {built}, statuses
    print(f"{recipe.name}: GPUCluster ready {ready_after:.1f}s after helm install started")

    # A legacy pod is translated by the webhook (reached through its Service), allocated, Running.
    cluster.kubectl("create", "-f", "-", stdin=legacy_pod("legacy", 2))
    pod = wait_for(
        "the legacy pod to run",
        lambda: (p := cluster.get("pod", "legacy"))["status"].get("phase") in ("Running", "Succeeded") and p,
        60,
    )
    assert pod["spec"]["resourceClaims"], pod["spec"]
    claims = cluster.get("resourceclaims")["items"]
    assert any(c["status"].get("allocation") for c in claims)

    # One changed value rolls the affected operand (the kubelet plugin's image).
    before = _plugin_images(cluster)
    assert any(":v0.4.1" in image for image in before), before
    cluster.upgrade(recipe, "gpuCluster.draDriver.version=v0.4.2")
    wait_for(
        "the kubelet plugin to roll to v0.4.2",
        lambda: (images := _plugin_images(cluster)) and all(":v0.4.2" in i for i in images if "dra-driver" in i),
        120,
    )
    cluster.wait_ready(timeout=120)
    _assert_no_hook_identity(cluster)

    # Everything the operator and the chart's hooks did was within their RBAC: no refusal at all.
    refused = cluster.forbidden("system:serviceaccount:gpu-operator:")
    assert not refused, refused

    cluster.kubectl("delete", "pod", "legacy", "--wait=true", "--timeout=60s")
    cluster.uninstall()
    assert cluster.get("gpuclusters")["items"] == []
    # The operator's pods terminate gracefully (the webhook drains for webhook.shutdownDelay).
    wait_for("the operator's pods to be gone", lambda: not cluster.get("pods", "-n", NAMESPACE)["items"], 60)
    assert cluster.get("daemonsets", "-n", NAMESPACE)["items"] == []
    assert cluster.get("deployments", "-n", NAMESPACE)["items"] == []
    assert cluster.get("validatingwebhookconfigurations")["items"] == []
    assert cluster.get("mutatingwebhookconfigurations")["items"] == []
    assert cluster.get("nvidiadrivers")["items"] == [] if recipe is DOCS_OPERATOR_MANAGED else True
    assert not [s for s in cluster.get("secrets", "-n", NAMESPACE)["items"] if s["type"] == "helm.sh/release.v1"]
    assert "gpuclusters.nvidia.com" in cluster.kubectl("get", "crd", "-o", "name")
    _assert_no_hook_identity(cluster)  # nor after the pre-delete hook


def _assert_no_hook_identity(cluster: Cluster) -> None:
    """The hook Jobs' ServiceAccount and roles exist only while a hook runs."""
    hooks = f"{RELEASE}-gpucluster-hooks"
    left = [
        f"{kind}/{o['metadata']['name']}"
        for kind, namespaced in (
            ("serviceaccounts", True), ("roles", True), ("rolebindings", True),
            ("clusterroles", False), ("clusterrolebindings", False),
        )
        for o in cluster.get(kind, *(("-n", NAMESPACE) if namespaced else ()))["items"]
        if o["metadata"]["name"].startswith(hooks)
    ]  # fmt: skip
    assert not left, left


def test_newest_kubernetes_installs_translates_and_uninstalls() -> None:
    """The pre-installed recipe on the newest Kubernetes built here (its DRA gates differ from 1.34's)."""
    newest = max(VERSIONS, key=lambda v: tuple(int(p) for p in v.split(".")))
    cluster = Cluster(nodes=2, gpus_per_node=4, backend=KUBE, version=newest)
    try:
        assert json.loads(cluster.kubectl("get", "--raw", "/version"))["gitVersion"] == f"v{VERSIONS[newest]}"
        cluster.install(DOCS_PREINSTALLED)
        cluster.wait_ready(timeout=180)
        wait_for("2 operator pods Running and Ready", lambda: _ready_operator_pods(cluster), 60)
        cluster.kubectl("create", "-f", "-", stdin=legacy_pod("legacy", 2))
        pod = wait_for(
            "the legacy pod to be bound and run",
            lambda: (p := cluster.get("pod", "legacy"))["status"].get("phase") in ("Running", "Succeeded") and p,
            60,
        )
        [status] = pod["status"]["resourceClaimStatuses"]
        claim = cluster.get("resourceclaim", status["resourceClaimName"])
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == 2 and {r["pool"] for r in results} == {pod["spec"]["nodeName"]}
        assert not cluster.forbidden("system:serviceaccount:gpu-operator:")
        cluster.kubectl("delete", "pod", "legacy", "--wait=true", "--timeout=60s")
        cluster.uninstall()
        assert cluster.get("gpuclusters")["items"] == []
        wait_for("the operator's pods to be gone", lambda: not cluster.get("pods", "-n", NAMESPACE)["items"], 60)
    finally:
        cluster.close()
