"""Start-up and dump loading, as whole processes (first runs only, as users run the commands).

Clusters of 100, 1,000 and 5,000 nodes x 8 GPUs (ResourceSlices, Nodes, a DeviceClass) are written
as kubectl-style ``List`` dumps in YAML and in JSON; each figure is the fastest of a few fresh
processes (one at 5,000 nodes), next to its floor measured in the same run (``python -c pass``,
``json.load`` of the JSON dump; for ``match``, the same run with ``true`` as every selector), with
the peak RSS of ``explain`` and ``match -o json``. Targets: ``explain`` on the
1,000-node dump <= 15x ``json.load`` (YAML) and <= 5x (JSON), ``match`` <= 2 us per
device x selector beyond ``true`` (timed in one process over the loaded dump, not as a difference
of two whole processes), and <= 1 GB peak RSS at 5,000 nodes YAML.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.bench_explain import _CLASS, _claim
from gpucluster.sandbox.sim import gpunodes as simulate

SIZES = (100, 1000, 5000)
GPUS = 8
RUNS = 3


def _fastest(argv: list[str], runs: int = RUNS) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, timeout=600, check=False)
        best = min(best, time.perf_counter() - start)
    return best * 1000


def _load(path: Path) -> list[str]:
    return [sys.executable, "-c", f"from gpucluster.manifests import load_objects; load_objects({str(path)!r})"]


def run() -> list[dict[str, Any]]:
    py = sys.executable
    bare = _fastest([py, "-c", "pass"], 5)
    version = _fastest([py, "-m", "gpucluster.cli", "--version"], 5)
    rows: list[dict[str, Any]] = [
        {"name": "python -c pass", "value": bare, "unit": "ms", "target": None, "ok": None},
        {
            "name": "gpucluster --version",
            "value": version,
            "unit": "ms",
            "target": f"<= 5x python -c pass ({5 * bare:.0f} ms)",
            "ok": version <= 5 * bare,
        },
    ]
    for nodes in SIZES:
        rows += _dump_rows(nodes, runs=RUNS if nodes <= 1000 else 1)
    return rows


def _peak(argv: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one fresh process running ``argv``."""
    probe = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:], capture_output=True, check=False); "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=900, check=True)
    seconds, kilobytes = out.stdout.split()
    return float(seconds), int(kilobytes) / 1024


def _beyond_true(path: Path, selectors: list[str], runs: int = 5) -> float:
    """Seconds ``match -o json`` spends on ``selectors`` beyond what ``true`` in their place costs:
    rows evaluated and serialised as the command does, over slices loaded once, the two alternating,
    each its fastest of ``runs``."""
    from gpucluster.cli.match import _each_row, _programs, _row_json
    from gpucluster.manifests import load_objects

    slices = [o for o in load_objects(str(path)) if o.get("kind") == "ResourceSlice"]
    programs = _programs(selectors, consumable_capacity=False)
    trues = _programs(["true"] * len(selectors), consumable_capacity=False)

    def once(progs: list[Any]) -> float:
        start = time.perf_counter()
        for row in _each_row(slices, progs):
            _row_json(row)
        return time.perf_counter() - start

    best_true = best = float("inf")
    for _ in range(runs):
        best_true = min(best_true, once(trues))
        best = min(best, once(programs))
    return max(best - best_true, 0.0)


