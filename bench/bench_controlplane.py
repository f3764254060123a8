"""The real control plane (``gpucluster cluster up``): the fastest of three start-ups until three
GPU nodes are Ready, per built version (target: under 30 s once built), and the size of
the built binaries. A version not built gets a row saying so."""

from __future__ import annotations

import time
from typing import Any

from gpucluster.sandbox.controlplane import build
from gpucluster.sandbox.controlplane.cluster import ClusterOptions, ControlPlane

RUNS = 3


def _up_seconds(options: ClusterOptions) -> float:
    best = float("inf")
    for _ in range(RUNS):
        plane = ControlPlane(options)
        started = time.perf_counter()
        try:
            plane.up()
            best = min(best, time.perf_counter() - started)
        finally:
            plane.stop()
    return best


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for minor in build.VERSIONS:
        binaries = build.cached(minor)
        if binaries is None:
            rows.append({"name": f"Kubernetes {minor}: not built (make kube)", "value": 0.0, "unit": "",
                         "target": None, "ok": None})  # fmt: skip
            continue
        size = sum(path.stat().st_size for path in binaries.paths.values()) / 2**20
        rows.append({"name": f"{binaries.version} binaries", "value": size, "unit": "MiB", "target": None, "ok": None})
        up = _up_seconds(ClusterOptions(version=minor, nodes=3, gpus_per_node=8))
        rows.append(
            {"name": f"{binaries.version} up, 3 GPU nodes Ready", "value": up, "unit": "s", "target": "< 30 s",
             "ok": up < 30}
        )  # fmt: skip
    return rows
