"""``gpucluster.audit``: the pure audit over listed objects (owner chains, opt-outs, native mapping ...)
and the ``audit`` command's output and exit codes (with the listing stubbed out)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpucluster.audit import Finding, audit, requested_gpus
from gpucluster.cli import audit as command
from gpucluster.policy import Settings
from gpucluster.webhook.audit import decider
from tests.migrate.conftest import Main

Obj = dict[str, Any]


def gpu_container(name: str = "cuda", gpus: Any = 2, *, request: Any = None) -> Obj:
    resources: Obj = {"limits": {"nvidia.com/gpu": gpus, "cpu": "1"}}
    if request is not None:
        resources["requests"] = {"nvidia.com/gpu": request}
    return {"name": name, "image": "nvcr.io/nvidia/cuda:12.6.2-base-ubi9", "resources": resources}


def migrated_container(name: str = "cuda") -> Obj:
    return {"name": name, "image": "x", "resources": {"claims": [{"name": "gpu-0"}]}}


def template(*containers: Obj, labels: dict[str, str] | None = None, claims: bool = False) -> Obj:
    spec: Obj = {"containers": list(containers)}
    if claims:
        spec["resourceClaims"] = [{"name": "gpu-0", "resourceClaimTemplateName": "gpucluster-gpu-2-x"}]
    return {"metadata": {"labels": labels or {"app": "x"}}, "spec": spec}


def obj(kind: str, name: str, namespace: str = "ml", *, owner: Obj | None = None, **spec: Any) -> Obj:
    api = {"Pod": "v1", "Job": "batch/v1", "CronJob": "batch/v1"}.get(kind, "apps/v1")
    meta: Obj = {"name": name, "namespace": namespace, "uid": f"uid-{kind}-{namespace}-{name}"}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner.get("apiVersion", "v1"),
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"].get("uid", "uid-unlisted"),
                "controller": True,
            }
        ]
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}


def pod(name: str, tpl: Obj, namespace: str = "ml", *, owner: Obj | None = None) -> Obj:
    p = obj("Pod", name, namespace, owner=owner, **tpl["spec"])
    p["metadata"].update(tpl["metadata"])
    p["spec"]["nodeName"] = "gpu-node-1"
    return p


def deployment_with_pods(name: str, tpl: Obj, pods: int, namespace: str = "ml") -> list[Obj]:
    deploy = obj("Deployment", name, namespace, replicas=pods, template=tpl)
    rs = obj("ReplicaSet", f"{name}-5d4f8", namespace, owner=deploy, replicas=pods, template=tpl)
    return [deploy, rs, *(pod(f"{name}-5d4f8-{i}", tpl, namespace, owner=rs) for i in range(pods))]


def namespace(name: str, **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def device_class(name: str, extended: str | None = None) -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def only(findings: list[Finding], kind: str, name: str) -> Finding:
    found = [f for f in findings if (f.kind, f.name) == (kind, name)]
    assert len(found) == 1, findings
    return found[0]


# ----------------------------------------------------------------------------- owner chains


def test_deployment_pods_replicaset_are_one_finding_with_the_owner_chain() -> None:
    objects = [namespace("ml"), *deployment_with_pods("trainer", template(gpu_container()), 2)]
    (finding,) = audit(objects, decide=decider())
    assert (finding.namespace, finding.kind, finding.name) == ("ml", "Deployment", "trainer")
    assert finding.chain_kinds == "Pod -> ReplicaSet -> Deployment"
    assert [str(r) for r in finding.chain] == ["Pod/trainer-5d4f8-0", "ReplicaSet/trainer-5d4f8", "Deployment/trainer"]
    assert finding.pods == 2
    assert finding.gpus == {"nvidia.com/gpu": "2"}
    assert finding.action == "translate"
    assert finding.reason == "new pods get DRA claims (gpu.nvidia.com=2)"


def test_migrated_deployment_is_not_listed() -> None:
    objects = [
        namespace("ml"),
        *deployment_with_pods("legacy", template(gpu_container()), 1),
        *deployment_with_pods("migrated", template(migrated_container(), claims=True), 2),
    ]
    assert [f.name for f in audit(objects, decide=decider())] == ["legacy"]


def test_deployment_scaled_to_zero_counts_from_its_template() -> None:
    deploy = obj("Deployment", "idle", replicas=0, template=template(gpu_container(gpus=1)))
    (finding,) = audit([namespace("ml"), deploy], decide=decider())
    assert finding.pods == 0 and finding.chain_kinds == "Deployment"
    assert finding.gpus == {"nvidia.com/gpu": "1"}


def test_cronjob_job_pod_chain() -> None:
    tpl = template(gpu_container(gpus=4))
    cron = obj("CronJob", "nightly", schedule="0 2 * * *", jobTemplate={"spec": {"template": tpl}})
    job = obj("Job", "nightly-2890", owner=cron, template=tpl)
    running = pod("nightly-2890-abcde", tpl, owner=job)
    (finding,) = audit([namespace("ml"), cron, job, running], decide=decider())
    assert finding.kind == "CronJob" and finding.chain_kinds == "Pod -> Job -> CronJob"
    assert finding.pods == 1 and finding.gpus == {"nvidia.com/gpu": "4"}


def test_statefulset_daemonset_and_bare_pod() -> None:
    tpl = template(gpu_container(gpus=1))
    sts = obj("StatefulSet", "db", template=tpl, serviceName="db")
    ds = obj("DaemonSet", "burn-in", template=tpl)
    objects = [namespace("ml"), sts, pod("db-0", tpl, owner=sts), ds, pod("burn-in-x7k2p", tpl, owner=ds)]
    objects.append(pod("smoke-test", tpl))
    findings = audit(objects, decide=decider())
    assert [(f.kind, f.name, f.chain_kinds, f.pods) for f in findings] == [
        ("DaemonSet", "burn-in", "Pod -> DaemonSet", 1),
        ("Pod", "smoke-test", "Pod", 1),
        ("StatefulSet", "db", "Pod -> StatefulSet", 1),
    ]


def test_pods_of_an_unlisted_custom_resource_are_grouped_under_it() -> None:
    tpl = template(gpu_container(name="pytorch", gpus=8))
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "bert", "uid": "u-bert"}}
    pods = [pod(f"bert-worker-{i}", tpl, owner=job) for i in range(3)]
    (finding,) = audit([namespace("ml"), *pods], decide=decider())
    assert (finding.kind, finding.name, finding.pods) == ("PyTorchJob", "bert", 3)
    assert finding.chain_kinds == "Pod -> PyTorchJob"
    assert finding.action == "translate"
    assert "was not listed" in finding.notes[0]


def test_pods_translated_by_the_webhook_are_counted_but_not_legacy() -> None:
    tpl = template(gpu_container())
    objects = [namespace("ml"), *deployment_with_pods("trainer", tpl, 1)]
    rs = objects[2]
    translated = pod("trainer-5d4f8-t", template(migrated_container(), claims=True), owner=rs)
    translated["metadata"]["annotations"] = {
        "gpucluster.nvidia.com/translated-from": '{"containers": {"cuda": {"nvidia.com/gpu": "2"}}}'
    }
    (finding,) = audit([*objects, translated], decide=decider())
    assert finding.pods == 1 and finding.translated_pods == 1


def test_old_revision_of_a_migrated_deployment() -> None:
    new_tpl = template(migrated_container(), claims=True)
    old_tpl = template(gpu_container())
    deploy = obj("Deployment", "web", replicas=1, template=new_tpl)
    old_rs = obj("ReplicaSet", "web-old", owner=deploy, replicas=0, template=old_tpl)
    assert audit([namespace("ml"), deploy, old_rs], decide=decider()) == []  # history kept for rollbacks: nothing runs
    still_running = pod("web-old-1", old_tpl, owner=old_rs)
    (finding,) = audit([namespace("ml"), deploy, old_rs, still_running], decide=decider())
    assert (finding.kind, finding.name, finding.pods) == ("ReplicaSet", "web-old", 1)
    assert finding.chain_kinds == "Pod -> ReplicaSet -> Deployment"
    assert "already migrated" in finding.notes[0]


# ----------------------------------------------------------------------------- what the webhook would do


def test_namespace_opt_out() -> None:
    objects = [
        namespace("ml", **{"gpucluster.nvidia.com/translate": "false"}),
        *deployment_with_pods("t", template(gpu_container()), 1),
    ]
    (finding,) = audit(objects, decide=decider())
    assert finding.action == "skip"
    assert finding.reason == "opted out (namespace label gpucluster.nvidia.com/translate=false)"


def test_pod_label_opt_out() -> None:
    tpl = template(gpu_container(), labels={"app": "nb", "gpucluster.nvidia.com/translate": "false"})
    (finding,) = audit([namespace("ml"), obj("Deployment", "nb", template=tpl)], decide=decider())
    assert finding.action == "skip" and finding.reason.startswith("opted out (pod label")


def test_native_mapping_by_a_device_class() -> None:
    objects = [
        namespace("ml"),
        device_class("gpu.nvidia.com", extended="nvidia.com/gpu"),
        obj("Deployment", "t", template=template(gpu_container())),
    ]
    (finding,) = audit(objects, decide=decider())
    assert finding.action == "skip"
    assert finding.reason == (
        "native mapping: the scheduler allocates nvidia.com/gpu by DeviceClass gpu.nvidia.com (DRAExtendedResource)"
    )
    (always,) = audit(objects, decide=decider(Settings(translation_mode="always")))
    assert always.action == "translate"


def test_operator_namespace_audit_mode_and_off() -> None:
    objects = [namespace("gpu-operator"), obj("DaemonSet", "dcgm", "gpu-operator", template=template(gpu_container()))]
    (finding,) = audit(objects, decide=decider())
    assert finding.action == "skip" and "operator namespace" in finding.reason
    objects = [namespace("ml"), obj("Deployment", "t", template=template(gpu_container()))]
    (warned,) = audit(objects, decide=decider(Settings(translation_mode="audit")))
    assert warned.action == "warn" and "audit mode" in warned.reason
    (off,) = audit(objects, decide=decider(Settings(translation_mode="off")))
    assert off.action == "skip" and off.reason == "webhook translation is off"


def test_untranslatable_requests_give_the_translation_reason() -> None:
    objects = [namespace("ml"), obj("Deployment", "t", template=template(gpu_container(gpus=2, request=1)))]
    (finding,) = audit(objects, decide=decider())
    assert finding.action == "skip"
    assert "nvidia.com/gpu request 1 differs from limit 2" in finding.reason


def test_running_pod_is_judged_without_its_node_name() -> None:
    tpl = template(gpu_container())
    (finding,) = audit([namespace("ml"), pod("bare", tpl)], decide=decider())
    assert finding.action == "translate" and "nodeName" not in finding.reason


def test_other_resources_are_not_findings() -> None:
    rdma = {"name": "net", "image": "x", "resources": {"limits": {"nvidia.com/hostdev": 1, "cpu": "1"}}}
    assert audit([namespace("ml"), obj("Deployment", "net", template=template(rdma))], decide=decider()) == []


def test_requested_gpus_is_the_effective_request() -> None:
    spec = {
        "initContainers": [
            {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": 3}}},
            {"name": "side", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}},
        ],
        "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": 1}}},
            {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": 1}}},
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu.shared": "500m"}}},
        ],
    }
    assert requested_gpus(spec) == {
        "nvidia.com/gpu": "3",
        "nvidia.com/gpu.shared": "0.5",
        "nvidia.com/mig-1g.10gb": "2",
    }


# ----------------------------------------------------------------------------- the command


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> list[Obj]:
    objects: list[Obj] = []

    async def collect(kubeconfig: str | None) -> command.Collected:
        return command.Collected(objects, True)

    monkeypatch.setattr(command, "collect", collect)
    return objects


def test_command_exit_0_when_nothing_found(
    gpucluster: Main, cluster: list[Obj], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.extend([namespace("ml"), *deployment_with_pods("m", template(migrated_container(), claims=True), 1)])
    assert gpucluster("audit") == 0
    out, err = capsys.readouterr()
    assert out == "" and "no workload requests GPUs" in err


def test_command_table_and_json(gpucluster: Main, cluster: list[Obj], capsys: pytest.CaptureFixture[str]) -> None:
    cluster.extend([namespace("ml"), *deployment_with_pods("trainer", template(gpu_container()), 2)])
    assert gpucluster("audit") == 1
    out, err = capsys.readouterr()
    header, row = out.splitlines()
    assert header.split() == ["NAMESPACE", "WORKLOAD", "OWNER", "CHAIN", "PODS", "GPUS/POD", "WEBHOOK", "REASON"]
    assert row.split()[:9] == [
        "ml", "Deployment/trainer", "Pod", "->", "ReplicaSet", "->", "Deployment", "2", "nvidia.com/gpu=2",
    ]  # fmt: skip
    assert "translate" in row
    assert "1 workload (2 running pods)" in err
    assert gpucluster("audit", "-o", "json") == 1
    data = json.loads(capsys.readouterr().out)
    assert data["webhookInstalled"] is True
    (item,) = data["workloads"]
    assert item["chain"][-1] == {"kind": "Deployment", "name": "trainer"}
    assert item["webhook"] == {"action": "translate", "reason": "new pods get DRA claims (gpu.nvidia.com=2)"}
    assert item["gpus"] == {"nvidia.com/gpu": "2"} and item["pods"] == 2 and item["translatedPods"] == 0


def test_command_cannot_connect_is_one_line(
    gpucluster: Main, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9', insecure-skip-tls-verify: true}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    assert gpucluster("audit", "--kubeconfig", str(kubeconfig)) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpucluster audit: cannot reach https://127.0.0.1:9") and len(err.strip().splitlines()) == 1
    assert gpucluster("audit", "--kubeconfig", str(tmp_path / "missing")) == 2
    assert "no such file" in capsys.readouterr().err
