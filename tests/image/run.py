"""Run a command from the operator image the way the chart mounts it, without a cluster: the
process kubelet's launcher (``gpucluster.sandbox.sim.container``) with volumes laid out as the kubelet lays
them out (``gpucluster.sandbox.sim.imagespec`` owners and modes). Shared by the image tests and ``make bench``.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from gpucluster.certs import authority
from gpucluster.sandbox.ports import free_port
from gpucluster.sandbox.sim import container, imagespec
from gpucluster.sandbox.sim.images import Image

UID = 65532
# The operator Deployment's pod and container security contexts (charts/gpucluster/templates:
# deployment.yaml and _helpers.tpl's gpucluster.containerSecurityContext).
CHART_CONTAINER: dict[str, Any] = {
    "name": "operator",
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    },
}
CHART_POD: dict[str, Any] = {
    "spec": {
        "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID},
        "containers": [CHART_CONTAINER],
    }
}


@dataclass(frozen=True)
class Volume:
    target: str
    source: dict[str, Any]
    """The pod's volume source: ``{"secret": {...}}``, ``{"emptyDir": {}}``..."""
    files: dict[str, tuple[bytes, int]]
    """name -> (content, mode as the volume's spec gives it)."""
    read_only: bool = True
    token: str = ""
    """The file that is a projected service-account token."""


def lay_out(root: Path, pod: dict[str, Any], volumes: list[Volume]) -> list[dict[str, Any]]:
    """The volumes' directories under ``root`` with the kubelet's owners and modes; launcher mounts."""
    mounts = []
    for i, v in enumerate(volumes):
        path = root / f"volume-{i}"
        path.mkdir(parents=True)
        own = imagespec.dir_ownership(pod, v.source)
        os.chown(path, own.uid, own.gid)
        os.chmod(path, own.mode)
        for name, (data, mode) in v.files.items():
            f = path / name
            f.write_bytes(data)
            owner = imagespec.file_ownership(pod, v.source, mode, token=name == v.token)
            os.chown(f, owner.uid, owner.gid)
            os.chmod(f, owner.mode)
        mounts.append({"source": str(path), "target": v.target, "readOnly": v.read_only})
    return mounts


def launch(
    image: Image,
    argv: list[str],
    root: Path,
    volumes: list[Volume],
    *,
    pod: dict[str, Any] = CHART_POD,
    env: dict[str, str] | None = None,
    **popen: Any,
) -> subprocess.Popen[str]:
    """Start ``argv`` in the pod's first container, from ``image``, as the process kubelet would
    (the chart's: read-only root, no privileges, the pod's user)."""
    mounts = lay_out(root / "volumes", pod, volumes)
    layers = root / "layers"
    for part in ("root", "upper", "work"):
        (layers / part).mkdir(parents=True, exist_ok=True)
    spec = imagespec.launch_spec(
        pod, pod["spec"]["containers"][0], image, layers=layers, mounts=mounts, etc={}, argv=argv,
        env={**dict(image.env), **(env or {})},
    )  # fmt: skip
    return subprocess.Popen(container.command(spec), text=True, start_new_session=True, **popen)


def tmp_volume() -> Volume:
    return Volume("/tmp", {"emptyDir": {}}, {}, read_only=False)


def _ready(port: int) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=0.5, context=ctx)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def _wait_ready(proc: subprocess.Popen[str], port: int, started: float, timeout: float = 60.0) -> float:
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the webhook exited with {proc.returncode} before it was ready")
        if _ready(port):
            return time.monotonic() - started
        time.sleep(0.005)
    raise RuntimeError(f"the webhook was not ready within {timeout:.0f} s")


def _stop(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


class Webhook:
    """The chart's webhook container, started from the image or from the venv."""

    def __init__(self, sandbox: Any, work: Path) -> None:
        self.api = urlparse(sandbox.url)
        ca = authority.new_ca("bench-ca")
        names = authority.service_dns_names("gpucluster-webhook", "gpu-operator")
        leaf = authority.new_serving_cert(ca, names, ip_addresses=["127.0.0.1"])
        self.certs = {"ca.crt": ca.cert_pem, "tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem}
        self.account = {"token": sandbox.token.encode(), "ca.crt": sandbox.pki.ca.cert_pem,
                        "namespace": b"gpu-operator"}  # fmt: skip
        self.work = work
        self.runs = 0

    def _args(self, port: int, health: int, cert_dir: str) -> list[str]:
        return ["webhook", f"--port={port}", f"--health-port={health}", f"--cert-dir={cert_dir}",
                "--operator-namespace=gpu-operator", "--service-name=gpucluster-webhook", "--log-level=warning"]  # fmt: skip

    def _env(self) -> dict[str, str]:
        host, port = self.api.hostname or "127.0.0.1", str(self.api.port or 443)
        return {
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "GPUCLUSTER_BIND_ADDRESS": "127.0.0.1",
        }

    def from_image(self, image: Any) -> float:
        self.runs += 1
        root = self.work / f"image-{self.runs}"
        port, health = free_port(), free_port()
        volumes = [
            Volume("/var/run/gpucluster/certs", {"secret": {"defaultMode": 0o440}},
                             {k: (v, 0o440) for k, v in self.certs.items()}),
            Volume("/var/run/secrets/kubernetes.io/serviceaccount",
                             {"projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
                             {k: (v, 0o644) for k, v in self.account.items()}, token="token"),
            tmp_volume(),
        ]  # fmt: skip
        started = time.monotonic()
        proc = launch(
            image, ["gpucluster", *self._args(port, health, "/var/run/gpucluster/certs")], root, volumes,
            env=self._env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            return _wait_ready(proc, health, started)
        finally:
            _stop(proc)

    def from_venv(self) -> float:
        self.runs += 1
        root = self.work / f"venv-{self.runs}"
        certs, account = root / "certs", root / "sa"
        for d, files in ((certs, self.certs), (account, self.account)):
            d.mkdir(parents=True)
            for name, data in files.items():
                (d / name).write_bytes(data)
        port, health = free_port(), free_port()
        env = {**os.environ, **self._env(), "GPUCLUSTER_SERVICEACCOUNT_DIR": str(account), "TMPDIR": str(root)}
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpucluster.cli", *self._args(port, health, str(certs))], env=env, text=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            return _wait_ready(proc, health, started)
        finally:
            _stop(proc)
