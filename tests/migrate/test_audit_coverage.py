"""``gpucluster audit`` sees every workload that asks for GPUs: custom kinds at every
served version of their group (each object once), every kind ``gpucluster migrate`` rewrites, pods
counted through their owner references (translated ones too), exit 1 while anything is legacy, and
the webhook's own reason for pods it declines on purpose."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.audit import WORKLOAD_KINDS, audit, is_custom_workload
from gpucluster.cli import audit as command
from gpucluster.migrate import migrate_text
from gpucluster.policy import TRANSLATE_LABEL, WEBHOOK_CONFIG, Settings
from gpucluster.sandbox.server import SandboxThread
from gpucluster.webhook.audit import decider
from tests.kit.fakekube import FakeKube
from tests.migrate import test_ecosystem
from tests.migrate.conftest import INPUT, Main

Obj = dict[str, Any]
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

# ----------------------------------------------------------------------------- published shapes

STORM_SERVICE = """\
apiVersion: orchestration.aibrix.ai/v1alpha1
kind: StormService
metadata: {name: vllm-1p1d, namespace: default, uid: ss-1}
spec:
  replicas: 1
  stateful: true
  selector: {matchLabels: {app: vllm-1p1d}}
  template:
    metadata: {labels: {app: vllm-1p1d}}
    spec:
      roles:
      - name: prefill
        replicas: 1
        stateful: true
        template:
          metadata: {labels: {role: prefill}}
          spec:
            containers:
            - name: prefill
              image: vllm/vllm-openai:v0.9.1
              resources:
                limits: {nvidia.com/gpu: 1}
      - name: decode
        replicas: 1
        stateful: true
        template:
          metadata: {labels: {role: decode}}
          spec:
            containers:
            - name: decode
              image: vllm/vllm-openai:v0.9.1
              resources:
                limits: {nvidia.com/gpu: 1}
"""

RAY_CLUSTER_FLEET = """\
apiVersion: orchestration.aibrix.ai/v1alpha1
kind: RayClusterFleet
metadata: {name: qwen-coder-7b, namespace: default, uid: rcf-1}
spec:
  replicas: 1
  selector: {matchLabels: {model.aibrix.ai/name: qwen-coder-7b}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 25%, maxUnavailable: 25%}}
  template:
    metadata: {labels: {model.aibrix.ai/name: qwen-coder-7b}}
    spec:
      rayVersion: 2.10.0
      headGroupSpec:
        rayStartParams: {dashboard-host: 0.0.0.0}
        template:
          spec:
            containers:
            - name: ray-head
              image: vllm/vllm-openai:v0.7.1
              resources:
                limits: {cpu: "8", nvidia.com/gpu: 1}
"""

KAITO_WORKSPACE = """\
apiVersion: kaito.sh/v1beta1
kind: Workspace
metadata: {name: workspace-custom-llm, namespace: default, uid: ws-1}
resource:
  instanceType: Standard_NC24ads_A100_v4
  labelSelector: {matchLabels: {apps: custom-llm}}
inference:
  template:
    spec:
      containers:
      - name: custom-llm-container
        image: ghcr.io/huggingface/text-generation-inference:1.4
        resources:
          requests: {nvidia.com/gpu: 1}
          limits: {nvidia.com/gpu: 1}
"""

KATIB_EXPERIMENT = """\
apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata: {name: random-gpu, namespace: kubeflow, uid: exp-1}
spec:
  objective: {type: minimize, goal: 0.001, objectiveMetricName: loss}
  algorithm: {algorithmName: random}
  parallelTrialCount: 3
  maxTrialCount: 12
  parameters:
  - name: lr
    parameterType: double
    feasibleSpace: {min: "0.01", max: "0.05"}
  trialTemplate:
    primaryContainerName: training-container
    trialParameters:
    - {name: learningRate, description: Learning rate, reference: lr}
    trialSpec:
      apiVersion: batch/v1
      kind: Job
      spec:
        template:
          spec:
            containers:
            - name: training-container
              image: docker.io/kubeflowkatib/pytorch-mnist:latest
              command: ["python3", "/opt/pytorch-mnist/mnist.py", "--lr=${trialParameters.learningRate}"]
              resources:
                limits: {nvidia.com/gpu: 1}
            restartPolicy: Never
