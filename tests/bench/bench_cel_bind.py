"""``cel.bind`` over a whole attribute map vs hand-written Python, per device (issue 15).

4,000 simulated H100 devices; fresh views every run (slice cache cleared), best of 5. The
hand-written function reads the two attributes from the ResourceSlice dicts directly.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from gpucluster.dra.cel import clear_slice_cache, compile_selector, slice_views
from sandbox.sim.gpunodes import cluster_slices

EXPRESSION = (
    'cel.bind(a, device.attributes["gpu.nvidia.com"], a.productName == "NVIDIA H100 80GB HBM3" && a.type == "gpu")'
)
TARGET_RATIO = 3.0


def _hand(device: dict[str, Any]) -> bool:
    a = device["attributes"]
    return bool(a["productName"]["string"] == "NVIDIA H100 80GB HBM3" and a["type"]["string"] == "gpu")


def run() -> list[dict[str, Any]]:
    slices = cluster_slices(500, 8, model="H100")
    devices = [d for s in slices for d in s["spec"]["devices"]]
    program = compile_selector(EXPRESSION)
    compiled = hand = float("inf")
    for _ in range(5):
        clear_slice_cache()
        views = [v for s in slices for v in slice_views(s)]
        gc.disable()
        try:
            start = time.perf_counter()
            for view in views:
                program.evaluate(view)
            compiled = min(compiled, time.perf_counter() - start)
            start = time.perf_counter()
            for device in devices:
                _hand(device)
            hand = min(hand, time.perf_counter() - start)
        finally:
            gc.enable()
    n = len(devices)
    ratio = compiled / hand
    return [
        {"name": "cel.bind over device.attributes[domain], per device", "value": compiled / n * 1e6,
         "unit": "us", "target": None, "ok": None},
        {"name": "cel.bind over the attribute map / hand-written Python", "value": ratio, "unit": "x",
         # Reported, not enforced yet: the generated code still makes three calls per device.
         "target": f"<= {TARGET_RATIO:.0f}x (issue 15, not enforced)", "ok": None},
    ]  # fmt: skip


if __name__ == "__main__":
    for row in run():
        print(row)
