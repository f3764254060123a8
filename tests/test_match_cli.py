"""`gpucluster match`: rows in slice and device order, summary counts, errors, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "resourceslices"


def match(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpucluster.cli", "match", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_json_rows_in_slice_device_and_expression_order() -> None:
    out = match("-e", 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"', "-e",
                'device.attributes["gpu.nvidia.com"].index == 0', "-f", str(FIXTURES / "l4-node.yaml"), "-o", "json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [(r["device"], r["expression"]) for r in rows[:4]] == [
        ("gpu-0", 0),
        ("gpu-0", 1),
        ("gpu-1", 0),
        ("gpu-1", 1),
    ]
    assert set(rows[0]) == {"driver", "pool", "device", "expression", "outcome", "message"}
    assert rows[0] == {
        "driver": "gpu.nvidia.com",
        "pool": "l4-node",
        "device": "gpu-0",
        "expression": 0,
        "outcome": "match",
        "message": "",
    }
    assert rows[1]["outcome"] == "error" and "no such key: index" in rows[1]["message"]


def test_summary_counts_mig_and_full_gpus() -> None:
    out = match("-e", 'device.attributes["gpu.nvidia.com"].type == "mig"', "-e", 'device.attributes["gpu.nvidia.com"].type == "gpu"',
                "-f", str(FIXTURES / "a100-mig-node.yaml"), "-o", "summary")  # fmt: skip
    summary = json.loads(out.stdout)["expressions"]
    assert summary[0]["match"] + summary[1]["match"] == summary[0]["match"] + summary[0]["nomatch"]
    assert summary[1]["match"] == 6  # GPUs 2-7 are full GPUs; 0 and 1 are partitioned
    assert summary[0]["error"] == 0


def test_quantity_and_semver_selectors() -> None:
    out = match("-e", 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
                "-e", 'device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("550.0.0")) >= 0',
                "-f", str(FIXTURES / "h100-node.yaml"), "-o", "summary")  # fmt: skip
    summary = json.loads(out.stdout)["expressions"]
    assert summary[0] == {"expression": 0, "match": 8, "nomatch": 0, "error": 0}
    assert summary[1] == {"expression": 1, "match": 8, "nomatch": 0, "error": 0}


def test_compile_error_exits_2_naming_expression_and_position() -> None:
    out = match("-e", "true", "-e", "device.attributes[", "-f", str(FIXTURES / "l4-node.yaml"))
    assert out.returncode == 2
    assert out.stderr.startswith("gpucluster match: expression #1: compile error at 1:")
    assert out.stderr.count("\n") == 1


def test_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "s.yaml"
    bad.write_text("apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: s}\nspec: {devices: []}\n")
    out = match("-e", "true", "-f", str(bad))
    assert out.returncode == 2 and "spec.driver: Required value" in out.stderr
    out = match("-e", "x" * (20 * 1024), "-f", str(FIXTURES / "l4-node.yaml"))
    assert out.returncode == 2 and "10 KiB" in out.stderr
    bad.write_text("kind: [\n")
    out = match("-e", "true", "-f", str(bad))
    assert out.returncode == 2 and "invalid YAML" in out.stderr and "Traceback" not in out.stderr


def test_json_output_is_streamed_row_by_row_and_reads_as_one_document() -> None:
    """``-o json`` writes each row as it is evaluated (never the whole answer at once), and the
    stream is exactly ``json.dumps(rows, indent=2)``."""
    import io

    from gpucluster.cli.match import _write_json_stream

    writes: list[str] = []

    class Recorder(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return super().write(text)

    rows = [{"device": f"gpu-{i}", "outcome": "match", "message": "a\nb"} for i in range(3)]
    out = Recorder()
    _write_json_stream(iter(rows), out)
    assert out.getvalue() == json.dumps(rows, indent=2) + "\n"
    assert len(writes) == len(rows) + 1  # one write per row, then the closing bracket
    empty = io.StringIO()
    _write_json_stream(iter([]), empty)
    assert json.loads(empty.getvalue()) == []


def test_json_rows_of_match_print_exactly_as_json_dumps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows match yields are filled into a template (json.dumps with indent is pure Python and
    was a third of a run); any other row goes through json.dumps. Both print the same text."""
    import io

    from gpucluster.cli.match import _write_json_stream

    rows = [
        {"driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-0", "expression": 0, "outcome": "match",
         "message": ""},
        {"driver": "d", "pool": 'p"\\', "device": "gpü-1", "expression": 12, "outcome": "error",
         "message": "no such key: 'x'\n\t\u2028"},
        {"driver": "d", "pool": "p", "device": "g", "expression": True, "outcome": "nomatch", "message": ""},
        {"pool": "p", "driver": "d", "device": "g", "expression": 1, "outcome": "nomatch", "message": ""},
    ]  # fmt: skip
    expected, expected_ours = json.dumps(rows, indent=2) + "\n", json.dumps(rows[:2], indent=2) + "\n"
    out = io.StringIO()
    _write_json_stream(iter(rows), out)
    assert out.getvalue() == expected

    def slow(*args: object, **kwargs: object) -> str:
        raise AssertionError("a row of match went through json.dumps")

    monkeypatch.setattr(json, "dumps", slow)
    out = io.StringIO()
    _write_json_stream(iter(rows[:2]), out)
    assert out.getvalue() == expected_ours


