"""The allocator's search on every claim shape: one claim over 1,000 simulated nodes x 8 H100 GPUs.

Claims: ExactCount 1-16 (1-8 fit, 9-16 cannot), with no constraint, with ``matchAttribute`` on
``productName`` (all GPUs share it: 1-8 fit) and on ``pcieRoot`` (every GPU has its own: only 1
fits); ``allocationMode: All`` with and without ``matchAttribute``; and claims no device matches.
Every claim is decided on a freshly loaded cluster, so each time is a first run: slice parsing
and CEL views included (the faster of two such runs, against preemption on a shared machine).
The worst node is the slowest single node of any of those runs. Last,
the 9-of-8 claim over 16 nodes that took 20 s before the search was pruned.
"""

from __future__ import annotations

import json
from typing import Any

from bench.bench_explain import timed
from gpucluster.sandbox.sim import gpunodes as simulate

NODES = 1000
GPUS = 8
FIRST_RUN_TARGET_MS = 100.0
NODE_TARGET_MS = 5.0
PRODUCT = "NVIDIA H100 80GB HBM3"

_CLASS: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]},
}


def _claim(count: int | None, *, match: str | None = None, product: str = PRODUCT) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": "gpu.nvidia.com",
        "selectors": [{"cel": {"expression": f"device.attributes['gpu.nvidia.com'].productName == '{product}'"}}],
    }
    if count is None:
        exactly["allocationMode"] = "All"
    else:
        exactly["count"] = count
    devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
    if match:
        devices["constraints"] = [{"matchAttribute": match}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"devices": devices},
    }


def _scenarios() -> list[tuple[str, bool, dict[str, Any]]]:
    """(family, fits, claim)."""
    product = "gpu.nvidia.com/productName"
    root = simulate.PCIE_ROOT_ATTRIBUTE
    out: list[tuple[str, bool, dict[str, Any]]] = []
    for n in range(1, 17):
        fits = n <= GPUS
        out.append((f"ExactCount {'1-8' if fits else '9-16'}", fits, _claim(n)))
        out.append(
            (f"ExactCount {'1-8' if fits else '9-16'}, matchAttribute productName", fits, _claim(n, match=product))
        )
        out.append((f"ExactCount {'1' if n == 1 else '2-16'}, matchAttribute pcieRoot", n == 1, _claim(n, match=root)))
    out.append(("All", True, _claim(None)))
    out.append(("All, matchAttribute productName", True, _claim(None, match=product)))
    out.append(("All, no device matches", False, _claim(None, product="NVIDIA B200")))
    out.append(("ExactCount 8, no device matches", False, _claim(GPUS, product="NVIDIA B200")))
    return out


def _first_run(claim: dict[str, Any], text: str, fits: bool, family: str, version: str = "1.34") -> tuple[float, float]:
    """(time of the whole explanation, time of its slowest node) on a freshly loaded cluster."""
    # A fresh cluster (nothing parsed is kept between explanations).
    cluster = json.loads(text)
    elapsed, result = timed([claim], cluster, kubernetes_version=version)
    assert result.satisfiable == fits, (family, result.one_line())
    assert not result.gave_up, (family, result.gave_up)
    return elapsed, max(n.elapsed_ms for n in result.nodes)


SHARED_TARGET_MS = 500.0  # no target in the issue: a guard against regressions


