"""Real kubectl (a subprocess) against a sandbox running in a background thread."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from gpucluster.sandbox.server import SandboxThread
from tests.sandbox.conftest import CRD_FILE, KUBECTL

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: web}}
spec:
  containers:
  - name: nginx
    image: nginx:1.27
    ports: [{{containerPort: 80}}]
"""


def kubectl(
    runner: SandboxThread, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 20
) -> subprocess.CompletedProcess[str]:
    cmd = [KUBECTL, "--kubeconfig", str(runner.sandbox.kubeconfig_path), *args]
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr}")
    return done


def test_discovery_version_and_auth(threaded: SandboxThread) -> None:
    out = kubectl(threaded, "version", "-o", "json").stdout
    assert json.loads(out)["serverVersion"]["gitVersion"] == "v1.34.2"
    resources = kubectl(threaded, "api-resources", "--no-headers").stdout
    assert "resourceslices" in resources and "deployments" in resources
    bad = Path(threaded.sandbox.state_dir) / "bad.kubeconfig"
    config = yaml.safe_load(Path(threaded.sandbox.kubeconfig_path).read_text())
    config["users"][0]["user"]["token"] = "wrong"
    bad.write_text(yaml.safe_dump(config))
    denied = subprocess.run(
        [KUBECTL, "--kubeconfig", str(bad), "get", "pods"], capture_output=True, text=True, timeout=20, check=False
    )
    assert denied.returncode != 0 and "Unauthorized" in denied.stderr


def test_create_get_apply_delete(threaded: SandboxThread) -> None:
    assert kubectl(threaded, "create", "-f", "-", stdin=POD.format(name="web")).stdout.strip() == "pod/web created"
    table = kubectl(threaded, "get", "pods").stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert table[1].split()[:4] == ["web", "0/1", "Pending", "0"]
    as_yaml = yaml.safe_load(kubectl(threaded, "get", "pod", "web", "-o", "yaml").stdout)
    assert as_yaml["metadata"]["namespace"] == "default" and as_yaml["status"]["phase"] == "Pending"
    applied = kubectl(
        threaded, "apply", "--server-side", "-f", "-", stdin=POD.format(name="web").replace("1.27", "1.28"), check=False
    )
    assert applied.returncode != 0 and 'conflict with "kubectl-create"' in applied.stderr
    forced = kubectl(
        threaded,
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        "-",
        stdin=POD.format(name="web").replace("1.27", "1.28"),
    )
    assert forced.stdout.strip() == "pod/web serverside-applied"
    assert kubectl(threaded, "get", "pod", "web", "-o", "jsonpath={.spec.containers[0].image}").stdout == "nginx:1.28"
    # client-side apply (strategic merge patch computed by kubectl)
    kubectl(threaded, "apply", "-f", "-", stdin=POD.format(name="web2"))
    patched = kubectl(threaded, "apply", "-f", "-", stdin=POD.format(name="web2").replace("1.27", "1.29"))
    assert patched.stdout.strip() == "pod/web2 configured"
    assert kubectl(threaded, "get", "pod", "web2", "-o", "jsonpath={.spec.containers[0].image}").stdout == "nginx:1.29"
    assert kubectl(threaded, "delete", "pod", "web", "web2").stdout.split("\n")[0] == 'pod "web" deleted'
    missing = kubectl(threaded, "get", "pod", "web", check=False)
    assert missing.returncode == 1 and 'pods "web" not found' in missing.stderr


def test_get_watch_prints_events(threaded: SandboxThread) -> None:
    kubectl(threaded, "create", "configmap", "w0", "-n", "kube-public", "--from-literal=a=b")
    cmd = [
        KUBECTL,
        "--kubeconfig",
        str(threaded.sandbox.kubeconfig_path),
        "get",
        "configmaps",
        "-n",
        "kube-public",
        "-w",
        "--request-timeout=8s",
    ]
    lines: queue.Queue[list[str]] = queue.Queue()

    def next_line() -> list[str]:
        return lines.get(timeout=10)  # a deadline, not a sleep: each line is awaited

    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        stdout = proc.stdout
        reader = threading.Thread(
            target=lambda: [lines.put(line.split()) for line in stdout if line.strip()], daemon=True
        )
        reader.start()
        try:
            assert next_line() == ["NAME", "DATA", "AGE"]
            assert next_line()[0] == "w0"  # the initial list: the watch is open from here
            kubectl(threaded, "create", "configmap", "w1", "-n", "kube-public", "--from-literal=a=b")
            kubectl(threaded, "label", "configmap", "w1", "-n", "kube-public", "x=y")
            kubectl(threaded, "delete", "configmap", "w1", "-n", "kube-public")
            assert [next_line()[0] for _ in range(3)] == ["w1", "w1", "w1"]
        finally:
            proc.terminate()
            proc.communicate(timeout=10)
            kubectl(threaded, "delete", "configmap", "w0", "-n", "kube-public")


