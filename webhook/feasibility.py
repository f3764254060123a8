"""The claim feasibility check of the webhook: claim reviews in parallel, a light one never behind a heavy one.

The allocator runs in worker processes (:mod:`gpucluster.dra.worker`) in two lanes, each with as
many processes as the container's CPUs (:func:`lane_size`: its affinity mask and its CFS quota,
at most ``MAX_DEFAULT_PROCESSES``), started on first use:

- the **quick lane** runs every check first with a small search budget (``quick_budget`` seconds
  over all nodes, and a step limit, both enforced by the allocator itself, so the process lives
  on): a claim that fits, or that no node can hold, is usually decided there in milliseconds;
- a check the quick lane could not finish continues in the **slow lane**, whose processes run at a
  lower CPU priority (nice 10): heavy searches use the cores the quick lane leaves.

Checks wait for a quick-lane process in order of their claims' weight (devices requested,
constraints, alternatives; then arrival), so a light review that arrives behind sixteen heavy ones
waits for at most the quick attempts already running. Identical checks in flight at once (the
same claim specs, cluster and options) share one search.

Every check keeps its own deadline (``--feasibility-deadline``, counted from the review's start,
queueing included): past it the answer is "cut short", never late.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import orjson

from gpucluster.dra.worker import DEFAULT_DEADLINE, AllocatorWorker, Feasibility, cut_short, fingerprint

log = logging.getLogger("gpucluster.webhook")

DEFAULT_QUICK_BUDGET = 0.02  # seconds of search over all nodes before a check moves to the slow lane
QUICK_MAX_STEPS = 20_000  # per node: bounds the quick lane even where the per-node deadline is off
SLOW_NICE = 10
# Processes per lane by default, whatever the CPUs: each worker holds its own copy of the cluster's
# slices, classes and nodes (measured with 8-GPU nodes: 33 MiB + 0.05 MiB per node, 82 MiB at
# 1,000 nodes; the webhook process itself peaks at about 220 MiB + 0.06 MiB per node), so the
# chart's memory limit must cover parent + 2 lanes x this x worker (charts/gpucluster/values.yaml).
MAX_DEFAULT_PROCESSES = 2
CPU_MAX = "/sys/fs/cgroup/cpu.max"  # cgroup v2: "QUOTA PERIOD" or "max PERIOD"
CFS_QUOTA = ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us")  # cgroup v1


def quota_cpus(quota: str) -> int | None:
    """CPUs a CFS quota allows, rounded up (pure): ``"200000 100000"`` is 2, ``"max 100000"`` (v2)
    or ``"-1 100000"`` (v1) is None (no quota). ValueError, naming the text, when it is neither."""
    fields = quota.split()
    if len(fields) != 2:
        raise ValueError(f"CPU quota {quota!r}: expected 'QUOTA PERIOD' (microseconds) or 'max PERIOD'")
    limit, period = fields
    if limit in ("max", "-1"):
        return None
    try:
        us, per = int(limit), int(period)
    except ValueError:
        raise ValueError(f"CPU quota {quota!r}: QUOTA and PERIOD must be integers of microseconds") from None
    if us <= 0 or per <= 0:
        raise ValueError(f"CPU quota {quota!r}: QUOTA and PERIOD must be positive")
    return max(1, math.ceil(us / per))


def lane_size(affinity: int, quota: str | None, *, cap: int = MAX_DEFAULT_PROCESSES) -> int:
    """Default processes per lane (pure): the CPUs the container may really use, min(affinity
    CPUs, ceil(quota / period)), at most ``cap``. ``quota`` is cgroup v2's ``cpu.max`` text, or
    v1's ``"cfs_quota_us cfs_period_us"``; None: no cgroup file. ValueError on bad input."""
    if affinity < 1 or cap < 1:
        raise ValueError(f"affinity {affinity} and cap {cap}: both must be at least 1")
    allowed = quota_cpus(quota) if quota is not None else None
    return min(affinity, cap, allowed or affinity)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def read_cpu_quota() -> str | None:
    """The container's CFS quota as text (cgroup v2 ``cpu.max``, else v1's two files), None if none is readable."""
    v2 = _read(CPU_MAX)
    if v2 is not None:
        return v2
    for quota_file in CFS_QUOTA:
        quota = _read(quota_file)
        period = _read(quota_file.replace("cfs_quota_us", "cfs_period_us"))
        if quota is not None and period is not None:
            return f"{quota} {period}"
    return None


