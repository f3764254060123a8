"""README's walkthrough, run as a new user types it: the `gpucluster run` line of its first console
block in one terminal, then every line of the second in another, with the outcome each line's
comment promises. The checkout is stood in for by a directory holding only links to its examples/
and .venv/, so whatever the walkthrough writes there is seen."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # starts servers or processes: `make unit` leaves it out

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

Check = Callable[[subprocess.CompletedProcess[str]], bool]


def _ok(*needles: str) -> Check:
    return lambda out: out.returncode == 0 and all(n in out.stdout for n in needles)


def _exit(code: int, *needles: str) -> Check:
    return lambda out: out.returncode == code and all(n in out.stdout for n in needles)


# Every line of the second block, with what its comment says (a line the README gains or loses
# must be added here: the test fails on any line it does not know).
EXPECT: dict[str, Check] = {
    "export KUBECONFIG=$PWD/sandbox.kubeconfig": _ok(),
    "export PATH=$PWD/.venv/bin:$PATH": _ok(),
    "kubectl apply --server-side -f examples/gpucluster.yaml": _ok("gpu-cluster serverside-applied"),
    "kubectl get gpucluster": _ok("gpu-cluster", "ready"),
    "kubectl get pods -n gpu-operator": _ok("nvidia-dra-driver-kubelet-plugin-", " 2/2 ", "Running"),
    "kubectl get deviceclass,resourceslices": _ok("deviceclass.resource.k8s.io/gpu.nvidia.com", "gpu-node-2"),
    "kubectl create -f examples/legacy-pod.yaml": _ok("pod/legacy created"),
    "kubectl get pod legacy -o jsonpath='{.spec.resourceClaims}'": _ok('"resourceClaimTemplateName"'),
    "kubectl create -f examples/legacy-pod-16-gpus.yaml": _ok("pod/legacy-16-gpus created"),
    "gpucluster explain pod/legacy-16-gpus": _exit(
        1, "not satisfiable: 0 of 3 node(s) fit", "gpu-node-1: does not fit", "8/8 devices usable, need 16"
    ),
    "kubectl gpucluster explain pod/legacy-16-gpus -o json": _exit(1, '"satisfiable": false', "need 16"),
}


def _console_blocks() -> list[list[str]]:
    """The walkthrough's console blocks (from the `make run` paragraph to `make bench`), as lines
    without their comments."""
    text = README.read_text()
    section = text[text.index("`make run` runs `gpucluster run`") : text.index("`make bench` measures")]
    blocks = re.findall(r"```console\n(.*?)```", section, re.S)
    return [[line for line in block.splitlines() if line.strip()] for block in blocks]


def _command(line: str) -> str:
    """The line without its trailing comment (comments follow two or more spaces)."""
    return re.split(r"\s{2,}# ", line, maxsplit=1)[0].strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    home = tmp_path / "checkout"
    home.mkdir()
    for name in ("examples", ".venv"):
        (home / name).symlink_to(REPO / name)
    return home


@pytest.fixture
def running(checkout: Path, tmp_path: Path) -> Iterator[Path]:
    [run_block, _] = _console_blocks()
    [line] = run_block
    # "make run     # or: .venv/bin/gpucluster run ...": the spelled-out alternative (make run is
    # the same command through the Makefile, which the stand-in checkout does not hold).
    alternative = line.split("# or:", 1)[1].strip()
    assert alternative.startswith(".venv/bin/gpucluster run ")
    log = (tmp_path / "run.out").open("w+")
    proc = subprocess.Popen(
        shlex.split(alternative), cwd=checkout, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        _wait(lambda: "stop with Ctrl-C" in Path(log.name).read_text() or proc.poll() is not None, 60)
        assert proc.poll() is None, Path(log.name).read_text()
        yield checkout
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _wait(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)  # polling a file the other process writes; the deadline bounds it


def _until(
    line: str, cwd: Path, env: dict[str, str], check: Check, *, once: bool, seconds: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``line`` in bash until ``check`` holds (reads: "ready within seconds"); a create once,
    its outcome being final."""
    deadline = time.monotonic() + seconds
    while True:
        out = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
        if once or check(out) or time.monotonic() > deadline:
            return out


def test_every_file_the_readme_names_exists() -> None:
    for block in _console_blocks():
        for line in block:
            for path in re.findall(r"-f (\S+\.ya?ml)", _command(line)):
                assert (REPO / path).is_file(), f"README names {path}, which does not exist"


def test_the_walkthrough_runs_verbatim(running: Path) -> None:
    _walk(running)
    # Nothing but the kubeconfig the walkthrough asked for was written into the checkout.
    assert sorted(p.name for p in running.iterdir()) == [".venv", "examples", "sandbox.kubeconfig"]


def test_the_walkthrough_runs_verbatim_on_the_real_control_plane(checkout: Path) -> None:
    """The same lines against kube-apiserver, kube-scheduler and kube-controller-manager: the
    operator runs as `gpucluster run` does against a configured cluster, its webhook registered by
    URL; the walkthrough's kubeconfig is the real control plane's admin's."""
    from gpucluster.cli.run import chart_env
    from tests.e2e.backends import kube_run_options, start_kube
    from tests.e2e.test_run import StackThread

    plane = start_kube(nodes=3)
    try:
        (checkout / "sandbox.kubeconfig").write_bytes(plane.admin_kubeconfig.read_bytes())
        runner = StackThread(kube_run_options(plane, environment=chart_env()))
        runner.start()
        try:
            _walk(checkout)
        finally:
            runner.stop()
    finally:
        plane.stop()


def _walk(running: Path) -> None:
    [_, lines] = _console_blocks()
    assert [_command(line) for line in lines] == list(EXPECT), "README's walkthrough changed: update EXPECT"
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "VIRTUAL_ENV")}
    env["PWD"] = str(running)
    for line in lines:
        command = _command(line)
        if command.startswith("export "):
            name, value = command.removeprefix("export ").split("=", 1)
            env[name] = subprocess.run(
                ["bash", "-c", f'printf %s "{value}"'], cwd=running, env=env, capture_output=True, text=True, check=True
            ).stdout
            continue
        check = EXPECT[command]
        out = _until(line, running, env, check, once=command.startswith("kubectl create"))
        assert check(out), f"{command!r}: {out.returncode}\n{out.stdout}\n{out.stderr}"


def test_run_takes_the_api_server_port(checkout: Path, tmp_path: Path) -> None:
    from gpucluster.sandbox.ports import free_port

    port = free_port()
    log = tmp_path / "run.out"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(REPO / ".venv/bin/gpucluster"), "run", "--port", str(port), "--no-controller"],
            cwd=checkout,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            _wait(lambda: "stop with Ctrl-C" in log.read_text() or proc.poll() is not None, 60)
            assert f"sandbox API server: https://127.0.0.1:{port} " in log.read_text()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    # The default kubeconfig is removed on exit: the checkout is left as it was.
    assert sorted(p.name for p in checkout.iterdir()) == [".venv", "examples"]
