"""The chart with client authentication on, on both backends: the API server presents its webhook
client certificate (the sandbox's, or kube-apiserver's through its AdmissionConfiguration), the
webhook requires it at the handshake and checks its name, and the probes (on the health port)
need none. The GPUCluster the install hook applies passes the fail-closed webhook; a legacy pod is
translated."""

from __future__ import annotations

import base64
from pathlib import Path

from tests.chart.helm import DOCS_PREINSTALLED
from tests.e2e.chart_install import NAMESPACE, Cluster, wait_for
from tests.e2e.test_run import legacy_pod


def _client_ca(cluster: Cluster) -> Path:
    if cluster.plane is not None:
        assert cluster.plane.pki is not None
        return cluster.plane.pki.webhook_client_ca_file
    assert cluster.sandbox.pki is not None
    return Path(cluster.sandbox.pki.webhook_client_ca_file)


def _ready(cluster: Cluster) -> int:
    pods = cluster.get("pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator")["items"]
    return len([p for p in pods if all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])])


def test_install_with_client_authentication(cluster: Cluster) -> None:
    recipe = DOCS_PREINSTALLED
    cluster.prepare(recipe)
    bundle = base64.b64encode(_client_ca(cluster).read_bytes()).decode()
    release = cluster.install(recipe, f"webhook.clientAuth.caBundle={bundle}")
    assert release["status"] == "deployed"  # the hook's GPUCluster went through the fail-closed webhook
    cluster.wait_ready(timeout=180)
    deployment = cluster.get("deployment", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=operator")["items"][0]
    [webhook] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "webhook"]
    assert "--client-ca-file=/var/run/gpucluster/client-ca/ca.crt" in webhook["args"]
    wait_for(
        "both operator pods ready (probes on the health port need no certificate)", lambda: _ready(cluster) == 2, 90
    )
    cluster.kubectl("create", "-f", "-", stdin=legacy_pod("legacy", 1))
    pod = cluster.get("pod", "legacy")
    assert pod["spec"].get("resourceClaims"), pod["spec"]  # translated: the webhook accepted the caller
    cluster.kubectl("delete", "pod", "legacy", "--wait=true", "--timeout=60s")
    cluster.uninstall()
