"""The `gpucluster` command: contract, exit codes, and `validate` end to end through the console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpucluster.cli import CONTRACT

GOOD = """\
apiVersion: nvidia.com/v1alpha1
kind: GPUCluster
metadata:
  name: gpu-cluster
spec:
  draDriver:
    featureGates:
      MPSSupport: true
  dcgm:
    enabled: true
"""

BAD = """\
apiVersion: nvidia.com/v1alpha1
kind: GPUCluster
metadata:
  name: gpu-cluster
spec:
  draDriver:
    imagePullPolicy: Sometimes
    featureGates:
      MPSSupport: "yes"
    gpus:
      kubeletPlugin:
        healthcheck:
          port: 70000
"""


def gpucluster(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpucluster.cli", *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def test_help_lists_every_command_of_the_contract() -> None:
    out = gpucluster("--help")
    assert out.returncode == 0
    for name in CONTRACT:
        assert name in out.stdout
    assert "Exit codes" in out.stdout


def test_usage_errors_exit_2() -> None:
    assert gpucluster().returncode == 2
    assert gpucluster("no-such-command").returncode == 2
    assert gpucluster("validate").returncode == 2  # -f is required


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (("validate",), "gpucluster validate: error: the following arguments are required: -f/--filename"),
        (("validate", "-f", "x.yaml", "--bogus"), "gpucluster validate: error: unrecognized arguments: --bogus"),
        (("certs", "rotate", "--interval", "x"), "gpucluster certs rotate: error: argument --interval: 'x' is not"),
        (("no-such-command",), "gpucluster: error: argument COMMAND: invalid choice: 'no-such-command'"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_command(argv: tuple[str, ...], line: str) -> None:
    # As every other error (the contract); argparse printed its usage first, and reported a
    # command's unknown flag as the top level's.
    out = gpucluster(*argv)
    assert out.returncode == 2
    assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith(line), out.stderr
    assert "--help" in out.stderr


def test_validate_prints_the_defaulted_object(tmp_path: Path) -> None:
    path = tmp_path / "gc.yaml"
    path.write_text(GOOD)
    out = gpucluster("validate", "-f", str(path))
    assert out.returncode == 0, out.stderr
    [obj] = list(yaml.safe_load_all(out.stdout))
    assert obj["spec"]["draDriver"]["featureGates"] == {"MPSSupport": True}
    assert obj["spec"]["dcgm"] == {"enabled": True, "hostPort": 5555}
    assert obj["spec"]["dcgmExporter"] == {"enabled": True}
    assert obj["spec"]["draDriver"]["computeDomains"]["kubeletPlugin"]["healthcheck"]["port"] == 51515


def test_validate_json_output_from_stdin() -> None:
    out = gpucluster("validate", "-f", "-", "-o", "json", stdin=GOOD)
    assert out.returncode == 0
    assert '"hostPort": 5555' in out.stdout


def test_validate_reports_each_problem_with_its_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    out = gpucluster("validate", "-f", str(path))
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 3
    assert all(line.startswith(f"gpucluster validate: {path}: spec.draDriver.") for line in lines)
    joined = "\n".join(lines)
    assert "spec.draDriver.gpus.kubeletPlugin.healthcheck.port: Invalid value: 70000" in joined
    assert 'spec.draDriver.imagePullPolicy: Unsupported value: "Sometimes"' in joined
    assert 'spec.draDriver.featureGates.MPSSupport: Invalid value: "yes": must be of type boolean' in joined
    assert "Traceback" not in out.stderr


def test_validate_names_the_document_in_a_stream(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(GOOD + "---\n" + GOOD.replace("gpu-cluster", "second"))
    out = gpucluster("validate", "-f", str(path))
    assert out.returncode == 2
    assert f"{path} (document 2): metadata.name" in out.stderr


def test_validate_warns_about_unknown_fields(tmp_path: Path) -> None:
    path = tmp_path / "gc.yaml"
    path.write_text(GOOD + "  dcgmExporters:\n    enabled: false\n")
    out = gpucluster("validate", "-f", str(path))
    assert out.returncode == 0
    assert 'warning: unknown field "spec.dcgmExporters"' in out.stderr


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("spec: [unclosed\n", "invalid YAML"),
        ("", "no objects found"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "expected apiVersion nvidia.com/v1alpha1 kind GPUCluster"),
    ],
)
def test_validate_bad_files_fail_with_one_line(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(content)
    out = gpucluster("validate", "-f", str(path))
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1
    assert fragment in out.stderr
    assert out.stderr.startswith(f"gpucluster validate: {path}"), out.stderr  # every error alike


def test_validate_missing_file() -> None:
    out = gpucluster("validate", "-f", "/nonexistent/gc.yaml")
    assert out.returncode == 2
    assert out.stderr.strip() == "gpucluster validate: /nonexistent/gc.yaml: no such file"


def test_readme_example_is_a_valid_gpucluster() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    blocks = [part.split("```", 1)[0] for part in readme.split("```yaml\n")[1:]]
    example = next(b for b in blocks if "kind: GPUCluster" in b)
    out = gpucluster("validate", "-f", "-", stdin=example)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


@pytest.mark.parametrize("nodes", ["99999999999", "65001", "-1"])
def test_sandbox_refuses_a_node_count_it_cannot_simulate(nodes: str) -> None:
    """99999999999 nodes used to hang silently while registering them."""
    out = gpucluster("sandbox", "--nodes", nodes)
    assert out.returncode == 2
    assert (
        out.stderr.strip()
        == f"gpucluster sandbox: --nodes {nodes}: must be between 0 and 65,000 (the largest real clusters)"
    )


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--node-workers", "0", "--node-workers 0: must be at least 1"),
        ("--kube-api-burst", "-1", "--kube-api-burst -1: must not be negative"),
    ],
)
def test_controller_refuses_no_label_workers_and_a_negative_burst(flag: str, value: str, message: str) -> None:
    out = gpucluster("controller", flag, value)
    assert out.returncode == 2
    assert out.stderr.strip() == f"gpucluster controller: {message}"


@pytest.mark.parametrize(
    "argv",
    [
        ("certs", "rotate", "--service", "s", "--namespace", "n", "--secret", "x", "--interval", "nan"),
        ("controller", "--kube-api-qps", "nan"),
        ("controller", "--claim-template-grace-period", "inf"),
        ("run", "--claim-template-grace-period", "nan"),
        ("webhook", "--self-signed", "--shutdown-delay=-inf"),
        ("webhook", "--self-signed", "--idle-timeout", "inf"),
        ("apply", "--timeout", "nan"),
        ("cleanup", "--timeout", "inf"),
    ],
)
def test_durations_and_rates_that_are_not_finite_are_refused(argv: tuple[str, ...]) -> None:
    # float() takes "nan" and "inf", and a NaN passes every range check: as the rotator's interval
    # it times out at once, so its loop would run passes back to back against the API server.
    out = gpucluster(*argv)
    assert out.returncode == 2, out.stderr
    assert "is not a finite number" in out.stderr.splitlines()[-1]
