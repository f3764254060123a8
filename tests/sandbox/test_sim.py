"""The simulated cluster: slices, workload status, claims from templates, scheduler, kubelet."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpucluster.controller.operands.dra_driver import GPU_DEVICE_CLASSES
from gpucluster.sandbox.apiserver.core import MERGE_PATCH, Context
from gpucluster.sandbox.server import Sandbox
from gpucluster.sandbox.sim import SimulationOptions
from gpucluster.sandbox.sim.kubelet import parse_mix, plan_nodes
from gpucluster.sandbox.sim.resourceclaim import generate_name
from gpucluster.sandbox.sim.scheduler import fit_error
from tests.sandbox.conftest import rt

Obj = dict[str, Any]
CTX = Context(field_manager="test")
SLICES = ("resource.k8s.io", "resourceslices")
CLAIMS = ("resource.k8s.io", "resourceclaims")
PLUGIN = "nvidia-dra-driver-kubelet-plugin"
DEPLOY_LABEL = "nvidia.com/gpu.deploy.dra-driver"


@pytest.fixture
async def cluster() -> AsyncIterator[Sandbox]:
    s = Sandbox(simulate=SimulationOptions(nodes=3, gpus_per_node=8, mix="h100,a100-mig,l4:4"))
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


async def settle(s: Sandbox) -> None:
    assert s.sim is not None
    await s.sim.settle()
    if s.gc is not None:
        await s.gc.idle()
    await s.sim.settle()


async def create(s: Sandbox, group: str, plural: str, ns: str, body: Obj) -> Obj:
    version = "v1"
    obj: Obj = await s.core.create(rt(s.core, group, version, plural), ns, body, CTX)
    return obj


async def label_node(s: Sandbox, name: str, value: str | None) -> None:
    patch = {"metadata": {"labels": {DEPLOY_LABEL: value}}}
    await s.core.patch(rt(s.core, "", "v1", "nodes"), "", name, MERGE_PATCH, patch, CTX)


async def install_driver(s: Sandbox, nodes: list[str]) -> None:
    for name, expression in GPU_DEVICE_CLASSES.items():
        await create(
            s,
            "resource.k8s.io",
            "deviceclasses",
            "",
            {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": expression}}]}},
        )
    await create(s, "", "namespaces", "", {"metadata": {"name": "nvidia"}})
    template = {
        "metadata": {"labels": {"app": "p"}},
        "spec": {"nodeSelector": {DEPLOY_LABEL: "true"}, "containers": [{"name": "gpus", "image": "x"}]},
    }
    ds = {
        "metadata": {"name": PLUGIN, "namespace": "nvidia"},
        "spec": {"selector": {"matchLabels": {"app": "p"}}, "template": template},
    }
    await create(s, "apps", "daemonsets", "nvidia", ds)
    for node in nodes:
        await label_node(s, node, "true")
    await settle(s)


def slices_by_node(s: Sandbox) -> dict[str, Obj]:
    return {o["spec"]["nodeName"]: o for o in s.core.store.iter(SLICES)}


def pod_with_template(name: str, template: str) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
            "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpus"}]}}],
        },
    }


def template(name: str, count: int, device_class: str = "gpu.nvidia.com") -> Obj:
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class, "count": count}}
    return {
        "metadata": {"name": name},
        "spec": {"metadata": {"labels": {"t": name}}, "spec": {"devices": {"requests": [request]}}},
    }


def test_mix_and_plans() -> None:
    plans = plan_nodes(4, 8, parse_mix("h100,a100-mig,l4:4"))
    assert [(p.name, p.model, p.gpus) for p in plans] == [
        ("gpu-node-0", "H100", 8), ("gpu-node-1", "A100", 8), ("gpu-node-2", "L4", 4), ("gpu-node-3", "H100", 8),
    ]  # fmt: skip
    assert sorted(plans[1].mig) == [0, 2, 4, 6] and not plans[0].mig
    with pytest.raises(ValueError, match="unknown GPU model"):
        parse_mix("v100")
    with pytest.raises(ValueError, match="does not support MIG"):
        parse_mix("l4-mig")
    assert generate_name("p", "gpus") == "p-gpus-"
    long = generate_name("p" * 60, "c" * 20)
    assert long == "p" * 41 + "-" + "c" * 13  # proportional, and (as upstream) no trailing hyphen


async def test_slices_follow_the_daemonset_selection(cluster: Sandbox) -> None:
    await install_driver(cluster, ["gpu-node-0", "gpu-node-1"])
    slices = slices_by_node(cluster)
    assert sorted(slices) == ["gpu-node-0", "gpu-node-1"]
    node0 = cluster.core.store.get(("", "nodes"), "", "gpu-node-0")
    assert node0 is not None
    s0 = slices["gpu-node-0"]
    assert s0["metadata"]["ownerReferences"][0]["uid"] == node0["metadata"]["uid"]
    assert re.fullmatch(r"gpu-node-0-gpu\.nvidia\.com-[a-z0-9]{5}", s0["metadata"]["name"])
    assert s0["spec"]["pool"]["name"] == "gpu-node-0" and len(s0["spec"]["devices"]) == 8
    assert any("-mig-" in d["name"] for d in slices["gpu-node-1"]["spec"]["devices"])  # A100, partly MIG
    ds = cluster.core.store.get(("apps", "daemonsets"), "nvidia", PLUGIN)
    assert ds is not None and ds["status"]["desiredNumberScheduled"] == 2 and ds["status"]["numberReady"] == 2
    await label_node(cluster, "gpu-node-0", None)
    await label_node(cluster, "gpu-node-2", "true")
    await settle(cluster)
    assert sorted(slices_by_node(cluster)) == ["gpu-node-1", "gpu-node-2"]
    ds = cluster.core.store.get(("apps", "daemonsets"), "nvidia", PLUGIN)
    assert ds is not None and ds["status"]["desiredNumberScheduled"] == 2
    # deleting the DaemonSet unpublishes everything
    await cluster.core.delete(rt(cluster.core, "apps", "v1", "daemonsets"), "nvidia", PLUGIN, {}, CTX)
    await settle(cluster)
    assert slices_by_node(cluster) == {}


async def test_workload_status(cluster: Sandbox) -> None:
    await create(cluster, "", "namespaces", "", {"metadata": {"name": "apps"}})
    pod_template = {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    deploy = {
        "metadata": {"name": "d"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}}, "template": pod_template},
    }
    await create(cluster, "apps", "deployments", "apps", deploy)
    container: Obj = {"name": "c", "image": "i"}
    stuck = {**pod_template, "spec": {"containers": [container], "nodeSelector": {"nope": "x"}}}
    await create(
        cluster,
        "apps",
        "deployments",
        "apps",
        {"metadata": {"name": "stuck"}, "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": stuck}},
    )
    tainted = {**pod_template, "spec": {"containers": [container], "tolerations": []}}
    await create(
        cluster,
        "apps",
        "daemonsets",
        "apps",
        {"metadata": {"name": "ds"}, "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": tainted}},
    )
    await settle(cluster)
    d = cluster.core.store.get(("apps", "deployments"), "apps", "d")
    assert d is not None
    status = d["status"]
    assert (status["replicas"], status["readyReplicas"], status["availableReplicas"], status["observedGeneration"]) == (
        2,
        2,
        2,
        1,
    )
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Available": "True", "Progressing": "True"}
    st = cluster.core.store.get(("apps", "deployments"), "apps", "stuck")
    assert st is not None and st["status"]["unavailableReplicas"] == 1 and "readyReplicas" not in st["status"]
    ds = cluster.core.store.get(("apps", "daemonsets"), "apps", "ds")
    assert ds is not None and ds["status"]["desiredNumberScheduled"] == 3
    # a NoSchedule taint removes a node from the DaemonSet
    taint = {"spec": {"taints": [{"key": "gpu", "value": "busy", "effect": "NoSchedule"}]}}
    await cluster.core.patch(rt(cluster.core, "", "v1", "nodes"), "", "gpu-node-2", MERGE_PATCH, taint, CTX)
    await settle(cluster)
    ds = cluster.core.store.get(("apps", "daemonsets"), "apps", "ds")
    assert (
        ds is not None and ds["status"]["desiredNumberScheduled"] == 2 and ds["status"]["currentNumberScheduled"] == 2
    )


async def test_claims_from_templates_scheduling_and_kubelet(cluster: Sandbox) -> None:
    await install_driver(cluster, ["gpu-node-0", "gpu-node-1", "gpu-node-2"])
    await create(cluster, "", "pods", "default", pod_with_template("trainer", "two-gpus"))
    await settle(cluster)
    pod = cluster.core.store.get(("", "pods"), "default", "trainer")
    assert pod is not None and "resourceClaimStatuses" not in pod["status"]  # template missing: retried
    await create(cluster, "resource.k8s.io", "resourceclaimtemplates", "default", template("two-gpus", 2))
    await settle(cluster)
    pod = cluster.core.store.get(("", "pods"), "default", "trainer")
    assert pod is not None
    [status] = pod["status"]["resourceClaimStatuses"]
    claim_name = status["resourceClaimName"]
    assert status["name"] == "gpus" and re.fullmatch(r"trainer-gpus-[a-z0-9]{5}", claim_name)
    claim = cluster.core.store.get(CLAIMS, "default", claim_name)
    assert claim is not None
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpus"
    assert claim["metadata"]["labels"] == {"t": "two-gpus"}
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        "trainer",
        pod["metadata"]["uid"],
        True,
    )
    allocation = claim["status"]["allocation"]
    results = allocation["devices"]["results"]
    assert [(r["request"], r["driver"], r["pool"]) for r in results] == [("gpu", "gpu.nvidia.com", "gpu-node-0")] * 2
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["gpu-node-0"]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer", "uid": pod["metadata"]["uid"]}]
    assert pod["spec"]["nodeName"] == "gpu-node-0" and pod["status"]["phase"] == "Running"
    ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert ready["Ready"] == "True" and ready["PodScheduled"] == "True"
    assert pod["status"]["containerStatuses"][0]["ready"] is True
    events = [e for e in cluster.core.store.iter(("", "events"), "default") if e["involvedObject"]["name"] == "trainer"]
    assert [e["reason"] for e in events] == ["Scheduled"]
    # deleting the pod frees its devices: the claim loses its allocation and finalizer and goes
    await cluster.core.delete(rt(cluster.core, "", "v1", "pods"), "default", "trainer", {}, CTX)
    await settle(cluster)
    assert cluster.core.store.get(CLAIMS, "default", claim_name) is None


async def test_failed_scheduling_events_explain(cluster: Sandbox) -> None:
    await install_driver(cluster, ["gpu-node-0", "gpu-node-1", "gpu-node-2"])
    await create(cluster, "resource.k8s.io", "resourceclaimtemplates", "default", template("nine", 9))
    await create(cluster, "", "pods", "default", pod_with_template("huge", "nine"))
    legacy = {
        "metadata": {"name": "legacy"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
    }
    await create(cluster, "", "pods", "default", legacy)
    await settle(cluster)
    events = {e["involvedObject"]["name"]: e for e in cluster.core.store.iter(("", "events"), "default")}
    huge = events["huge"]
    assert (huge["type"], huge["reason"], huge["source"]["component"]) == (
        "Warning",
        "FailedScheduling",
        "default-scheduler",
    )
    assert huge["message"].startswith(
        "0/3 nodes are available: 3 cannot allocate all claims. still not schedulable, preemption: "
        "0/3 nodes are available: 3 Preemption is not helpful for scheduling. allocator: "
    )
    assert "gpu-node-0: request gpu: 8/8 devices usable, need 9" in huge["message"]
    assert "gpu-node-2: request gpu: 4/4 devices usable, need 9" in huge["message"]
    assert events["legacy"]["message"] == (
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. still not schedulable, preemption: "
        "0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )
    pod = cluster.core.store.get(("", "pods"), "default", "huge")
    assert pod is not None and not pod["spec"].get("nodeName")
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    # a cluster change retries the pod; the same answer bumps the event's count
    await label_node(cluster, "gpu-node-2", None)
    await create(cluster, "resource.k8s.io", "deviceclasses", "", {"metadata": {"name": "x.example.com"}, "spec": {}})
    await settle(cluster)
    assert cluster.sim is not None
    import asyncio

    def counted() -> int:
        return sum(
            e["count"]
            for e in cluster.core.store.iter(("", "events"), "default")
            if e["involvedObject"]["name"] == "huge"
        )

    deadline = asyncio.get_running_loop().time() + 10.0
    while counted() < 2:  # the scheduler retries after its back-off: wait for it, with a deadline
        assert asyncio.get_running_loop().time() < deadline, "the pod was not retried"
        await asyncio.sleep(0.05)
        await settle(cluster)


def test_fit_error_shapes() -> None:
    from collections import Counter

    assert fit_error(0, Counter()) == "no nodes available to schedule pods"
    message = fit_error(4, Counter({"cannot allocate all claims": 3, "node(s) had untolerated taint {a: b}": 1}))
    assert message == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {a: b}, 3 cannot allocate all claims. "
        "still not schedulable, preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    )
    assert fit_error(2, Counter(), "request gpu: device class x does not exist").startswith(
        "0/2 nodes are available: request gpu: device class x does not exist. still not schedulable"
    )