def test_describe_pod_shows_events(threaded: SandboxThread) -> None:
    kubectl(threaded, "create", "-f", "-", stdin=POD.format(name="described"))
    uid = kubectl(threaded, "get", "pod", "described", "-o", "jsonpath={.metadata.uid}").stdout
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "described.1"},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "described", "namespace": "default", "uid": uid},
        "reason": "FailedScheduling",
        "message": "0/2 nodes are available: 2 cannot allocate all claims.",
        "type": "Warning",
        "source": {"component": "default-scheduler"},
        "firstTimestamp": "2025-01-01T00:00:00Z",
        "lastTimestamp": "2025-01-01T00:00:00Z",
        "count": 1,
    }
    kubectl(threaded, "create", "-f", "-", stdin=json.dumps(event))
    described = kubectl(threaded, "describe", "pod", "described").stdout
    assert "Status:           Pending" in described
    assert "FailedScheduling" in described and "2 cannot allocate all claims" in described
    kubectl(threaded, "delete", "pod", "described")


def test_gpucluster_crd_status_column(threaded: SandboxThread) -> None:
    applied = kubectl(threaded, "apply", "--server-side", "-f", str(CRD_FILE)).stdout
    assert "customresourcedefinition.apiextensions.k8s.io/gpuclusters.nvidia.com serverside-applied" in applied
    kubectl(threaded, "wait", "--for=condition=Established", "crd/gpuclusters.nvidia.com", "--timeout=10s")
    singleton = "apiVersion: nvidia.com/v1alpha1\nkind: GPUCluster\nmetadata:\n  name: {name}\nspec: {{}}\n"
    kubectl(threaded, "apply", "--server-side", "-f", "-", stdin=singleton.format(name="gpu-cluster"))
    denied = kubectl(threaded, "create", "-f", "-", stdin=singleton.format(name="other"), check=False)
    assert denied.returncode == 1 and "GPUCluster is a singleton" in denied.stderr
    kubectl(
        threaded,
        "patch",
        "gc",
        "gpu-cluster",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"state":"ready"}}',
    )
    rows = [line.split() for line in kubectl(threaded, "get", "gpucluster").stdout.splitlines()]
    assert rows[0] == ["NAME", "STATUS", "AGE"] and rows[1][:2] == ["gpu-cluster", "ready"]
    defaulted = yaml.safe_load(kubectl(threaded, "get", "gc", "gpu-cluster", "-o", "yaml").stdout)
    assert defaulted["spec"]["dcgm"]["hostPort"] == 5555
    kubectl(threaded, "delete", "-f", str(CRD_FILE))
    gone = kubectl(threaded, "get", "gpucluster", check=False)
    assert gone.returncode != 0


def test_nodes_and_dry_run(threaded: SandboxThread) -> None:
    from gpucluster.sandbox.sim.gpunodes import node_object

    kubectl(threaded, "create", "-f", "-", stdin=json.dumps(node_object("gpu-node-0", "H100", 8)))
    rows = [line.split() for line in kubectl(threaded, "get", "nodes").stdout.splitlines()]
    assert rows[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"] and rows[1][:3] == ["gpu-node-0", "Ready", "<none>"]
    labelled = kubectl(
        threaded, "get", "nodes", "-l", "feature.node.kubernetes.io/pci-10de.present=true", "-o", "name"
    ).stdout
    assert labelled.strip() == "node/gpu-node-0"
    dry = kubectl(threaded, "create", "configmap", "dry", "--dry-run=server", "--from-literal=a=b").stdout
    assert "created (server dry run)" in dry
    assert kubectl(threaded, "get", "configmap", "dry", check=False).returncode == 1
