"""``gpucluster run`` as a process with no cluster configured: sandbox, webhook and controller."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpucluster.commands import run as command
from gpucluster.errors import InputError
from tests.e2e.test_run import KUBECTL

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import argparse, sys
from gpucluster.commands import run
parser = argparse.ArgumentParser(prog="gpucluster")
run.register(parser.add_subparsers(dest="command"))
args = parser.parse_args(sys.argv[1:])
sys.exit(args.func(args))
"""


def _parse(*argv: str) -> object:
    import argparse

    parser = argparse.ArgumentParser(prog="gpucluster")
    command.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["run", *argv])


def test_bad_arguments_are_input_errors() -> None:
    with pytest.raises(InputError, match="--mix"):
        command.options_from(_parse("--mix", "v100"))  # type: ignore[arg-type]
    with pytest.raises(InputError, match="--nodes"):
        command.options_from(_parse("--nodes", "-2"))  # type: ignore[arg-type]


def test_cluster_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert not command.cluster_configured(None)
    assert command.cluster_configured("some.kubeconfig")
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("{}")
    assert command.cluster_configured(None)


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")
def test_run_without_a_cluster_starts_the_sandbox(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    argv = [sys.executable, "-c", SCRIPT, "run", "--kubeconfig-out", str(kubeconfig), "--nodes", "2"]
    with subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            started = time.monotonic()
            lines: list[str] = []
            while not any(line.startswith("stop with") for line in lines):
                line = proc.stdout.readline()
                assert line, proc.stderr.read() if proc.stderr else "no output"
                lines.append(line)
            assert time.monotonic() - started < 15
            text = "".join(lines)
            assert lines[0].startswith("sandbox API server: https://127.0.0.1:")
            assert f"export KUBECONFIG={kubeconfig}" in text and "webhook: https://127.0.0.1:" in text

            def kubectl(*args: str) -> str:
                done = subprocess.run(
                    [KUBECTL, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=20
                )
                assert done.returncode == 0, done.stderr
                return done.stdout

            assert kubectl("get", "nodes", "-o", "name").split() == ["node/gpu-node-0", "node/gpu-node-1"]
            crds = kubectl("get", "crds", "-o", "name")
            for name in ("gpuclusters.nvidia.com", "clusterpolicies.nvidia.com", "nvidiadrivers.nvidia.com"):
                assert f"customresourcedefinition.apiextensions.k8s.io/{name}" in crds
            assert "gpucluster-webhook" in kubectl("get", "services", "-n", "gpu-operator", "-o", "name")
            hooks = kubectl("get", "validatingwebhookconfiguration", "gpucluster-validating-webhook", "-o", "yaml")
            assert "caBundle:" in hooks and "name: gpucluster-webhook" in hooks
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
    assert proc.returncode == 0
    assert not kubeconfig.exists()