def affinity_cpus() -> int:
    """CPUs this process may run on (its affinity mask; the container's cpuset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def replica_cores() -> int:
    """Default processes per lane for this container: :func:`lane_size` of what the kernel says.

    A quota file that cannot be parsed is logged and ignored (the cap still bounds the memory)."""
    quota = read_cpu_quota()
    try:
        return lane_size(affinity_cpus(), quota)
    except ValueError as exc:
        log.warning("ignoring the CPU quota error=%s", exc)
        return lane_size(affinity_cpus(), None)


def _lower_priority() -> None:
    """Nice this thread; the slow lane's workers, started from it, inherit it (Linux: nice is per thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SLOW_NICE)
    except (AttributeError, OSError) as exc:  # not Linux, or not allowed: still correct, only less fair
        log.debug("cannot lower the slow lane's priority error=%s", exc)


def node_count(cluster: Sequence[Mapping[str, Any]]) -> int:
    """Nodes the allocator will visit: Node objects and the nodes slices name."""
    names: set[str] = set()
    for obj in cluster:
        kind = obj.get("kind")
        if kind == "Node":
            names.add(str((obj.get("metadata") or {}).get("name")))
        elif kind == "ResourceSlice":
            node = (obj.get("spec") or {}).get("nodeName")
            if node:
                names.add(str(node))
    return max(1, len(names))


def weight(claims: Sequence[Mapping[str, Any]]) -> int:
    """How much search a claim may need, roughly (pure): devices asked for, constraints, alternatives."""
    total = 0
    for claim in claims:
        spec = claim.get("spec") if isinstance(claim.get("spec"), dict) else {}
        devices = (spec or {}).get("devices")
        devices = devices if isinstance(devices, dict) else {}
        constraints = devices.get("constraints")
        total += 4 * len(constraints) if isinstance(constraints, list) else 0
        requests = devices.get("requests")
        for request in requests if isinstance(requests, list) else []:
            if not isinstance(request, dict):
                continue
            bodies = request.get("firstAvailable")
            bodies = bodies if isinstance(bodies, list) and bodies else [request.get("exactly")]
            total += len(bodies) - 1
            for body in bodies:
                if not isinstance(body, dict):
                    continue
                count = body.get("count", 1)
                total += 64 if body.get("allocationMode") == "All" else count if isinstance(count, int) else 1
    return total


