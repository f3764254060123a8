"""GPU requests in operator-specific fields (the operator makes pods that ask for the
extended resource) are never skipped: each is reported for manual migration with its exact path,
and counts for ``--check``. Zero counts ask for nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.migrate import MigrateResult, migrate_text
from gpucluster.policy import TRANSLATE_LABEL, WEBHOOK_CONFIG
from tests.migrate.conftest import Main

MANUAL = "(operator field); the operator adds it to the pods it creates and has no DRA form for it; migrate it by hand"


def migrate(text: str, source: str = "test.yaml") -> MigrateResult:
    return migrate_text(text, source, config=WEBHOOK_CONFIG, opt_out_label=TRANSLATE_LABEL)


# The Spark operator's GPU fields (GPUSpec: name, quantity), as in its API docs.
SPARK = """\
apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata:
  name: spark-rapids
  namespace: spark
spec:
  type: Scala
  mode: cluster
  image: nvcr.io/nvidia/spark-rapids:24.10
  mainClass: org.apache.spark.examples.SparkPi
  sparkVersion: "3.5.3"
  driver:
    cores: 1
    memory: 2g
    serviceAccount: spark
    gpu:
      name: nvidia.com/gpu
      quantity: 1
  executor:
    instances: 2
    cores: 4
    memory: 8g
    gpu:
      name: "nvidia.com/gpu"
      quantity: 2
"""


def test_spark_driver_and_executor_gpus_are_reported_with_their_paths(
    gpucluster: Main, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = migrate(SPARK)
    assert not result.changed and result.text == SPARK
    assert result.unhandled == [
        f"SparkApplication spark/spark-rapids spec.driver.gpu: nvidia.com/gpu 1 {MANUAL}",
        f"SparkApplication spark/spark-rapids spec.executor.gpu: nvidia.com/gpu 2 {MANUAL}",
    ]
    path = tmp_path / "spark.yaml"
    path.write_text(SPARK)
    assert gpucluster("migrate", "-f", str(path), "--check") == 1
    out, err = capsys.readouterr()
    assert f"needs manual migration {path}: SparkApplication spark/spark-rapids spec.executor.gpu:" in out
    assert "2 GPU requests not migrated" in err


def test_spark_zero_gpu_quantity_is_not_a_request() -> None:
    text = SPARK.replace("quantity: 1", "quantity: 0").replace("quantity: 2", 'quantity: "0"')
    assert migrate(text).unhandled == []


def test_scheduled_spark_application_template_is_reported_too() -> None:
    text = """\
apiVersion: sparkoperator.k8s.io/v1beta2
kind: ScheduledSparkApplication
metadata:
  name: nightly
spec:
  schedule: "@daily"
  template:
    type: Python
    driver:
      gpu: {name: nvidia.com/gpu, quantity: 1}
    executor:
      instances: 4
      gpu: {name: nvidia.com/mig-1g.10gb, quantity: 1}
"""
    assert [line.split(":")[0] for line in migrate(text).unhandled] == [
        "ScheduledSparkApplication nightly spec.template.driver.gpu",
        "ScheduledSparkApplication nightly spec.template.executor.gpu",
    ]


# The vLLM production stack operator's sample VLLMRuntime.
VLLM_RUNTIME = """\
apiVersion: production-stack.vllm.ai/v1alpha1
kind: VLLMRuntime
metadata:
  name: vllmruntime-sample
spec:
  model:
    modelURL: "meta-llama/Llama-3.1-8B-Instruct"
  vllmConfig:
    tensorParallelSize: 1
    gpuMemoryUtilization: "0.8"
  deploymentConfig:
    # Resource requirements
    resources:
      cpu: "5"
      memory: "32Gi"
      gpu: "1"
      gpuType: "nvidia.com/gpu"
    replicas: 2
"""


def test_vllm_runtime_gpu_type_is_reported_with_its_path(gpucluster: Main, tmp_path: Path) -> None:
    result = migrate(VLLM_RUNTIME)
    assert not result.changed
    assert result.unhandled == [
        "VLLMRuntime vllmruntime-sample spec.deploymentConfig.resources.gpuType: nvidia.com/gpu, "
        f"spec.deploymentConfig.resources.gpu: 1 {MANUAL}"
    ]
    path = tmp_path / "vllm.yaml"
    path.write_text(VLLM_RUNTIME)
    assert gpucluster("migrate", "-f", str(path), "--check") == 1


def test_vllm_runtime_with_zero_gpus_or_another_type_asks_for_nothing() -> None:
    assert migrate(VLLM_RUNTIME.replace('gpu: "1"', 'gpu: "0"')).unhandled == []
    assert migrate(VLLM_RUNTIME.replace('"nvidia.com/gpu"', '"amd.com/gpu"')).unhandled == []


KUBEAI_MODEL = """\
apiVersion: kubeai.org/v1
kind: Model
metadata:
  name: llama-3.1-8b-instruct-fp8-l4
spec:
  features: [TextGeneration]
  url: hf://neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8
  engine: VLLM
  resourceProfile: nvidia-gpu-l4:1
"""


def test_kubeai_nvidia_resource_profile_is_reported() -> None:
    (line,) = migrate(KUBEAI_MODEL).unhandled
    assert line.startswith(
        "Model llama-3.1-8b-instruct-fp8-l4 spec.resourceProfile: nvidia-gpu-l4:1 (KubeAI's nvidia-gpu-l4 profile"
    )
    assert migrate(KUBEAI_MODEL.replace("nvidia-gpu-l4:1", "cpu:2")).unhandled == []
    assert migrate(KUBEAI_MODEL.replace("nvidia-gpu-l4:1", "nvidia-gpu-l4:0")).unhandled == []


def test_operator_shapes_inside_a_pod_spec_are_left_to_the_translation() -> None:
    # An env var or a ConfigMap-like field inside a container is not an operator GPU field.
    text = """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: a
    image: x
    env:
    - name: nvidia.com/gpu
      value: "1"
