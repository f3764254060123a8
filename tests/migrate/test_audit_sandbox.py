"""End to end: ``gpucluster audit`` against the sandbox API server lists a legacy Deployment and not
the same Deployment after ``gpucluster migrate`` (both applied with the real ``kubectl``)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpucluster.cli.audit import list_all
from gpucluster.kube.client import Kube
from gpucluster.sandbox.server import SandboxThread
from tests.migrate.conftest import Main

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: NAME
  namespace: default
spec:
  replicas: 0
  selector:
    matchLabels:
      app: NAME
  template:
    metadata:
      labels:
        app: NAME
    spec:
      containers:
        - name: cuda
          image: nvcr.io/nvidia/cuda:12.6.2-base-ubi9
          command: ["sleep", "infinity"]
          resources:
            limits:
              nvidia.com/gpu: 2   # two GPUs per replica
"""


@pytest.fixture(scope="module")
def sandbox(sb: SandboxThread) -> SandboxThread:
    return sb


def kubectl(kubeconfig: Path, *args: str) -> str:
    done = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_audit_lists_the_legacy_deployment_and_not_the_migrated_one(
    sandbox: SandboxThread, gpucluster: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    kubeconfig = sandbox.sandbox.kubeconfig_path
    legacy = tmp_path / "legacy.yaml"
    legacy.write_text(DEPLOYMENT.replace("NAME", "legacy-trainer"))
    original = tmp_path / "migrated-original.yaml"
    original.write_text(DEPLOYMENT.replace("NAME", "migrated-trainer"))
    migrated = tmp_path / "migrated.yaml"
    assert gpucluster("migrate", "-f", str(original), "-o", str(migrated)) == 0
    capsys.readouterr()

    kubectl(kubeconfig, "apply", "-f", str(legacy))
    applied = kubectl(kubeconfig, "apply", "-f", str(migrated))
    assert "resourceclaimtemplate.resource.k8s.io/gpucluster-gpu-2-" in applied
    assert "deployment.apps/migrated-trainer" in applied

    assert gpucluster("audit", "--kubeconfig", str(kubeconfig), "-o", "json") == 1
    data = json.loads(capsys.readouterr().out)
    names = [(w["namespace"], w["kind"], w["name"]) for w in data["workloads"]]
    assert names == [("default", "Deployment", "legacy-trainer")]
    (finding,) = data["workloads"]
    assert finding["gpus"] == {"nvidia.com/gpu": "2"}
    assert finding["webhook"]["action"] == "translate"
    assert finding["chain"][-1] == {"kind": "Deployment", "name": "legacy-trainer"}
    # -o yaml is the same answer, as kubectl users expect it.
    assert gpucluster("audit", "--kubeconfig", str(kubeconfig), "-o", "yaml") == 1
    assert yaml.safe_load(capsys.readouterr().out) == data
    # -o wide: the owner chain by name, and the pods that hold extended resources apart.
    assert gpucluster("audit", "--kubeconfig", str(kubeconfig)) == 1
    narrow = capsys.readouterr().out
    assert gpucluster("audit", "--kubeconfig", str(kubeconfig), "-o", "wide") == 1
    wide = capsys.readouterr().out

    def columns(table: str) -> dict[str, str]:
        header, row = table.splitlines()
        names = [n for n in header.split("   ") if n.strip()]
        starts = [header.index(n) for n in names] + [len(row)]
        return {n.strip(): row[a:b].strip() for n, a, b in zip(names, starts, starts[1:], strict=False)}

    assert columns(narrow)["OWNER CHAIN"] == "Deployment" and columns(narrow)["PODS"] == "0"
    wide_row = columns(wide)
    assert wide_row["OWNER CHAIN"] == "Deployment/legacy-trainer"
    assert wide_row["LEGACY PODS"] == "0" and wide_row["TRANSLATED PODS"] == "0"

    async def paged() -> list[str]:
        kube = await Kube.connect(str(kubeconfig))
        try:
            return [d["metadata"]["name"] for d in await list_all(kube, "apps/v1", "Deployment", page_size=1)]
        finally:
            await kube.close()

    assert sorted(asyncio.run(paged())) == ["legacy-trainer", "migrated-trainer"]

    kubectl(kubeconfig, "delete", "-f", str(legacy))
    assert gpucluster("audit", "--kubeconfig", str(kubeconfig)) == 0
    assert "no workload requests GPUs" in capsys.readouterr().err


RAY_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: rayclusters.ray.io
spec:
  group: ray.io
  names: {kind: RayCluster, listKind: RayClusterList, plural: rayclusters, singular: raycluster}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"""

RAY_CLUSTER = """\
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: raycluster-gpu
  namespace: default
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.46.0
  workerGroupSpecs:
  - groupName: gpu-group
    replicas: 0
    minReplicas: 0
    maxReplicas: 2
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.46.0-gpu
          resources:
            limits:
              nvidia.com/gpu: "1"
"""


def test_audit_lists_a_legacy_raycluster_that_has_no_pods(
    sandbox: SandboxThread, gpucluster: Main, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    kubeconfig = sandbox.sandbox.kubeconfig_path
    crd, cluster = tmp_path / "crd.yaml", tmp_path / "raycluster.yaml"
    crd.write_text(RAY_CRD)
    cluster.write_text(RAY_CLUSTER)
    kubectl(kubeconfig, "apply", "-f", str(crd))
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=30s", "crd/rayclusters.ray.io")
    kubectl(kubeconfig, "apply", "-f", str(cluster))
    try:
        assert gpucluster("audit", "--kubeconfig", str(kubeconfig), "-o", "json") == 1
        data = json.loads(capsys.readouterr().out)
        (finding,) = [w for w in data["workloads"] if w["kind"] == "RayCluster"]
        assert finding["name"] == "raycluster-gpu" and finding["namespace"] == "default"
        assert finding["pods"] == 0 and finding["gpus"] == {"nvidia.com/gpu": "1"}
        assert finding["chain"] == [{"kind": "RayCluster", "name": "raycluster-gpu"}]
        assert finding["webhook"]["action"] == "translate"
        assert data["notListed"] == []
    finally:
        kubectl(kubeconfig, "delete", "-f", str(cluster))
