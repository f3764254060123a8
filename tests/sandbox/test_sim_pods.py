"""The simulated workload controllers create real pods: DaemonSet pods per eligible node (pinned
with node affinity, scheduled, claims allocated), Deployment -> ReplicaSet -> pods, rollouts,
status computed from the pods, and what ``kubectl get pods -n gpu-operator`` shows."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucluster.controller.operands.dra_driver import GPU_DEVICE_CLASSES
from gpucluster.sandbox.apiserver.core import MERGE_PATCH, Context
from gpucluster.sandbox.apiserver.store import Event
from gpucluster.sandbox.server import Sandbox
from gpucluster.sandbox.sim import SimulationOptions
from gpucluster.sandbox.sim.workloads import compute_hash
from tests.sandbox.conftest import KUBECTL, rt

Obj = dict[str, Any]
CTX = Context(field_manager="test")
PODS = ("", "pods")
CLAIMS = ("resource.k8s.io", "resourceclaims")
DAEMONSETS = ("apps", "daemonsets")
REPLICASETS = ("apps", "replicasets")
NS = "gpu-operator"
PLUGIN = "nvidia-dra-driver-kubelet-plugin"
DRIVER_LABEL = "nvidia.com/gpu.deploy.dra-driver"
VALIDATOR_LABEL = "nvidia.com/gpu.deploy.dra-validator"
ADMIN_LABEL = "resource.kubernetes.io/admin-access"


@pytest.fixture
async def cluster() -> AsyncIterator[Sandbox]:
    s = Sandbox(simulate=SimulationOptions(nodes=3, gpus_per_node=4, mix="h100"))
    await s.start()
    await create(s, "", "namespaces", "", {"metadata": {"name": NS, "labels": {ADMIN_LABEL: "true"}}})
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


async def eventually(s: Sandbox, what: str, probe: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Settle until ``probe()`` is truthy (the scheduler retries unschedulable pods after 1 s)."""
    deadline = time.monotonic() + timeout
    while True:
        await settle(s)
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def create(s: Sandbox, group: str, plural: str, ns: str, body: Obj) -> Obj:
    obj: Obj = await s.core.create(rt(s.core, group, "v1", plural), ns, body, CTX)
    return obj


async def patch(s: Sandbox, group: str, plural: str, ns: str, name: str, body: Obj) -> Obj:
    obj, _ = await s.core.patch(rt(s.core, group, "v1", plural), ns, name, MERGE_PATCH, body, CTX)
    assert isinstance(obj, dict)
    return obj


async def label(s: Sandbox, node: str, labels: dict[str, str | None]) -> None:
    await patch(s, "", "nodes", "", node, {"metadata": {"labels": labels}})


def daemonset(name: str, *, node_selector: dict[str, str], **spec: Any) -> Obj:
    pod_spec: Obj = {"nodeSelector": node_selector, "containers": [{"name": "main", "image": f"example.com/{name}:1"}]}
    pod_spec.update(spec)
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
        },
    }


def pods_of(s: Sandbox, owner: str, ns: str = NS) -> list[Obj]:
    out = []
    for pod in s.core.store.iter(PODS, ns):
        refs = pod["metadata"].get("ownerReferences") or []
        if any(r["name"] == owner and r.get("controller") for r in refs):
            out.append(pod)
    return out


def by_node(pods: list[Obj]) -> dict[str, Obj]:
    return {p["spec"]["nodeName"]: p for p in pods if p["spec"].get("nodeName")}


def ds_status(s: Sandbox, name: str) -> Obj:
    ds = s.core.store.get(DAEMONSETS, NS, name)
    assert ds is not None
    status: Obj = ds.get("status") or {}
    return status


def running(pod: Obj) -> bool:
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])
    return bool(pod["status"].get("phase") == "Running" and ready)