def test_an_attribute_cel_cannot_convert_is_an_error_for_every_expression(tmp_path: Path) -> None:
    # As Kubernetes' DeviceMatches: every attribute is converted first, so `true` fails too.
    slice_ = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "n",
            "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": "ok", "attributes": {"model": {"string": "x"}}},
                {"name": "bad", "attributes": {"model": {}}},
            ],
        },
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(slice_))
    out = match("-e", "true", "-e", "device.driver == 'gpu.nvidia.com'", "-f", str(path), "-o", "json")
    rows = json.loads(out.stdout)
    assert [(r["device"], r["outcome"]) for r in rows] == [
        ("ok", "match"),
        ("ok", "match"),
        ("bad", "error"),
        ("bad", "error"),
    ]
    assert rows[2]["message"] == "attribute model: unsupported attribute value"


def test_yaml_rows_are_the_json_rows() -> None:
    args = (
        "-e",
        'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"',
        "-f",
        str(FIXTURES / "l4-node.yaml"),
    )
    as_json = match(*args, "-o", "json")
    as_yaml = match(*args, "-o", "yaml")
    assert as_yaml.returncode == 0, as_yaml.stderr
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout) != []


def test_wide_adds_each_devices_node_and_the_error_messages() -> None:
    fixture = str(FIXTURES / "l4-node.yaml")
    narrow = match("-e", 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"', "-e",
                   'device.attributes["gpu.nvidia.com"].nope == 1', "-f", fixture)  # fmt: skip
    wide = match("-e", 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L4"', "-e",
                 'device.attributes["gpu.nvidia.com"].nope == 1', "-f", fixture, "-o", "wide")  # fmt: skip
    assert narrow.returncode == wide.returncode == 0, wide.stderr
    header = next(line for line in wide.stdout.splitlines() if line.startswith("DRIVER"))
    assert header.split() == ["DRIVER", "POOL", "DEVICE", "NODE", "#0", "#1", "MESSAGE"]
    assert "NODE" not in narrow.stdout and "no such key" not in narrow.stdout
    rows = [line.split(None, 6) for line in wide.stdout.splitlines() if line.startswith("gpu.nvidia.com")]
    slices = list(yaml.safe_load_all((FIXTURES / "l4-node.yaml").read_text()))
    node = next(s for s in slices if s and s.get("kind") == "ResourceSlice")["spec"]["nodeName"]
    assert rows and all(r[3] == node and r[5] == "error" and r[6] == "#1: no such key: nope" for r in rows)
    assert [r[4] for r in rows] == ["match"] * 4
