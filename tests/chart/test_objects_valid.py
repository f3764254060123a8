"""Every object real Helm renders for the documented installs (and a few more value combinations)
is valid for Kubernetes 1.34: built-in kinds through kubernetes-validate (strict: unknown fields
are errors), the GPUCluster through our own CRD's schema from crds/ as kube-apiserver applies it
(pruning must drop nothing; the OpenAPI schema must accept it) and through the model.

Custom resources of other projects have no schema here: they are listed in NOT_VALIDATED, and a
custom kind missing from that list fails the test (no silent skip)."""

from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest

from gpucluster.api.structural import apply_defaults
from gpucluster.api.validation import validate_gpucluster
from tests.chart import helm
from tests.chart.helm import (
    CA_BUNDLE,
    CERT_MANAGER_API,
    DOCS_OPERATOR_MANAGED,
    DOCS_PREINSTALLED,
    SERVICE_MONITOR_API,
    Manifest,
    Recipe,
)

K8S_VERSION = "1.34.0"

# (apiVersion, kind) -> why it is not validated here.
NOT_VALIDATED = {
    ("nvidia.com/v1alpha1", "NVIDIADriver"): "the GPU Operator's CRD, not shipped by this chart",
    ("cert-manager.io/v1", "Certificate"): "cert-manager's CRD, not shipped by this chart",
    ("cert-manager.io/v1", "Issuer"): "cert-manager's CRD, not shipped by this chart",
}

COMBINATIONS = [
    Recipe("defaults", ()),
    DOCS_OPERATOR_MANAGED,
    DOCS_PREINSTALLED,
    DOCS_OPERATOR_MANAGED.with_flags("webhook.certificates.mode=cert-manager", api_versions=CERT_MANAGER_API),
    DOCS_PREINSTALLED.with_flags(
        "webhook.certificates.mode=cert-manager",
        "webhook.certificates.certManager.issuerType=clusterissuer",
        "webhook.certificates.certManager.issuerName=corp-ca",
        api_versions=CERT_MANAGER_API,
    ),
    DOCS_PREINSTALLED.with_flags(
        "webhook.certificates.mode=secret",
        "webhook.certificates.secret.name=my-tls",
        f"webhook.certificates.secret.caBundle={CA_BUNDLE}",
    ),
    DOCS_PREINSTALLED.with_flags("dcgm.enabled=true"),
    DOCS_PREINSTALLED.with_flags("webhook.enabled=false"),
    DOCS_PREINSTALLED.with_flags("cleanup.enabled=false"),
    DOCS_PREINSTALLED.with_flags(
        "dcgmExporter.serviceMonitor.enabled=true",
        "dcgmExporter.serviceMonitor.additionalLabels.release=prometheus",
        api_versions=SERVICE_MONITOR_API,
    ),
    DOCS_OPERATOR_MANAGED.with_flags(
        "driver.nvidiaDriverCRD.nodeSelector.example\\.com/pool=gpus",
        "operator.podDisruptionBudget.enabled=false",
        "operator.replicas=1",
    ),
]
IDS = [
    "defaults",
    "operator-managed",
    "pre-installed",
    "cert-manager",
    "cert-manager-clusterissuer",
    "secret",
    "dcgm",
    "no-webhook",
    "no-cleanup",
    "servicemonitor",
    "driver-nodeselector",
]


@cache
def gpucluster_crd_schema() -> dict[str, Any]:
    (crd,) = [c for c in helm.crds() if c["spec"]["names"]["kind"] == "GPUCluster"]
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def pruned_fields(value: Any, schema: dict[str, Any], path: str = "", *, root: bool = False) -> list[str]:
    """Fields kube-apiserver's structural pruning would drop silently (unknown to the schema)."""
    out: list[str] = []
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return out
        properties: dict[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            where = f"{path}.{key}" if path else key
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            if key in properties:
                out += pruned_fields(child, properties[key], where)
            elif isinstance(extra, dict):
                out += pruned_fields(child, extra, where)
            elif extra is not True:
                out.append(where)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += pruned_fields(item, schema["items"], f"{path}[{i}]")
    return out


def problems_of_gpucluster(obj: dict[str, Any]) -> list[str]:
    """What kube-apiserver would drop or refuse: pruning, then the CRD's OpenAPI schema after
    defaulting (JSON Schema draft 4, which OpenAPI v3 schemas follow); then our model, which
    also holds the CRD's x-kubernetes-validations rules (the CRD is generated from it)."""
    schema = gpucluster_crd_schema()
    out = [f"unknown field {p} (pruned by the API server)" for p in pruned_fields(obj, schema, root=True)]
    validator = jsonschema.Draft4Validator(schema)
    for error in validator.iter_errors(apply_defaults(obj, schema)):
        out.append(f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}")
    result = validate_gpucluster(obj)
    out += [str(p) for p in result.problems] + [f"warning: {w}" for w in result.warnings]
    return out


def problems_of(obj: Manifest) -> list[str]:
    key = (obj.get("apiVersion"), obj.kind)
    if key == ("nvidia.com/v1alpha1", "GPUCluster"):
        return problems_of_gpucluster(dict(obj))
    if key in NOT_VALIDATED:
        return []
    try:
        kubernetes_validate.validate(dict(obj), K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        return [f"{where or '<root>'}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        return [f"no schema for {key}: validate it here or list it in NOT_VALIDATED"]
    return []


@pytest.mark.parametrize("recipe", COMBINATIONS, ids=IDS)
def test_every_rendered_object_is_valid_for_kubernetes_1_34(recipe: Recipe) -> None:
    objs = helm.render_recipe(recipe)
    assert objs
    problems = []
    for obj in [*objs, *(o for o in helm.default_objects(objs) if o not in objs)]:
        problems += [f"{obj.template} {obj.kind}/{obj.name}: {p}" for p in problems_of(obj)]
    assert not problems, "\n".join(problems)


def test_the_crds_are_valid_for_kubernetes_1_34() -> None:
    for crd in helm.crds():
        kubernetes_validate.validate(crd, K8S_VERSION, strict=True)


def test_the_validation_catches_bad_objects() -> None:
    """The checks above are live: an unknown field, a wrong type, an unknown custom kind."""
    (deployment,) = [o for o in helm.render_recipe(DOCS_PREINSTALLED) if o.kind == "Deployment"]
    bad = Manifest({**deployment, "spec": {**deployment["spec"], "replica": 2}}, deployment.template)
    assert any("replica" in p for p in problems_of(bad))
    bad = Manifest({**deployment, "spec": {**deployment["spec"], "replicas": "2"}}, deployment.template)
    assert problems_of(bad)
    stranger = Manifest({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}, "x.yaml")
    assert problems_of(stranger) == [
        f"no schema for {('example.com/v1', 'Widget')}: validate it here or list it in NOT_VALIDATED"
    ]
    gpucluster = helm.default_objects(helm.render_recipe(DOCS_PREINSTALLED))[0]
    spec = {**gpucluster["spec"], "typo": 1, "dcgm": {**gpucluster["spec"]["dcgm"], "hostPort": 70000}}
    problems = problems_of(Manifest({**gpucluster, "spec": spec}, gpucluster.template))
    assert any("spec.typo" in p for p in problems) and any("hostPort" in p for p in problems), problems
