"""The shell scripts the operands run, executed against fake host trees.

``chroot`` and ``nvidia-smi`` are replaced by stand-ins on PATH: the fake chroot runs the
command from the given root's /usr/bin, so a "driver" is a root containing an executable
usr/bin/nvidia-smi.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gpucluster.controller.operands.dra_driver import DRIVER_VALIDATOR_SCRIPT
from gpucluster.controller.operands.dra_validator import VALIDATOR_SCRIPT

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

FAKE_CHROOT = """#!/bin/sh
root=$1; shift
cmd=$1; shift
[ -x "$root/usr/bin/$cmd" ] || exit 127
exec "$root/usr/bin/$cmd" "$@"
"""


def executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def install_driver(root: Path, *, works: bool = True) -> None:
    executable(root / "usr/bin/nvidia-smi", "#!/bin/sh\nexit 0\n" if works else "#!/bin/sh\nexit 9\n")


class Node:
    """A fake node: host root, operator driver root, validations dir and the pod's emptyDir."""

    def __init__(self, tmp: Path) -> None:
        self.host = tmp / "host"
        self.driver_root = tmp / "driver-root"
        self.validations = tmp / "validations"
        self.ready_dir = tmp / "dra-driver"
        self.bin = tmp / "bin"
        for d in (self.host, self.driver_root, self.validations, self.ready_dir):
            d.mkdir()
        executable(self.bin / "chroot", FAKE_CHROOT)

    @property
    def ready_file(self) -> Path:
        return self.ready_dir / "driver-ready"

    def env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "HOST_DRIVER_ROOT": "/",
            "HOST_DRIVER_ROOT_CTR_PATH": str(self.host),
            "OPERATOR_DRIVER_ROOT": "/run/nvidia/driver",
            "OPERATOR_DRIVER_ROOT_CTR_PATH": str(self.driver_root),
            "OPERATOR_DRIVER_READY_FILE": str(self.validations / ".driver-ctr-ready"),
            "DRIVER_READY_FILE": str(self.ready_file),
            "RETRY_INTERVAL_SECONDS": "0.05",
        }

    def run_validator(self, timeout: float = 10) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", DRIVER_VALIDATOR_SCRIPT],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ready_vars(self) -> dict[str, str]:
        lines = self.ready_file.read_text().splitlines()
        return dict(line.split("=", 1) for line in lines)


def test_host_driver_is_preferred(tmp_path: Path) -> None:
    node = Node(tmp_path)
    install_driver(node.host)
    install_driver(node.driver_root)
    (node.validations / ".driver-ctr-ready").touch()
    out = node.run_validator()
    assert out.returncode == 0, out.stderr
    assert node.ready_vars() == {
        "IS_HOST_DRIVER": "true",
        "NVIDIA_DRIVER_ROOT": "/",
        "DRIVER_ROOT_CTR_PATH": str(node.host),
    }


def test_operator_driver_is_used_once_its_container_is_ready(tmp_path: Path) -> None:
    node = Node(tmp_path)
    install_driver(node.driver_root)
    (node.validations / ".driver-ctr-ready").touch()
    out = node.run_validator()
    assert out.returncode == 0, out.stderr
    assert node.ready_vars() == {
        "IS_HOST_DRIVER": "false",
        "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver",
        "DRIVER_ROOT_CTR_PATH": str(node.driver_root),
    }
    # The file is what the plugin containers source.
    sourced = subprocess.run(
        ["bash", "-c", f'set -a; . "{node.ready_file}"; set +a; echo "$NVIDIA_DRIVER_ROOT|$DRIVER_ROOT_CTR_PATH"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert sourced.stdout.strip() == f"/run/nvidia/driver|{node.driver_root}"


def test_broken_host_driver_falls_through_to_the_operator_driver(tmp_path: Path) -> None:
    node = Node(tmp_path)
    install_driver(node.host, works=False)
    install_driver(node.driver_root)
    (node.validations / ".driver-ctr-ready").touch()
    assert node.run_validator().returncode == 0
    assert node.ready_vars()["IS_HOST_DRIVER"] == "false"


def test_waits_while_no_driver_is_ready_and_proceeds_when_one_is(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.ready_file.write_text("stale\n")
    install_driver(node.driver_root)  # installed, but its container has not signalled readiness
    proc = subprocess.Popen(
        ["bash", "-c", DRIVER_VALIDATOR_SCRIPT],
        env=node.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Its first pass is over once it says it is waiting: no fixed sleep, a deadline.
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        assert ready, "the validator said nothing within 10 s"
        first = proc.stdout.readline()
        assert "no ready NVIDIA driver" in first, first
        assert proc.poll() is None, "the validator must keep waiting"
        assert not node.ready_file.exists(), "a stale verdict must be removed first"
        (node.validations / ".driver-ctr-ready").touch()
        stdout, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert "NVIDIA driver ready at /run/nvidia/driver" in stdout
    assert node.ready_vars()["NVIDIA_DRIVER_ROOT"] == "/run/nvidia/driver"


# --- nvidia-dra-validator --------------------------------------------------------------------


def run_dra_validator(tmp_path: Path, smi: str) -> tuple[subprocess.Popen[str], Path]:
    executable(tmp_path / "bin/nvidia-smi", smi)
    validated = tmp_path / "validated"
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "VALIDATED_FILE": str(validated)}
    proc = subprocess.Popen(
        ["sh", "-c", VALIDATOR_SCRIPT], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return proc, validated


def test_dra_validator_becomes_ready_after_nvidia_smi_lists_a_gpu(tmp_path: Path) -> None:
    gpu = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1b2c3d4e-0000-0000-0000-000000000000)"
    proc, validated = run_dra_validator(tmp_path, f"#!/bin/sh\n[ \"$1\" = -L ] && echo '{gpu}'\n")
    try:
        deadline = time.monotonic() + 10
        while not validated.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert validated.exists()
        assert proc.poll() is None, "the container keeps running to hold the pod ready"
        proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert gpu in stdout


@pytest.mark.parametrize("smi", ["#!/bin/sh\nexit 1\n", "#!/bin/sh\nexit 0\n"], ids=["fails", "lists-nothing"])
def test_dra_validator_is_never_ready_without_a_working_gpu(tmp_path: Path, smi: str) -> None:
    proc, validated = run_dra_validator(tmp_path, smi)
    _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 1
    assert not validated.exists()
    assert "nvidia-dra-validator:" in stderr
