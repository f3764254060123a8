"""What the controller applies is what kube-apiserver accepts: for every documented install and
the other value sets the chart tests render, the operands the controller renders from the chart's
default GPUCluster, submitted to the real kube-apiserver (1.34 and 1.37, where built) with
server-side apply and ``dryRun=All``, exactly as the reconciler applies them (field manager
gpucluster, force, the applied-hash annotation). The sandbox answers every submission with the
same code.

The GPUCluster itself is first created (dry run) on both servers with the chart's CRD installed,
and the controller renders from what kube-apiserver returns (pruned, defaulted), as it would read
it. Variants: ComputeDomains as the values say and off, the ServiceMonitor CRD absent and present.

Then the hostile and edge specs of tests/realkube/edge_specs.py, each merged into the pre-installed
recipe's spec: kube-apiserver's CRD refuses a spec with the expected field and message (and the
sandbox refuses it too), or the model refuses it (the webhook; no operand is rendered), or every
operand rendered from it is accepted by both servers.

Not submitted: SecurityContextConstraints (OpenShift; the controller never renders with
``openshift=True`` and the kind has no REST mapping here). The ServiceMonitor CRD installed is a
minimal one carrying prometheus-operator's (v0.84) constraints on the fields the operator renders.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpucluster.api import gpucluster as gc
from gpucluster.api.validation import validate_gpucluster
from gpucluster.controller.operands import IMAGE_ENV_NAMES, ClusterFacts, render
from gpucluster.controller.plan import with_hash
from gpucluster.kube.paths import collection_path, object_path
from gpucluster.sandbox.controlplane.build import resolve_version
from gpucluster.sandbox.controlplane.cluster import ClusterOptions, ControlPlane
from tests.chart import helm
from tests.chart.test_objects_valid import COMBINATIONS, IDS
from tests.e2e.backends import require_kube
from tests.realkube.agreement import outcome
from tests.realkube.api import Api
from tests.realkube.conftest import kube_client
from tests.realkube.edge_specs import EDGE_SPECS, EdgeSpec

Obj = dict[str, Any]

VERSIONS = ("1.34", "1.37")
SANDBOX_VERSION = "1.34"  # whose validation the sandbox reproduces
NAMESPACE = helm.NAMESPACE
ADMIN_ACCESS = {"resource.kubernetes.io/admin-access": "true"}  # the reconciler labels its namespace
OWNER_UID = "6f1c2f0e-5a4b-4c3d-8e2f-0123456789ab"
DEFAULTS_CONFIGMAP = f"{helm.RELEASE}-gpucluster-defaults"

# Kinds the renderers can produce that are not submitted, and why.
NOT_SUBMITTED = {
    "SecurityContextConstraints": "OpenShift only: the controller never renders with openshift=True",
}

_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_RELABEL_ACTIONS = [
    *("replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod", "labelmap", "LabelMap"),
    *("labeldrop", "LabelDrop", "labelkeep", "LabelKeep", "lowercase", "Lowercase", "uppercase", "Uppercase"),
    *("keepequal", "KeepEqual", "dropequal", "DropEqual"),
]
# prometheus-operator's ServiceMonitor CRD, reduced to the fields the operator renders and their
# constraints in v0.84 (the rest of spec is preserved unvalidated).
SERVICE_MONITOR_CRD: Obj = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {
            "kind": "ServiceMonitor",
            "listKind": "ServiceMonitorList",
            "plural": "servicemonitors",
            "singular": "servicemonitor",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                                "required": ["selector"],
                                "properties": {
                                    "jobLabel": {"type": "string"},
                                    "namespaceSelector": {
                                        "type": "object",
                                        "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                                    },
                                    "selector": {
                                        "type": "object",
                                        "x-kubernetes-map-type": "atomic",
                                        "properties": {
                                            "matchLabels": {
                                                "type": "object",
                                                "additionalProperties": {"type": "string"},
                                            }
                                        },
                                    },
                                    "endpoints": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True,
                                            "properties": {
                                                "port": {"type": "string"},
                                                "path": {"type": "string"},
                                                "honorLabels": {"type": "boolean"},
                                                "interval": {"type": "string", "pattern": _DURATION},
                                                "scrapeTimeout": {"type": "string", "pattern": _DURATION},
                                                "relabelings": {
                                                    "type": "array",
                                                    "items": {
                                                        "type": "object",
                                                        "properties": {
                                                            "action": {"type": "string", "enum": _RELABEL_ACTIONS},
                                                            "modulus": {"type": "integer", "format": "int64"},
                                                            "regex": {"type": "string"},
                                                            "replacement": {"type": "string"},
                                                            "separator": {"type": "string"},
                                                            "sourceLabels": {
                                                                "type": "array",
                                                                "items": {
                                                                    "type": "string",
                                                                    "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$",
                                                                },
                                                            },
                                                            "targetLabel": {"type": "string"},
                                                        },
                                                    },
                                                },
                                            },
                                        },
                                    },
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


# --- the two servers -----------------------------------------------------------------------------


def apply_path(obj: Obj, *, dry_run: bool = True) -> str:
    query = "?fieldManager=gpucluster&force=true" + ("&dryRun=All" if dry_run else "")
    return object_path(obj) + query


def server_side_apply(api: Api, obj: Obj, *, dry_run: bool = True) -> tuple[int, Obj]:
    return api.request("PATCH", apply_path(obj, dry_run=dry_run), obj, content_type="application/apply-patch+yaml")


def dry_run_create(api: Api, obj: Obj) -> tuple[int, Obj]:
    path = collection_path(obj["apiVersion"], obj["kind"], (obj.get("metadata") or {}).get("namespace"))
    return api.request("POST", path + "?dryRun=All", obj)


def prepare(api: Api) -> None:
    """The chart's CRDs, the ServiceMonitor CRD and the operator namespace, labelled as the
    reconciler labels it; returns once the custom resources are served."""
    for obj in [*helm.crds(), SERVICE_MONITOR_CRD]:
        status, body = server_side_apply(api, obj, dry_run=False)
        assert status in (200, 201), f"{api.name}: {obj['metadata']['name']}: {status} {body}"
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": ADMIN_ACCESS}}
    status, body = server_side_apply(api, namespace, dry_run=False)
    assert status in (200, 201), f"{api.name}: namespace: {status} {body}"
    served = [
        "/apis/nvidia.com/v1alpha1/gpuclusters",
        f"/apis/monitoring.coreos.com/v1/namespaces/{NAMESPACE}/servicemonitors",
    ]
    deadline = time.monotonic() + 30
    while any(api.request("GET", path)[0] != 200 for path in served):
        assert time.monotonic() < deadline, f"{api.name}: the custom resources are not served after 30 s"
        time.sleep(0.2)


@pytest.fixture(scope="module", params=VERSIONS)
def kube_version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def kube_at(kube_version: str) -> Iterator[Api]:
    """The real kube-apiserver of ``kube_version`` (no nodes: nothing here schedules)."""
    require_kube(kube_version)
    plane = ControlPlane(ClusterOptions(version=kube_version, nodes=0, node_agent=False, process_pods=False)).up()
    try:
        api = kube_client(plane)
        prepare(api)
        yield api
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def sandbox(sandbox_api: Api) -> Api:
    prepare(sandbox_api)
    return sandbox_api


# --- what the controller renders -----------------------------------------------------------------


def chart_defaults(recipe: helm.Recipe) -> tuple[Obj | None, dict[str, str]]:
    """The GPUCluster the chart's defaults hook applies (from the ``<release>-gpucluster-defaults``
    ConfigMap, key gpucluster.yaml), None when the values install none, and the image
    environment of the operator's controller container."""
    objs = helm.render_recipe(recipe)
    (deployment,) = [o for o in objs if o.kind == "Deployment"]
    (controller,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "controller"]
    env = {e["name"]: e["value"] for e in controller.get("env") or [] if e["name"] in IMAGE_ENV_NAMES}
    clusters = [o for o in helm.default_objects(objs) if o.kind == gc.KIND]
    if not clusters:
        return None, env
    (cluster,) = clusters
    (configmap,) = [o for o in objs if o.kind == "ConfigMap" and o.name == DEFAULTS_CONFIGMAP]
    assert cluster.template == f"{configmap.template}#gpucluster.yaml", cluster.template
    return dict(cluster), env


