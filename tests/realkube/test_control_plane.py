"""The real control plane itself: what it runs, who may do what, and that it leaves nothing behind."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from gpucluster.sandbox.controlplane import pki
from gpucluster.sandbox.controlplane.build import resolve_version
from gpucluster.sandbox.controlplane.cluster import ControlPlane
from tests.e2e.backends import kube_version, require_kube
from tests.realkube.api import Api

KUBECTL = "/usr/bin/kubectl"


def kubectl(plane: ControlPlane, *args: str, identity: pki.Identity = pki.ADMIN) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(plane.kubeconfig(identity)), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_it_is_the_pinned_kubernetes_with_ready_gpu_nodes(kube: ControlPlane, kube_api: Api) -> None:
    version = kube_api.ok("GET", "/version")
    assert version["gitVersion"] == f"v{resolve_version(kube_version())}"
    nodes = kube_api.ok("GET", "/api/v1/nodes")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["gpu-node-0", "gpu-node-1"]
    for node in nodes:
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True"
        assert node["metadata"]["labels"]["feature.node.kubernetes.io/pci-10de.present"] == "true"
    # Served as that version serves it: DRA's GA API.
    groups = kube_api.ok("GET", "/apis/resource.k8s.io")
    assert "v1" in [v["version"] for v in groups["versions"]]


def test_each_component_has_its_own_identity_judged_by_the_real_authorizers(kube: ControlPlane) -> None:
    # A node may label its own Node but not even read another (the Node authorizer, 1.34+).
    own = kubectl(kube, "label", "node", "gpu-node-0", "example.com/x=1", identity=pki.node_identity("gpu-node-0"))
    assert own.returncode == 0, own.stderr
    other = kubectl(kube, "label", "node", "gpu-node-1", "example.com/x=1", identity=pki.node_identity("gpu-node-0"))
    assert other.returncode != 0
    assert "Forbidden" in other.stderr and "only its own Node object" in other.stderr, other.stderr
    # The simulated DRA driver may manage ResourceSlices and nothing else of note.
    can = kubectl(kube, "auth", "can-i", "create", "resourceslices.resource.k8s.io", identity=pki.DRA_PLUGIN)
    assert can.stdout.strip() == "yes"
    cannot = kubectl(kube, "auth", "can-i", "create", "pods", identity=pki.DRA_PLUGIN)
    assert cannot.stdout.strip() == "no"
    # The scheduler runs as system:kube-scheduler, bound by the bootstrap RBAC only.
    binds = kubectl(kube, "auth", "can-i", "create", "pods", "--subresource=binding", identity=pki.SCHEDULER)
    assert binds.stdout.strip() == "yes"


def test_the_audit_log_names_refused_requests(kube: ControlPlane, kube_api: Api) -> None:
    token = kube_api.service_account_token("default", "nobody")
    status, _ = kube_api.request("GET", "/api/v1/namespaces/kube-system/secrets", token=token)
    assert status == 403
    refused = [line for line in kube.forbidden("system:serviceaccount:default:nobody")]
    assert any("/api/v1/namespaces/kube-system/secrets" in line for line in refused), refused
    assert kube.forbidden("system:serviceaccount:default:someone-else") == []


def test_pods_run_on_the_simulated_nodes_and_stop(kube: ControlPlane) -> None:
    created = kubectl(kube, "run", "plain", "--image=registry.example/app:1", "--restart=Never")
    assert created.returncode == 0, created.stderr
    ready = kubectl(kube, "wait", "--for=condition=Ready", "pod/plain", "--timeout=60s")
    assert ready.returncode == 0, ready.stderr
    deleted = kubectl(kube, "delete", "pod", "plain", "--timeout=60s")
    assert deleted.returncode == 0, deleted.stderr


def test_stop_ends_every_process_and_removes_its_directory() -> None:
    from gpucluster.sandbox.controlplane.cluster import ClusterOptions

    plane = ControlPlane(ClusterOptions(version=kube_version(), nodes=1, gpus_per_node=1)).up()
    pids = [c.process.pid for c in plane.components if c.process is not None]
    workdir = plane.workdir
    assert len(pids) == 5  # etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the nodes
    plane.stop()
    assert not workdir.exists()
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"process {pid} still runs")


def test_a_port_taken_before_its_component_binds_it_starts_the_plane_again_on_new_ports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpucluster.sandbox.controlplane import cluster
    from gpucluster.sandbox.ports import free_port

    require_kube()
    # Another listener takes kube-apiserver's port between its choice and its bind (the third
    # port chosen: etcd's client and peer ports come first), as a parallel test worker may.
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    chosen: list[int] = []

    def choose() -> int:
        port = taken if len(chosen) == 2 else free_port()
        chosen.append(port)
        return port

    monkeypatch.setattr(cluster, "free_port", choose)
    said: list[str] = []
    plane = cluster.ControlPlane(
        cluster.ClusterOptions(version=kube_version(), nodes=1, gpus_per_node=1), say=said.append
    )
    try:
        plane.up()
        assert plane.apiserver_port != taken
        assert plane.admin_get("/version")["gitVersion"] == f"v{resolve_version(kube_version())}"
        assert len(chosen) == 8  # four ports, chosen twice
        assert any("starting again" in line and "address already in use" in line for line in said), said
        assert len(plane.components) == 5  # the first try's etcd is not left running
    finally:
        plane.stop()
        squatter.close()


def test_a_port_free_now_is_below_the_kernels_ephemeral_range() -> None:
    from gpucluster.sandbox.ports import free_port

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    for port in ports:
        assert 20000 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    assert len(ports) > 1  # chosen at random, so parallel workers rarely meet


def test_a_process_pod_runs_with_a_bound_token_and_kubectl_logs_reads_it(kube: ControlPlane) -> None:
    # The project's image runs as a local process; `gpucluster --version` needs no cluster.
    manifest = """
apiVersion: v1
kind: Pod
metadata: {name: version}
spec:
  restartPolicy: Never
  containers:
  - {name: main, image: ghcr.io/nvidia/gpucluster:0.1.0, args: [--version]}
"""
    created = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kube.admin_kubeconfig), "create", "-f", "-"],
        input=manifest, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    done = kubectl(kube, "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/version", "--timeout=60s")
    assert done.returncode == 0, done.stderr + kubectl(kube, "get", "pod", "version", "-o", "yaml").stdout
    # kube-apiserver proxies the log from the node's kubelet API, as it does on a cluster.
    logs = kubectl(kube, "logs", "version")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.startswith("gpucluster "), logs.stdout
    wrong = kubectl(kube, "logs", "version", "-c", "nope")
    assert wrong.returncode != 0 and "container nope is not valid for pod version" in wrong.stderr
    kubectl(kube, "delete", "pod", "version", "--timeout=60s")
