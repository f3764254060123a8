"""A rate-limited work queue of keys, with client-go's semantics (``util/workqueue``).

* A key is queued at most once: adding a queued key again is a no-op (events coalesce).
* A key is never handed to two workers at once: a key added while a worker holds it is queued
  again only when that worker calls :meth:`WorkQueue.done`.
* ``add_after`` queues a key later; of two delayed adds of one key the earlier wins.
* ``add_rate_limited`` queues it after the rate limiter's delay. The default limiter is
  client-go's ``DefaultControllerRateLimiter``: the larger of a per-key exponential back-off
  (5 ms doubling to 1,000 s) and a global token bucket (10 per second, burst 100), so one
  failing key backs off alone and a storm of failures is bounded overall. ``forget`` resets a
  key's back-off after a success.

:func:`run_workers` is the usual loop around it: get a key, sync it, forget it on success
(requeue it after the delay the sync returns, if any), re-add it rate-limited on failure.
The queue runs on one asyncio event loop and is not thread-safe.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

K = TypeVar("K", bound=Hashable)
log = logging.getLogger("gpucluster.kube.workqueue")

Clock = Callable[[], float]


class RateLimiter(Protocol):
    def when(self, key: Hashable) -> float:
        """Seconds to wait before ``key`` is queued again (and count this retry)."""

    def forget(self, key: Hashable) -> None: ...

    def retries(self, key: Hashable) -> int: ...


class ItemExponentialFailureRateLimiter:
    """``base * 2**failures`` seconds, capped at ``cap``, per key."""

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        self.base = base
        self.cap = cap
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        if n >= 64:  # 2**n would overflow a float long before; the cap applies anyway
            return self.cap
        return float(min(self.base * (2**n), self.cap))

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def retries(self, key: Hashable) -> int:
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """A token bucket shared by all keys: ``qps`` tokens a second, at most ``burst`` banked.

    A retry that finds the bucket empty reserves the next token and waits for it, as
    ``golang.org/x/time/rate.Limiter.Reserve`` does.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock = time.monotonic) -> None:
        self.qps = qps
        self.burst = burst
        self.clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def when(self, key: Hashable) -> float:
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
        self._at = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, key: Hashable) -> None:
        return None

    def retries(self, key: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest delay of several limiters (every limiter counts the retry)."""

    def __init__(self, *limiters: RateLimiter) -> None:
        self.limiters = limiters

    def when(self, key: Hashable) -> float:
        return max(limiter.when(key) for limiter in self.limiters)

    def forget(self, key: Hashable) -> None:
        for limiter in self.limiters:
            limiter.forget(key)

    def retries(self, key: Hashable) -> int:
        return max(limiter.retries(key) for limiter in self.limiters)


def default_rate_limiter(base: float = 0.005, cap: float = 1000.0, clock: Clock = time.monotonic) -> RateLimiter:
    """client-go's ``DefaultControllerRateLimiter`` (``base``/``cap`` adjustable)."""
    return MaxOfRateLimiter(ItemExponentialFailureRateLimiter(base, cap), BucketRateLimiter(10.0, 100, clock))


DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class QueueMetrics:
    """client-go's workqueue metrics (``workqueue_depth`` ...), labelled by queue ``name``, under ``prefix``."""

    def __init__(self, registry: CollectorRegistry, prefix: str = "") -> None:
        self.depth = Gauge(f"{prefix}workqueue_depth", "Keys waiting in the queue.", ["name"], registry=registry)
        self.adds = Counter(f"{prefix}workqueue_adds", "Keys added to the queue.", ["name"], registry=registry)
        self.retries = Counter(
            f"{prefix}workqueue_retries", "Keys re-added after a failure (rate-limited).", ["name"], registry=registry
        )
        self.queue_duration = Histogram(
            f"{prefix}workqueue_queue_duration_seconds", "How long a key waited before a worker took it.", ["name"],
            buckets=DURATION_BUCKETS, registry=registry,
        )  # fmt: skip
        self.work_duration = Histogram(
            f"{prefix}workqueue_work_duration_seconds", "How long a worker held a key.", ["name"],
            buckets=DURATION_BUCKETS, registry=registry,
        )  # fmt: skip
        self.longest_running = Gauge(
            f"{prefix}workqueue_longest_running_processor_seconds",
            "How long the longest-running worker has held its key.", ["name"], registry=registry,
        )  # fmt: skip
        self.unfinished_work = Gauge(
            f"{prefix}workqueue_unfinished_work_seconds",
            "Seconds of work in progress not yet observed by work_duration (large values: stuck workers).",
            ["name"], registry=registry,
        )  # fmt: skip

    def register(self, name: str) -> None:
        """Create every series of ``name`` at zero (rate() needs a first sample)."""
        self.depth.labels(name).set(0)
        self.adds.labels(name)
        self.retries.labels(name)
        self.queue_duration.labels(name)
        self.work_duration.labels(name)


class WorkQueue(Generic[K]):
    def __init__(
        self,
        name: str,
        rate_limiter: RateLimiter | None = None,
        *,
        metrics: QueueMetrics | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.name = name
        self.rate_limiter = rate_limiter or default_rate_limiter(clock=clock)
        self.metrics = metrics
        self.clock = clock
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: dict[K, float] = {}  # key -> when a worker took it
        self._added_at: dict[K, float] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._getters: deque[asyncio.Future[None]] = deque()
        self._shutting_down = False
        if metrics is not None:
            metrics.register(name)
            # Read when scraped, as client-go's metrics update loop does: a key held for long
            # shows while it is held, not only once it is done.
            metrics.longest_running.labels(name).set_function(self._longest_running)
            metrics.unfinished_work.labels(name).set_function(self._unfinished_work)

    # ------------------------------------------------------------------ adding

    def add(self, key: K) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if self.metrics is not None:
            self.metrics.adds.labels(self.name).inc()
        self._added_at.setdefault(key, self.clock())
        if key in self._processing:
            return  # queued again by done()
        self._queue.append(key)
        self._depth_changed()
        self._notify()

    def add_after(self, key: K, delay: float) -> None:
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        existing = self._timers.get(key)
        if existing is not None:
            if existing.when() <= loop.time() + delay:
                return  # an earlier add is already due
            existing.cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            self.add(key)

        self._timers[key] = loop.call_later(delay, fire)

    def add_rate_limited(self, key: K) -> None:
        if self.metrics is not None:
            self.metrics.retries.labels(self.name).inc()
        self.add_after(key, self.rate_limiter.when(key))

    def forget(self, key: K) -> None:
        self.rate_limiter.forget(key)

    def retries(self, key: K) -> int:
        return self.rate_limiter.retries(key)

    # ------------------------------------------------------------------ taking

    async def get(self) -> K | None:
        """The next key (now held by the caller until :meth:`done`), or None once shut down."""
        while not self._queue:
            if self._shutting_down:
                return None
            waiter = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._getters:
                    self._getters.remove(waiter)
                elif self._queue:
                    self._notify()  # this worker was woken for a key it will not take: pass it on
                raise
        key = self._queue.popleft()
        now = self.clock()
        self._processing[key] = now
        self._dirty.discard(key)
        added = self._added_at.pop(key, now)
        if self.metrics is not None:
            self.metrics.queue_duration.labels(self.name).observe(now - added)
        self._depth_changed()
        return key

    def done(self, key: K) -> None:
        started = self._processing.pop(key, None)
        if started is not None and self.metrics is not None:
            self.metrics.work_duration.labels(self.name).observe(self.clock() - started)
        if key in self._dirty and not self._shutting_down:
            self._queue.append(key)
            self._depth_changed()
            self._notify()

    # ------------------------------------------------------------------ state

    def _longest_running(self) -> float:
        oldest = min(self._processing.values(), default=None)
        return 0.0 if oldest is None else self.clock() - oldest

    def _unfinished_work(self) -> float:
        now = self.clock()
        return sum(now - started for started in self._processing.values())

    def __len__(self) -> int:
        return len(self._queue)

    def idle(self) -> bool:
        """Nothing queued and nothing held by a worker (keys waiting on a delay do not count)."""
        return not self._queue and not self._processing

    def queued(self, key: K) -> bool:
        return key in self._dirty

    def keys(self) -> frozenset[K]:
        """The keys waiting to be synced (queued, or added again while a worker holds them)."""
        return frozenset(self._dirty)

    def waiting(self) -> int:
        """Keys waiting on a delay (a requeue or a back-off)."""
        return len(self._timers)

    def shut_down(self) -> None:
        self._shutting_down = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._notify(every=True)

    def _depth_changed(self) -> None:
        if self.metrics is not None:
            self.metrics.depth.labels(self.name).set(len(self._queue))

    def _notify(self, every: bool = False) -> None:
        """Wake one waiting worker (all of them on shut-down)."""
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                if not every:
                    return


Sync = Callable[[K], Awaitable[float | None]]


async def run_workers(
    queue: WorkQueue[K],
    sync: Sync[K],
    *,
    workers: int = 1,
    on_error: Callable[[K, BaseException], None] | None = None,
) -> None:
    """Run ``workers`` loops over ``queue`` until it shuts down.

    ``sync(key)`` returns None, or seconds after which the key is synced again (a level-triggered
    resync); an exception re-adds the key rate-limited (``on_error`` is told first). No two
    workers ever hold one key.
    """

    async def worker() -> None:
        while True:
            key = await queue.get()
            if key is None:
                return
            try:
                requeue = await sync(key)
            except asyncio.CancelledError:
                queue.done(key)
                raise
            except Exception as exc:
                if on_error is not None:
                    on_error(key, exc)
                else:
                    log.warning("sync failed queue=%s key=%s error=%s", queue.name, key, exc)
                queue.done(key)
                queue.add_rate_limited(key)
                continue
            queue.forget(key)
            queue.done(key)
            if requeue is not None:
                queue.add_after(key, requeue)

    tasks = [asyncio.create_task(worker()) for _ in range(max(1, workers))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:  # one worker failing (or this being cancelled) stops them all
            task.cancel()
