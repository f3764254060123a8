"""The two backends end-to-end tests run against: the sandbox (the Python double) and the real
control plane (``gpucluster.sandbox.controlplane``: kube-apiserver, kube-controller-manager, kube-scheduler,
etcd built from Go modules). ``backends()`` parametrizes a test over both.

Where the real control plane is not built, its cases skip with one line saying how to build it;
under CI=true they fail instead, so a CI run never loses the tier silently.

The chart's operator pods run from the operator image (``make image``) where it is built from the
sources as they are; otherwise from this checkout's venv, which ``image_status()`` says in the
pytest header, and which fails the run under CI=true (``operator_images()``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.cli.run import CLUSTERPOLICY_CRD, NVIDIADRIVER_CRD, RunOptions, chart_crds
from gpucluster.sandbox.controlplane import build
from gpucluster.sandbox.controlplane.cluster import ClusterOptions, ControlPlane
from gpucluster.sandbox.ports import free_port

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

SANDBOX = "sandbox"
KUBE = "kube"


def kube_version() -> str:
    """The Kubernetes version the real-control-plane cases run (``GPUCLUSTER_KUBE_VERSION``, default 1.34)."""
    return os.environ.get("GPUCLUSTER_KUBE_VERSION", build.DEFAULT_VERSION)


def require_kube(version: str | None = None) -> build.Binaries:
    """The built control plane, or skip (fail under CI=true) with how to build it."""
    version = version or kube_version()
    found = build.cached(version)
    if found is not None:
        return found
    if shutil.which("go") is None:
        reason = f"real control plane {version}: Go is not installed (install Go >= 1.24, then `make kube`)"
    else:
        reason = f"real control plane {version} not built: run `make kube` (about 7 minutes cold per version)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason + "; CI=true never skips this tier")
    pytest.skip(reason)


@cache
def _image() -> tuple[tuple[Path, ...], str]:
    from tools import image

    record = image.recorded()
    if record is None:
        return (), "operator image: not built: the chart's pods run from this checkout's venv (`make image` builds it)"
    if image.current() is None:
        return (), (
            f"operator image: {image.ARCHIVE.name} is older than the sources or the commit: the chart's pods run from this "
            "checkout's venv (`make image` rebuilds it)"
        )
    mib = int(record.get("compressed_bytes") or 0) >> 20
    return (image.ARCHIVE,), f"operator image: {record['reference']} ({image.ARCHIVE.name}, {mib} MiB compressed)"


def image_facts() -> str | None:
    """``repository@manifest-digest`` of the operator image the nodes hold, None without one: what a
    container run from it reports as its imageID."""
    if not operator_images():
        return None
    from tools import image

    record = image.recorded() or {}
    return f"{record['reference'].rsplit(':', 1)[0]}@{record['manifest']}"


def image_status() -> str:
    """One line for the pytest header: what the chart's operator pods run."""
    return _image()[1]


def operator_images() -> tuple[Path, ...]:
    """The archives the simulated nodes hold: the operator image when it is current. Without it the
    pods run from the venv; under CI=true that fails, since CI must test what users deploy."""
    archives, line = _image()
    if not archives and os.environ.get("CI", "").lower() == "true":
        pytest.fail(line + "; CI=true runs the chart's end-to-end tests on the image only")
    return archives


def backends() -> list[str]:
    return [SANDBOX, KUBE]


def start_kube(
    *, nodes: int = 3, gpus_per_node: int = 8, mix: str = "h100", node_agent: bool = True, **options: Any
) -> ControlPlane:
    """The real control plane with the CRDs ``gpucluster run`` installs in the sandbox (the chart's,
    ClusterPolicy's and NVIDIADriver's) and the operator namespace, as an admin would prepare it."""
    require_kube()
    plane = ControlPlane(
        ClusterOptions(
            version=kube_version(), nodes=nodes, gpus_per_node=gpus_per_node, mix=mix, node_agent=node_agent, **options
        )
    ).up()
    try:
        apply = [KUBECTL, "--kubeconfig", str(plane.admin_kubeconfig), "apply", "--server-side", "-f", "-"]
        crds = [*chart_crds(), CLUSTERPOLICY_CRD, NVIDIADRIVER_CRD]
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}}
        docs = yaml.safe_dump_all([*crds, namespace])
        subprocess.run(apply, input=docs, capture_output=True, text=True, check=True, timeout=60)
        wait = [KUBECTL, "--kubeconfig", str(plane.admin_kubeconfig), "wait", "--for=condition=Established"]
        names = [f"crd/{crd['metadata']['name']}" for crd in crds]
        subprocess.run([*wait, *names, "--timeout=30s"], capture_output=True, check=True, timeout=60)
    except BaseException:
        plane.stop()
        raise
    return plane


def kube_run_options(plane: ControlPlane, **overrides: Any) -> RunOptions:
    """``gpucluster run`` against the real control plane: the webhook on loopback, registered by
    URL (kube-apiserver calls it there), health on a free port."""
    port = free_port()
    options: dict[str, Any] = {
        "kubeconfig": str(plane.admin_kubeconfig),
        "sandbox": False,
        "webhook_host": "127.0.0.1",
        "webhook_port": port,
        "webhook_url": f"https://127.0.0.1:{port}",
        "health_port": free_port(),
    }
    return RunOptions(**{**options, **overrides})
