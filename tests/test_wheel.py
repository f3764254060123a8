"""The wheel works installed: built from the checkout, installed (not editable) into a fresh venv
run from a directory outside the checkout, then `render`, `explain` and `sandbox --help` work, with
the chart and CRDs read from inside the package. Also: every library the code imports is declared."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from gpucluster.sandbox.sim import gpunodes as simulate
from tests import test_allocator as t
from tools.namespace import namespace

pytestmark = pytest.mark.integration  # starts servers or processes: `make unit` leaves it out

REPO = Path(__file__).resolve().parents[1]
FOLDERS = list(namespace().values())  # the checkout folders the wheel is made of
GPUCLUSTER = """\
apiVersion: nvidia.com/v1alpha1
kind: GPUCluster
metadata:
  name: gpu-cluster
spec: {}
"""
# The operand images, as the operator's environment gives them.
IMAGES = {
    "DRA_DRIVER_IMAGE": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0",
    "DCGM_EXPORTER_IMAGE": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
    "DCGM_IMAGE": "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
    "VALIDATOR_IMAGE": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0",
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a fresh venv with the built wheel installed."""
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    # Build isolation fetches setuptools from the configured (local) index, as `pip install .` does.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = dist.glob("gpucluster-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # The dependencies come from the project's venv (offline, and seconds instead of a minute): a bare
    # path line, so that venv's editable-install hook for gpucluster is not run.
    site = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    (site / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin"


def run(bin_dir: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **IMAGES}
    return subprocess.run(
        [str(bin_dir / "gpucluster"), *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_installed_package_is_the_wheel_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        [
            str(installed / "python"),
            "-c",
            "import gpucluster.chart as c, gpucluster; print(gpucluster.__file__, c.chart_dir())",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    module, chart = out.stdout.split()
    assert not Path(module).is_relative_to(REPO)
    assert Path(chart).name == "_chart" and (Path(chart) / "crds" / "nvidia.com_gpuclusters.yaml").is_file()


def test_the_wheel_installs_one_top_level_package(installed: Path) -> None:
    """Only ``gpucluster`` goes on the path: the shells are its subpackages, so the wheel cannot
    clash with PyPI's ``controller`` or ``certs``."""
    site = next(installed.parent.glob("lib/python3*/site-packages"))
    [record] = site.glob("gpucluster-*.dist-info/RECORD")
    tops = {line.split("/", 1)[0] for line in record.read_text().splitlines() if "/" in line.split(",", 1)[0]}
    assert tops - {record.parent.name, ".."} == {"gpucluster"}  # ".." : the console scripts in bin/
    assert not any((site / name).exists() for name in ("webhook", "controller", "certs", "sandbox", "cli"))
    for name in ("cli", "webhook", "controller", "certs", "sandbox"):
        assert (site / "gpucluster" / name / "__init__.py").is_file(), name


def test_every_command_loads_installed(installed: Path, tmp_path: Path) -> None:
    """Every command's own module loads from the wheel: the full parser imports them all, and
    each command's help is its own."""
    code = (
        "import gpucluster.cli as c, sys; p = c.build_parser(); "
        "[sub] = [a for a in p._actions if a.dest == 'command']; "
        "print(*(f'{n}={m.format_usage().split()[1:3]}' for n, m in sub.choices.items()), sep='\\n'); "
        "print(*sorted(m for m in sys.modules if m.startswith('gpucluster.cli.')), sep='\\n')"
    )
    out = subprocess.run([str(installed / "python"), "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    from gpucluster.cli import COMMANDS

    for command in COMMANDS:
        assert f"{command}=['gpucluster', '{command}']" in lines, (command, out.stdout)
        assert f"gpucluster.cli.{command}" in lines, command


def test_render_explain_and_sandbox_help_run_installed(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "gc.yaml").write_text(GPUCLUSTER)
    out = run(installed, tmp_path, "render", "-f", "gc.yaml")
    assert out.returncode == 0, out.stderr
    assert any(d and d.get("kind") == "DaemonSet" for d in yaml.safe_load_all(out.stdout))

    cluster = [*simulate.node_slices("node-a", "H100", 8), simulate.node_object("node-a"), t.device_class()]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(cluster))
    (tmp_path / "claim.yaml").write_text(yaml.safe_dump(t.claim(t.exact(count=2))))
    out = run(installed, tmp_path, "explain", "--claim", "claim.yaml", "--cluster", "cluster.yaml", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert '"satisfiable": true' in out.stdout

    out = run(installed, tmp_path, "sandbox", "--help")
    assert out.returncode == 0, out.stderr
    assert "--kubeconfig-out" in out.stdout


def test_run_reads_the_crds_shipped_in_the_package(installed: Path, tmp_path: Path) -> None:
    code = "from gpucluster.cli.run import chart_crds; print([c['metadata']['name'] for c in chart_crds()])"
    out = subprocess.run([str(installed / "python"), "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "gpuclusters.nvidia.com" in out.stdout


def _imported_top_levels() -> set[str]:
    names: set[str] = set()
    for folder in FOLDERS:
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"gpucluster"}


def test_every_imported_library_is_declared() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {Requirement(r).name.lower().replace("_", "-") for r in project["dependencies"]}
    dev = {Requirement(r).name.lower().replace("_", "-") for r in project["optional-dependencies"]["dev"]}
    providers = importlib.metadata.packages_distributions()
    # Only tools that regenerate data files import these, and only from a development checkout.
    dev_only = {"kubernetes_validate"}
    missing = {}
    for name in _imported_top_levels():
        dists = {d.lower().replace("_", "-") for d in providers.get(name, [name])}
        allowed = declared | dev if name in dev_only else declared
        if not dists & allowed:
            missing[name] = sorted(dists)
    assert not missing, f"imported but not declared in [project] dependencies: {missing}"


def test_the_control_plane_modules_ship_in_the_package(installed: Path, tmp_path: Path) -> None:
    # `gpucluster cluster build` from an installed wheel builds from the modules inside the package.
    code = (
        "from gpucluster.sandbox.controlplane import build; "
        "print(build.MODULES, *sorted(p.relative_to(build.MODULES).as_posix() for p in build.MODULES.rglob('*') if p.is_file()))"
    )
    out = subprocess.run([str(installed / "python"), "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    modules, *files = out.stdout.split()
    assert not Path(modules).is_relative_to(REPO)
    for minor in ("1.34", "1.37"):
        assert {f"kube-{minor}/go.mod", f"kube-{minor}/go.sum"} <= set(files), files
    assert {"etcd/go.mod", "etcd/go.sum", "etcd/main.go"} <= set(files), files
    out = run(installed, tmp_path, "cluster", "up", "--version", "1.20")
    assert out.returncode == 2 and "is not pinned here" in out.stderr
