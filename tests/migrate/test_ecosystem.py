"""Manifests of the GPU ecosystem as their projects publish them; each case is migrated
right or reported with its path and reason (HAMi sharing, Argo embedded manifests, Kubeflow
trainer runtimes, KServe LLMInferenceService), and formatting of changed documents is kept."""

from __future__ import annotations

from typing import Any

import yaml

from gpucluster.controller.provision import wanted_templates
from gpucluster.migrate import MigrateResult, migrate_text
from gpucluster.policy import TRANSLATE_LABEL, WEBHOOK_CONFIG
from gpucluster.translate import TRANSLATED_LABEL
from tests.migrate.conftest import Main


def migrate(text: str, source: str = "test.yaml") -> MigrateResult:
    return migrate_text(text, source, config=WEBHOOK_CONFIG, opt_out_label=TRANSLATE_LABEL)


def docs(text: str) -> list[Any]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


# ----------------------------------------------------------------------------- HAMi sharing

HAMI_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: gpu-pod
spec:
  containers:
    - name: ubuntu-container
      image: ubuntu:18.04
      command: ["bash", "-c", "sleep 86400"]
      resources:
        limits:
          nvidia.com/gpu: 2 # requesting 2 vGPUs
          nvidia.com/gpumem: 3000 # Each vGPU contains 3000m device memory
          nvidia.com/gpucores: 30 # Each vGPU uses 30% of the entire GPU
    - name: whole
      image: nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04
      resources:
        limits:
          nvidia.com/gpu: 1
"""


def test_hami_shared_container_is_left_unchanged_and_reported() -> None:
    result = migrate(HAMI_POD)
    (pod,) = docs(result.text)[1:]
    shared, whole = pod["spec"]["containers"]
    assert shared["resources"] == {
        "limits": {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}
    }
    assert "claims" not in shared["resources"]
    assert whole["resources"] == {"claims": [{"name": "gpu-0"}]}
    # The shared container's lines stay byte for byte, comments included.
    assert "          nvidia.com/gpumem: 3000 # Each vGPU contains 3000m device memory\n" in result.text
    (workload,) = result.workloads
    assert workload.migrated and workload.devices == {"gpu.nvidia.com": 1}
    (problem,) = workload.problems
    assert problem.startswith(
        "container ubuntu-container: nvidia.com/gpu qualified by nvidia.com/gpucores, nvidia.com/gpumem"
    )
    assert "container left unchanged" in problem
    assert result.needs_migration


def test_hami_percentage_only_container_leaves_the_pod_unchanged() -> None:
    text = HAMI_POD.replace("nvidia.com/gpumem: 3000", "nvidia.com/gpumem-percentage: 50").split("    - name: whole")[0]
    result = migrate(text)
    assert not result.changed and result.text == text
    (workload,) = result.workloads
    assert not workload.migrated
    assert ["nvidia.com/gpumem-percentage" in p for p in workload.problems] == [True]


# ----------------------------------------------------------------------------- embedded manifests

ARGO_RESOURCE = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: k8s-jobs-
spec:
  entrypoint: pi-tmpl
  templates:
  - name: pi-tmpl
    resource:                   # indicates that this is a resource template
      action: create            # can be any kubectl action (e.g. create, delete, apply, patch)
      successCondition: status.succeeded > 0
      failureCondition: status.failed > 3
      manifest: |               #put your kubernetes spec here
        apiVersion: batch/v1
        kind: Job
        metadata:
          generateName: pi-job-
        spec:
          template:
            metadata:
              name: pi
            spec:
              containers:
              - name: pi
                image: perl
                command: ["perl",  "-Mbignum=bpi", "-wle", "print bpi(2000)"]
                resources:
                  limits:
                    nvidia.com/gpu: "1"
                  requests:
                    nvidia.com/gpu: "1"
              restartPolicy: Never
          backoffLimit: 4
"""


def test_gpu_request_in_argo_resource_manifest_is_reported_with_its_path() -> None:
    result = migrate(ARGO_RESOURCE)
    assert not result.changed
    assert result.unhandled == [
        "Workflow k8s-jobs-* spec.templates[0].resource.manifest: text embedded in a string (a manifest or patch "
        "gpucluster does not rewrite): Job pi-job- spec.template.spec.containers[0].resources: nvidia.com/gpu; "
        "migrate it by hand"
    ]
    assert result.needs_migration


