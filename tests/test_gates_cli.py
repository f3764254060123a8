"""``--feature-gates`` on ``gpucluster explain`` and ``gpucluster match``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from gpucluster.cli import explain as explain_command
from gpucluster.cli import match as match_command
from gpucluster.errors import InputError
from tests import test_allocator as t
from tests.test_explain_cli import _write


def _run(module: Any, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="gpucluster")
    module.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


@pytest.fixture
def tainted(tmp_path: Path) -> tuple[str, str]:
    cluster = [t.rslice("s1", "n1", "p1", t.dev("d1", taints=[t.taint()])), t.device_class()]
    return _write(tmp_path / "claim.yaml", [t.claim(t.exact())]), _write(tmp_path / "cluster.yaml", cluster)


def test_explain_gates_change_the_answer_and_json_reports_them(
    tainted: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    claim, cluster = tainted
    assert _run(explain_command, "explain", "--claim", claim, "--cluster", cluster, "-o", "json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["featureGates"]["DRADeviceTaints"] is False
    args = ("--claim", claim, "--cluster", cluster, "--feature-gates", "DRADeviceTaints=true", "-o", "json")
    assert _run(explain_command, "explain", *args) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["featureGates"]["DRADeviceTaints"] is True
    assert out["kubernetesVersion"] == "1.34"


def test_explain_bad_gates_are_input_errors(tainted: tuple[str, str]) -> None:
    claim, cluster = tainted
    with pytest.raises(InputError, match="--feature-gates: unrecognized feature gate: Nope"):
        _run(explain_command, "explain", "--claim", claim, "--cluster", cluster, "--feature-gates", "Nope=true")
    with pytest.raises(InputError, match="--feature-gates: cannot set feature gate DRAAdminAccess to false"):
        _run(explain_command, "explain", "--claim", claim, "--cluster", cluster,
             "--kubernetes-version", "1.36", "--feature-gates", "DRAAdminAccess=false")  # fmt: skip


def test_match_consumable_capacity_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slices = _write(tmp_path / "s.yaml", [t.rslice("s1", "n1", "p1", t.dev("d1"))])
    expr = "device.allowMultipleAllocations == false"
    with pytest.raises(InputError, match="compile error"):
        _run(match_command, "match", "-e", expr, "-f", slices)
    assert _run(match_command, "match", "-e", expr, "-f", slices, "--feature-gates", "DRAConsumableCapacity=true",
                "-o", "summary") == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["expressions"][0]["match"] == 1
    assert _run(match_command, "match", "-e", expr, "-f", slices, "--kubernetes-version", "1.36") == 0
    with pytest.raises(InputError, match="--feature-gates: invalid value of DRAConsumableCapacity=maybe"):
        _run(match_command, "match", "-e", expr, "-f", slices, "--feature-gates", "DRAConsumableCapacity=maybe")
