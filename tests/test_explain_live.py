"""``gpucluster explain pod/NAME | claim/NAME | -f FILE`` against a running sandbox, as a process and
as the kubectl plugin ``kubectl gpucluster``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.sandbox.server import SandboxThread
from gpucluster.sandbox.sim import SimulationOptions

pytestmark = pytest.mark.integration  # starts servers or processes: `make unit` leaves it out

BIN = Path(sys.executable).parent
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
}


# The sandbox's nodes publish their GPUs while a pod of this DaemonSet runs on them.
PLUGIN = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "nvidia-dra-driver-kubelet-plugin", "namespace": "default"},
    "spec": {
        "selector": {"matchLabels": {"app": "plugin"}},
        "template": {
            "metadata": {"labels": {"app": "plugin"}},
            "spec": {"containers": [{"name": "gpus", "image": "example.com/dra-driver"}]},
        },
    },
}


def _claim(name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}]}
        },
    }


def _template(name: str, count: int) -> dict[str, Any]:
    claim = _claim(name, count)
    return {**claim, "kind": "ResourceClaimTemplate", "spec": {"spec": claim["spec"]}}


def _pod(name: str, claims: list[dict[str, str]], node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceClaims": claims,
        "containers": [
            {
                "name": "main",
                "image": "example.com/cuda",
                "resources": {"claims": [{"name": c["name"]} for c in claims]},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    kubeconfig = tmp_path_factory.mktemp("live") / "kubeconfig"
    runner = SandboxThread(
        kubeconfig_path=kubeconfig,
        simulate=SimulationOptions(nodes=2, gpus_per_node=4, processes=False, jobs=False, endpoints=False),
    )
    runner.start()
    objects = [
        CLASS,
        PLUGIN,
        _claim("huge", 6),
        _claim("two", 2),
        _template("huge-template", 6),
        _pod("greedy", [{"name": "gpu", "resourceClaimName": "huge"}]),
        _pod("templated", [{"name": "gpu", "resourceClaimTemplateName": "huge-template"}]),
        _pod("nowhere", [{"name": "gpu", "resourceClaimName": "two"}], {"no-such-label": "x"}),
    ]
    manifest = kubeconfig.parent / "objects.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    try:
        kubectl(kubeconfig, "create", "-f", str(manifest))
        _wait_for_slices(kubeconfig, 2)
        yield kubeconfig
    finally:
        runner.stop()


def kubectl(kubeconfig: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """kubectl with $KUBECONFIG (kubectl allows no flag before a plugin's name) and the venv's
    bin on PATH, where pip installs kubectl-gpucluster."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([KUBECTL, *argv], capture_output=True, text=True, timeout=60, env=env, check=False)


def _wait_for_slices(kubeconfig: Path, count: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = kubectl(kubeconfig, "get", "resourceslices", "-o", "json")
        if out.returncode == 0 and len(json.loads(out.stdout)["items"]) >= count:
            return
    raise AssertionError(f"{count} ResourceSlices not published within 30 s")


def explain(kubeconfig: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "gpucluster"), "explain", *argv, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_pending_pod_is_explained_node_by_node(cluster: Path) -> None:
    out = explain(cluster, "pod/greedy")
    assert out.returncode == 1, out.stderr
    assert out.stdout.startswith("not satisfiable: 0 of 2 node(s) fit (Kubernetes 1.34)")
    for node in ("gpu-node-0", "gpu-node-1"):
        assert f"{node}: does not fit" in out.stdout
    assert out.stdout.count("request gpu: 4/4 devices usable, need 6") == 2


def test_json_names_the_reason_per_node(cluster: Path) -> None:
    out = explain(cluster, "pod/greedy", "-n", "default", "-o", "json")
    assert out.returncode == 1, out.stderr
    answer = json.loads(out.stdout)
    assert answer["satisfiable"] is False
    assert answer["kubernetesVersion"] == "1.34"
    assert [n["node"] for n in answer["nodes"]] == ["gpu-node-0", "gpu-node-1"]
    assert all(any("need 6" in r for r in n["reasons"]) for n in answer["nodes"])


def test_the_kubectl_plugin_answers_the_same(cluster: Path) -> None:
    plugin = kubectl(cluster, "gpucluster", "explain", "pod/greedy")
    direct = explain(cluster, "pod/greedy")
    assert plugin.returncode == 1, plugin.stderr
    assert plugin.stdout == direct.stdout


def test_a_pod_with_a_claim_template_is_explained_through_its_generated_claim(cluster: Path) -> None:
    out = explain(cluster, "pod/templated")
    assert out.returncode == 1, out.stderr
    assert out.stdout.count("request gpu: 4/4 devices usable, need 6") == 2
    assert out.stderr == ""  # the sandbox's resourceclaim controller generated it


def test_pod_claims_come_from_the_claim_the_template_or_the_generated_claim() -> None:
    import asyncio

    from gpucluster.cli import explain_live
    from tests.kit.fakekube import FakeKube

    dra = "/apis/resource.k8s.io/v1/namespaces/team"
    kube = FakeKube()
    kube.put(_claim("shared", 1), path=f"{dra}/resourceclaims/shared")
    kube.put(_claim("p-gen-abc", 2), path=f"{dra}/resourceclaims/p-gen-abc")
    kube.put(_template("t", 3), path=f"{dra}/resourceclaimtemplates/t")
    pod = _pod(
        "p",
        [
            {"name": "a", "resourceClaimName": "shared"},
            {"name": "gen", "resourceClaimTemplateName": "t"},
            {"name": "later", "resourceClaimTemplateName": "t"},
        ],
    )
    pod["metadata"]["namespace"] = "team"
    pod["status"] = {"resourceClaimStatuses": [{"name": "gen", "resourceClaimName": "p-gen-abc"}]}
    claims, notes = asyncio.run(explain_live._pod_claims(kube, pod))
    assert [c["kind"] for c in claims] == ["ResourceClaim", "ResourceClaim", "ResourceClaimTemplate"]
    assert kube.paths() == [
        f"{dra}/resourceclaims/shared",
        f"{dra}/resourceclaims/p-gen-abc",
        f"{dra}/resourceclaimtemplates/t",
    ]
    assert notes == ["claim later: not generated yet, explained from template t"]


def test_claims_by_name_and_from_a_file(cluster: Path, tmp_path: Path) -> None:
    assert explain(cluster, "claim/two").returncode == 0
    assert explain(cluster, "claim/huge").returncode == 1
    small = tmp_path / "claim.yaml"
    small.write_text(yaml.safe_dump({**_claim("from-file", 1), "metadata": {"name": "from-file"}}))
    out = explain(cluster, "-f", str(small))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("satisfiable on 2 of 2 node(s)")


def test_only_the_nodes_the_pod_could_use_are_tried(cluster: Path) -> None:
    out = explain(cluster, "pod/nowhere")
    assert out.returncode == 1
    assert "error: no node matches the pod's nodeName, nodeSelector and node affinity" in out.stdout
    assert "gpu-node-0" not in out.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pod/missing"], 'pods "missing" not found'),
        (["deployment/x"], "expected pod/NAME or claim/NAME"),
        ([], "nothing to explain"),
        (["pod/greedy", "--cluster", "c.yaml"], "is read from the cluster"),
        (["claim.yaml", "--cluster", "c.yaml"], "claim.yaml: give a file with --claim FILE"),
        (["pod/greedy", "--claim", "c.yaml", "--cluster", "c.yaml"], "give pod/greedy or -f FILE, not both"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cluster: Path, argv: list[str], message: str) -> None:
    out = explain(cluster, *argv)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_an_unreachable_cluster_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    out = explain(missing, "pod/x")
    assert out.returncode == 2
    assert "no such file" in out.stderr and "Traceback" not in out.stderr


def test_no_cluster_configured_and_an_empty_name_are_one_line_errors(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    for target, wanted in (("pod/x", "no cluster configured"), ("pod/", "expected pod/NAME or claim/NAME")):
        done = subprocess.run(
            [sys.executable, "-m", "gpucluster.cli", "explain", target],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and wanted in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("content", "wanted"),
    [
        ("", "the file is empty"),
        ("[1, 2]\n", "not a kubeconfig"),
        ("apiVersion: v1\nkind: Config\n", "no contexts"),
        ("clusters: [\n", "cannot read it"),
    ],
    ids=["empty", "a-list", "no-contexts", "bad-yaml"],
)
def test_an_unusable_kubeconfig_is_one_line(tmp_path: Path, content: str, wanted: str) -> None:
    """An empty kubeconfig used to end in "'NoneType' object does not support item assignment"."""
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    out = explain(path, "pod/x")
    assert out.returncode == 2
    assert wanted in out.stderr and "NoneType" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
