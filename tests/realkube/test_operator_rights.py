"""The operator's RBAC is exactly what it uses, measured on the real control plane.

The chart's whole life cycle runs on kube-apiserver with OwnerReferencesPermissionEnforcement on
(setting an ownerReference with blockOwnerDeletion then needs update of the owner's finalizers,
and setting one on an existing object needs delete on it), for both documented recipes, the
second under another release name and namespace: install (the first one taking over cluster-scoped
objects an admin handed over), a legacy GPU pod translated and Running and its claim template
collected, an operand edited by hand twice (reverted: the second revert's Event is a count bump,
a patch), an upgrade (the first one pruning: computeDomains and DCGM Exporter off, a ServiceMonitor
among them), uninstall. Every request the operator's ServiceAccount made is then read from the
audit log and evaluated against the rendered ClusterRole and Role (tests/chart/rights.py): none
may be uncovered, and what no request used must be exactly the rules rbac.yaml marks
escalation-only.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python as helm_sdk
import pytest

from gpucluster.cli.run import CLUSTERPOLICY_CRD
from gpucluster.kube.paths import plural
from gpucluster.sandbox.controlplane.cluster import ControlPlane
from tests.chart import helm
from tests.chart.helm import CHART_DIR, DOCS_OPERATOR_MANAGED, DOCS_PREINSTALLED, Recipe, set_values
from tests.chart.rights import (
    Evaluation,
    Grant,
    Request,
    audited_requests,
    escalation_requests,
    evaluate,
    operator_grants,
)
from tests.e2e.backends import KUBE
from tests.e2e.chart_install import KUBECTL, Cluster, wait_for
from tests.e2e.test_run import legacy_pod
from tests.realkube.conftest import kube_client

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")

# A minimal Prometheus Operator ServiceMonitor API, so that DCGM Exporter's ServiceMonitor is applied.
SERVICE_MONITOR_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {
            "plural": "servicemonitors",
            "singular": "servicemonitor",
            "kind": "ServiceMonitor",
            "listKind": "ServiceMonitorList",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}
GPU_CLASS = "gpu.nvidia.com"
MANAGED = {"app.kubernetes.io/managed-by": "gpucluster"}
PLUGIN_ROLE = "nvidia-dra-driver-kubeletplugin"
SLICE_POLICY = "resourceslices-policy-nvidia-dra-driver"
# Cluster-scoped objects an admin hands over to the operator before it runs (the managed-by
# label): those it renders for every spec, so that it never prunes them.
HANDED_OVER: list[dict[str, Any]] = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": PLUGIN_ROLE, "labels": MANAGED},
        "rules": [],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": PLUGIN_ROLE, "labels": MANAGED},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": PLUGIN_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": PLUGIN_ROLE, "namespace": "kube-system"}],
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": SLICE_POLICY, "labels": MANAGED},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["resourceslices"],
                    }
                ]
            },
            "validations": [{"expression": "true"}],
        },
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": SLICE_POLICY, "labels": MANAGED},
        "spec": {"policyName": SLICE_POLICY, "validationActions": ["Deny"]},
    },
]


@dataclass(frozen=True)
class Install:
    recipe: Recipe
    release: str
    namespace: str
    flags: tuple[str, ...] = ()
    take_over: bool = False
    prune: bool = False
    drift: bool = False

    def values(self, *upgrade: str) -> dict[str, Any]:
        return set_values(self.recipe.set_flags + self.flags + upgrade)

    @property
    def fullname(self) -> str:
        return self.release if "gpucluster" in self.release else f"{self.release}-gpucluster"

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.fullname}"

    def grants(self) -> list[Grant]:
        texts = helm.render_text(
            self.values(), api_versions=self.recipe.api_versions, namespace=self.namespace, release=self.release
        )
        return operator_grants(texts, self.fullname, self.namespace)


@dataclass
class Seen:
    """What one life cycle showed beyond the audit log: the operand roles the operator created
    (their escalation checks) and the checks taking objects over implied."""

    roles: list[dict[str, Any]] = field(default_factory=list)
    implied: list[Request] = field(default_factory=list)


FIRST = Install(
    DOCS_PREINSTALLED,
    "gpu-operator",
    "gpu-operator",
    ("dcgmExporter.serviceMonitor.enabled=true", "operator.claimTemplates.gracePeriodSeconds=0"),
    take_over=True,
    prune=True,
    drift=True,
)
SECOND = Install(DOCS_OPERATOR_MANAGED, "gpus", "nvidia-gpu", ("operator.claimTemplates.gracePeriodSeconds=0",))


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster(nodes=2, gpus_per_node=4, backend=KUBE, admission_plugins=("OwnerReferencesPermissionEnforcement",))
    try:
        yield c
    finally:
        c.close()


def _create(cluster: Cluster, *objs: dict[str, Any]) -> None:
    cluster.kubectl("create", "-f", "-", stdin="\n".join(json.dumps(o) for o in objs))


def _resource(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["apiVersion"].rpartition("/")[0], plural(obj["apiVersion"], obj["kind"])[0]


def _names(cluster: Cluster, *args: str) -> set[str]:
    return {o["metadata"]["name"] for o in cluster.get(*args)["items"]}


def _operator_pods_ready(cluster: Cluster, namespace: str) -> bool:
    pods = cluster.get("pods", "-n", namespace, "-l", "app.kubernetes.io/component=operator")["items"]
    ready = [
        p
        for p in pods
        if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
    ]
    return len(pods) == len(ready) == 2


def _operand_roles(cluster: Cluster) -> list[dict[str, Any]]:
    selector = "app.kubernetes.io/managed-by=gpucluster"
    roles = [dict(r, kind="ClusterRole") for r in cluster.get("clusterroles", "-l", selector)["items"]]
    return roles + [dict(r, kind="Role") for r in cluster.get("roles", "-A", "-l", selector)["items"]]


def _taken_over(cluster: Cluster) -> list[Request]:
    """The handed-over objects, now the operator's, and what taking one over implied: setting an
    ownerReference on an existing object needs delete on it (OwnerReferencesPermissionEnforcement)."""
    out = []
    for obj in HANDED_OVER:
        group, resource = _resource(obj)
        name = obj["metadata"]["name"]
        refs = cluster.get(resource, name)["metadata"].get("ownerReferences") or []
        assert [r["kind"] for r in refs] == ["GPUCluster"], (obj["kind"], refs)
        out.append(Request("delete", group, resource, "", name, f"taking over the handed-over {obj['kind']} {name}"))
    return out


def _pod_life(cluster: Cluster, name: str) -> None:
    """A legacy GPU pod translated, allocated and run; deleted, its claim template collected."""
    cluster.kubectl("create", "-f", "-", stdin=legacy_pod(name, 2))
    wait_for(
        f"pod {name} to run", lambda: cluster.get("pod", name)["status"].get("phase") in ("Running", "Succeeded"), 90
    )
    assert cluster.get("resourceclaimtemplates")["items"], "the controller provisions the pod's claim template"
    cluster.kubectl("delete", "pod", name, "--wait=true", "--timeout=60s")
    wait_for("the claim template to be collected", lambda: not cluster.get("resourceclaimtemplates")["items"], 60)


def _drift(cluster: Cluster, times: int) -> None:
    """Edit the GPU DeviceClass's selector by hand; the operator reverts it each time."""
    original = cluster.get("deviceclass", GPU_CLASS)["spec"]["selectors"]
    edit = json.dumps({"spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}})
    for _ in range(times):
        cluster.kubectl("patch", "deviceclass", GPU_CLASS, "--type=merge", "-p", edit)
        wait_for(
            "the operator to revert the DeviceClass",
            lambda: cluster.get("deviceclass", GPU_CLASS)["spec"]["selectors"] == original,
            60,
        )
    events = cluster.get("events", "-n", "default", "--field-selector", "involvedObject.kind=GPUCluster")["items"]
    counts = [e.get("count") or 1 for e in events if "reverted a change to DeviceClass" in e.get("message", "")]
    assert counts and max(counts) == times, events


def _life_cycle(cluster: Cluster, install: Install) -> Seen:
    client = helm_sdk.Config(kubeconfig_path=cluster.kubeconfig, namespace=install.namespace)
    try:
        return _use(cluster, client, install)
    finally:
        client.close()


def _use(cluster: Cluster, client: helm_sdk.Config, install: Install) -> Seen:
    """Install, use, edit, upgrade (pruning), uninstall."""
    ns, seen = install.namespace, Seen()
    cluster.prepare(install.recipe)
    if install.take_over:
        _create(cluster, *HANDED_OVER)
    client.install(CHART_DIR, install.release, install.values(), namespace=ns, create_namespace=True, timeout=240)
    cluster.wait_ready(timeout=180)
    wait_for("2 operator pods Ready", lambda: _operator_pods_ready(cluster, ns), 90)
    seen.roles = _operand_roles(cluster)
    if install.take_over:
        seen.implied = _taken_over(cluster)
    if "dcgmExporter.serviceMonitor.enabled=true" in install.flags:
        assert _names(cluster, "servicemonitors", "-n", ns) == {"nvidia-dcgm-exporter"}
    _pod_life(cluster, f"legacy-{install.release}")
    if install.drift:
        _drift(cluster, 2)
    upgrade = ["gpuCluster.draDriver.version=v0.4.2"]
    if install.prune:
        upgrade += ["gpuCluster.draDriver.computeDomains.enabled=false", "dcgmExporter.enabled=false"]
    client.upgrade(CHART_DIR, install.release, install.values(*upgrade), namespace=ns, timeout=240)
    if install.prune:
        wait_for(
            "the computeDomains and DCGM Exporter operands to be pruned",
            lambda: (
                _names(cluster, "deployments", "-n", ns) == {install.fullname}
                and "nvidia-dcgm-exporter" not in _names(cluster, "daemonsets", "-n", ns)
                and not {n for n in _names(cluster, "deviceclasses") if n.startswith("compute-domain")}
            ),
            120,
        )
        assert not _names(cluster, "servicemonitors", "-n", ns)
    cluster.wait_ready(timeout=120)
    # Nothing refused, until Helm deletes the release's RBAC while the operator's pods still run.
    assert cluster.plane is not None
    refused = cluster.plane.forbidden(f"system:serviceaccount:{ns}:")
    assert not refused, refused
    client.uninstall(install.release, timeout=300, wait="watcher")
    assert cluster.get("gpuclusters")["items"] == []
    wait_for("the operator's pods to be gone", lambda: not cluster.get("pods", "-n", ns)["items"], 90)
    return seen


def _normalized(install: Install, atom: Grant | Request) -> tuple[str, ...]:
    """An atom with the release's namespace and fullname as placeholders (to compare releases)."""

    def norm(value: str) -> str:
        return "{namespace}" if value == install.namespace else value.replace(install.fullname, "{fullname}")

    return (atom.verb, atom.group, atom.resource, norm(atom.name), norm(atom.namespace))


def test_the_operator_uses_every_right_it_holds_and_no_other(cluster: Cluster) -> None:
    assert cluster.plane is not None
    plane: ControlPlane = cluster.plane
    # The APIs the operator watches when they are served: the GPU Operator's ClusterPolicy, the
    # Prometheus Operator's ServiceMonitor (NVIDIADriver: the operator-managed recipe's).
    _create(cluster, CLUSTERPOLICY_CRD, SERVICE_MONITOR_CRD)
    names = ["crd/clusterpolicies.nvidia.com", "crd/servicemonitors.monitoring.coreos.com"]
    cluster.kubectl("wait", "--for=condition=Established", *names, "--timeout=30s")

    seen = {install: _life_cycle(cluster, install) for install in (FIRST, SECOND)}

    events = plane.audit_events()
    evaluations: dict[Install, Evaluation] = {}
    non_resource: set[str] = set()
    for install in (FIRST, SECOND):
        requests, other = audited_requests(events, install.user)
        assert requests, f"no request of {install.user} in the audit log"
        non_resource |= {line.split("?")[0] for line in other}
        # The operand roles the API server let the operator create are covered by its rights in
        # the model too (RBAC's escalation check).
        asked = requests + seen[install].implied + escalation_requests(seen[install].roles)
        evaluation = evaluate(install.grants(), asked)
        assert not evaluation.uncovered, evaluation.report()
        evaluations[install] = evaluation
    # Discovery and the server version only, which every user may read (system:discovery).
    assert all(line.startswith(("get /api", "get /version", "get /openapi")) for line in non_resource), non_resource

    # A right is used when either release's operator used it (names and namespaces normalized).
    used = {
        _normalized(i, g)
        for i, e in evaluations.items()
        for g in set(e.grants) - set(e.unused(counting_escalation=False))
    }
    unused = {
        _normalized(i, g): g
        for i, e in evaluations.items()
        for g in e.unused(counting_escalation=False)
        if _normalized(i, g) not in used
    }
    marked = {_normalized(i, g) for i, e in evaluations.items() for g in e.marked_escalation_only()}
    calls = {_normalized(i, r) for i, e in evaluations.items() for r in e.distinct_requests()}
    print(f"\n{len(calls)} distinct authorization checks; {len(used)} rights used; {len(unused)} unused:")
    for key in sorted(unused):
        grant = unused[key]
        print(f"  {grant} [{grant.source}]{' escalation-only' if key in marked else ''}")
    assert not used & marked, ("used, yet marked escalation-only", sorted(used & marked))
    assert set(unused) == marked, ("unused and not marked escalation-only", sorted(set(unused) - marked))


def test_server_side_apply_create_is_authorized_by_name(kube: ControlPlane) -> None:
    """What rbac.yaml relies on: a create by server-side apply is authorized for ``create`` of the
    object's name (patch.go's createAuthorizerAttributes carry it), so resourceNames restrict it;
    a POST create names nothing, and a rule with resourceNames never allows it."""
    api = kube_client(kube)
    ns = api.namespace("apply-by-name")
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "named", "namespace": ns},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["allowed"], "verbs": ["create", "patch"]}
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "named", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "named"},
        "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": ns}],
    }
    api.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", role)
    api.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", binding)
    token = api.service_account_token(ns, "robot")
    base = f"/api/v1/namespaces/{ns}/configmaps"

    def apply(name: str) -> int:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}}
        path = f"{base}/{name}?fieldManager=test"
        return api.request("PATCH", path, body, content_type="application/apply-patch+yaml", token=token)[0]

    def post(name: str) -> int:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
        return api.request("POST", base, body, token=token)[0]

    try:
        assert apply("allowed") == 201  # created: authorized for patch and for create of that name
        assert apply("allowed") == 200
        assert apply("other") == 403
        assert post("allowed") == 403
    finally:
        subprocess.run(
            [KUBECTL, "--kubeconfig", str(kube.admin_kubeconfig), "delete", "namespace", ns, "--wait=false"],
            capture_output=True,
            check=False,
        )