def test_templated_embedded_manifest_is_reported_even_when_it_does_not_parse() -> None:
    text = ARGO_RESOURCE.replace('nvidia.com/gpu: "1"', "nvidia.com/gpu: {{inputs.parameters.gpus}}")
    result = migrate(text)
    (line,) = result.unhandled
    assert line.startswith("Workflow k8s-jobs-* spec.templates[0].resource.manifest: text embedded in a string")
    assert "requests GPUs through extended resources" in line


# ----------------------------------------------------------------------------- counting

TRAINJOB = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: pytorch-distributed
  namespace: team-a
spec:
  runtimeRef:
    name: torch-distributed
  trainer:
    numNodes: 2
    resourcesPerNode:
      limits:
        nvidia.com/gpu: "2"
      requests:
        nvidia.com/gpu: "2"
"""


def test_limits_and_requests_of_one_container_count_once(gpucluster: Main, tmp_path: Any, capsys: Any) -> None:
    result = migrate(TRAINJOB)
    assert result.unhandled == [
        "TrainJob team-a/pytorch-distributed spec.trainer.resourcesPerNode (limits and requests): nvidia.com/gpu "
        "outside a pod template gpucluster can rewrite; left as it is"
    ]
    path = tmp_path / "trainjob.yaml"
    path.write_text(TRAINJOB)
    assert gpucluster("migrate", "-f", str(path), "--check") == 1
    assert "0 ResourceClaimTemplates to create, 1 GPU request not migrated" in capsys.readouterr().err


# ----------------------------------------------------------------------------- cluster-scoped templates

CLUSTER_RUNTIME = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch-distributed
  labels:
    trainer.kubeflow.org/framework: torch
spec:
  mlPolicy:
    numNodes: 1
    torch:
      numProcPerNode: auto
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: trainer
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime
                      command:
                        - /bin/bash
                        - -c
                        - |
                          echo "Torch Distributed Runtime"
                      resources:
                        limits:
                          nvidia.com/gpu: 8
"""


def test_cluster_training_runtime_gets_no_namespaceless_template_and_says_what_to_create_where() -> None:
    result = migrate(CLUSTER_RUNTIME)
    assert result.created == []
    (runtime,) = docs(result.text)
    assert [d for d in docs(result.text) if d["kind"] == "ResourceClaimTemplate"] == []
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    (claim,) = pod["spec"]["resourceClaims"]
    name = claim["resourceClaimTemplateName"]
    # What the controller provisions in each namespace the pods start in, as for a translated pod.
    assert pod["metadata"]["labels"] == {TRANSLATED_LABEL: "true"}
    wanted, refused = wanted_templates(pod)
    assert list(wanted) == [name] and refused == []
    assert wanted[name].spec["spec"]["devices"]["requests"][0]["exactly"]["count"] == 8
    (workload,) = result.migrated
    (note,) = workload.notes
    assert note.startswith("cluster-scoped: its pods run in the namespaces of the TrainJobs whose runtimeRef names it")
    assert (
        f"create in every such namespace (kubectl apply -n NAMESPACE): ResourceClaimTemplate {name} with spec" in note
    )
    assert migrate(result.text).text == result.text


# ----------------------------------------------------------------------------- KServe LLMInferenceService

LLM_SERVICE = """\
apiVersion: serving.kserve.io/v1alpha1
kind: LLMInferenceService
metadata:
  name: qwen2-7b-pd
  namespace: llm
spec:
  model:
    uri: hf://Qwen/Qwen2.5-7B-Instruct
    name: Qwen/Qwen2.5-7B-Instruct
  replicas: 1
  router:
    scheduler: {}
    route: {}
    gateway: {}
  template:
    containers:
    - name: main
      image: ghcr.io/llm-d/llm-d:v0.2.0
      env:
      - name: VLLM_LOGGING_LEVEL
        value: INFO
      resources:
        limits:
          cpu: "4"
          memory: 32Gi
          nvidia.com/gpu: "1"
        requests:
          cpu: "2"
          memory: 16Gi
          nvidia.com/gpu: "1"
  prefill:
    replicas: 2
    template:
      containers:
      - name: main
        image: ghcr.io/llm-d/llm-d:v0.2.0
        resources:
          limits:
            nvidia.com/gpu: "2"
"""