def _shared_rows() -> list[dict[str, Any]]:
    """The same nodes with GPUs that allow multiple allocations, at Kubernetes 1.36 (where
    DRAConsumableCapacity is on by default): one request of ExactCount 1-16 asking 10Gi of
    memory a GPU (1.36: one request takes a GPU once, so 9-16 cannot fit), and 9 requests of
    1 GPU x 10Gi over GPUs of 10Gi (5 s a node before the capacity bound)."""
    slices = simulate.cluster_slices(NODES, GPUS, model="H100")
    for s in slices:
        for device in s["spec"]["devices"]:
            device["allowMultipleAllocations"] = True
    text = json.dumps([*slices, *simulate.cluster_nodes(NODES, GPUS, model="H100"), _CLASS])
    times: dict[bool, list[float]] = {True: [], False: []}
    for n in range(1, 2 * GPUS + 1):
        claim = _claim(n)
        claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": "10Gi"}}
        elapsed, _ = min(_first_run(claim, text, n <= GPUS, "shared", version="1.36") for _ in range(2))
        times[n <= GPUS].append(elapsed)
    for s in slices:
        for device in s["spec"]["devices"]:
            device["capacity"] = {"memory": {"value": "10Gi"}}
    small_gpus = json.dumps([*slices, *simulate.cluster_nodes(NODES, GPUS, model="H100"), _CLASS])
    nine = _claim(1)
    one = nine["spec"]["devices"]["requests"][0]
    one["exactly"]["capacity"] = {"requests": {"memory": "10Gi"}}
    nine["spec"]["devices"]["requests"] = [{**one, "name": f"gpu-{i}"} for i in range(GPUS + 1)]
    many, _ = min(_first_run(nine, small_gpus, False, "shared", version="1.36") for _ in range(2))
    label = f"1 claim, {NODES} nodes x {GPUS} shared GPUs (1.36), first run"
    return [
        {
            "name": f"{label}: ExactCount {a}-{b} x 10Gi (slowest of {GPUS})",
            "value": max(times[fits]),
            "unit": "ms",
            "target": f"<= {SHARED_TARGET_MS:.0f} ms",
            "ok": max(times[fits]) <= SHARED_TARGET_MS,
        }
        for fits, (a, b) in ((True, (1, GPUS)), (False, (GPUS + 1, 2 * GPUS)))
    ] + [
        {
            "name": f"{label}: {GPUS + 1} requests x 10Gi over 10Gi GPUs",
            "value": many,
            "unit": "ms",
            "target": f"<= {SHARED_TARGET_MS:.0f} ms",
            "ok": many <= SHARED_TARGET_MS,
        }
    ]


def run() -> list[dict[str, Any]]:
    # One JSON text, loaded afresh for every claim: new objects, so nothing parsed is reused.
    text = json.dumps(
        [
            *simulate.cluster_slices(NODES, GPUS, model="H100"),
            *simulate.cluster_nodes(NODES, GPUS, model="H100"),
            _CLASS,
        ]
    )
    families: dict[str, list[float]] = {}
    fits_ms: list[float] = []
    misses_ms: list[float] = []
    worst_node = (0.0, "")
    for family, fits, claim in _scenarios():
        # Two first runs, the faster counts: the machine is shared, and a run preempted by
        # another process says nothing about the allocator.
        elapsed, node_ms = min(_first_run(claim, text, fits, family) for _ in range(2))
        families.setdefault(family, []).append(elapsed)
        (fits_ms if fits else misses_ms).append(elapsed)
        if node_ms > worst_node[0]:
            worst_node = (node_ms, family)

    label = f"1 claim, {NODES} nodes x {GPUS} GPUs, first run"
    rows: list[dict[str, Any]] = []
    for family, times in families.items():
        slowest = max(times)
        rows.append(
            {
                "name": f"{label}: {family} (slowest of {len(times)})",
                "value": slowest,
                "unit": "ms",
                "target": f"<= {FIRST_RUN_TARGET_MS:.0f} ms",
                "ok": slowest <= FIRST_RUN_TARGET_MS,
            }
        )
    rows.append(
        {
            "name": f"worst single node of all those runs ({worst_node[1]})",
            "value": worst_node[0],
            "unit": "ms",
            "target": f"<= {NODE_TARGET_MS:.0f} ms",
            "ok": worst_node[0] <= NODE_TARGET_MS,
        }
    )
    # Medians: single first runs on a shared 2-core machine vary by 10-20 %.
    ratio = sorted(misses_ms)[len(misses_ms) // 2] / sorted(fits_ms)[len(fits_ms) // 2]
    rows.append(
        {
            "name": "infeasible / feasible claims, median first run",
            "value": ratio,
            "unit": "x",
            "target": "<= 1.0 (+10 % noise)",
            "ok": ratio <= 1.1,
        }
    )

    rows.extend(_shared_rows())

    small = [*simulate.cluster_slices(16, GPUS, model="H100"), *simulate.cluster_nodes(16, GPUS, model="H100"), _CLASS]
    elapsed, result = timed([_claim(GPUS + 1)], small)
    assert not result.satisfiable and not result.gave_up
    rows.append(
        {
            "name": f"{GPUS + 1} of {GPUS} GPUs over 16 nodes (20 s before pruning), first run",
            "value": elapsed,
            "unit": "ms",
            "target": "< 50 ms",
            "ok": elapsed < 50,
        }
    )
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row['value']:9.2f} {row['unit']:3} {row['target'] or '':>22}  {row['name']}")
