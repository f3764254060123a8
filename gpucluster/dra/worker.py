"""The allocator in a worker process, with a deadline: servers ask "could any node ever satisfy
this claim?" without running the search on their event loop.

The allocator is pure Python, so a thread would hold the GIL for the whole search and starve the
event loop (measured: 20 pod reviews beside an 8 s search went from ~2 ms to ~0.4-1 s each under
a thread; unchanged with a process). A process also can be stopped: past the deadline the worker
is killed (the search is abandoned, not left to finish), the caller gets "cut short", never a late
answer, and the next check starts a fresh worker. Workers fork from a forkserver that has already
imported the allocator, so a restart costs milliseconds.

Each worker keeps the last cluster it was sent; a check re-sends the cluster only when its
fingerprint (kind, name, resourceVersion and identity of every object) changed. Calls are
thread-safe and block (a webhook rule runs in a thread); :meth:`AllocatorWorker.check_async` is
the same for coroutines (the controller).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger("gpucluster.dra.worker")

DEFAULT_DEADLINE = 2.0


@dataclass(frozen=True)
class Feasibility:
    """The answer: ``reason`` why no node can satisfy the claims (None: some node can), or
    ``incomplete``: why there is no answer (the deadline passed, the worker failed)."""

    reason: str | None = None
    incomplete: str | None = None

    @property
    def cut_short(self) -> bool:
        return self.incomplete is not None


def cut_short(seconds: float) -> Feasibility:
    return Feasibility(incomplete=f"feasibility check cut short after {seconds:g}s")


def fingerprint(cluster: Sequence[Mapping[str, Any]]) -> int:
    """Changes when any object is added, removed, replaced or gets a new resourceVersion."""
    parts = []
    for obj in cluster:
        meta = obj.get("metadata") or {}
        parts.append((obj.get("kind"), meta.get("namespace"), meta.get("name"), meta.get("resourceVersion"), id(obj)))
    return hash(tuple(parts))


def _serve(conn: Connection) -> None:
    """Worker main loop: (claims, fingerprint, cluster or None, options) in, (status, text) out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    from gpucluster.dra.allocator import explain
    from gpucluster.dra.model import AllocatorInputError

    cluster: list[dict[str, Any]] = []
    while True:
        try:
            claims, _, objects, options = conn.recv()
        except (EOFError, OSError):
            return
        if objects is not None:
            cluster = objects
        try:
            result: tuple[str, str | None] = ("ok", explain(claims, cluster, **options).one_line() or None)
        except AllocatorInputError as exc:
            result = ("ok", str(exc))  # input the API server would reject: the reason itself
        except Exception as exc:  # an allocator bug: reported, the worker lives on
            result = ("error", f"{type(exc).__name__}: {exc}")
        conn.send(result)


class _Slot:
    """One worker process and the fingerprint of the cluster it holds."""

    def __init__(self, context: multiprocessing.context.BaseContext) -> None:
        self.context = context
        self.process: Any = None
        self.conn: Connection | None = None
        self.version: int | None = None

    def ensure_started(self) -> Connection:
        if self.conn is None or self.process is None or not self.process.is_alive():
            self.stop()
            parent, child = multiprocessing.Pipe()
            process = self.context.Process(target=_serve, args=(child,), daemon=True, name="allocator-worker")  # type: ignore[attr-defined]
            process.start()
            child.close()
            self.process, self.conn, self.version = process, parent, None
        return self.conn

    def stop(self) -> None:
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(5)
            self.process.close()
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = self.version = None


class AllocatorWorker:
    """``processes`` workers; a check waits for a free one within its deadline."""

    def __init__(self, *, deadline: float = DEFAULT_DEADLINE, processes: int = 1) -> None:
        self.deadline = deadline
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        if "forkserver" in methods:
            context.set_forkserver_preload(["gpucluster.dra.allocator"])
        self._slots = [_Slot(context) for _ in range(max(1, processes))]
        self._idle: queue.Queue[_Slot] = queue.Queue()
        for slot in self._slots:
            self._idle.put(slot)
        self.cut_short = 0  # checks abandoned at the deadline, for metrics
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the workers now, so that the first check does not pay for it."""
        for slot in self._slots:
            with self._lock:
                slot.ensure_started()

    def close(self) -> None:
        for slot in self._slots:
            slot.stop()

    def check(
        self,
        claims: list[dict[str, Any]],
        cluster: Sequence[Mapping[str, Any]],
        *,
        deadline: float | None = None,
        **options: Any,
    ) -> Feasibility:
        """Whether ``claims`` fit together on some node of ``cluster`` (see ``allocator.explain``),
        decided within ``deadline`` seconds (the worker's default when None) or cut short."""
        limit = self.deadline if deadline is None else deadline
        ends = time.monotonic() + limit
        try:
            slot = self._idle.get(timeout=limit)
        except queue.Empty:
            return self._cut(limit)
        try:
            with self._lock:  # starting processes from several threads at once is not safe
                conn = slot.ensure_started()
            version = fingerprint(cluster)
            objects = None if version == slot.version else list(cluster)
            conn.send((claims, version, objects, options))
            slot.version = version
            if not conn.poll(max(0.0, ends - time.monotonic())):
                slot.stop()  # abandon the search: a late answer is never used
                return self._cut(limit)
            status, text = conn.recv()
        except (EOFError, OSError) as exc:
            slot.stop()
            log.error("allocator worker failed error=%s", exc)
            return Feasibility(incomplete=f"feasibility check failed: worker exited ({exc or 'no answer'})")
        finally:
            self._idle.put(slot)
        if status != "ok":
            log.error("allocator failed error=%s", text)
            return Feasibility(incomplete=f"feasibility check failed: {text}")
        return Feasibility(reason=text)

    def _cut(self, limit: float) -> Feasibility:
        self.cut_short += 1
        log.warning("feasibility check cut short deadline=%.1fs", limit)
        return cut_short(limit)

    async def check_async(
        self, claims: list[dict[str, Any]], cluster: Sequence[Mapping[str, Any]], **options: Any
    ) -> Feasibility:
        """:meth:`check` from a coroutine: waits in a thread, the event loop keeps running."""
        return await asyncio.to_thread(self.check, claims, cluster, **options)


_shared: AllocatorWorker | None = None
_shared_lock = threading.Lock()


def shared_worker() -> AllocatorWorker:
    """The process-wide worker (created on first use; its deadline is set by the server's flags)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared_pid != os.getpid():
            _reset(AllocatorWorker())
        assert _shared is not None
        return _shared


_shared_pid = 0


def _reset(worker: AllocatorWorker) -> None:
    global _shared, _shared_pid
    _shared, _shared_pid = worker, os.getpid()


def configure(*, deadline: float | None = None, processes: int | None = None) -> AllocatorWorker:
    """Replace the shared worker's settings (servers call this once at start)."""
    current = shared_worker()
    with _shared_lock:
        if processes is not None and processes != len(current._slots):
            current.close()
            current = AllocatorWorker(deadline=current.deadline, processes=processes)
            _reset(current)
        if deadline is not None:
            current.deadline = deadline
    return current