"""

CORPUS = {
    "stormservice.yaml": STORM_SERVICE,
    "rayclusterfleet.yaml": RAY_CLUSTER_FLEET,
    "workspace.yaml": KAITO_WORKSPACE,
    "experiment.yaml": KATIB_EXPERIMENT,
}


def namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _objects(doc: Any) -> list[Obj]:
    if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
        return [i for i in doc["items"] if isinstance(i, dict)]
    return [doc] if isinstance(doc, dict) else []


def _identity(obj: Obj) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return (str(obj.get("apiVersion")), str(obj.get("kind")), f"{meta.get('namespace', '')}/{meta.get('name', '')}")


def _load(text: str) -> list[Obj]:
    if text.lstrip().startswith(("{", "[")):
        return [o for o in _objects(json.loads(text))]
    return [o for d in yaml.safe_load_all(text) for o in _objects(d)]


def _corpus() -> dict[str, str]:
    texts = {f"golden/{p.name}": p.read_text() for p in sorted(INPUT.iterdir()) if p.suffix in (".yaml", ".json")}
    texts.update(CORPUS)
    for name, value in vars(test_ecosystem).items():
        if name.isupper() and isinstance(value, str) and "kind:" in value and "nvidia.com/" in value:
            texts[f"test_ecosystem.{name}"] = value
    return texts


def _migrated_objects() -> list[tuple[str, Obj]]:
    """(source, object) of every object of the corpus that ``migrate`` changes."""
    changed: list[tuple[str, Obj]] = []
    for source, text in _corpus().items():
        result = migrate_text(text, source, config=WEBHOOK_CONFIG, opt_out_label=TRANSLATE_LABEL)
        if not result.changed:
            continue
        after = {_identity(o): o for o in _load(result.text)}
        for before in _load(text):
            if before.get("kind") in ("ResourceClaimTemplate",):
                continue
            if after.get(_identity(before)) != before:
                changed.append((source, before))
    return changed


def test_audit_knows_every_kind_migrate_rewrites() -> None:
    changed = _migrated_objects()
    kinds = {(str(o.get("apiVersion")).rpartition("/")[0], str(o.get("kind"))) for _, o in changed}
    for wanted in [
        ("orchestration.aibrix.ai", "StormService"),
        ("orchestration.aibrix.ai", "RayClusterFleet"),
        ("kaito.sh", "Workspace"),
        ("kubeflow.org", "Experiment"),
    ]:
        assert wanted in kinds
    unknown = [
        (source, o.get("apiVersion"), o.get("kind"))
        for source, o in changed
        if not (is_custom_workload(o) or (o.get("kind") in WORKLOAD_KINDS and "." not in str(o.get("apiVersion"))))
    ]
    assert unknown == [], "migrate rewrites kinds audit never lists"
    # ... and audit reports each of them (before migration) as a workload asking for GPUs.
    for source, o in changed:
        ns = str((o.get("metadata") or {}).get("namespace") or "")
        findings = audit([namespace(ns), o], decide=decider())
        name = (o.get("metadata") or {}).get("name") or ""
        assert [(f.kind, f.name) for f in findings] == [(o.get("kind"), name)], source


def test_new_kinds_report_their_gpu_template() -> None:
    objects = [namespace("default"), namespace("kubeflow"), *(yaml.safe_load(t) for t in CORPUS.values())]
    findings = {f.workload: f for f in audit(objects, decide=decider())}
    assert set(findings) == {
        "StormService/vllm-1p1d",
        "RayClusterFleet/qwen-coder-7b",
        "Workspace/workspace-custom-llm",
        "Experiment/random-gpu",
    }
    assert all(f.gpus == {"nvidia.com/gpu": "1"} and f.action == "translate" for f in findings.values())
    assert "spec.template.spec.roles[0].template" in findings["StormService/vllm-1p1d"].notes[0]


# ----------------------------------------------------------------------------- served versions


def versions_kube() -> FakeKube:
    """kubeflow.org as a normal Kubeflow install serves it: PyTorchJob at v1 (preferred) and
    v1beta1, MPIJob only at v2beta1."""
    pytorch = {"resources": [{"name": "pytorchjobs", "kind": "PyTorchJob", "verbs": ["get", "list"]}]}
    group = {
        "name": "kubeflow.org",
        "versions": [
            {"groupVersion": "kubeflow.org/v2beta1", "version": "v2beta1"},
            {"groupVersion": "kubeflow.org/v1", "version": "v1"},
            {"groupVersion": "kubeflow.org/v1beta1", "version": "v1beta1"},
        ],
        "preferredVersion": {"groupVersion": "kubeflow.org/v1", "version": "v1"},
    }
    return FakeKube(
        served={
            "/apis": {"groups": [group]},
            "/apis/kubeflow.org/v1": pytorch,
            "/apis/kubeflow.org/v1beta1": pytorch,
            "/apis/kubeflow.org/v2beta1": {"resources": [{"name": "mpijobs", "kind": "MPIJob", "verbs": ["list"]}]},
        }
    )


def test_every_served_version_each_kind_once() -> None:
    kube = versions_kube()
    collections = asyncio.run(command.custom_collections(kube))
    assert set(kube.paths()) <= {
        "/apis",
        "/apis/kubeflow.org/v1",
        "/apis/kubeflow.org/v1beta1",
        "/apis/kubeflow.org/v2beta1",
    }
    assert collections == [
        ("kubeflow.org/v1", "PyTorchJob", "/apis/kubeflow.org/v1/pytorchjobs"),
        ("kubeflow.org/v2beta1", "MPIJob", "/apis/kubeflow.org/v2beta1/mpijobs"),
    ]


def _pytorch(api_version: str, uid: str | None) -> Obj:
    meta: Obj = {"name": "bert", "namespace": "ml"}
    if uid:
        meta["uid"] = uid
    tpl = {"spec": {"containers": [{"name": "pytorch", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}
    return {
        "apiVersion": api_version,
        "kind": "PyTorchJob",
        "metadata": meta,
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": tpl}}},
    }


@pytest.mark.parametrize("uid", ["pj-1", None])
def test_an_object_seen_under_two_versions_is_one_finding(uid: str | None) -> None:
    objects = [namespace("ml"), _pytorch("kubeflow.org/v1", uid), _pytorch("kubeflow.org/v1beta1", uid)]
    (finding,) = audit(objects, decide=decider())
    assert finding.workload == "PyTorchJob/bert"


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        input=stdin,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _crd(plural: str, kind: str, versions: list[str]) -> str:
    served = "".join(
        f"""
  - name: {v}
    served: true
    storage: {str(i == 0).lower()}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true"""
        for i, v in enumerate(versions)
    )
    return f"""\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.kubeflow.org
