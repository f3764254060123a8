"""The chart's caller authentication, NetworkPolicy and opt-in stranded-pod deletion, rendered by real Helm."""

from __future__ import annotations

import base64
from typing import Any

import helm_python as helm
import pytest

from gpucluster.certs.authority import new_ca
from tests.chart.helm import render


def objects(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(m) for m in render(values)]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind]
    return found


def container(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    [found] = [c for c in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return found


def test_defaults_open_no_client_ca_no_policy_no_pod_deletion() -> None:
    docs = objects({})
    assert not [d for d in docs if d["kind"] in ("NetworkPolicy", "ConfigMap") and "webhook" in d["metadata"]["name"]]
    assert not any(a.startswith("--client-ca-file") for a in container(docs, "webhook")["args"])
    assert "--delete-stranded-pods" not in container(docs, "controller")["args"]
    assert "--claim-template-grace-period=600" in container(docs, "controller")["args"]
    roles = [d for d in docs if d["kind"] == "ClusterRole"]
    assert not any("delete" in r["verbs"] and "pods" in r["resources"] for role in roles for r in role["rules"])
    mutating = one(docs, "MutatingWebhookConfiguration")
    assert {w["sideEffects"] for w in mutating["webhooks"]} == {"None"}


def test_client_ca_bundle_is_mounted_and_required() -> None:
    ca = new_ca()
    docs = objects({"webhook": {"clientAuth": {"caBundle": base64.b64encode(ca.cert_pem).decode()}}})
    [config] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("webhook-client-ca")]
    assert config["data"]["ca.crt"] == ca.cert_pem.decode()
    webhook = container(docs, "webhook")
    assert "--client-ca-file=/var/run/gpucluster/client-ca/ca.crt" in webhook["args"]
    assert "--client-allowed-names=kube-apiserver-webhook-client" in webhook["args"]
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "client-ca", "configMap": {"name": config["metadata"]["name"]}} in volumes


def test_probes_and_the_rotator_use_the_health_port_and_the_caps_are_passed() -> None:
    docs = objects({"webhook": {"connections": {"max": 300, "perPeer": 40}}})
    webhook = container(docs, "webhook")
    assert {"--health-port=9444", "--max-connections=300", "--max-connections-per-peer=40"} <= set(webhook["args"])
    assert (
        webhook["readinessProbe"]["httpGet"]["port"] == webhook["livenessProbe"]["httpGet"]["port"] == "webhook-health"
    )
    assert {"name": "webhook-health", "containerPort": 9444, "protocol": "TCP"} in webhook["ports"]
    assert "--probe=$(POD_IP):9444" in container(docs, "certs")["args"]


def test_client_allowed_names_can_be_listed_or_any() -> None:
    bundle = base64.b64encode(new_ca().cert_pem).decode()
    for names, flag in ((["a", "b"], "--client-allowed-names=a,b"), ([], "--client-allowed-names=")):
        docs = objects({"webhook": {"clientAuth": {"caBundle": bundle, "allowedNames": names}}})
        assert flag in container(docs, "webhook")["args"]


def test_network_policy_admits_only_the_peers_named() -> None:
    peers = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    docs = objects({"webhook": {"networkPolicy": {"enabled": True, "from": peers}}})
    policy = one(docs, "NetworkPolicy")
    webhook_rule, health_rule = policy["spec"]["ingress"]
    assert webhook_rule["ports"] == [{"port": 9443, "protocol": "TCP"}]
    assert webhook_rule["from"][0] == peers[0] and "podSelector" in webhook_rule["from"][1]
    assert len(webhook_rule["from"]) == 2
    assert health_rule == {"ports": [{"port": 8081, "protocol": "TCP"}, {"port": 9444, "protocol": "TCP"}]}


@pytest.mark.parametrize("endpoints", [True, False])
def test_network_policy_without_peers_is_refused_not_opened_to_all(endpoints: bool) -> None:
    """helm template finds no default/kubernetes EndpointSlice: nothing to admit, so no policy open to all."""
    values = {"webhook": {"networkPolicy": {"enabled": True, "from": [], "apiServerEndpoints": endpoints}}}
    with pytest.raises(helm.HelmRenderError, match="admits only the peers you name"):
        objects(values)


def test_stranded_pod_deletion_is_opt_in_and_granted_only_then() -> None:
    docs = objects({"operator": {"strandedPods": {"delete": True}, "claimTemplates": {"gracePeriodSeconds": 30}}})
    args = container(docs, "controller")["args"]
    assert "--delete-stranded-pods" in args and "--claim-template-grace-period=30" in args
    roles = [d for d in docs if d["kind"] == "ClusterRole"]
    assert any(
        r == {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]} for role in roles for r in role["rules"]
    )
