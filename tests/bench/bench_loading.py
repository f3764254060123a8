"""Start-up and dump loading, as whole processes (first runs only, as users run the commands).

A 1,000-node x 8-GPU cluster (ResourceSlices, Nodes, a DeviceClass) is written as a kubectl-style
``List`` in YAML and in JSON; each figure is the fastest of a few fresh processes, next to its floor
measured in the same run (``python -c pass``, ``json.load`` of the JSON dump).
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

from gpucluster.dra import simulate
from tests.bench.bench_explain import _CLASS, _claim

NODES = 1000
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
    cluster = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            *simulate.cluster_slices(NODES, GPUS, model="H100"),
            *simulate.cluster_nodes(NODES, GPUS, model="H100"),
            _CLASS,
        ],
    }
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "cluster.json").write_text(json.dumps(cluster, indent=4))
        (d / "cluster.yaml").write_text(yaml.safe_dump(cluster, sort_keys=False, default_flow_style=False))
        (d / "claim.yaml").write_text(yaml.safe_dump(_claim("NVIDIA H100 80GB HBM3")))
        floor = _fastest([py, "-c", f"import json; json.load(open({str(d / 'cluster.json')!r}))"])
        rows.append(
            {"name": f"json.load, {NODES}-node JSON dump", "value": floor, "unit": "ms", "target": None, "ok": None}
        )
        for fmt, factor in (("yaml", 15), ("json", 5)):
            path = d / f"cluster.{fmt}"
            size = path.stat().st_size / 1e6
            load = _fastest(_load(path))
            rows.append(
                {
                    "name": f"load_objects, {NODES}-node {fmt.upper()} dump ({size:.0f} MB)",
                    "value": load,
                    "unit": "ms",
                    "target": None,
                    "ok": None,
                }
            )
            explain = _fastest(
                [py, "-m", "gpucluster.cli", "explain", "--claim", str(d / "claim.yaml"), "--cluster", str(path)]
            )
            rows.append(
                {
                    "name": f"gpucluster explain, {NODES}-node {fmt.upper()} dump (process)",
                    "value": explain,
                    "unit": "ms",
                    "target": f"<= {factor}x json.load ({factor * floor:.0f} ms)",
                    "ok": explain <= factor * floor,
                }
            )
    return rows