spec:
  group: kubeflow.org
  names: {{kind: {kind}, listKind: {kind}List, plural: {plural}, singular: {kind.lower()}}}
  scope: Namespaced
  versions:{served}
"""


MPI_JOBS = "".join(
    f"""\
---
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {{name: mpi-{gpus}, namespace: default}}
spec:
  slotsPerWorker: 1
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
          - {{name: launcher, image: mpioperator/mpi-pi:openmpi}}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: worker
            image: mpioperator/mpi-pi:openmpi
            resources:
              limits: {{nvidia.com/gpu: {gpus}}}
"""
    for gpus in (8, 4, 2)
)

PYTORCH_JOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: bert, namespace: default}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: kubeflow/pytorch-dist-mnist:latest
            resources:
              limits: {nvidia.com/gpu: 1}
"""


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")
def test_live_audit_lists_mpijobs_served_only_at_v2beta1(
    sb: SandboxThread, gpucluster: Main, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = sb.sandbox.kubeconfig_path
    crds = _crd("mpijobs", "MPIJob", ["v2beta1"]) + "---\n" + _crd("pytorchjobs", "PyTorchJob", ["v1", "v1beta1"])
    kubectl(kubeconfig, "apply", "-f", "-", stdin=crds)
    for crd in ("mpijobs", "pytorchjobs"):
        kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=30s", f"crd/{crd}.kubeflow.org")
    groups = json.loads(kubectl(kubeconfig, "get", "--raw", "/apis"))
    (kubeflow,) = [g for g in groups["groups"] if g["name"] == "kubeflow.org"]
    assert kubeflow["preferredVersion"]["groupVersion"] == "kubeflow.org/v1"
    kubectl(kubeconfig, "apply", "-f", "-", stdin=MPI_JOBS + "---\n" + PYTORCH_JOB)
    assert gpucluster("audit", "--kubeconfig", str(kubeconfig), "-o", "json") == 1
    data = json.loads(capsys.readouterr().out)
    found = sorted((w["kind"], w["name"], w["gpus"].get("nvidia.com/gpu")) for w in data["workloads"])
    assert found == [
        ("MPIJob", "mpi-2", "2"),
        ("MPIJob", "mpi-4", "4"),
        ("MPIJob", "mpi-8", "8"),
        ("PyTorchJob", "bert", "1"),
    ]


# ----------------------------------------------------------------------------- pods through owners


def gpu_spec(gpus: int = 2, resource: str = "nvidia.com/gpu") -> Obj:
    return {"containers": [{"name": "cuda", "image": "x", "resources": {"limits": {resource: gpus}}}]}


def translated_spec() -> Obj:
    return {
        "containers": [{"name": "cuda", "image": "x", "resources": {"claims": [{"name": "gpu-0"}]}}],
        "resourceClaims": [{"name": "gpu-0", "resourceClaimTemplateName": "gpucluster-gpu-2-fe27b22c2a"}],
    }


def workload(kind: str, name: str, spec: Obj, *, owner: Obj | None = None, api: str | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": "ml", "uid": f"uid-{kind}-{name}"}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    default = {"Pod": "v1", "Job": "batch/v1", "CronJob": "batch/v1"}.get(kind, "apps/v1")
    return {"apiVersion": api or default, "kind": kind, "metadata": meta, "spec": spec}


def translated_pod(name: str, owner: Obj | None = None, *, label: bool = True) -> Obj:
    pod = workload("Pod", name, translated_spec(), owner=owner)
    pod["metadata"]["annotations"] = {WEBHOOK_CONFIG.annotation: '{"containers": {"cuda": {"nvidia.com/gpu": "2"}}}'}
    if label:
        pod["metadata"]["labels"] = {"gpucluster.nvidia.com/translated": "true"}
    return pod


def test_deployment_whose_pod_was_translated_counts_that_pod() -> None:
    tpl = {"metadata": {"labels": {"app": "t"}}, "spec": gpu_spec()}
    deploy = workload("Deployment", "trainer", {"replicas": 1, "template": tpl})
    rs = workload("ReplicaSet", "trainer-5d4f8", {"replicas": 1, "template": tpl}, owner=deploy)
    pod = translated_pod("trainer-5d4f8-x", rs)
    (finding,) = audit([namespace("ml"), deploy, rs, pod], decide=decider())
    assert finding.workload == "Deployment/trainer"
    assert (finding.pods, finding.translated_pods, finding.running_pods) == (0, 1, 1)
    assert finding.to_json()["runningPods"] == 1
    assert finding.chain_kinds == "Pod -> ReplicaSet -> Deployment"
    assert any("translated by the webhook" in n for n in finding.notes)


def test_cronjob_job_pod_translated_counts_under_the_cronjob() -> None:
    tpl = {"spec": gpu_spec(4)}
    cron = workload("CronJob", "nightly", {"schedule": "0 2 * * *", "jobTemplate": {"spec": {"template": tpl}}})
    job = workload("Job", "nightly-1", {"template": tpl}, owner=cron)
    (finding,) = audit([namespace("ml"), cron, job, translated_pod("nightly-1-x", job)], decide=decider())
    assert (finding.workload, finding.translated_pods) == ("CronJob/nightly", 1)


def test_custom_controller_pod_is_found_by_owner_uid() -> None:
    fleet = yaml.safe_load(RAY_CLUSTER_FLEET)
    fleet["metadata"]["namespace"] = "ml"
    # RayClusterReplicaSet and RayCluster not listed (forbidden): the pod's owner is unknown by name
    pod = translated_pod("qwen-head-0", fleet)
    legacy = workload("Pod", "qwen-head-1", gpu_spec(1), owner=fleet)
    (finding,) = audit([namespace("ml"), fleet, pod, legacy], decide=decider())
    assert finding.workload == "RayClusterFleet/qwen-coder-7b"
    assert (finding.pods, finding.translated_pods) == (1, 1)


def test_migrated_deployment_pods_do_not_rely_on_translation() -> None:
    tpl = {"metadata": {"annotations": {WEBHOOK_CONFIG.annotation: "{}"}}, "spec": translated_spec()}
    deploy = workload("Deployment", "done", {"template": tpl})
    rs = workload("ReplicaSet", "done-1", {"template": tpl}, owner=deploy)
    assert audit([namespace("ml"), deploy, rs, translated_pod("done-1-x", rs)], decide=decider()) == []


def test_bare_pod_translated_by_the_webhook_is_a_finding_and_a_migrated_one_is_not() -> None:
    (finding,) = audit([namespace("ml"), translated_pod("legacy")], decide=decider())
    assert (finding.workload, finding.pods, finding.translated_pods) == ("Pod/legacy", 0, 1)
    assert finding.gpus == {"nvidia.com/gpu": "2"}  # what its manifest asks for
    assert finding.action == "translate" and finding.reason.startswith("new pods get DRA claims (gpu.nvidia.com=2)")
    # A pod applied from a migrated manifest records its requests too, without the webhook's label.
    assert audit([namespace("ml"), translated_pod("migrated", label=False)], decide=decider()) == []


# ----------------------------------------------------------------------------- the command's exit code


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> list[Obj]:
    objects: list[Obj] = []

    async def collect(kubeconfig: str | None) -> command.Collected:
        return command.Collected(objects, True)

    monkeypatch.setattr(command, "collect", collect)
    return objects


def test_exit_1_while_a_pod_relies_on_translation(
    gpucluster: Main, cluster: list[Obj], capsys: pytest.CaptureFixture[str]
) -> None:
    tpl = {"spec": gpu_spec()}
    deploy = workload("Deployment", "trainer", {"replicas": 1, "template": tpl})
    rs = workload("ReplicaSet", "trainer-1", {"template": tpl}, owner=deploy)
    cluster.extend([namespace("ml"), translated_pod("legacy"), deploy, rs, translated_pod("trainer-1-x", rs)])
    assert gpucluster("audit") == 1
    out, err = capsys.readouterr()
    assert "2 workloads (2 running pods, 2 translated by the webhook)" in err
    assert "no workload" not in err
    rows = {line.split()[1]: line for line in out.splitlines()[1:]}
    assert set(rows) == {"Pod/legacy", "Deployment/trainer"}
    assert "1 (1 translated)" in rows["Deployment/trainer"]
    cluster.clear()
    cluster.append(namespace("ml"))
    assert gpucluster("audit") == 0
    with pytest.raises(SystemExit) as usage:  # argparse: one usage line, exit 2
        gpucluster("audit", "--translation-mode", "sometimes")
    assert usage.value.code == 2
    assert "invalid choice: 'sometimes'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- declined on purpose


def test_pods_the_webhook_declines_get_its_reason_not_recreate() -> None:
    slices = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "gpu-node-1-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "gpu-node-1",
            "pool": {"name": "gpu-node-1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}],
        },
    }
    objects = [
        namespace("ml"),
        slices,
        workload("Pod", "big", gpu_spec(33)),
        workload("Pod", "mig", gpu_spec(1, "nvidia.com/mig-7g.80gb")),
        workload("Pod", "stranded", gpu_spec(1)),
    ]
    findings = {f.name: f for f in audit(objects, decide=decider(Settings()))}
    big, mig, stranded = findings["big"], findings["mig"], findings["stranded"]
    assert big.action == "skip" and "at most 32" in big.reason
    assert mig.action == "skip" and mig.reason == "no node publishes MIG profile 7g.80gb"
    for declined in (big, mig):
        text = " ".join([declined.reason, *declined.notes])
        assert "recreate" not in text and "webhook was unavailable" not in text
        assert any("webhook declines it on purpose" in n and "would not change that" in n for n in declined.notes)
    assert stranded.action == "translate"
    assert any("admitted without translation" in n and "recreate them" in n for n in stranded.notes)


def test_live_audit_lists_resource_slices_for_the_webhook_view() -> None:
    assert ("resource.k8s.io/v1", "ResourceSlice", False) in command.LISTED
