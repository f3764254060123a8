"""The operator image (``make image``): its size, what a node pays to unpack it, and the webhook's
cold start from it to ``/readyz``, against the same webhook from the checkout's venv as a floor.

The webhook runs as the chart runs it: read-only root, ``/tmp`` an emptyDir, its certificates a
Secret volume (0440, fsGroup), as UID 65532, with in-cluster configuration pointing at a sandbox
API server (``--kubeconfig`` is not what the chart uses; the service-account token and the
``KUBERNETES_SERVICE_*`` variables are). "Cold" is the first start after the image was unpacked
into an empty cache (a node that just pulled it); "warm" the median of the next starts.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from certs import authority
from sandbox.server import SandboxThread
from sandbox.sim.images import ImageStore
from tests.image import run as image_run
from tools import image as build

STARTS = 5
READY_GOAL_S = 2.0
SIZE_GOAL_MB = 200.0


def _row(name: str, value: float, unit: str, target: str | None = None, ok: bool | None = None) -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit, "target": target, "ok": ok}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
        port, health = _free_port(), _free_port()
        volumes = [
            image_run.Volume("/var/run/gpucluster/certs", {"secret": {"defaultMode": 0o440}},
                             {k: (v, 0o440) for k, v in self.certs.items()}),
            image_run.Volume("/var/run/secrets/kubernetes.io/serviceaccount",
                             {"projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
                             {k: (v, 0o644) for k, v in self.account.items()}, token="token"),
            image_run.tmp_volume(),
        ]  # fmt: skip
        started = time.monotonic()
        proc = image_run.launch(
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
        port, health = _free_port(), _free_port()
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


def run() -> list[dict[str, Any]]:
    record = build.current()
    if record is None:
        return [_row("image built from these sources", 0.0, "", "make image", False)]
    if os.geteuid() != 0:
        return [_row("image runs here (needs root)", 0.0, "", "root", False)]
    mb = 10**6
    compressed = int(record["compressed_bytes"]) / mb
    rows = [
        _row("image size, compressed (registry)", compressed, "MB", f"< {SIZE_GOAL_MB:.0f} MB",
             compressed < SIZE_GOAL_MB),
        _row("image size, unpacked", int(record["unpacked_bytes"]) / mb, "MB"),
        _row("make image, last build", float(record["seconds"]["total"]), "s"),
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gpucluster-bench-image-") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        image = ImageStore([build.ARCHIVE], cache=work / "cache").get(record["reference"])
        assert image is not None
        rows.append(_row("node unpacks the image (cold, empty cache)", time.monotonic() - started, "s"))
        sandbox = SandboxThread()
        sb = sandbox.start()
        try:
            webhook = Webhook(sb, work)
            cold = webhook.from_image(image)
            warm = statistics.median(webhook.from_image(image) for _ in range(STARTS))
            floor = statistics.median(webhook.from_venv() for _ in range(STARTS))
        finally:
            sandbox.stop()
    rows += [
        _row("webhook from the image to /readyz, cold (first start)", cold, "s", f"< {READY_GOAL_S:.0f} s",
             cold < READY_GOAL_S),
        _row(f"webhook from the image to /readyz, warm (median of {STARTS})", warm, "s", f"< {READY_GOAL_S:.0f} s",
             warm < READY_GOAL_S),
        _row(f"floor: the same webhook from the venv (median of {STARTS})", floor, "s"),
        _row("image start over the venv's", warm / floor, "x"),
    ]  # fmt: skip
    return rows