async def install_driver(s: Sandbox, nodes: list[str]) -> None:
    """The DeviceClasses and the kubelet-plugin DaemonSet on ``nodes``: their slices appear."""
    for name, expression in GPU_DEVICE_CLASSES.items():
        body = {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": expression}}]}}
        await create(s, "resource.k8s.io", "deviceclasses", "", body)
    plugin = daemonset(PLUGIN, node_selector={DRIVER_LABEL: "true"})
    plugin["spec"]["template"]["spec"]["containers"].append({"name": "compute-domains", "image": "example.com/cd:1"})
    plugin["spec"]["template"]["spec"]["initContainers"] = [{"name": "dra-driver-validator", "image": "x:1"}]
    await create(s, "apps", "daemonsets", NS, plugin)
    for node in nodes:
        await label(s, node, {DRIVER_LABEL: "true"})
    await settle(s)


def admin_template(name: str, *, all_devices: bool) -> Obj:
    exactly: Obj = {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}
    exactly.update({"allocationMode": "All"} if all_devices else {"allocationMode": "ExactCount", "count": 1})
    return {
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def with_claim(ds: Obj, claim: str, template: str) -> Obj:
    spec = ds["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": claim, "resourceClaimTemplateName": template}]
    spec["containers"][0]["resources"] = {"claims": [{"name": claim}]}
    return ds


# --------------------------------------------------------------------------- DaemonSet pods


async def test_daemonset_pods_per_eligible_node(cluster: Sandbox) -> None:
    s = cluster
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}
                ]
            }
        }
    }
    toleration = {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}
    ds = daemonset("agent", node_selector={"role": "gpu"}, affinity=affinity, tolerations=[toleration])
    await create(s, "apps", "daemonsets", NS, ds)
    await label(s, "gpu-node-0", {"role": "gpu"})
    await label(s, "gpu-node-1", {"role": "gpu"})
    await settle(s)
    pods = pods_of(s, "agent")
    assert sorted(by_node(pods)) == ["gpu-node-0", "gpu-node-1"] and len(pods) == 2
    stored = s.core.store.get(DAEMONSETS, NS, "agent")
    assert stored is not None
    for node, pod in by_node(pods).items():
        md, spec = pod["metadata"], pod["spec"]
        assert re.fullmatch(r"agent-[a-z0-9]{5}", md["name"])
        assert md["labels"]["app"] == "agent" and md["labels"]["pod-template-generation"] == "1"
        assert md["labels"]["controller-revision-hash"] == compute_hash(stored["spec"]["template"])
        [owner] = md["ownerReferences"]
        assert owner == {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "agent",
            "uid": stored["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        # pinned by node affinity (the template's required affinity is replaced), bound by the scheduler
        required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert required == {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        }
        keys = {(t["key"], t["effect"]) for t in spec["tolerations"]}
        assert ("maintenance", "NoSchedule") in keys and ("node.kubernetes.io/unschedulable", "NoSchedule") in keys
        assert running(pod)
        assert [c["name"] for c in pod["status"]["containerStatuses"]] == ["main"]
    events = [e for e in s.core.store.iter(("", "events"), NS) if e["involvedObject"]["name"] == "agent"]
    assert {e["reason"] for e in events} == {"SuccessfulCreate"}
    assert ds_status(s, "agent") == {
        "currentNumberScheduled": 2,
        "desiredNumberScheduled": 2,
        "numberMisscheduled": 0,
        "numberReady": 2,
        "numberAvailable": 2,
        "observedGeneration": 1,
        "updatedNumberScheduled": 2,
    }

    # a tolerated NoSchedule taint does not matter; an untolerated one keeps new pods away
    # but leaves the running pod (misscheduled); an untolerated NoExecute taint evicts it
    taint = {"spec": {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}}
    await patch(s, "", "nodes", "", "gpu-node-1", taint)
    await label(s, "gpu-node-2", {"role": "gpu"})
    await patch(
        s, "", "nodes", "", "gpu-node-2", {"spec": {"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}}
    )
    await settle(s)
    assert sorted(by_node(pods_of(s, "agent"))) == ["gpu-node-0", "gpu-node-1", "gpu-node-2"]
    status = ds_status(s, "agent")
    assert (status["desiredNumberScheduled"], status["currentNumberScheduled"], status["numberMisscheduled"]) == (
        2,
        2,
        1,
    )
    await patch(s, "", "nodes", "", "gpu-node-1", {"spec": {"taints": [{"key": "dedicated", "effect": "NoExecute"}]}})
    # a node that no longer matches the selector loses its pod
    await label(s, "gpu-node-0", {"role": None})
    await settle(s)
    assert sorted(by_node(pods_of(s, "agent"))) == ["gpu-node-2"]
    assert ds_status(s, "agent")["desiredNumberScheduled"] == 1
    # pods of a deleted DaemonSet go
    await s.core.delete(rt(s.core, "apps", "v1", "daemonsets"), NS, "agent", {}, CTX)
    await settle(s)
    assert pods_of(s, "agent") == []


async def test_admin_access_claims_allocated_on_busy_gpus(cluster: Sandbox) -> None:
    s = cluster
    await install_driver(s, ["gpu-node-0", "gpu-node-1", "gpu-node-2"])
    plugins = pods_of(s, PLUGIN)
    assert len(plugins) == 3 and all(running(p) for p in plugins)
    assert len(list(s.core.store.iter(("resource.k8s.io", "resourceslices")))) == 3
    # a workload takes every GPU of gpu-node-0
    all_gpus = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}
    await create(
        s,
        "resource.k8s.io",
        "resourceclaims",
        NS,
        {"metadata": {"name": "greedy"}, "spec": {"devices": {"requests": [all_gpus]}}},
    )
    greedy = {
        "metadata": {"name": "greedy"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "gpu-node-0"},
            "resourceClaims": [{"name": "gpus", "resourceClaimName": "greedy"}],
            "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpus"}]}}],
        },
    }
    await create(s, "", "pods", NS, greedy)
    await settle(s)
    pod = s.core.store.get(PODS, NS, "greedy")
    assert pod is not None and pod["spec"]["nodeName"] == "gpu-node-0" and running(pod)
    # the validator (one GPU) and the DCGM exporter (all GPUs) use adminAccess: in-use devices are fine
    await create(s, "resource.k8s.io", "resourceclaimtemplates", NS, admin_template("validator-gpu", all_devices=False))
    await create(s, "resource.k8s.io", "resourceclaimtemplates", NS, admin_template("exporter-gpus", all_devices=True))
    validator = with_claim(
        daemonset("validator", node_selector={DRIVER_LABEL: "true"}), "validation-gpu", "validator-gpu"
    )
    exporter = with_claim(daemonset("exporter", node_selector={DRIVER_LABEL: "true"}), "admin-gpus", "exporter-gpus")
    await create(s, "apps", "daemonsets", NS, validator)
    await create(s, "apps", "daemonsets", NS, exporter)
    await eventually(
        s,
        "validator and exporter ready",
        lambda: all(ds_status(s, d).get("numberReady") == 3 for d in ("validator", "exporter")),
    )
    for name, devices in (("validator", 1), ("exporter", 4)):
        for node, pod in by_node(pods_of(s, name)).items():
            assert running(pod)
            [claim_status] = pod["status"]["resourceClaimStatuses"]
            claim = s.core.store.get(CLAIMS, NS, claim_status["resourceClaimName"])
            assert claim is not None
            results = claim["status"]["allocation"]["devices"]["results"]
            assert len(results) == devices and all(r["adminAccess"] is True and r["pool"] == node for r in results)
            assert claim["status"]["reservedFor"] == [
                {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
            ]
    status = ds_status(s, "validator")
    assert (status["desiredNumberScheduled"], status["numberAvailable"], status.get("numberUnavailable")) == (
        3,
        3,
        None,
    )


async def test_validator_stays_pending_without_gpus(cluster: Sandbox) -> None:
    """Status comes from the pods: a validator whose GPU claim cannot be allocated is Pending
    and the DaemonSet is not ready, until the DRA driver publishes the node's GPUs."""
    s = cluster
    await install_driver(s, ["gpu-node-0", "gpu-node-1"])  # gpu-node-2 publishes no slices
    await create(s, "resource.k8s.io", "resourceclaimtemplates", NS, admin_template("validator-gpu", all_devices=False))
    for node in ("gpu-node-0", "gpu-node-1", "gpu-node-2"):
        await label(s, node, {VALIDATOR_LABEL: "true"})
    validator = daemonset("nvidia-dra-validator", node_selector={VALIDATOR_LABEL: "true"})
    await create(s, "apps", "daemonsets", NS, with_claim(validator, "validation-gpu", "validator-gpu"))
    await eventually(s, "two validators ready", lambda: ds_status(s, "nvidia-dra-validator").get("numberReady") == 2)
    status = ds_status(s, "nvidia-dra-validator")
    assert status["desiredNumberScheduled"] == 3 and status["currentNumberScheduled"] == 3
    assert status["numberAvailable"] == 2 and status["numberUnavailable"] == 1
    pending = [p for p in pods_of(s, "nvidia-dra-validator") if not p["spec"].get("nodeName")]
    assert len(pending) == 1
    [pod] = pending
    assert pod["status"]["phase"] == "Pending"
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "False" and scheduled["reason"] == "Unschedulable"
    assert scheduled["message"].startswith(
        "0/3 nodes are available: 1 cannot allocate all claims, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )
    assert "allocator: gpu-node-2: no devices are published for this node" in scheduled["message"]
    # the kubelet plugin starts on gpu-node-2, its slices appear, the validator gets its GPU
    await label(s, "gpu-node-2", {DRIVER_LABEL: "true"})
    await eventually(s, "three validators ready", lambda: ds_status(s, "nvidia-dra-validator").get("numberReady") == 3)
    assert all(running(p) for p in pods_of(s, "nvidia-dra-validator"))
    assert "numberUnavailable" not in ds_status(s, "nvidia-dra-validator")


async def test_daemonset_rollouts(cluster: Sandbox) -> None:
    s = cluster
    for node in ("gpu-node-0", "gpu-node-1", "gpu-node-2"):
        await label(s, node, {"role": "gpu"})
    await create(s, "apps", "daemonsets", NS, daemonset("agent", node_selector={"role": "gpu"}))
    await settle(s)
    before = {p["metadata"]["name"] for p in pods_of(s, "agent")}
    assert len(before) == 3
    unavailable: list[int] = []

    def watch(event: Event) -> None:
        if event.resource == DAEMONSETS and event.obj["metadata"]["name"] == "agent":
            unavailable.append(int((event.obj.get("status") or {}).get("numberUnavailable") or 0))

    unsubscribe = s.store.subscribe(watch)
    try:
        template = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "example.com/agent:2"}]}}}}
        ds = await patch(s, "apps", "daemonsets", NS, "agent", template)
        assert ds["metadata"]["generation"] == 2
        await settle(s)
    finally:
        unsubscribe()
    pods = pods_of(s, "agent")
    assert len(pods) == 3 and not before & {p["metadata"]["name"] for p in pods}  # every pod was replaced
    new_hash = compute_hash(ds["spec"]["template"])
    assert {p["metadata"]["labels"]["controller-revision-hash"] for p in pods} == {new_hash}
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {"example.com/agent:2"} and all(map(running, pods))
    assert max(unavailable) == 1  # RollingUpdate with the default maxUnavailable 1
    status = ds_status(s, "agent")
    assert (status["observedGeneration"], status["updatedNumberScheduled"], status["numberAvailable"]) == (2, 3, 3)

    # OnDelete: a template change rolls nothing; a deleted pod comes back with the new template
    await patch(
        s, "apps", "daemonsets", NS, "agent", {"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None}}}
    )
    await settle(s)
    assert ds_status(s, "agent")["updatedNumberScheduled"] == 3  # the template did not change
    template = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "example.com/agent:3"}]}}}}
    await patch(s, "apps", "daemonsets", NS, "agent", template)
    await settle(s)
    pods = pods_of(s, "agent")
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {"example.com/agent:2"}
    status = ds_status(s, "agent")
    assert "updatedNumberScheduled" not in status and status["numberReady"] == 3 and status["observedGeneration"] == 4
    victim = by_node(pods)["gpu-node-1"]["metadata"]["name"]
    await s.core.delete(rt(s.core, "", "v1", "pods"), NS, victim, {}, CTX)
    await settle(s)
    images = {n: p["spec"]["containers"][0]["image"] for n, p in by_node(pods_of(s, "agent")).items()}
    assert images == {
        "gpu-node-0": "example.com/agent:2",
        "gpu-node-1": "example.com/agent:3",
        "gpu-node-2": "example.com/agent:2",
    }
    assert ds_status(s, "agent")["updatedNumberScheduled"] == 1


