"""The allocator off the event loop: a worker process with a deadline, in the webhook and the controller."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucluster.clusterstate import ClusterState
from gpucluster.controller.explain import Explainer
from gpucluster.dra import worker
from gpucluster.dra.worker import AllocatorWorker
from gpucluster.policy import Settings
from gpucluster.sandbox.sim import gpunodes as simulate
from gpucluster.webhook import feasibility
from gpucluster.webhook.server import INFLIGHT_KEY
from tests.webhook.pods import container, pod
from tests.webhook.reviews import review
from tests.webhook.test_server_hardening import FAST, closed_by_server, head, start

pytestmark = pytest.mark.integration  # starts servers or processes: `make unit` leaves it out

GPU_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
             "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}  # fmt: skip


def claim(count: int, name: str = "train") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}]}}}  # fmt: skip


def cluster(nodes: int) -> list[dict[str, Any]]:
    return [
        GPU_CLASS,
        *simulate.cluster_slices(nodes, 8, model="H100"),
        *simulate.cluster_nodes(nodes, 8, model="H100"),
    ]


# A search that takes seconds before it says no, and that no pruning cuts short, at Kubernetes
# 1.36 (AT_136; 1.34's distinctAttribute compares pointers and refuses nothing): 22 requests of
# one device each, distinct in x and in y (upstream's distinctAttribute remembers one value per
# request, so it binds devices of different requests), on 16 nodes of 44 devices where each x has
# two devices, the first 19 with two y values of their own, the last 3 sharing y0 and y1
# (pigeonhole): the choices for the first 19 requests are tried before the last three fail.
# Nine GPUs on 8-GPU nodes used to be this slow.
HARD = 22
AT_136 = {"kubernetes_version": "1.36"}
SLOW = claim(1)
SLOW["spec"]["devices"]["requests"] = [
    {"name": "gpu" if i == 0 else f"gpu-r{i}", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}
    for i in range(HARD)
]
SLOW["spec"]["devices"]["constraints"] = [
    {"distinctAttribute": "gpu.nvidia.com/x"},
    {"distinctAttribute": "gpu.nvidia.com/y"},
]


def _hard_devices() -> list[dict[str, Any]]:
    return [
        {"name": f"d{x}-{y}", "attributes": {"x": {"string": f"x{x}"}, "y": {"string": f"y{y}"}}}
        for x in range(HARD)
        for y in ([0, 1] if x >= HARD - 3 else [2 * x + 10, 2 * x + 11])
    ]


def slow_cluster() -> list[dict[str, Any]]:
    big = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"big-{n}"},
         "spec": {"driver": "gpu.nvidia.com", "nodeName": f"big-{n}", "pool": {"name": f"big-{n}", "generation": 1, "resourceSliceCount": 1},
                  "devices": _hard_devices()}}
        for n in range(16)
    ]  # fmt: skip
    return [*cluster(16), *big]


@pytest.fixture
def checker() -> Iterator[AllocatorWorker]:
    w = AllocatorWorker(deadline=5)
    w.start()
    yield w
    w.close()


def test_answers_come_from_the_worker(checker: AllocatorWorker) -> None:
    objects = cluster(2)
    assert checker.check([claim(2)], objects).reason is None
    result = checker.check([claim(9)], objects)
    assert not result.cut_short and "need 9 on one node" in (result.reason or "")
    bad = checker.check([{"kind": "ResourceClaim", "metadata": {"name": "x"}, "spec": {"devices": 3}}], objects)
    assert bad.reason and not bad.cut_short  # input errors are the reason itself


def test_past_the_deadline_the_check_is_cut_short_and_the_worker_replaced(checker: AllocatorWorker) -> None:
    objects = slow_cluster()
    started = time.monotonic()
    result = checker.check([SLOW], objects, deadline=0.4, **AT_136)
    took = time.monotonic() - started
    assert result.incomplete == "feasibility check cut short after 0.4s" and result.reason is None
    assert 0.4 <= took < 1.5  # no late answer
    again = checker.check([claim(1)], objects)  # a fresh worker, the cluster sent again
    assert again.reason is None and not again.cut_short and checker.cut_short == 1


def test_a_check_queued_behind_a_slow_one_is_cut_short_at_its_own_deadline(checker: AllocatorWorker) -> None:
    async def both() -> tuple[worker.Feasibility, worker.Feasibility, float]:
        objects = slow_cluster()
        slow = asyncio.create_task(asyncio.to_thread(checker.check, [SLOW], objects, deadline=2, **AT_136))
        async with asyncio.timeout(5):  # the slow one takes the only worker first
            while not checker._idle.empty():
                await asyncio.sleep(0.01)
        started = time.monotonic()
        queued = await asyncio.to_thread(checker.check, [claim(1)], objects, deadline=0.3)
        waited = time.monotonic() - started
        return await slow, queued, waited

    slow, queued, waited = asyncio.run(both())
    assert queued.cut_short and waited < 1.5
    assert slow.cut_short


async def test_a_slow_claim_review_does_not_delay_pod_reviews(tmp_path: Path) -> None:
    """One claim review runs into the deadline while 20 pod reviews are answered quickly."""
    feasibility.configure(deadline=3.0)
    try:
        srv, task = await start(
            tmp_path, FAST, ClusterState.from_objects(slow_cluster()), Settings(kubernetes_version="1.36")
        )
        try:
            ctx = srv.client_context()
            body = json.dumps(review(SLOW, namespace="ml")).encode()
            reader, writer = await asyncio.open_connection("127.0.0.1", srv.port, ssl=ctx)
            writer.write(head(len(body), keep_alive=False) + body)
            claim_started = time.monotonic()
            slow = asyncio.create_task(closed_by_server(reader, 10))

            async def pod_review(i: int) -> float:
                p = pod(container("cuda", {"nvidia.com/gpu": "1"}), name=f"p-{i}")
                data = json.dumps(review(p, namespace="ml")).encode()
                r, w = await asyncio.open_connection("127.0.0.1", srv.port, ssl=ctx)
                started = time.monotonic()
                w.write(head(len(data), keep_alive=False).replace(b"/validate", b"/mutate") + data)
                answer = await closed_by_server(r, 5)
                w.close()
                assert answer.startswith(b"HTTP/1.1 200") and b"JSONPatch" in answer
                return time.monotonic() - started

            async with asyncio.timeout(5):  # the claim review is now being answered (waiting for the allocator)
                while srv.app[INFLIGHT_KEY].count < 1:  # type: ignore[index]
                    await asyncio.sleep(0.01)
            latencies = await asyncio.gather(*(pod_review(i) for i in range(20)))
            assert not slow.done(), "the claim review should still be in flight"
            assert max(latencies) < 1.0, latencies
            answer = await slow
            writer.close()
            took = time.monotonic() - claim_started
            assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
            response = json.loads(answer.split(b"\r\n\r\n", 1)[1])["response"]
            assert response["allowed"] is True
            assert response["warnings"] == ["feasibility check cut short after 3s"]
            assert 3.0 <= took < 6.0
        finally:
            srv.stop.set()
            await asyncio.wait_for(task, 10)
    finally:
        feasibility.configure(deadline=worker.DEFAULT_DEADLINE)


async def test_the_controller_explainer_uses_the_worker_and_its_deadline() -> None:
    pending = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", "uid": "u1"},
               "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "train"}], "containers": [{"name": "c"}]},
               "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}  # fmt: skip
    state = ClusterState.from_objects([*slow_cluster(), SLOW, pending])
    w = AllocatorWorker(deadline=0.5)
    try:
        loop_ticks = 0

        async def ticker() -> None:
            nonlocal loop_ticks
            while True:
                loop_ticks += 1
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(ticker())
        found, _ = await Explainer(state, worker=w, allocator_options=dict(AT_136)).explain(pending, "ml/p")
        assert found is not None
        explained, claims, reason = found
        ticking.cancel()
        assert explained["metadata"]["name"] == "p" and claims[0]["metadata"]["name"] == "train"
        assert reason == "feasibility check cut short after 0.5s"
        assert loop_ticks >= 20  # the event loop kept running meanwhile
        state2 = ClusterState.from_objects([*cluster(2), claim(9), pending])
        w.deadline = 10  # a fresh worker: start-up and CEL compilation are part of the first check
        found, _ = await Explainer(state2, worker=w).explain(pending, "ml/p")
        assert found is not None and "need 9 on one node" in found[2]
    finally:
        w.close()


def _heavy(i: int, distinct: bool) -> dict[str, Any]:
    obj = json.loads(json.dumps(SLOW))
    if distinct:  # another request name: another search (nothing shared), as heavy
        obj["spec"]["devices"]["requests"][0]["name"] = f"gpu-{i}"
    return dict(obj)


@pytest.mark.parametrize("distinct", [True, False], ids=["distinct", "identical"])
async def test_a_light_claim_review_is_not_delayed_by_sixteen_heavy_ones(tmp_path: Path, distinct: bool) -> None:
    """Claim reviews in parallel: 16 infeasible searches that run into the deadline, then a light claim.

    Distinct heavy claims each get their own search (the light one enters the quick lane before
    those still waiting, and they go on in the slow lane); identical ones share one search.
    """
    pool = feasibility.configure(deadline=2.0)
    escalated, shared = pool.escalated, pool.shared
    try:
        srv, task = await start(
            tmp_path, FAST, ClusterState.from_objects(slow_cluster()), Settings(kubernetes_version="1.36")
        )
        try:
            ctx = srv.client_context()

            async def claim_review(obj: dict[str, Any], i: int) -> tuple[float, dict[str, Any]]:
                body = dict(obj, metadata={"name": f"c-{i}", "namespace": "ml"})
                data = json.dumps(review(body, namespace="ml")).encode()
                reader, writer = await asyncio.open_connection("127.0.0.1", srv.port, ssl=ctx)
                started = time.monotonic()
                writer.write(head(len(data), keep_alive=False) + data)
                answer = await closed_by_server(reader, 15)
                writer.close()
                assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
                return time.monotonic() - started, json.loads(answer.split(b"\r\n\r\n", 1)[1])["response"]

            await claim_review(claim(1), 99)  # the workers have the cluster now
            heavy = [asyncio.create_task(claim_review(_heavy(i, distinct), i)) for i in range(16)]
            async with asyncio.timeout(5):  # all sixteen are being answered
                while srv.app[INFLIGHT_KEY].count < 16:  # type: ignore[index]
                    await asyncio.sleep(0.01)
            light, answer = await claim_review(claim(1), 100)
            assert answer["allowed"] is True and "warnings" not in answer  # a real answer: it fits
            assert light < 1.0, light
            done = await asyncio.gather(*heavy)
            assert all(a["warnings"] == ["feasibility check cut short after 2s"] for _, a in done)
            assert max(t for t, _ in done) < 2.0 + 2.0  # each within its own deadline (and the answer's way back)
            if distinct:
                # Nothing shared; the heavy ones went on in the slow lane (one still waiting for the
                # quick lane at its deadline, on a loaded machine, is cut short there instead).
                assert pool.shared == shared and pool.escalated - escalated >= 1
            else:
                assert pool.shared - shared == 15 and pool.escalated - escalated == 1
        finally:
            srv.stop.set()
            await asyncio.wait_for(task, 10)
    finally:
        feasibility.configure(deadline=worker.DEFAULT_DEADLINE)
