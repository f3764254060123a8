"""Explanations separate "busy now" (wait) from "never fits" (fix the claim) once devices are in use."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from controller.explain import Explainer
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


def by_pod(found: list[tuple[dict[str, Any], list[dict[str, Any]], str]]) -> dict[str, str]:
    return {p["metadata"]["name"]: reason for p, _, reason in found}


@pytest.fixture
def worker() -> Iterator[AllocatorWorker]:
    w = AllocatorWorker(deadline=30)
    try:
        yield w
    finally:
        w.close()


def test_inline_busy_reads_as_wait_and_impossible_as_never() -> None:
    reasons = by_pod(busy_cluster().explanations())
    assert reasons["waits"].endswith("would fit once devices are freed on h100-node")
    assert "in use" in reasons["waits"]
    assert reasons["never"].endswith("does not fit even on an empty node")
    assert "in use" not in reasons["never"]


async def test_offloaded_busy_reads_as_wait_and_impossible_as_never(worker: AllocatorWorker) -> None:
    explainer = busy_cluster()
    explainer.worker = worker
    reasons = by_pod(await explainer.explanations_offloaded())
    assert reasons["waits"].endswith("would fit once devices are freed")
    assert reasons["never"].endswith("does not fit even on an empty node")
    assert "in use" not in reasons["never"]
