"""``gpucluster cluster build`` and ``gpucluster cluster up`` as a user runs them."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpucluster.sandbox.controlplane import build
from tests.e2e.backends import kube_version, require_kube

GPUCLUSTER = str(Path(sys.executable).with_name("gpucluster"))
KUBECTL = "/usr/bin/kubectl"


def test_versions_resolve_to_the_pinned_patch_releases() -> None:
    assert build.resolve_version("1.34") == build.VERSIONS["1.34"]
    assert build.resolve_version("v1.37") == build.VERSIONS["1.37"]
    assert build.resolve_version(build.VERSIONS["1.34"]) == build.VERSIONS["1.34"]
    for wrong in ("1.29", "1.34.0", "latest", ""):
        with pytest.raises(build.BuildError, match="is not pinned here"):
            build.resolve_version(wrong)


def test_the_binaries_carry_kubernetes_version_stamp() -> None:
    flags = build.ldflags("1.34.4")
    assert "-X k8s.io/component-base/version.gitVersion=v1.34.4" in flags
    assert "-X k8s.io/client-go/pkg/version.gitMinor=34" in flags


def test_every_pinned_version_has_its_module() -> None:
    for minor, full in build.VERSIONS.items():
        gomod = (build.MODULES / f"kube-{minor}" / "go.mod").read_text()
        assert re.search(rf"^\s*(require )?k8s.io/kubernetes v{re.escape(full)}( // indirect)?$", gomod, re.M), minor
        staging = "v0." + full.split(".", 1)[1]
        assert f"k8s.io/api => k8s.io/api {staging}" in gomod
        assert (build.MODULES / f"kube-{minor}" / "go.sum").is_file()


def test_kubebuilder_assets_supply_apiserver_and_etcd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache, assets = tmp_path / "cache", tmp_path / "assets"
    full = build.VERSIONS["1.34"]
    (cache / full).mkdir(parents=True)
    assets.mkdir()
    for name in ("kube-controller-manager", "kube-scheduler"):
        (cache / full / name).write_text("#!/bin/sh\n")
        (cache / full / name).chmod(0o755)
    monkeypatch.setenv(build.CACHE_ENV, str(cache))
    assert build.cached("1.34") is None  # kube-apiserver and etcd are missing
    for name in ("kube-apiserver", "etcd"):
        (assets / name).write_text("#!/bin/sh\n")
        (assets / name).chmod(0o755)
    monkeypatch.setenv(build.ASSETS_ENV, str(assets))
    found = build.cached("1.34")
    assert found is not None
    assert found["kube-apiserver"] == assets / "kube-apiserver" and found["etcd"] == assets / "etcd"
    assert found["kube-scheduler"] == cache / full / "kube-scheduler"


def test_without_go_the_build_says_how_to_get_it(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path), build.CACHE_ENV: str(tmp_path / "cache")}
    done = subprocess.run([GPUCLUSTER, "cluster", "build"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "the go command is not installed" in done.stderr and "make kube" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_second_build_is_a_no_op() -> None:
    require_kube()
    if shutil.which("go") is None:
        pytest.skip("Go is not installed")
    started = time.monotonic()
    done = subprocess.run(
        [GPUCLUSTER, "cluster", "build", "--version", kube_version()], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "is up to date" in done.stderr
    assert time.monotonic() - started < 30


def test_bad_arguments_are_one_line_errors() -> None:
    for args, fragment in (
        (["--version", "1.20"], "is not pinned here"),
        (["--nodes", "0"], "--nodes 0"),
        (["--mix", "v100"], "unknown GPU model"),
        (["--feature-gates", "DRAAdminAccess"], "expected Name=true or Name=false"),
        (["--kubeconfig-out", "/nonexistent-dir/kube.kubeconfig"], "no such directory /nonexistent-dir"),
        (["--workdir", "/etc/hostname"], "not a directory"),
    ):
        done = subprocess.run([GPUCLUSTER, "cluster", "up", *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        assert fragment in done.stderr and "Traceback" not in done.stderr


def test_up_serves_until_interrupted_and_leaves_nothing(tmp_path: Path) -> None:
    require_kube()
    kubeconfig, workdir = tmp_path / "kube.kubeconfig", tmp_path / "state"
    proc = subprocess.Popen(
        [GPUCLUSTER, "cluster", "up", "--version", kube_version(), "--nodes", "2", "--gpus-per-node", "2",
         "--mix", "h100,a100-mig", "--kubeconfig-out", str(kubeconfig), "--workdir", str(workdir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "GPU nodes" in first, first + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        assert f"export KUBECONFIG={kubeconfig}" in proc.stdout.readline()
        nodes = json.loads(
            subprocess.run(
                [KUBECTL, "--kubeconfig", str(kubeconfig), "get", "nodes", "-o", "json"],
                capture_output=True, text=True, check=True, timeout=30,
            ).stdout
        )  # fmt: skip
        products = {n["metadata"]["labels"]["nvidia.com/gpu.product"] for n in nodes["items"]}
        assert len(nodes["items"]) == 2 and len(products) == 2, products
        assert (workdir / "pki" / "node-gpu-node-0.kubeconfig").is_file()
        assert (workdir / "logs" / "kube-apiserver.log").is_file()
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
    assert code == 0
    left = subprocess.run(["pgrep", "-f", str(workdir)], capture_output=True, text=True)
    assert left.stdout.strip() == "", f"processes left running: {left.stdout}"