def _dump_rows(nodes: int, *, runs: int) -> list[dict[str, Any]]:
    """First runs of loading, explain and match over one cluster dump, YAML and JSON."""
    py = sys.executable
    rows: list[dict[str, Any]] = []
    cluster = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            *simulate.cluster_slices(nodes, GPUS, model="H100"),
            *simulate.cluster_nodes(nodes, GPUS, model="H100"),
            _CLASS,
        ],
    }
    selectors = [
        'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"',
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
        'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))',
    ]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "cluster.json").write_text(json.dumps(cluster, indent=4))
        # libyaml's emitter when there is one: the pure-Python one takes minutes at 5,000 nodes.
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        (d / "cluster.yaml").write_text(yaml.dump(cluster, Dumper=dumper, sort_keys=False, default_flow_style=False))
        (d / "claim.yaml").write_text(yaml.safe_dump(_claim("NVIDIA H100 80GB HBM3")))
        floor = _fastest([py, "-c", f"import json; json.load(open({str(d / 'cluster.json')!r}))"], runs)
        rows.append(
            {"name": f"json.load, {nodes}-node JSON dump", "value": floor, "unit": "ms", "target": None, "ok": None}
        )
        for fmt, factor in (("yaml", 15), ("json", 5)):
            path = d / f"cluster.{fmt}"
            size = path.stat().st_size / 1e6
            rows.append(
                {
                    "name": f"load_objects, {nodes}-node {fmt.upper()} dump ({size:.0f} MB)",
                    "value": _fastest(_load(path), runs),
                    "unit": "ms",
                    "target": None,
                    "ok": None,
                }
            )
            explain_argv = [
                py,
                "-m",
                "gpucluster.cli",
                "explain",
                "--claim",
                str(d / "claim.yaml"),
                "--cluster",
                str(path),
            ]
            explain = _fastest(explain_argv, runs)
            target = f"<= {factor}x json.load ({factor * floor:.0f} ms)" if nodes == 1000 else None
            rows.append(
                {
                    "name": f"gpucluster explain, {nodes}-node {fmt.upper()} dump (first run, process)",
                    "value": explain,
                    "unit": "ms",
                    "target": target,
                    "ok": explain <= factor * floor if target else None,
                }
            )
            match_argv = [
                py,
                "-m",
                "gpucluster.cli",
                "match",
                *(a for e in selectors for a in ("-e", e)),
                "-f",
                str(path),
                "-o",
                "json",
            ]
            floor_argv = [*match_argv[:4], *("-e", "true") * len(selectors), *match_argv[4 + 2 * len(selectors) :]]
            # The selectors' share (about 1 us per device x selector) is small next to loading the
            # dump, so the two commands alternate, and each takes its fastest of three.
            match_floor = match = float("inf")
            for _ in range(RUNS):
                match_floor = min(match_floor, _fastest(floor_argv, 1))
                match = min(match, _fastest(match_argv, 1))
            # A difference of two whole processes is mostly loading noise (it came out negative): the
            # selectors' own share is timed in one process over the loaded dump instead.
            per = _beyond_true(path, selectors) * 1e6 / (nodes * GPUS * len(selectors))
            rows += [
                {
                    "name": f"gpucluster match -o json, 3x 'true', {nodes}-node {fmt.upper()} dump (first run, process)",
                    "value": match_floor,
                    "unit": "ms",
                    "target": None,
                    "ok": None,
                },
                {
                    "name": f"gpucluster match -o json, 3 selectors, {nodes}-node {fmt.upper()} dump (first run, process)",
                    "value": match,
                    "unit": "ms",
                    "target": None,
                    "ok": None,
                },
                {
                    "name": f"gpucluster match, {nodes}-node {fmt.upper()} dump: beyond 'true'",
                    "value": per,
                    "unit": "us/device/selector",
                    "target": "<= 2" if nodes >= 1000 else None,
                    "ok": per <= 2 if nodes >= 1000 else None,
                },
            ]
            limit = nodes == 5000 and fmt == "yaml"
            for name, argv in (("explain", explain_argv), ("match -o json, 3 selectors", match_argv)):
                _, rss = _peak(argv)
                rows.append(
                    {
                        "name": f"gpucluster {name}, {nodes}-node {fmt.upper()} dump: peak RSS",
                        "value": rss,
                        "unit": "MB",
                        "target": "<= 1024 MB" if limit else None,
                        "ok": rss <= 1024 if limit else None,
                    }
                )
    return rows
