"""``gpucluster explain``: files in, exit code and output out (gpucluster.cli.explain)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.cli import explain as explain_command
from gpucluster.errors import InputError
from gpucluster.sandbox.sim import gpunodes as simulate
from tests import test_allocator as t


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpucluster")
    explain_command.register(parser.add_subparsers(dest="command", required=True))
    return parser


def _run(*argv: str) -> int:
    args = _parser().parse_args(["explain", *argv])
    code: int = args.func(args)
    return code


def _write(path: Path, objects: list[dict[str, Any]]) -> str:
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return str(path)


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    cluster = [*simulate.node_slices("node-a", "H100", 8), simulate.node_object("node-a"), t.device_class()]
    claim = t.claim(t.exact(count=2))
    return _write(tmp_path / "claim.yaml", [claim]), _write(tmp_path / "cluster.yaml", cluster)


def test_satisfiable_exits_0_with_json(files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    claim, cluster = files
    assert _run("--claim", claim, "--cluster", cluster, "-o", "json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["satisfiable"] is True
    assert out["nodes"][0]["allocation"][0] == {
        "claim": "default/c",
        "request": "gpu",
        "driver": "gpu.nvidia.com",
        "pool": "node-a",
        "device": "gpu-0",
    }


def test_unsatisfiable_exits_1_with_text(
    tmp_path: Path, files: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, cluster = files
    claim = _write(tmp_path / "big.yaml", [t.claim(t.exact(count=9))])
    assert _run("--claim", claim, "--cluster", cluster, "--kubernetes-version", "1.36") == 1
    assert capsys.readouterr().out == (
        "not satisfiable: 0 of 1 node(s) fit (Kubernetes 1.36)\n"
        "node-a: does not fit\n"
        "  request gpu: 8/8 devices usable, need 9\n"
    )
    # One fewer fits: all eight GPUs.
    claim = _write(tmp_path / "eight.yaml", [t.claim(t.exact(count=8))])
    assert _run("--claim", claim, "--cluster", cluster, "--kubernetes-version", "1.36") == 0
    assert capsys.readouterr().out.splitlines()[:2] == [
        "satisfiable on 1 of 1 node(s) (Kubernetes 1.36)",
        "node-a: fits: request gpu -> " + ", ".join(f"gpu-{i}" for i in range(8)) + " (gpu.nvidia.com/node-a)",
    ]


def test_missing_class_exits_1(tmp_path: Path, files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    _, cluster = files
    claim = _write(tmp_path / "c.yaml", [t.claim(t.exact(cls="foo"))])
    assert _run("--claim", claim, "--cluster", cluster) == 1
    assert "error: request gpu: device class foo does not exist" in capsys.readouterr().out


def test_bad_input_names_the_file(tmp_path: Path, files: tuple[str, str]) -> None:
    claim, cluster = files
    bad_claim = _write(tmp_path / "bad.yaml", [t.claim(t.exact(count=0))])
    with pytest.raises(
        InputError, match=r"bad\.yaml: ResourceClaim default/c: spec\.devices\.requests\[0\]\.exactly\.count"
    ):
        _run("--claim", bad_claim, "--cluster", cluster)
    bad_cluster = _write(tmp_path / "slices.yaml", [{"kind": "ResourceSlice", "metadata": {"name": "s"}, "spec": {}}])
    with pytest.raises(InputError, match=r"slices\.yaml: ResourceSlice s: spec\.driver: required"):
        _run("--claim", claim, "--cluster", bad_cluster)
    no_claims = _write(tmp_path / "none.yaml", [t.node("n")])
    with pytest.raises(InputError, match=r"none\.yaml: no ResourceClaim or ResourceClaimTemplate found"):
        _run("--claim", no_claims, "--cluster", cluster)
    with pytest.raises(InputError, match="node 'nope' not found"):
        _run("--claim", claim, "--cluster", cluster, "--node", "nope")
    with pytest.raises(InputError, match="no such file"):
        _run("--claim", str(tmp_path / "missing.yaml"), "--cluster", cluster)


def test_usage_errors_exit_2(files: tuple[str, str]) -> None:
    claim, cluster = files
    with pytest.raises(SystemExit) as info:
        _run("--claim", claim, "--cluster", cluster, "--kubernetes-version", "1.33")
    assert info.value.code == 2


def test_objects_changed_in_place_are_explained_as_they_are_now() -> None:
    """Nothing parsed outlives an explanation: a caller that edits its objects in place (device
    attributes, node labels) gets answers about the new values, not about an earlier parse."""
    from gpucluster.dra.allocator import explain
    from gpucluster.dra.model import node_from_object

    cluster = [*simulate.node_slices("node-a", "H100", 8), simulate.node_object("node-a"), t.device_class()]
    b200 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA B200"'
    claim = t.claim(t.exact(count=1, selectors=[{"cel": {"expression": b200}}]))
    assert not explain([claim], cluster).satisfiable
    for obj in cluster:
        if obj["kind"] == "ResourceSlice":
            for device in obj["spec"]["devices"]:
                device["attributes"]["productName"] = {"string": "NVIDIA B200"}
    assert explain([claim], cluster).satisfiable

    node = next(o for o in cluster if o["kind"] == "Node")
    assert node_from_object(node, 0).labels["kubernetes.io/hostname"] == "node-a"
    node["metadata"]["labels"]["kubernetes.io/hostname"] = "renamed"
    assert node_from_object(node, 0).labels["kubernetes.io/hostname"] == "renamed"


def test_yaml_output_is_the_json_answer(files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    claim, cluster = files
    assert _run("--claim", claim, "--cluster", cluster, "-o", "json") == 0
    as_json = json.loads(capsys.readouterr().out)
    assert _run("--claim", claim, "--cluster", cluster, "-o", "yaml") == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json


def test_wide_lists_every_rejected_device_on_every_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 16 GPUs on node-a, of which none is an L4; node-b has one L4 and fits.
    cluster = [
        *simulate.node_slices("node-a", "H100", 16),
        *simulate.node_slices("node-b", "L4", 1),
        simulate.node_object("node-a"),
        simulate.node_object("node-b"),
        t.device_class(),
    ]
    selector = t.sel(f"device.attributes['{t.GPU}'].productName.startsWith('NVIDIA L4')")
    claim = _write(tmp_path / "claim.yaml", [t.claim(t.exact(selectors=selector))])
    where = _write(tmp_path / "cluster.yaml", cluster)
    assert _run("--claim", claim, "--cluster", where) == 0
    text = capsys.readouterr().out
    assert "... and 6 more (see -o wide or -o json)" in text
    assert "gpu.nvidia.com/node-a/gpu-15:" not in text
    assert _run("--claim", claim, "--cluster", where, "-o", "wide") == 0
    wide = capsys.readouterr().out
    rejected = [line for line in wide.splitlines() if line.startswith("    gpu.nvidia.com/node-a/")]
    assert len(rejected) == 16 and "gpu.nvidia.com/node-a/gpu-15: selector #0 false" in wide
    assert "more (see" not in wide
    assert "node-b: fits: request gpu -> gpu-0" in wide
