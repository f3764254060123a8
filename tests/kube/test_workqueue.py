"""The shared work queue: client-go's dedup, one-worker-per-key, delayed and rate-limited adds."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from gpucluster.kube.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    QueueMetrics,
    WorkQueue,
    default_rate_limiter,
    run_workers,
)


async def _until(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


def test_exponential_limiter_doubles_per_key_up_to_the_cap_and_forgets() -> None:
    limiter = ItemExponentialFailureRateLimiter(0.005, 0.04)
    assert [limiter.when("a") for _ in range(5)] == [0.005, 0.01, 0.02, 0.04, 0.04]
    assert limiter.when("b") == 0.005  # per key
    assert limiter.retries("a") == 5
    limiter.forget("a")
    assert limiter.retries("a") == 0 and limiter.when("a") == 0.005
    for _ in range(2000):  # no overflow however many failures
        delay = limiter.when("c")
    assert delay == 0.04


def test_bucket_limiter_allows_a_burst_then_spaces_retries_at_qps() -> None:
    now = [0.0]
    bucket = BucketRateLimiter(qps=10.0, burst=3, clock=lambda: now[0])
    assert [bucket.when(k) for k in "abc"] == [0.0, 0.0, 0.0]
    assert bucket.when("d") == pytest.approx(0.1)
    assert bucket.when("e") == pytest.approx(0.2)
    now[0] = 10.0  # refilled, but never above the burst
    assert [bucket.when(k) for k in "fgh"] == [0.0, 0.0, 0.0]
    assert bucket.when("i") == pytest.approx(0.1)


def test_default_limiter_is_the_larger_of_per_key_backoff_and_global_bucket() -> None:
    now = [0.0]
    limiter = default_rate_limiter(clock=lambda: now[0])
    assert isinstance(limiter, MaxOfRateLimiter)
    delays = [limiter.when(f"k{i}") for i in range(101)]
    assert delays[:100] == [0.005] * 100  # burst of 100, first failure of each key: 5 ms
    assert delays[100] == pytest.approx(0.1)  # the 101st waits for the bucket


async def test_a_key_added_many_times_is_queued_once() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    for _ in range(5):
        queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert await queue.get() == "a"
    assert await queue.get() == "b"
    assert len(queue) == 0


async def test_a_key_added_while_held_is_requeued_only_on_done() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    queue.add("a")
    assert await queue.get() == "a"
    queue.add("a")  # an event while a worker holds it
    assert len(queue) == 0 and queue.queued("a")
    queue.done("a")
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    assert queue.idle()


async def test_two_workers_never_hold_one_key() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    holding: set[str] = set()
    overlaps = 0
    synced: list[str] = []

    async def sync(key: str) -> None:
        nonlocal overlaps
        if key in holding:
            overlaps += 1
        holding.add(key)
        await asyncio.sleep(0.002)
        if len(synced) < 30:
            queue.add(key)  # re-added while held, every time
        synced.append(key)
        holding.discard(key)

    for key in "abc":
        queue.add(key)
    task = asyncio.create_task(run_workers(queue, sync, workers=4))
    await _until(lambda: len(synced) >= 30 and queue.idle())
    queue.shut_down()
    await asyncio.wait_for(task, 5)
    assert overlaps == 0
    assert set(synced) == {"a", "b", "c"}


async def test_add_after_keeps_the_earliest_and_shutdown_drops_delayed_keys() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    queue.add_after("a", 60.0)
    queue.add_after("a", 0.01)  # earlier wins
    queue.add_after("a", 30.0)  # later is ignored
    assert queue.waiting() == 1
    await _until(lambda: len(queue) == 1)
    assert await queue.get() == "a"
    queue.done("a")
    queue.add_after("b", 60.0)
    queue.shut_down()
    assert queue.waiting() == 0
    assert await queue.get() is None


async def test_failures_back_off_per_key_and_success_forgets() -> None:
    queue: WorkQueue[str] = WorkQueue("t", ItemExponentialFailureRateLimiter(0.001, 0.05))
    calls: list[str] = []

    async def sync(key: str) -> None:
        calls.append(key)
        if key == "bad" and calls.count("bad") < 4:
            raise RuntimeError("boom")

    errors: list[str] = []
    queue.add("bad")
    queue.add("good")
    task = asyncio.create_task(run_workers(queue, sync, on_error=lambda k, e: errors.append(f"{k}: {e}")))
    await _until(lambda: calls.count("bad") == 4 and queue.idle())
    assert calls.count("good") == 1
    assert errors == ["bad: boom"] * 3
    assert queue.retries("bad") == 0  # forgotten after the success
    queue.shut_down()
    await asyncio.wait_for(task, 5)


async def test_sync_returning_a_delay_resyncs_the_key() -> None:
    queue: WorkQueue[str] = WorkQueue("t")
    calls: list[str] = []

    async def sync(key: str) -> float | None:
        calls.append(key)
        return 0.01 if len(calls) < 3 else None

    queue.add("a")
    task = asyncio.create_task(run_workers(queue, sync))
    await _until(lambda: len(calls) == 3 and queue.idle() and queue.waiting() == 0)
    queue.shut_down()
    await asyncio.wait_for(task, 5)


async def test_metrics_count_adds_depth_retries_and_durations() -> None:
    registry = CollectorRegistry()
    now = [100.0]
    queue: WorkQueue[str] = WorkQueue("nodes", metrics=QueueMetrics(registry, prefix="x_"), clock=lambda: now[0])

    def sample(name: str) -> float | None:
        return registry.get_sample_value(name, {"name": "nodes"})

    assert sample("x_workqueue_depth") == 0 and sample("x_workqueue_adds_total") == 0
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert sample("x_workqueue_depth") == 2 and sample("x_workqueue_adds_total") == 2
    key = await queue.get()
    assert sample("x_workqueue_depth") == 1
    now[0] += 7.0  # held for 7 s: visible while held, not only once done
    assert sample("x_workqueue_longest_running_processor_seconds") == 7.0
    assert sample("x_workqueue_unfinished_work_seconds") == 7.0
    assert sample("x_workqueue_queue_duration_seconds_count") == 1
    assert key is not None
    queue.done(key)
    assert sample("x_workqueue_work_duration_seconds_count") == 1
    assert sample("x_workqueue_longest_running_processor_seconds") == 0
    queue.add_rate_limited("c")
    assert sample("x_workqueue_retries_total") == 1
    queue.shut_down()
