"""``--check`` exits 0 exactly when nothing asks for GPUs. Capacity limits (a Karpenter
NodePool's ``spec.limits``) and zero counts are not requests; an embedded manifest string is
parsed and judged by what it asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.errors import InputError
from gpucluster.migrate import MigrateResult, migrate_text
from gpucluster.policy import TRANSLATE_LABEL, WEBHOOK_CONFIG
from tests.migrate.conftest import Main


def migrate(text: str, source: str = "test.yaml") -> MigrateResult:
    return migrate_text(text, source, config=WEBHOOK_CONFIG, opt_out_label=TRANSLATE_LABEL)


def check(gpucluster: Main, tmp_path: Path, text: str) -> int:
    path = tmp_path / "manifest.yaml"
    path.write_text(text)
    return gpucluster("migrate", "-f", str(path), "--check")


# Karpenter's GPU NodePool sample (data-on-eks style): a ceiling on what the pool may provision.
NODEPOOL = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: gpu
spec:
  template:
    spec:
      requirements:
        - key: karpenter.k8s.aws/instance-family
          operator: In
          values: ["g5", "p4d"]
      taints:
        - key: nvidia.com/gpu
          value: "true"
          effect: NoSchedule
  limits:
    cpu: 1000
    nvidia.com/gpu: 50
"""


