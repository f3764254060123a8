"""The generated GPUCluster CRD: committed copy, Kubernetes schema, structural rules, defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml

from gpucluster.api import GPUCluster
from gpucluster.api.crd import generated_files, gpucluster_crd
from gpucluster.api.structural import apply_defaults

CRD_DIR = Path(__file__).resolve().parent.parent / "charts" / "gpucluster" / "crds"


def schema() -> dict[str, Any]:
    return gpucluster_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def test_committed_crds_equal_the_generated_ones() -> None:
    files = generated_files()
    committed = {p.name for p in CRD_DIR.glob("*.yaml")}
    assert committed == set(files), "run `make crds` to regenerate charts/gpucluster/crds"
    for name, text in files.items():
        assert (CRD_DIR / name).read_text() == text, f"{name} is stale: run `make crds`"


def test_crd_validates_against_kubernetes_1_34_in_strict_mode() -> None:
    for name in generated_files():
        crd = yaml.safe_load((CRD_DIR / name).read_text())
        kubernetes_validate.validate(crd, "1.34", strict=True)


def test_crd_names_scope_columns_and_subresources() -> None:
    crd = gpucluster_crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "gpuclusters.nvidia.com"
    assert spec["scope"] == "Cluster"
    assert spec["names"]["shortNames"] == ["gc"]
    assert spec["names"]["kind"] == "GPUCluster"
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert columns["Status"]["jsonPath"] == ".status.state"
    assert columns["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    assert list(columns)[:2] == ["Status", "Age"]  # the default `kubectl get gpucluster` view
    assert all(c.get("priority") == 1 for c in list(columns.values())[2:])  # inventory in -o wide


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, child in node.get("properties", {}).items():
        out += _walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        out += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += _walk(node["additionalProperties"], f"{path}{{}}")
    return out


def test_schema_is_structural_and_documented() -> None:
    for path, node in _walk(schema()):
        assert "$ref" not in node and "title" not in node, path
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        else:
            assert "type" in node, f"{path} has no type"
            assert "anyOf" not in node, path
        if "properties" in node:
            assert "additionalProperties" not in node, path
        if path.startswith(".spec") and path.count("{}") == 0 and "[]" not in path:
            assert node.get("description"), f"{path} has no description for kubectl explain"


def test_schema_carries_enums_bounds_and_the_singleton_rule() -> None:
    s = schema()
    assert s["x-kubernetes-validations"] == [
        {
            "rule": "self.metadata.name == 'gpu-cluster'",
            "message": "GPUCluster is a singleton, metadata.name must be 'gpu-cluster'",
        }
    ]
    dra = s["properties"]["spec"]["properties"]["draDriver"]["properties"]
    port = dra["gpus"]["properties"]["kubeletPlugin"]["properties"]["healthcheck"]["properties"]["port"]
    assert (port["minimum"], port["maximum"], port["default"]) == (1, 65535, 51516)
    assert dra["imagePullPolicy"]["enum"] == ["Always", "IfNotPresent", "Never"]
    assert dra["featureGates"]["additionalProperties"] == {"type": "boolean"}
    assert s["properties"]["status"]["properties"]["state"]["enum"] == ["ready", "notReady", "disabled"]


@pytest.mark.parametrize(("name", "allowed"), [("gpu-cluster", True), ("other", False)])
def test_singleton_rule_evaluates_as_cel(name: str, allowed: bool) -> None:
    rule = schema()["x-kubernetes-validations"][0]["rule"]
    env = celpy.Environment()
    program = env.program(env.compile(rule))
    result = program.evaluate({"self": celpy.json_to_cel({"metadata": {"name": name}})})
    assert bool(result) is allowed


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"draDriver": {"computeDomains": {"enabled": False}}},
        {"dcgm": {"enabled": True}, "dcgmExporter": {"serviceMonitor": {"enabled": True}}},
        {"draDriver": {"gpus": {"kubeletPlugin": {"healthcheck": {"enabled": False}}}}},
    ],
)
def test_api_server_defaulting_equals_model_defaulting(spec: dict[str, Any]) -> None:
    obj = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "metadata": {"name": "gpu-cluster"}, "spec": spec}
    by_crd = apply_defaults(obj, schema())
    by_model = GPUCluster.model_validate(obj).to_dict()
    assert by_crd["spec"] == by_model["spec"]


def test_defaulting_fills_a_missing_spec() -> None:
    obj = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "metadata": {"name": "gpu-cluster"}}
    assert apply_defaults(obj, schema())["spec"]["dcgmExporter"] == {"enabled": True}