class _Gate:
    """At most ``width`` holders; waiters enter lightest first, then in arrival order."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.busy = 0
        self._waiting: list[tuple[int, int, threading.Event]] = []
        self._order = itertools.count()
        self._lock = threading.Lock()

    def enter(self, weight: int, timeout: float) -> bool:
        with self._lock:
            if self.busy < self.width and not self._waiting:
                self.busy += 1
                return True
            entry = (weight, next(self._order), threading.Event())
            heapq.heappush(self._waiting, entry)
        if entry[2].wait(timeout):
            return True
        with self._lock:
            if entry[2].is_set():  # let in just as it gave up
                return True
            self._waiting.remove(entry)
            heapq.heapify(self._waiting)
        return False

    def leave(self) -> None:
        with self._lock:
            if self._waiting:
                heapq.heappop(self._waiting)[2].set()  # the slot passes on: busy stays
            else:
                self.busy -= 1


class FeasibilityPool:
    """The two lanes; :meth:`check` is thread-safe and blocks (a claim review runs in a thread)."""

    def __init__(
        self,
        *,
        processes: int | None = None,
        deadline: float = DEFAULT_DEADLINE,
        quick_budget: float = DEFAULT_QUICK_BUDGET,
        threads: int = 64,
    ) -> None:
        if processes is not None and processes < 1:
            raise ValueError(f"processes {processes}: must be at least 1")
        self.processes = processes or replica_cores()
        self.deadline = deadline
        self.quick_budget = quick_budget
        self.quick = AllocatorWorker(deadline=deadline, processes=self.processes)
        self.slow = AllocatorWorker(deadline=deadline, processes=self.processes)
        self._slow_threads = ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="feasibility-slow", initializer=_lower_priority
        )
        self.escalated = 0  # checks the quick lane could not finish, for tests and metrics
        self.shared = 0  # checks answered by an identical one in flight
        self._gate = _Gate(self.processes)
        self._flights: dict[tuple[Any, ...], Future[Feasibility]] = {}
        self._flights_lock = threading.Lock()

    def close(self) -> None:
        self.quick.close()
        self.slow.close()
        self._slow_threads.shutdown(wait=False, cancel_futures=True)

    def check(
        self,
        claims: list[dict[str, Any]],
        cluster: Sequence[Mapping[str, Any]],
        *,
        started: float | None = None,
        **options: Any,
    ) -> Feasibility:
        """Whether ``claims`` fit on some node, within the deadline counted from ``started`` (monotonic; now)."""
        begun = time.monotonic() if started is None else started
        key = (orjson.dumps([c.get("spec") for c in claims], option=orjson.OPT_SORT_KEYS), fingerprint(cluster),
               orjson.dumps(options, option=orjson.OPT_SORT_KEYS, default=str))  # fmt: skip
        with self._flights_lock:
            flight = self._flights.get(key)
            mine = flight is None
            if flight is None:
                flight = self._flights[key] = Future()
        if not mine:
            self.shared += 1
            try:
                return flight.result(timeout=max(0.0, begun + self.deadline - time.monotonic()))
            except TimeoutError:
                return self._cut()
        try:
            result = self._check(claims, cluster, begun, **options)
            flight.set_result(result)
            return result
        except BaseException as exc:
            flight.set_exception(exc)
            raise
        finally:
            with self._flights_lock:
                self._flights.pop(key, None)

    def _check(
        self, claims: list[dict[str, Any]], cluster: Sequence[Mapping[str, Any]], begun: float, **options: Any
    ) -> Feasibility:
        ends = begun + self.deadline
        left = ends - time.monotonic()
        if left <= 0 or not self._gate.enter(weight(claims), left):
            return self._cut()
        try:
            per_node_ms = max(0.5, self.quick_budget * 1000 / node_count(cluster))
            first = self.quick.check(
                claims, cluster, deadline=max(0.01, ends - time.monotonic()), deadline_ms=per_node_ms,
                max_steps=QUICK_MAX_STEPS, **options,
            )  # fmt: skip
        finally:
            self._gate.leave()
        if not first.cut_short:
            return first
        left = ends - time.monotonic()
        if left <= 0.01:
            return self._cut()
        self.escalated += 1
        result = self._slow_threads.submit(self.slow.check, claims, cluster, deadline=left, **options).result()
        if result.incomplete and result.incomplete.startswith("feasibility check cut short after"):
            return cut_short(self.deadline)  # the review's deadline, not what was left of it
        return result

    def _cut(self) -> Feasibility:
        log.warning("feasibility check cut short deadline=%.1fs", self.deadline)
        return cut_short(self.deadline)


_shared: FeasibilityPool | None = None
_shared_pid = 0
_lock = threading.Lock()


def shared_pool() -> FeasibilityPool:
    """The process-wide pool (created on first use; servers size it with :func:`configure`)."""
    global _shared, _shared_pid
    with _lock:
        if _shared is None or _shared_pid != os.getpid():
            _shared, _shared_pid = FeasibilityPool(), os.getpid()
        return _shared


def configure(
    *, deadline: float | None = None, processes: int | None = None, quick_budget: float | None = None
) -> FeasibilityPool:
    """Replace the shared pool's settings (servers call this once at start; tests in between)."""
    global _shared, _shared_pid
    current = shared_pool()
    with _lock:
        if processes is not None and processes != current.processes:
            current.close()
            current = FeasibilityPool(processes=processes, deadline=current.deadline, quick_budget=current.quick_budget)
            _shared, _shared_pid = current, os.getpid()
        if deadline is not None:
            current.deadline = deadline
            current.quick.deadline = current.slow.deadline = deadline
        if quick_budget is not None:
            current.quick_budget = quick_budget
    return current
