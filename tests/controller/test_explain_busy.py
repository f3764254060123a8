"""Explanations separate "busy now" (wait) from "never fits" (fix the claim) once devices are in use."""

from __future__ import annotations

import copy
from typing import Any

from gpucluster.controller.explain import Explainer
from gpucluster.dra.worker import AllocatorWorker
from tests.controller.test_explain_unit import claim, pod, state


def holding_every_gpu() -> dict[str, Any]:
    held = copy.deepcopy(claim("held", "NVIDIA H100 80GB HBM3"))
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "h100-node", "device": f"gpu-{i}"} for i in range(8)
    ]
    held["spec"]["devices"]["requests"][0]["exactly"]["count"] = 8
    held["status"] = {"allocation": {"devices": {"results": results}}}
    return held


def busy_cluster() -> Explainer:
    objects = [holding_every_gpu(), claim("h100", "NVIDIA H100 80GB HBM3"), claim("b200", "NVIDIA B200")]
    return Explainer(state(*objects, pod("waits", "h100"), pod("never", "b200")))


async def test_busy_reads_as_wait_and_impossible_as_never(worker: AllocatorWorker) -> None:
    explainer = busy_cluster()
    explainer.worker = worker
    reasons = {}
    for p in explainer.state.list("Pod"):
        found, _ = await explainer.explain(p, f"ml/{p['metadata']['name']}")
        assert found is not None
        reasons[p["metadata"]["name"]] = found[2]
    assert reasons["waits"].endswith("would fit once devices are freed")
    assert "in use" in reasons["waits"]
    now, _, empty = reasons["never"].partition("; does not fit even on an empty node: ")
    assert now.endswith("8 in use")  # true today: every GPU is held
    assert empty.endswith('8 selector #0 false (productName == "NVIDIA B200")')  # why waiting cannot help