def stored(kube: Api, sandbox: Api, cluster: Obj) -> Obj:
    """The GPUCluster as kube-apiserver would store it (both servers accept it)."""
    status, body = dry_run_create(kube, cluster)
    assert status == 201, f"kube-apiserver refuses the GPUCluster: {status} {body.get('message')}"
    sandbox_status, sandbox_body = dry_run_create(sandbox, cluster)
    assert sandbox_status == 201, f"the sandbox refuses the GPUCluster: {sandbox_status} {sandbox_body.get('message')}"
    return body


def facts(kube_version: str, env: dict[str, str], *, service_monitor_crd: bool) -> ClusterFacts:
    return ClusterFacts(
        namespace=NAMESPACE,
        env=env,
        service_monitor_crd=service_monitor_crd,
        kubernetes_version=resolve_version(kube_version),
        owner_uid=OWNER_UID,
    )


def submit(kube: Api, sandbox: Api, objs: list[Obj]) -> list[str]:
    """Every object server-side applied (dry run) on both servers: what either refused or where
    they disagree."""
    problems = []
    for obj in objs:
        assert obj["kind"] not in NOT_SUBMITTED, obj["kind"]
        desired = with_hash(obj)
        what = f"{obj['kind']} {obj['metadata']['name']}"
        status, body = server_side_apply(kube, desired)
        if not 200 <= status < 300:
            problems.append(f"kube-apiserver refuses {what}: {status} {body.get('message')}")
        sandbox_status, sandbox_body = server_side_apply(sandbox, desired)
        if sandbox_status != status:
            problems.append(
                f"the sandbox answers {what} {sandbox_status} ({sandbox_body.get('message')}), kube {status}"
            )
    return problems