def test_karpenter_nodepool_limits_are_capacity_not_requests(
    gpucluster: Main, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = migrate(NODEPOOL)
    assert result.unhandled == [] and result.workloads == []
    assert not result.needs_migration and result.text == NODEPOOL
    assert check(gpucluster, tmp_path, NODEPOOL) == 0
    assert "0 GPU requests not migrated" in capsys.readouterr().err


def test_limits_of_other_kinds_named_like_a_nodepool_still_count() -> None:
    text = NODEPOOL.replace("karpenter.sh/v1", "example.com/v1")
    (line,) = migrate(text).unhandled
    assert line.startswith("NodePool gpu spec.limits: nvidia.com/gpu outside a pod template")


# IBM autopilot's health-check style: a pod that explicitly asks for no GPU.
ZERO_POD = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: autopilot-check
spec:
  template:
    spec:
      containers:
      - name: check
        image: quay.io/autopilot/autopilot:v2
        resources:
          limits:
            nvidia.com/gpu: 0
          requests:
            nvidia.com/gpu: "0"
      restartPolicy: Never
"""


def test_zero_gpus_in_a_pod_template_is_nothing_to_migrate(gpucluster: Main, tmp_path: Path) -> None:
    result = migrate(ZERO_POD)
    assert result.workloads == [] and result.unhandled == []
    assert not result.needs_migration and result.text == ZERO_POD
    assert check(gpucluster, tmp_path, ZERO_POD) == 0


def test_zero_beside_a_real_request_still_migrates_the_real_one() -> None:
    text = ZERO_POD.replace(
        "      restartPolicy: Never\n",
        "      - name: train\n        image: cuda\n        resources:\n          limits:\n"
        "            nvidia.com/gpu: 2\n      restartPolicy: Never\n",
    )
    result = migrate(text)
    (workload,) = result.workloads
    assert workload.migrated and workload.devices == {"gpu.nvidia.com": 2}
    assert workload.problems == []


def test_zero_outside_a_pod_template_is_not_reported() -> None:
    text = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: cpu-only}
spec:
  trainer:
    resourcesPerNode:
      limits:
        nvidia.com/gpu: "0"
"""
    assert migrate(text).unhandled == []


ARGO_MANIFEST = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: launch-
spec:
  entrypoint: launch
  templates:
  - name: launch
    resource:
      action: create
      manifest: |
        apiVersion: batch/v1
        kind: Job
        metadata:
          generateName: cpu-job-
        spec:
          template:
            spec:
              containers:
              - name: main
                image: busybox
                resources:
                  limits:
                    nvidia.com/gpu: 0
              restartPolicy: Never
"""


def test_zero_inside_an_embedded_manifest_is_not_reported(gpucluster: Main, tmp_path: Path) -> None:
    assert migrate(ARGO_MANIFEST).unhandled == []
    assert check(gpucluster, tmp_path, ARGO_MANIFEST) == 0


def test_zero_inside_an_embedded_json_manifest_is_not_reported() -> None:
    text = ARGO_MANIFEST.split("      manifest: |")[0] + (
        '      manifest: \'{"kind": "Pod", "spec": {"containers": [{"name": "a", '
        '"resources": {"limits": {"nvidia.com/gpu": "0"}}}]}}\'\n'
    )
    assert migrate(text).unhandled == []


def test_embedded_manifest_is_judged_by_what_it_asks_not_by_its_text() -> None:
    # A ResourceQuota's "requests.nvidia.com/gpu" and a NodePool's limits look like GPU keys as text.
    quota = ARGO_MANIFEST.split("      manifest: |")[0] + (
        "      manifest: |\n"
        "        apiVersion: v1\n        kind: ResourceQuota\n        metadata:\n          name: gpus\n"
        "        spec:\n          hard:\n            requests.nvidia.com/gpu: 4\n"
        "        ---\n"
        "        apiVersion: karpenter.sh/v1\n        kind: NodePool\n        metadata:\n          name: gpu\n"
        "        spec:\n          limits:\n            nvidia.com/gpu: 8\n"
    )
    assert migrate(quota).unhandled == []


def test_embedded_manifest_asking_for_gpus_still_counts(gpucluster: Main, tmp_path: Path) -> None:
    text = ARGO_MANIFEST.replace("nvidia.com/gpu: 0", 'nvidia.com/gpu: "2"')
    (line,) = migrate(text).unhandled
    assert "Job cpu-job- spec.template.spec.containers[0].resources: nvidia.com/gpu" in line
    assert check(gpucluster, tmp_path, text) == 1


def test_unparseable_embedded_text_with_zero_is_not_reported_but_a_parameter_is() -> None:
    templated = ARGO_MANIFEST.replace("image: busybox", "image: {{inputs.parameters.image}}")
    assert migrate(templated).unhandled == []
    counted = templated.replace("nvidia.com/gpu: 0", "nvidia.com/gpu: {{inputs.parameters.gpus}}")
    (line,) = migrate(counted).unhandled
    assert "requests GPUs through extended resources" in line


def test_embedded_text_with_a_self_referencing_alias_or_deep_nesting_is_read_as_text() -> None:
    looped = ARGO_MANIFEST.split("      manifest: |")[0] + '      manifest: "a: &a [*a]\\nnvidia.com/gpu: 1\\n"\n'
    (line,) = migrate(looped).unhandled
    assert "requests GPUs through extended resources" in line
    deep = ARGO_MANIFEST.split("      manifest: |")[0] + "      manifest: '" + "[" * 5000 + "]" * 5000 + "'\n"
    assert migrate(deep).unhandled == []


def test_values_yaml_cannot_construct_are_one_line_errors() -> None:
    with pytest.raises(
        InputError, match=r"^bad\.yaml:1: invalid YAML \(in the document starting here\): month must be in 1\.\.12$"
    ):
        migrate_text("apiVersion: v1\nkind: ConfigMap\ndata: {day: 2001-13-45}\n", "bad.yaml")
    with pytest.raises(InputError, match=r"^deep\.yaml:1: invalid YAML: nested too deeply$"):
        migrate_text("a: " + "[" * 1000 + "]" * 1000 + "\n", "deep.yaml")


CORPUS = Path(__file__).resolve().parent / "corpus"


def test_published_zero_request_passes_check_and_a_spark_gpu_field_fails_it(
    gpucluster: Main, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gpucluster("migrate", "-f", str(CORPUS / "autopilot__helm-charts_autopilot_values.yaml"), "--check") == 0
    spark = CORPUS / "data-on-eks__data-stacks_spark-on-eks_examples_spark-rapids_spark-rapids-app-gpus.yaml"
    assert gpucluster("migrate", "-f", str(spark), "--check") == 1
    out, _ = capsys.readouterr()
    assert (
        f"needs manual migration {spark}: SparkApplication spark-team-a/spark-rapids-yunikorn spec.executor.gpu:" in out
    )