"""
    assert migrate(text).unhandled == [] and migrate(text).workloads == []


def test_vllm_runtime_gpu_without_type_is_nvidia_gpu_and_type_without_count_asks_nothing() -> None:
    # The operator asks for gpu of gpuType, nvidia.com/gpu when gpuType is unset, nothing when gpu is unset.
    untyped = VLLM_RUNTIME.replace('      gpuType: "nvidia.com/gpu"\n', "")
    assert migrate(untyped).unhandled == [
        "VLLMRuntime vllmruntime-sample spec.deploymentConfig.resources.gpu: 1 (operator field; gpuType unset: "
        f"nvidia.com/gpu); {MANUAL.removeprefix('(operator field); ')}"
    ]
    assert migrate(VLLM_RUNTIME.replace('      gpu: "1"\n', "")).unhandled == []
    assert migrate(VLLM_RUNTIME.replace('gpu: "1"', 'gpu: ""')).unhandled == []


NIM_SERVICE = """\
apiVersion: apps.nvidia.com/v1alpha1
kind: NIMService
metadata:
  name: meta-llama-3-2-1b-instruct
  namespace: nim-service
spec:
  image:
    repository: nvcr.io/nim/meta/llama-3.2-1b-instruct
    tag: "1.12.0"
  resources:
    limits:
      nvidia.com/gpu: 1
  expose:
    service:
      type: ClusterIP
      port: 8000
"""


def test_nim_service_resources_name_the_operators_dra_field() -> None:
    (line,) = migrate(NIM_SERVICE).unhandled
    assert line == (
        "NIMService nim-service/meta-llama-3-2-1b-instruct spec.resources.limits: nvidia.com/gpu outside a pod "
        "template gpucluster can rewrite; left as it is; the operator's DRA form is spec.draResources "
        "(resourceClaimTemplateName): migrate it by hand"
    )


KAITO_PRESET = """\
apiVersion: kaito.sh/v1beta1
kind: Workspace
metadata:
  name: workspace-phi-4-mini
resource:
  instanceType: "Standard_NC24ads_A100_v4"
  labelSelector:
    matchLabels:
      apps: phi-4
inference:
  preset:
    name: phi-4-mini-instruct
"""


def test_kaito_preset_workspace_is_reported_and_a_templated_one_is_migrated() -> None:
    (line,) = migrate(KAITO_PRESET).unhandled
    assert line.startswith("Workspace workspace-phi-4-mini inference.preset: the preset's GPU count of nvidia.com/gpu")
    tuning = KAITO_PRESET.replace("inference:\n  preset:", "tuning:\n  method: qlora\n  preset:")
    assert [x.split(":")[0] for x in migrate(tuning).unhandled] == ["Workspace workspace-phi-4-mini tuning.preset"]
    templated = KAITO_PRESET.replace(
        "  preset:\n    name: phi-4-mini-instruct\n",
        "  template:\n    spec:\n      containers:\n      - name: llm\n        image: kaito-base\n"
        "        resources:\n          limits:\n            nvidia.com/gpu: 1\n",
    )
    result = migrate(templated)
    assert result.unhandled == [] and [w.where for w in result.migrated] == ["inference.template"]


SPARK_CONF = """\
apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata:
  name: rapids
spec:
  type: Scala
  sparkConf:
    "spark.executor.resource.gpu.amount": "1"
    "spark.executor.resource.gpu.vendor": "nvidia.com"
    "spark.executor.resource.gpu.discoveryScript": "/opt/sparkRapidsPlugin/getGpusResources.sh"
    "spark.task.resource.gpu.amount": "0.25"
  executor:
    instances: 2
"""


def test_spark_conf_gpu_amount_is_reported_once() -> None:
    assert migrate(SPARK_CONF).unhandled == [
        f'SparkApplication rapids spec.sparkConf["spark.executor.resource.gpu.amount"]: nvidia.com/gpu 1; '
        f"{MANUAL.removeprefix('(operator field); ')}"
    ]
    # With the executor's gpu field too, it is one request, reported at the field.
    both = SPARK_CONF + "    gpu:\n      name: nvidia.com/gpu\n      quantity: 1\n"
    assert [line.split(":")[0] for line in migrate(both).unhandled] == ["SparkApplication rapids spec.executor.gpu"]
    assert migrate(SPARK_CONF.replace('amount": "1"', 'amount": "0"')).unhandled == []
    assert migrate(SPARK_CONF.replace('"nvidia.com"', '"amd.com"')).unhandled == []


KFP_PIPELINE = """\
# A Kubeflow pipeline compiled by kfp 2: the backend makes the executor's pod ask for the accelerator.
deploymentSpec:
  executors:
    exec-train:
      container:
        image: pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime
        resources:
          accelerator:
            resourceCount: '1'
            resourceType: nvidia.com/gpu
pipelineInfo:
  name: train
"""


def test_accelerator_requests_are_reported_and_profiles_are_not() -> None:
    (line,) = migrate(KFP_PIPELINE).unhandled
    assert line.startswith(
        "object <unnamed> deploymentSpec.executors.exec-train.container.resources.accelerator: nvidia.com/gpu 1"
    )
    assert migrate(KFP_PIPELINE.replace("resourceCount: '1'", "resourceCount: '0'")).unhandled == []
    # Capacity and profile declarations name the resource without asking for it.
    profile = "resourceLimits:\n- resourceType: nvidia.com/gpu\n  minimum: 1\n  maximum: 2\n"
    assert migrate(profile).unhandled == []
