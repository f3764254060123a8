"""Claim-template provisioning and stranded pods, pure parts and the I/O against a fake API."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpucluster.clusterstate import ClusterState
from gpucluster.controller.provision import (
    CONFLICT_REASON,
    REFUSED_REASON,
    Provisioner,
    collectable,
    plan,
    wanted_templates,
)
from gpucluster.controller.stranded import REASON as STRANDED_REASON
from gpucluster.controller.stranded import StrandedPods, stranded_resources
from gpucluster.translate import TEMPLATES_ANNOTATION, TRANSLATED_LABEL, templates_annotation, translate_pod
from tests.kit.fakekube import FakeKube

TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates"


def translated(name: str = "p", namespace: str = "ml", gpus: int = 1, **extra: Any) -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", **extra},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }
    out, translation = translate_pod(pod)
    out["metadata"]["labels"] = {TRANSLATED_LABEL: "true"}
    out["metadata"]["annotations"][TEMPLATES_ANNOTATION] = templates_annotation(translation.templates)
    return out


def none(namespace: str, name: str) -> None:
    return None


def test_plan_creates_what_live_pods_refer_to_once() -> None:
    a, b = translated("a"), translated("b")
    result = plan([a, b], none, set())
    [(key, template)] = result.create.items()
    assert key == ("ml", a["spec"]["resourceClaims"][0]["resourceClaimTemplateName"])
    assert template["metadata"]["labels"]["gpucluster.nvidia.com/provisioned"] == "true"
    assert [p["metadata"]["name"] for p in result.wanted_by[key]] == ["a", "b"]
    done = {**a, "status": {"phase": "Succeeded"}}
    assert plan([done], none, set()).create == {}  # a finished pod needs no claim any more


def test_forged_annotation_specs_are_never_used() -> None:
    # The specs the claim-templates annotation records are not read: the controller re-derives
    # them from the recorded original requests (1 GPU here), whatever the annotation says.
    pod = translated()
    name = pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    honest = json.loads(pod["metadata"]["annotations"][TEMPLATES_ANNOTATION])[name]
    forged = json.loads(json.dumps(honest))
    forged["spec"]["devices"]["requests"][0]["exactly"]["count"] = 32
    pod["metadata"]["annotations"][TEMPLATES_ANNOTATION] = json.dumps({name: forged})
    wants, problems = wanted_templates(pod)
    assert problems == [] and [w.spec for w in wants.values()] == [honest]
    # A name of the user's choosing is not a translation's: nothing, and the event says so.
    pod = translated()
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "gpucluster-chosen-name"
    pod["metadata"]["annotations"][TEMPLATES_ANNOTATION] = json.dumps({"gpucluster-chosen-name": honest})
    wants, problems = wanted_templates(pod)
    assert wants == {} and "not a template the translation of the pod's recorded GPU requests gives" in problems[0]


def test_collectable_after_the_grace_period_only() -> None:
    template = {"metadata": {"name": "t", "namespace": "ml", "creationTimestamp": "2020-01-01T00:00:00Z"}}
    since: dict[tuple[str, str], float] = {}
    assert collectable([template], set(), since, 100.0, 10.0) == []
    assert collectable([template], set(), since, 105.0, 10.0) == []
    assert collectable([template], {("ml", "t")}, since, 109.0, 10.0) == []  # referenced again: clock resets
    assert collectable([template], set(), since, 115.0, 10.0) == []
    assert collectable([template], set(), since, 124.0, 10.0) == []
    assert collectable([template], set(), since, 125.0, 10.0) == [template]


async def test_collision_after_admission_is_a_warning_event_once() -> None:
    pod = translated()
    name = pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    foreign = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": []}}},
    }
    kube = FakeKube([foreign])
    events: list[tuple[str, str, str]] = []

    async def event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        events.append((type_, reason, message))

    provisioner = Provisioner(kube, event=event)
    provisioner.state.replace("Pod", [pod])
    provisioner.state.replace("ResourceClaimTemplate", [])
    await provisioner.reconcile()
    await provisioner.reconcile()
    [(type_, reason, message)] = events
    assert (type_, reason) == ("Warning", CONFLICT_REASON) and f"ml/{name}" in message
    assert kube.paths("POST") == [TEMPLATES]  # backed off, reported once
    assert f"{TEMPLATES}/{name}" not in kube.paths("PUT")
    assert kube.object(f"{TEMPLATES}/{name}")["spec"] == foreign["spec"]  # the foreign template is left alone


async def test_refused_annotation_is_a_warning_event() -> None:
    pod = translated()
    pod["metadata"]["annotations"]["gpucluster.nvidia.com/translated-from"] = "not json"
    events: list[str] = []

    async def event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        events.append(reason)

    provisioner = Provisioner(FakeKube(), event=event)
    provisioner.state.replace("Pod", [pod])
    provisioner.state.replace("ResourceClaimTemplate", [])
    await provisioner.reconcile()
    assert events == [REFUSED_REASON]


def stranded_pod(name: str, *, owned: bool = False, **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}", **meta}
    if owned:
        metadata["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": "x", "controller": True}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def test_which_pods_are_stranded() -> None:
    state = ClusterState.from_objects([])
    assert stranded_resources(stranded_pod("a"), state, "gpu-operator") == ["nvidia.com/gpu"]
    opted = stranded_pod("b", labels={"gpucluster.nvidia.com/translate": "false"})
    mirror = stranded_pod("c", annotations={"kubernetes.io/config.mirror": "x"})
    fresh = stranded_pod("d")
    fresh["status"]["conditions"] = []  # not judged by the scheduler yet
    for pod in (opted, mirror, fresh):
        assert stranded_resources(pod, state, "gpu-operator") == []
    native = {
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"extendedResourceName": "nvidia.com/gpu"},
    }
    assert stranded_resources(stranded_pod("e"), ClusterState.from_objects([native]), "gpu-operator") == []


async def test_stranded_pods_are_reported_once_and_deleted_only_when_owned_and_opted_in() -> None:
    state = ClusterState.from_objects([stranded_pod("bare"), stranded_pod("owned", owned=True)])
    events: list[tuple[str, str, str]] = []
    deleted: list[str] = []

    async def event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        events.append((obj["metadata"]["name"], type_, reason))

    async def delete(obj: Mapping[str, Any]) -> None:
        deleted.append(obj["metadata"]["name"])

    async def check_all(stranded: StrandedPods) -> None:
        for pod in state.list("Pod"):
            await stranded.check(pod, f"ml/{pod['metadata']['name']}", event, delete)

    report_only = StrandedPods(state, "gpu-operator")
    await check_all(report_only)
    await check_all(report_only)
    assert sorted(events) == [("bare", "Warning", STRANDED_REASON), ("owned", "Warning", STRANDED_REASON)]
    assert deleted == [] and report_only.gauge._value.get() == 2
    await report_only.check(None, "ml/bare", event, delete)  # gone
    assert report_only.gauge._value.get() == 1

    events.clear()
    deleting = StrandedPods(state, "gpu-operator", delete=True)
    await check_all(deleting)
    assert deleted == ["owned"]


async def test_a_refused_create_is_reported_once_and_does_not_fail_the_pass() -> None:
    events: list[str] = []

    async def event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        events.append(message)

    kube = FakeKube()
    terminating = "unable to create new content in namespace ml because it is being terminated"
    kube.fail("POST", TEMPLATES, 403, message=terminating)
    provisioner = Provisioner(kube, event=event)
    provisioner.state.replace("Pod", [translated()])
    provisioner.state.replace("ResourceClaimTemplate", [])
    await provisioner.reconcile()
    await provisioner.reconcile()
    [message] = events
    assert "being terminated" in message
