"""Server-side apply types built-in lists from the OpenAPI definitions, as kube-apiserver does:
a webhook configuration's ``webhooks`` is a map keyed by name, so another manager's write to one
webhook's caBundle does not conflict with the chart re-applying the configuration (helm upgrade)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpucluster.kube.client import Kube, KubeError
from gpucluster.sandbox.apiserver.apply import DefinitionTypes
from gpucluster.sandbox.server import Sandbox

PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def config(timeout: int) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "v"},
        "webhooks": [
            {
                "name": "a.example.com",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "timeoutSeconds": timeout,
                "clientConfig": {"service": {"namespace": "ns", "name": "svc", "path": "/validate", "port": 443}},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}],
            }
        ],
    }


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    sandbox = Sandbox()
    await sandbox.start()
    client = await Kube.connect(str(sandbox.kubeconfig_path))
    try:
        yield client
    finally:
        await client.close()
        await sandbox.stop()


async def apply(kube: Kube, obj: dict[str, Any], manager: str) -> dict[str, Any]:
    return await kube.request(
        "PATCH", f"{PATH}/v", body=obj, content_type="application/apply-patch+yaml",
        query=[("fieldManager", manager)],
    )  # fmt: skip


def test_list_types_come_from_the_definitions() -> None:
    types = DefinitionTypes("io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration")
    assert types.list_type(("webhooks",)) == ("map", ("name",))
    assert types.list_type(("webhooks", "[]", "rules")) == ("atomic", ())
    pod = DefinitionTypes("io.k8s.api.core.v1.Pod")
    assert pod.list_type(("spec", "containers")) == ("map", ("name",))
    assert pod.list_type(("spec", "containers", "[]", "ports")) == ("map", ("containerPort", "protocol"))
    assert pod.list_type(("spec", "tolerations")) == ("atomic", ())
    assert pod.list_type(("metadata", "finalizers")) == ("set", ())


async def test_a_cabundle_written_by_another_manager_does_not_conflict_with_a_reapply(kube: Kube) -> None:
    await apply(kube, config(10), "helm")
    patch = [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "Q0E="}]
    await kube.request("PATCH", f"{PATH}/v", body=json.dumps(patch), content_type="application/json-patch+json")
    live = await apply(kube, config(5), "helm")  # helm upgrade with a changed value, no force
    assert live["webhooks"][0]["timeoutSeconds"] == 5
    assert live["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E="
    helm = next(e for e in live["metadata"]["managedFields"] if e["manager"] == "helm")
    assert 'k:{"name":"a.example.com"}' in helm["fieldsV1"]["f:webhooks"]


async def test_a_field_owned_by_another_manager_still_conflicts(kube: Kube) -> None:
    await apply(kube, config(10), "helm")
    other = config(10)
    other["webhooks"][0]["timeoutSeconds"] = 7
    with pytest.raises(KubeError) as conflict:
        await apply(kube, other, "someone-else")
    assert conflict.value.status == 409 and "timeoutSeconds" in str(conflict.value)