def with_compute_domains(cluster: Obj, enabled: bool) -> Obj:
    out = copy.deepcopy(cluster)
    out["spec"].setdefault("draDriver", {}).setdefault("computeDomains", {})["enabled"] = enabled
    return out


# --- the value sets ----------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", COMBINATIONS, ids=IDS)
def test_the_operands_of_every_chart_value_set_are_accepted(
    kube_at: Api, sandbox: Api, kube_version: str, recipe: helm.Recipe
) -> None:
    cluster, env = chart_defaults(recipe)
    if cluster is None:
        assert recipe.name == "defaults"  # gpuCluster.enabled is false: the controller has nothing to render
        return
    problems = []
    submitted = 0
    for compute_domains in (cluster["spec"]["draDriver"]["computeDomains"]["enabled"], False):
        live = stored(kube_at, sandbox, with_compute_domains(cluster, compute_domains))
        result = validate_gpucluster(live)
        assert result.ok and result.obj is not None, [str(p) for p in result.problems]
        for service_monitor_crd in (False, True):
            objs = render(result.obj, facts(kube_version, env, service_monitor_crd=service_monitor_crd))
            kinds = {o["kind"] for o in objs}
            assert {"DaemonSet", "DeviceClass", "ResourceClaimTemplate", "ValidatingAdmissionPolicy"} <= kinds
            assert ("Deployment" in kinds) is compute_domains  # the compute-domain controller
            problems += [
                f"computeDomains={compute_domains} serviceMonitorCRD={service_monitor_crd}: {p}"
                for p in submit(kube_at, sandbox, objs)
            ]
            submitted += len(objs)
    assert not problems, "\n".join(problems)
    assert submitted >= 4 * 17


def test_the_service_monitor_is_submitted(kube_at: Api, sandbox: Api, kube_version: str) -> None:
    """The servicemonitor value set renders a ServiceMonitor once the CRD is served."""
    recipe = COMBINATIONS[IDS.index("servicemonitor")]
    cluster, env = chart_defaults(recipe)
    assert cluster is not None
    result = validate_gpucluster(stored(kube_at, sandbox, cluster))
    assert result.obj is not None
    objs = render(result.obj, facts(kube_version, env, service_monitor_crd=True))
    (monitor,) = [o for o in objs if o["kind"] == "ServiceMonitor"]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert submit(kube_at, sandbox, [monitor]) == []


# --- hostile and edge specs ---------------------------------------------------------------------


def merged(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = merged(base.get(key), value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(patch)


def causes(body: Obj) -> list[tuple[str, str]]:
    return [(str(c.get("field")), str(c.get("message"))) for c in (body.get("details") or {}).get("causes") or []]


@pytest.mark.parametrize("case", EDGE_SPECS, ids=lambda c: c.id)
def test_an_edge_spec_is_refused_by_the_crd_or_the_webhook_or_its_operands_are_accepted(
    kube_at: Api, sandbox: Api, kube_version: str, case: EdgeSpec
) -> None:
    base, env = chart_defaults(helm.DOCS_PREINSTALLED)
    assert base is not None
    cluster = {**base, "spec": merged(base["spec"], case.spec)}
    status, body = dry_run_create(kube_at, cluster)
    sandbox_status, sandbox_body = dry_run_create(sandbox, cluster)
    assert sandbox_status == status, (sandbox_body.get("message"), body.get("message"))
    if case.crd is not None:
        path, fragment = case.crd
        assert status == 422, body
        found = [message for field, message in causes(body) if field == path]
        assert any(fragment in m for m in found), causes(body)
        if kube_version == SANDBOX_VERSION:  # the sandbox answers as 1.34 does, word for word
            assert outcome(sandbox_status, sandbox_body) == outcome(status, body)
        else:
            assert [f for f, _ in causes(sandbox_body)] == [f for f, _ in causes(body)]
        return
    assert status == 201, body.get("message")
    result = validate_gpucluster(body)
    if case.model is not None:
        path, fragment = case.model
        assert any(p.path == path and fragment in p.message for p in result.problems), result.problems
        return
    assert result.ok and result.obj is not None, [str(p) for p in result.problems]
    objs = render(result.obj, facts(kube_version, env, service_monitor_crd=True))
    assert submit(kube_at, sandbox, objs) == []
