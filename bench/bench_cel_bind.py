"""``cel.bind`` and macros over a whole attribute map vs hand-written Python, per device.

4,000 simulated H100 devices; fresh views (and one fresh Shapes) every run, best of 5. Each hand-written function reads
the same attributes from the ResourceSlice dicts directly (versions parsed once per distinct
string, as the library's parse memo does).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from gpucluster.dra.cel import Shapes, compile_selector, slice_views
from gpucluster.dra.semver import Semver
from gpucluster.sandbox.sim.gpunodes import cluster_slices

EXPRESSION = (
    'cel.bind(a, device.attributes["gpu.nvidia.com"], a.productName == "NVIDIA H100 80GB HBM3" && a.type == "gpu")'
)
TARGET_RATIO = 3.0
_V550 = Semver.parse("550.0.0")
_VERSIONS: dict[str, Semver] = {}


def _version(text: str) -> Semver:
    v = _VERSIONS.get(text)
    if v is None:
        v = _VERSIONS[text] = Semver.parse(text)
    return v


def _bind(device: dict[str, Any]) -> bool:
    a = device["attributes"]
    return bool(a["productName"]["string"] == "NVIDIA H100 80GB HBM3" and a["type"]["string"] == "gpu")


def _bind_semver(device: dict[str, Any]) -> bool:
    a = device["attributes"]
    return bool(
        a["productName"]["string"] == "NVIDIA H100 80GB HBM3" and _version(a["driverVersion"]["version"]) > _V550
    )


def _has(device: dict[str, Any]) -> bool:
    a = device["attributes"]
    return "productName" in a and a["productName"]["string"].startswith("NVIDIA")


def _exists(device: dict[str, Any]) -> bool:
    # A plain loop, the fastest hand-written form (any() over a generator is slower).
    for k in device["attributes"]:  # noqa: SIM110
        if k == "uuid":
            return True
    return False


def _all(device: dict[str, Any]) -> bool:
    for k in device["attributes"]:  # noqa: SIM110
        if k == "":
            return False
    return True


CASES: list[tuple[str, str, Callable[[dict[str, Any]], bool]]] = [
    ("cel.bind over the attribute map", EXPRESSION, _bind),
    (
        "cel.bind with a semver comparison",
        'cel.bind(a, device.attributes["gpu.nvidia.com"], a.productName == "NVIDIA H100 80GB HBM3"'
        ' && a.driverVersion.isGreaterThan(semver("550.0.0")))',
        _bind_semver,
    ),
    (
        "cel.bind with has()",
        'cel.bind(a, device.attributes["gpu.nvidia.com"], has(a.productName) && a.productName.startsWith("NVIDIA"))',
        _has,
    ),
    (
        'attributes["gpu.nvidia.com"].exists(k, ...)',
        'device.attributes["gpu.nvidia.com"].exists(k, k == "uuid")',
        _exists,
    ),
    ('attributes["gpu.nvidia.com"].all(k, ...)', 'device.attributes["gpu.nvidia.com"].all(k, k != "")', _all),
]


def _measure(
    slices: list[dict[str, Any]], expression: str, hand_fn: Callable[[dict[str, Any]], bool]
) -> tuple[float, float]:
    devices = [d for s in slices for d in s["spec"]["devices"]]
    program = compile_selector(expression)
    compiled = hand = float("inf")
    for _ in range(5):
        shapes = Shapes()  # one per run, as a caller evaluating over the whole cluster has
        views = [v for s in slices for v in slice_views(s, shapes)]
        gc.disable()
        try:
            start = time.perf_counter()
            for view in views:
                program.evaluate(view)
            compiled = min(compiled, time.perf_counter() - start)
            start = time.perf_counter()
            for device in devices:
                hand_fn(device)
            hand = min(hand, time.perf_counter() - start)
        finally:
            gc.enable()
    for view, device in zip(views, devices, strict=True):
        assert program.evaluate(view) == hand_fn(device), expression
    return compiled / len(devices), hand / len(devices)


def run() -> list[dict[str, Any]]:
    slices = cluster_slices(500, 8, model="H100")
    rows: list[dict[str, Any]] = []
    for label, expression, hand_fn in CASES:
        compiled, hand = _measure(slices, expression, hand_fn)
        ratio = compiled / hand
        rows.append({"name": f"{label}, per device", "value": compiled * 1e6, "unit": "us", "target": None, "ok": None})
        rows.append(
            {
                "name": f"{label} / hand-written Python",
                "value": ratio,
                "unit": "x",
                "target": f"<= {TARGET_RATIO:.0f}x",
                "ok": ratio <= TARGET_RATIO,
            }
        )
    return rows  # fmt: skip


if __name__ == "__main__":
    for row in run():
        print(row)
