"""``gpucluster sandbox`` as a process: starts, serves kubectl, stops on SIGTERM."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpucluster.cli import sandbox as command
from gpucluster.errors import InputError
from tests.sandbox.conftest import KUBECTL, REPO

SCRIPT = """
import argparse, sys
from gpucluster.cli import sandbox
parser = argparse.ArgumentParser(prog="gpucluster")
sandbox.register(parser.add_subparsers(dest="command"))
args = parser.parse_args(sys.argv[1:])
sys.exit(args.func(args))
"""


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpucluster")
    command.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["sandbox", *argv])


def test_bad_arguments_are_input_errors() -> None:
    with pytest.raises(InputError, match="--nodes -1"):
        command.run(_parse("--nodes", "-1"))
    with pytest.raises(InputError, match="--model"):
        command.run(_parse("--model", "NoSuchGPU"))


@pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")
def test_sandbox_command_serves_nodes_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    argv = [
        sys.executable,
        "-c",
        SCRIPT,
        "sandbox",
        "--nodes",
        "3",
        "--gpus-per-node",
        "4",
        "--kubeconfig-out",
        str(kubeconfig),
    ]
    with subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            started = time.monotonic()
            lines = []
            while not any(line.startswith("stop with") for line in lines):
                line = proc.stdout.readline()
                assert line, proc.stderr.read() if proc.stderr else "no output"
                lines.append(line)
            assert time.monotonic() - started < 10
            assert lines[0].startswith("sandbox API server: https://127.0.0.1:")
            assert f"export KUBECONFIG={kubeconfig}\n" in "".join(lines)
            nodes = subprocess.run(
                [KUBECTL, "--kubeconfig", str(kubeconfig), "get", "nodes", "-o", "name"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout.split()
            assert nodes == ["node/gpu-node-0", "node/gpu-node-1", "node/gpu-node-2"]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
    assert proc.returncode == 0
    assert not kubeconfig.exists()
