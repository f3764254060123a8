"""``gpucluster certs`` against the sandbox API server, through real kubectl-visible objects."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from gpucluster import cli
from gpucluster.webhook.configurations import webhook_configurations

sandbox = pytest.importorskip("sandbox")


def test_rotate_and_inject_against_the_sandbox(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from gpucluster.kube.client import Kube

    with sandbox.SandboxThread() as cluster:
        kubeconfig = str(cluster.kubeconfig_path)

        async def setup() -> None:
            kube = await Kube.connect(kubeconfig)
            try:
                await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "gpu-operator"}})
                for obj in webhook_configurations(namespace="gpu-operator"):
                    plural = obj["kind"].lower() + "s"
                    await kube.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", body=obj)
            finally:
                await kube.close()

        async def read(path: str) -> dict[str, object]:
            kube = await Kube.connect(kubeconfig)
            try:
                return await kube.request("GET", path)
            finally:
                await kube.close()

        asyncio.run(setup())
        argv = ["certs", "rotate", "--kubeconfig", kubeconfig, "--namespace", "gpu-operator"]
        argv += ["--secret", "webhook-certs", "--service", "gpucluster-webhook", "--cert-dir", str(tmp_path)]
        assert cli.main(argv) == 0
        assert "action=bootstrap" in capsys.readouterr().out
        assert cli.main(argv) == 0
        assert "action=none" in capsys.readouterr().out
        secret = asyncio.run(read("/api/v1/namespaces/gpu-operator/secrets/webhook-certs"))
        bundle = base64.b64decode(secret["data"]["ca.crt"])  # type: ignore[index]
        assert (tmp_path / "ca.crt").read_bytes() == bundle
        assert stat.S_IMODE(os.stat(tmp_path / "tls.key").st_mode) == 0o600
        vwc = asyncio.run(
            read("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpucluster-validating-webhook")
        )
        assert {w["clientConfig"]["caBundle"] for w in vwc["webhooks"]} == {base64.b64encode(bundle).decode()}  # type: ignore[attr-defined]
        assert cli.main(["certs", "inject", "--kubeconfig", kubeconfig, "--ca-file", str(tmp_path / "ca.crt")]) == 0
        assert json.dumps(capsys.readouterr().out).count("unchanged") == 2