# --------------------------------------------------------------------------- Deployments


async def test_deployment_replicaset_pods(cluster: Sandbox) -> None:
    s = cluster
    template: Obj = {
        "metadata": {"labels": {"app": "ctl"}},
        "spec": {
            "tolerations": [
                {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [{"name": "ctl", "image": "example.com/ctl:1"}],
        },
    }
    deploy = {
        "metadata": {"name": "ctl"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "ctl"}}, "template": template},
    }
    created = await create(s, "apps", "deployments", NS, deploy)
    await settle(s)
    [rs] = list(s.core.store.iter(REPLICASETS, NS))
    hash_ = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"ctl-{hash_}" and re.fullmatch(r"[bcdfghjklmnpqrstvwxz2456789]{1,10}", hash_)
    assert rs["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "ctl", "pod-template-hash": hash_}
    assert rs["status"] == {
        "replicas": 2,
        "fullyLabeledReplicas": 2,
        "readyReplicas": 2,
        "availableReplicas": 2,
        "observedGeneration": 1,
    }
    pods = pods_of(s, rs["metadata"]["name"])
    assert len(pods) == 2 and all(running(p) for p in pods)
    for pod in pods:
        assert re.fullmatch(rf"ctl-{hash_}-[a-z0-9]{{5}}", pod["metadata"]["name"])
        assert pod["metadata"]["labels"] == {"app": "ctl", "pod-template-hash": hash_}
        assert pod["spec"]["nodeName"]  # placed by the scheduler
    d = s.core.store.get(("apps", "deployments"), NS, "ctl")
    assert d is not None and d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    status = d["status"]
    assert (status["replicas"], status["updatedReplicas"], status["readyReplicas"], status["availableReplicas"]) == (
        2,
        2,
        2,
        2,
    )
    assert {c["type"]: c["reason"] for c in status["conditions"]} == {
        "Available": "MinimumReplicasAvailable",
        "Progressing": "NewReplicaSetAvailable",
    }

    # a template change: a new ReplicaSet takes over, the old one is scaled to 0
    template["spec"]["containers"][0]["image"] = "example.com/ctl:2"
    await patch(s, "apps", "deployments", NS, "ctl", {"spec": {"template": template}})
    await settle(s)
    sets = {r["metadata"]["name"]: r for r in s.core.store.iter(REPLICASETS, NS)}
    assert len(sets) == 2
    old = sets.pop(rs["metadata"]["name"])
    [new] = sets.values()
    assert old["spec"]["replicas"] == 0 and old["status"]["replicas"] == 0 and pods_of(s, old["metadata"]["name"]) == []
    assert new["spec"]["replicas"] == 2 and new["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    new_pods = pods_of(s, new["metadata"]["name"])
    assert len(new_pods) == 2 and {p["spec"]["containers"][0]["image"] for p in new_pods} == {"example.com/ctl:2"}
    d = s.core.store.get(("apps", "deployments"), NS, "ctl")
    assert d is not None
    assert (d["status"]["observedGeneration"], d["status"]["updatedReplicas"], d["status"]["availableReplicas"]) == (
        2,
        2,
        2,
    )
    # RollingUpdate with maxSurge 25% (1) and maxUnavailable 25% (0): one new pod at a time
    scaling = {e["message"] for e in s.core.store.iter(("", "events"), NS) if e["reason"] == "ScalingReplicaSet"}
    old_name, new_name = old["metadata"]["name"], new["metadata"]["name"]
    assert scaling == {
        f"Scaled up replica set {old_name} from 0 to 2",
        f"Scaled up replica set {new_name} from 0 to 1",
        f"Scaled down replica set {old_name} from 2 to 1",
        f"Scaled up replica set {new_name} from 1 to 2",
        f"Scaled down replica set {old_name} from 1 to 0",
    }
    # scaling, then deleting the Deployment takes ReplicaSets and pods along
    await patch(s, "apps", "deployments", NS, "ctl", {"spec": {"replicas": 3}})
    await settle(s)
    assert len(pods_of(s, new["metadata"]["name"])) == 3
    await s.core.delete(rt(s.core, "apps", "v1", "deployments"), NS, "ctl", {}, CTX)
    await settle(s)
    assert list(s.core.store.iter(REPLICASETS, NS)) == [] and list(s.core.store.iter(PODS, NS)) == []


# --------------------------------------------------------------------------- kubectl


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not Path(KUBECTL).exists():
        pytest.skip("kubectl not installed")
    from gpucluster.cli.run import RunOptions
    from tests.e2e.test_run import StackThread

    kubeconfig = tmp_path_factory.mktemp("pods") / "kubeconfig"
    runner = StackThread(RunOptions(sandbox=True, kubeconfig_out=kubeconfig, nodes=2, mix="h100,gb200"))
    stack = runner.start()
    try:
        yield stack
    finally:
        runner.stop()


def test_kubectl_get_pods_shows_the_operands(stack: Any) -> None:
    from tests.e2e.test_run import GPUCLUSTER, get_json, kubectl, wait_for

    if not stack.controller_started:
        pytest.skip("controller not available")
    kubectl(stack, "create", "-f", "-", stdin=GPUCLUSTER)

    def all_running() -> bool:
        if get_json(stack, "gpucluster", "gpu-cluster").get("status", {}).get("state") != "ready":
            return False
        pods = get_json(stack, "pods", "-n", NS)["items"]
        return len(pods) == 7 and all(p["status"].get("phase") == "Running" for p in pods)

    wait_for("the operands to run", all_running, timeout=30)
    table = kubectl(stack, "get", "pods", "-n", NS).stdout
    rows = [line.split() for line in table.splitlines()]
    assert rows[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    shown = {(re.sub(r"-[a-z0-9]{5}$", "", r[0]), r[1], r[2], r[3]) for r in rows[1:]}
    controller = next(r[0] for r in rows[1:] if r[0].startswith("nvidia-dra-driver-controller-"))
    assert re.fullmatch(r"nvidia-dra-driver-controller-[bcdfghjklmnpqrstvwxz2456789]{1,10}-[a-z0-9]{5}", controller)
    assert shown == {
        ("nvidia-dra-driver-kubelet-plugin", "2/2", "Running", "0"),
        ("nvidia-dra-validator", "1/1", "Running", "0"),
        ("nvidia-dcgm-exporter", "1/1", "Running", "0"),
        (re.sub(r"-[a-z0-9]{5}$", "", controller), "1/1", "Running", "0"),
    }
    assert sum(1 for r in rows[1:] if r[0].startswith(f"{PLUGIN}-")) == 2
    wide = kubectl(stack, "get", "pods", "-n", NS, "-o", "wide", "-l", "app=nvidia-dra-validator").stdout
    assert "gpu-node-0" in wide and "gpu-node-1" in wide
