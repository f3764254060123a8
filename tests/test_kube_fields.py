"""What reaches an operand object is refused in the GPUCluster when kube-apiserver would refuse it
there: by the model (webhook, ``gpucluster validate``) and by the generated CRD, here as the
sandbox's CRD validation evaluates it (OpenAPI checks and CEL rules). The cases and their
expected outcomes are tests/realkube/edge_specs.py, read off the real kube-apiserver, which
tests/realkube/test_operands_accepted.py holds the CRD to."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpucluster.api import gpucluster as gc
from gpucluster.api.crd import gpucluster_crd
from gpucluster.api.validation import validate_gpucluster
from gpucluster.sandbox.apiserver import crds
from tests.realkube.edge_specs import EDGE_SPECS, EdgeSpec

Obj = dict[str, Any]


def gpucluster(spec: Obj) -> Obj:
    return {
        "apiVersion": gc.API_VERSION,
        "kind": gc.KIND,
        "metadata": {"name": gc.SINGLETON_NAME},
        "spec": copy.deepcopy(spec),
    }


def crd_causes(obj: Obj) -> list[tuple[str, str, str]]:
    """The sandbox's validation of ``obj`` against the generated CRD: pruned, defaulted, validated."""
    schema = gpucluster_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    stored = crds.default(crds.prune(obj, schema, root=True), schema)
    return crds.validate(stored, schema)


@pytest.mark.parametrize("case", EDGE_SPECS, ids=lambda c: c.id)
def test_the_model_refuses_what_kube_apiserver_refuses_in_the_operands(case: EdgeSpec) -> None:
    result = validate_gpucluster(gpucluster(case.spec))
    problems = {p.path: p.message for p in result.problems}
    if case.model is None:
        assert problems == {}
        return
    path, fragment = case.model
    assert path in problems, problems
    assert fragment in problems[path]


@pytest.mark.parametrize("case", EDGE_SPECS, ids=lambda c: c.id)
def test_the_crd_refuses_what_kube_apiserver_refuses_in_the_operands(case: EdgeSpec) -> None:
    causes = crd_causes(gpucluster(case.spec))
    if case.crd is None:
        assert causes == []
        return
    path, fragment = case.crd
    at_path = [message for _, field, message in causes if field == path]
    assert at_path, causes
    assert any(fragment in message for message in at_path), at_path


def test_numeric_max_unavailable_strings_become_numbers() -> None:
    assert [gc.daemonset_max_unavailable(v) for v in ("007", "2147483647", "100%", 3)] == [7, 2147483647, "100%", 3]


def test_the_crd_rules_carry_their_messages_and_field_paths() -> None:
    """A CEL rule's refusal names the field it is about (fieldPath) and says what is allowed."""
    schema = gpucluster_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    toleration = schema["properties"]["spec"]["properties"]["daemonsets"]["properties"]["tolerations"]
    assert toleration["maxItems"] == 64
    rules = {r["fieldPath"]: r["message"] for r in toleration["items"]["x-kubernetes-validations"]}
    assert rules[".effect"] == "effect must be NoExecute when tolerationSeconds is set"
    assert set(rules) == {".key", ".operator", ".value", ".effect"}
    labels = schema["properties"]["spec"]["properties"]["daemonsets"]["properties"]["labels"]
    assert labels["maxProperties"] == 256 and labels["additionalProperties"]["maxLength"] == 63
