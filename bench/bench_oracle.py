"""The speed anchor: our allocator and CEL against Kubernetes' own Go code on the same inputs, in one run.

Allocator: one claim per family of the allocator bench over 1,000 nodes x 8 H100 GPUs
(Kubernetes 1.34 and its default gates), but for 9 of 8 GPUs: upstream's 1.34 search tries
every ordering of the 8 GPUs on each node before it fails (8! steps, about 40 ms a node). Ours is ``explain`` on freshly loaded objects (slice
parsing, CEL views and the search included) divided by the nodes; upstream's is NewAllocator
plus Allocate on every node (the oracle, decoding not timed), divided by the nodes. Cold is the
first run (for upstream a fresh CEL cache: every selector compiled), warm the best of the next
three. CEL: one selector over the same 8,000 devices, per device: ours a compiled program on
views, upstream's CompilationResult.DeviceMatches; cold includes the compile and the first pass.
Ratios are ours / upstream's; the goals are 5x for the allocator and 3x for CEL.
"""

from __future__ import annotations

import copy
import gc
import json
import shutil
import time
from collections.abc import Callable
from typing import Any

from bench.bench_allocator import _CLASS, GPUS, NODES, _claim
from bench.bench_explain import timed
from gpucluster.dra import gates
from gpucluster.dra.cel import compile_selector, slice_views
from gpucluster.sandbox.sim import gpunodes as simulate
from tests.oracle import build
from tests.oracle.client import Oracle

ALLOCATOR_GOAL = 5.0
CEL_GOAL = 3.0
VERSION = "1.34"
WARM_RUNS = 3

FAMILIES: list[tuple[str, bool, dict[str, Any]]] = [
    ("ExactCount 1", True, _claim(1)),
    ("ExactCount 8", True, _claim(8)),
    ("ExactCount 4, matchAttribute productName", True, _claim(4, match="gpu.nvidia.com/productName")),
    ("ExactCount 2, matchAttribute pcieRoot (cannot fit)", False, _claim(2, match=simulate.PCIE_ROOT_ATTRIBUTE)),
    ("All", True, _claim(None)),
    ("All, matchAttribute productName", True, _claim(None, match="gpu.nvidia.com/productName")),
    ("ExactCount 8, no device matches", False, _claim(GPUS, product="NVIDIA B200")),
]

SELECTORS = [
    "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'",
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
    "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('500.0.0'))",
    "device.attributes['gpu.nvidia.com'].type == 'gpu' && device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA')",
]


def _defaulted(claim: dict[str, Any]) -> dict[str, Any]:
    """The claim as the API server stores it (what the scheduler's allocator reads)."""
    out = copy.deepcopy(claim)
    for request in out["spec"]["devices"]["requests"]:
        exactly = request["exactly"]
        exactly.setdefault("allocationMode", "ExactCount")
        if exactly["allocationMode"] == "ExactCount":
            exactly.setdefault("count", 1)
    out["metadata"]["uid"] = "uid-train"
    return out


def _best(runs: int, once: Callable[[], float]) -> float:
    return min(once() for _ in range(runs))


def _ours_per_node(claim: dict[str, Any], text: str, fits: bool) -> float:
    elapsed, result = timed([claim], json.loads(text), kubernetes_version=VERSION)
    assert result.satisfiable == fits, result.one_line()
    return elapsed * 1000 / NODES  # µs


def _ours_cel(expression: str, slices: list[dict[str, Any]]) -> tuple[float, float, int]:
    """(cold µs, warm µs, matches) per device."""

    def one_pass(program: Any, views: list[Any]) -> int:
        return sum(1 for v in views if program.evaluate(v))

    gc.collect()
    started = time.perf_counter()
    program = compile_selector(expression, disable_cost_estimation=False)
    views = [v for s in slices for v in slice_views(s)]
    matches = one_pass(program, views)
    cold = (time.perf_counter() - started) * 1e6 / len(views)
    warm = float("inf")
    for _ in range(WARM_RUNS):
        started = time.perf_counter()
        one_pass(program, views)
        warm = min(warm, (time.perf_counter() - started) * 1e6 / len(views))
    return cold, warm, matches


def _row(name: str, value: float, unit: str, target: str | None = None, ok: bool | None = None) -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit, "target": target, "ok": ok}


def _ratio_rows(
    what: str, ours: tuple[float, float], answer: dict[str, Any], goal: float, digits: int, per: str
) -> list[dict[str, Any]]:
    """The cold and warm rows of one measurement: ours (µs) against upstream's answer (ns)."""
    rows = []
    for kind, mine, theirs_ns in (("cold", ours[0], answer["coldNS"]), ("warm", ours[1], answer["warmNS"])):
        theirs = theirs_ns / 1000
        ratio = mine / theirs
        text = f"{what}, {kind}: ours {mine:.{digits}f} µs / upstream {theirs:.{digits}f} µs {per}"
        rows.append(_row(text, ratio, "x", f"<= {goal:.0f}x", ratio <= goal))
    return rows


def run() -> list[dict[str, Any]]:
    binary = build.cached(VERSION)
    if binary is None and shutil.which("go") is not None:
        binary = build.build(VERSION)
    if binary is None:
        return [_row("speed anchor skipped: Go is not installed (the oracle is built with it)", 0.0, "", None, None)]
    slices = simulate.cluster_slices(NODES, GPUS, model="H100")
    nodes = simulate.cluster_nodes(NODES, GPUS, model="H100")
    text = json.dumps([*slices, *nodes, _CLASS])
    gate_values = gates.resolve(VERSION)
    rows: list[dict[str, Any]] = []
    label = f"{NODES} nodes x {GPUS} GPUs, per node"
    with Oracle(binary) as oracle:
        for family, fits, claim in FAMILIES:
            cold_ours = _ours_per_node(claim, text, fits)
            warm_ours = _best(WARM_RUNS, lambda claim=claim, fits=fits: _ours_per_node(claim, text, fits))
            answer = oracle.ask(
                {
                    "kind": "bench",
                    "gates": gate_values,
                    "classes": [_CLASS],
                    "slices": slices,
                    "nodes": nodes,
                    "claims": [_defaulted(claim)],
                    "repeat": 1 + WARM_RUNS,
                }
            )["bench"]
            assert (answer["fits"] > 0) == fits, (family, answer)
            rows.extend(_ratio_rows(f"allocator {family}", (cold_ours, warm_ours), answer, ALLOCATOR_GOAL, 1, label))
        devices = [d for s in slices for d in s["spec"]["devices"]]
        for expression in SELECTORS:
            cold_ours, warm_ours, matches = _ours_cel(expression, slices)
            answer = oracle.ask(
                {
                    "kind": "celbench",
                    "gates": gate_values,
                    "expression": expression,
                    "driver": slices[0]["spec"]["driver"],
                    "devices": devices,
                    "repeat": 1 + WARM_RUNS,
                }
            )["bench"]
            assert answer["fits"] == matches, (expression, answer["fits"], matches)
            short = expression if len(expression) <= 60 else expression[:57] + "..."
            rows.extend(_ratio_rows(f"CEL {short}", (cold_ours, warm_ours), answer, CEL_GOAL, 2, "per device"))
    return rows