def test_llm_inference_service_decode_and_prefill_pod_specs_are_migrated() -> None:
    result = migrate(LLM_SERVICE)
    assert result.unhandled == [] and result.problems == []
    assert {w.where: w.gpus for w in result.migrated} == {"spec.template": 1, "spec.prefill.template": 2}
    templates = [d for d in docs(result.text) if d["kind"] == "ResourceClaimTemplate"]
    assert [t["metadata"]["namespace"] for t in templates] == ["llm", "llm"]
    (service,) = [d for d in docs(result.text) if d["kind"] == "LLMInferenceService"]
    decode = service["spec"]["template"]
    assert decode["containers"][0]["resources"] == {
        "limits": {"cpu": "4", "memory": "32Gi"},
        "requests": {"cpu": "2", "memory": "16Gi"},
        "claims": [{"name": "gpu-0"}],
    }
    assert decode["resourceClaims"][0]["resourceClaimTemplateName"] == templates[0]["metadata"]["name"]
    prefill = service["spec"]["prefill"]["template"]
    assert prefill["resourceClaims"][0]["resourceClaimTemplateName"] == templates[1]["metadata"]["name"]
    assert migrate(result.text).text == result.text


# ----------------------------------------------------------------------------- formatting

# KubeRay's sample style: sequences not indented under some keys, indented under others, and a
# block scalar; none of those lines is touched by the migration.
RAY_CLUSTER = """\
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: raycluster-gpu
  namespace: ray
spec:
  rayVersion: '2.46.0'
  headGroupSpec:
    rayStartParams:
      dashboard-host: '0.0.0.0'
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray-ml:2.46.0-gpu
          ports:
          - containerPort: 6379
            name: gcs
          - containerPort: 8265
            name: dashboard
          lifecycle:
            preStop:
              exec:
                command: ["/bin/sh","-c","ray stop"]
          resources:
            limits:
              cpu: "2"
              memory: "8G"
  workerGroupSpecs:
  - groupName: gpu-group
    replicas: 0
    minReplicas: 0
    maxReplicas: 4
    rayStartParams: {}
    template:
      spec:
        containers:
          - name: ray-worker
            image: rayproject/ray-ml:2.46.0-gpu
            env:
              - name: RAY_GRAFANA_HOST
                value: http://prometheus-grafana.prometheus-system.svc:80
            command:
              - /bin/bash
              - -c
              - |
                  echo starting
                  ray start --block
            resources:
              limits:
                cpu: "8"
                nvidia.com/gpu: "2"  # two GPUs per worker
              requests:
                cpu: "8"
                nvidia.com/gpu: "2"
        tolerations:
        - key: nvidia.com/gpu
          operator: Exists
          effect: NoSchedule
"""


def test_untouched_lines_of_a_changed_document_keep_their_indentation() -> None:
    result = migrate(RAY_CLUSTER)
    assert {w.where for w in result.migrated} == {"spec.workerGroupSpecs[0].template"}
    (cluster,) = [d for d in docs(result.text) if d["kind"] == "RayCluster"]
    worker = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["containers"][0]["resources"]["claims"] == [{"name": "gpu-0"}]
    out = result.text.splitlines(keepends=True)
    kept = [line for line in RAY_CLUSTER.splitlines(keepends=True) if "nvidia.com/gpu:" not in line]
    missing = [line for line in kept if line not in out]
    assert missing == []
    # In the same order too: the original lines are a subsequence of the output.
    position = 0
    for line in kept:
        position = out.index(line, position) + 1
    assert migrate(result.text).text == result.text


def test_trailing_comment_of_a_removed_gpu_line_moves_to_the_claim_line() -> None:
    result = migrate(RAY_CLUSTER)
    (line,) = [x for x in result.text.splitlines() if "# two GPUs per worker" in x]
    assert line.strip() == "- name: gpu-0  # two GPUs per worker"


FOUR_SPACES = """\
apiVersion: v1
kind: Pod
metadata:
    name: cuda-vectoradd
spec:
    restartPolicy: OnFailure
    containers:
        -   name: cuda-vectoradd
            image: "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda11.7.1-ubuntu20.04"
            resources:
                limits:
                    nvidia.com/gpu: 1 # requesting 1 GPU
"""


def test_four_space_document_keeps_its_lines_and_comment() -> None:
    result = migrate(FOUR_SPACES)
    pod = next(d for d in docs(result.text) if d["kind"] == "Pod")
    assert pod["spec"]["containers"][0]["resources"] == {"claims": [{"name": "gpu-0"}]}
    for line in FOUR_SPACES.splitlines(keepends=True):
        if "nvidia.com/gpu" not in line and "limits" not in line:
            assert line in result.text.splitlines(keepends=True)
    assert "name: gpu-0 # requesting 1 GPU\n" in result.text
