"""``gpucluster audit`` sees custom resources that carry pod templates directly: a RayCluster
scaled to zero, a suspended PyTorchJob, a ClusterTrainingRuntime no TrainJob uses yet."""

from __future__ import annotations

import asyncio
from typing import Any

import yaml

from gpucluster.audit import audit, custom_pod_templates
from gpucluster.cli import audit as command
from gpucluster.policy import Settings
from gpucluster.webhook.audit import decider
from tests.kit.fakekube import FakeKube

RAY_CLUSTER = yaml.safe_load("""\
apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: raycluster-gpu, namespace: ray, uid: rc-1}
spec:
  headGroupSpec:
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.46.0
  workerGroupSpecs:
  - groupName: gpu-group
    replicas: 0
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.46.0-gpu
          resources:
            limits: {nvidia.com/gpu: "1"}
  - groupName: big
    replicas: 0
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.46.0-gpu
          resources:
            limits: {nvidia.com/gpu: "4"}
""")

PYTORCH_JOB = yaml.safe_load("""\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: mnist, namespace: ml, uid: pj-1}
spec:
  runPolicy: {suspend: true}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: kubeflow/pytorch-dist-mnist:latest
            resources:
              limits: {nvidia.com/gpu: 1}
""")

ARGO = yaml.safe_load("""\
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: train, namespace: ml, uid: wt-1}
spec:
  templates:
  - name: main
    dag: {tasks: [{name: t, template: gpu}]}
  - name: gpu
    container:
      image: nvcr.io/nvidia/pytorch:24.05-py3
      resources: {limits: {nvidia.com/gpu: 2}}
""")


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def test_custom_pod_templates_are_found_by_shape() -> None:
    assert [p for p, _ in custom_pod_templates(RAY_CLUSTER)] == [
        "spec.headGroupSpec.template",
        "spec.workerGroupSpecs[0].template",
        "spec.workerGroupSpecs[1].template",
    ]
    ((path, template),) = custom_pod_templates(ARGO)
    assert path == "spec.templates[1]"
    assert template["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 2}}


def test_custom_resources_without_pods_are_findings() -> None:
    objects = [namespace("ray"), namespace("ml"), RAY_CLUSTER, PYTORCH_JOB, ARGO]
    findings = {f.workload: f for f in audit(objects, decide=decider(Settings()))}
    assert set(findings) == {"RayCluster/raycluster-gpu", "PyTorchJob/mnist", "WorkflowTemplate/train"}
    ray = findings["RayCluster/raycluster-gpu"]
    assert ray.pods == 0 and ray.chain_kinds == "RayCluster" and ray.gpus == {"nvidia.com/gpu": "1"}
    assert ray.action == "translate"
    assert ray.notes == [
        "pod templates asking for GPUs: spec.workerGroupSpecs[0].template (nvidia.com/gpu=1), "
        "spec.workerGroupSpecs[1].template (nvidia.com/gpu=4)"
    ]
    assert findings["WorkflowTemplate/train"].gpus == {"nvidia.com/gpu": "2"}


def test_pods_of_a_listed_custom_resource_join_its_finding() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "mnist-master-0",
            "namespace": "ml",
            "uid": "p-1",
            "ownerReferences": [{"kind": "PyTorchJob", "name": "mnist", "uid": "pj-1", "controller": True}],
        },
        "spec": PYTORCH_JOB["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"],
    }
    (finding,) = audit([namespace("ml"), PYTORCH_JOB, pod], decide=decider(Settings()))
    assert finding.workload == "PyTorchJob/mnist" and finding.pods == 1
    assert finding.chain_kinds == "Pod -> PyTorchJob"
    assert not any("was not listed" in n for n in finding.notes)


def discovering_kube() -> FakeKube:
    """Discovery serves ray.io and kubeflow.org, one RayCluster is stored; listing pytorchjobs is forbidden."""
    kube = FakeKube(
        served={
            "/apis": {
                "groups": [
                    {"name": "ray.io", "preferredVersion": {"groupVersion": "ray.io/v1"}},
                    {"name": "kubeflow.org", "preferredVersion": {"groupVersion": "kubeflow.org/v1"}},
                    {"name": "apps", "preferredVersion": {"groupVersion": "apps/v1"}},
                ]
            },
            "/apis/ray.io/v1": {
                "resources": [
                    {"name": "rayclusters", "kind": "RayCluster", "verbs": ["get", "list"]},
                    {"name": "rayclusters/status", "kind": "RayCluster", "verbs": ["get"]},
                ]
            },
            "/apis/kubeflow.org/v1": {"resources": [{"name": "pytorchjobs", "kind": "PyTorchJob", "verbs": ["list"]}]},
        }
    )
    kube.put(RAY_CLUSTER, path="/apis/ray.io/v1/namespaces/ray/rayclusters/raycluster-gpu")
    kube.fail("GET", "/apis/kubeflow.org/v1/pytorchjobs", 403)
    return kube


def test_discovery_lists_known_custom_kinds_and_names_the_forbidden_ones() -> None:
    kube = discovering_kube()
    collections = asyncio.run(command.custom_collections(kube))
    assert collections == [
        ("ray.io/v1", "RayCluster", "/apis/ray.io/v1/rayclusters"),
        ("kubeflow.org/v1", "PyTorchJob", "/apis/kubeflow.org/v1/pytorchjobs"),
    ]
    listed = asyncio.run(command._list_custom(kube, *collections[0]))
    # The list's items came without kind and apiVersion: the listing gives them theirs.
    assert isinstance(listed, list) and listed[0]["kind"] == "RayCluster" and listed[0]["apiVersion"] == "ray.io/v1"
    assert [item["metadata"]["name"] for item in listed] == ["raycluster-gpu"]
    forbidden = asyncio.run(command._list_custom(kube, *collections[1]))
    assert forbidden == "pytorchjobs.kubeflow.org (403: not allowed to list)"
    assert "/apis/apps/v1" not in kube.paths()
