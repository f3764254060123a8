"""``gpucluster run`` as a process with no cluster configured: sandbox, webhook and controller."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpucluster.cli import run as command
from gpucluster.cli.run import RunOptions
from gpucluster.errors import InputError
from tests.e2e.test_run import KUBECTL, StackThread, get_json, kubectl, legacy_pod, serve_dra_model

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import argparse, sys
from gpucluster.cli import run
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


def test_client_auth_stranded_pod_deletion_and_the_grace_period_reach_the_options() -> None:
    args = _parse(
        "--client-auth", "--client-allowed-names", "a,b", "--delete-stranded-pods",
        "--claim-template-grace-period", "30",
    )  # fmt: skip
    options = command.options_from(args)  # type: ignore[arg-type]
    assert options.client_auth == "sandbox" and options.client_allowed_names == ("a", "b")
    assert options.delete_stranded_pods and options.template_grace_period == 30
    options = command.options_from(_parse("--client-ca-file", "ca.crt"))  # type: ignore[arg-type]
    assert options.client_auth == "ca.crt" and options.client_allowed_names is None
    assert not options.delete_stranded_pods and options.template_grace_period == 600
    with pytest.raises(SystemExit):  # argparse: one or the other
        _parse("--client-auth", "--client-ca-file", "ca.crt")


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")
@pytest.mark.parametrize(("names", "translated"), [(None, True), (("someone-else",), False)])
def test_run_with_client_auth_in_the_sandbox(tmp_path: Path, names: tuple[str, ...] | None, translated: bool) -> None:
    """The sandbox presents its webhook client certificate: translated; a webhook allowing another
    name refuses it, and the pod (failurePolicy Ignore) is stored untranslated."""
    options = RunOptions(
        sandbox=True, kubeconfig_out=tmp_path / "kubeconfig", nodes=1, controller=False,
        client_auth="sandbox", client_allowed_names=names,
    )  # fmt: skip
    runner = StackThread(options)
    stack = runner.start()
    try:
        serve_dra_model(stack)
        kubectl(stack, "create", "-f", "-", stdin=legacy_pod("legacy", 1))
        pod = get_json(stack, "pod", "legacy")
        assert bool(pod["spec"].get("resourceClaims")) is translated, pod["spec"]
    finally:
        runner.stop()
