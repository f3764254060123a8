"""The allocator in a worker process, with a deadline: servers ask "could any node ever satisfy
this claim?" without running the search on their event loop.

The allocator is pure Python, so a thread holds the GIL for the whole search and starves the
event loop. Measured on our 2-core machine, pod reviews through the app (8 in flight) beside a
4.3 s search over 16 nodes: idle 4,900/s (p99 2.5 ms); search in a thread 860/s (p99 63 ms);
search in a worker process 3,350/s (p99 12 ms, the median unchanged at 1.5 ms). A thread also
cannot be stopped; a process can: past the deadline the worker is killed (the search is
abandoned, not left to finish), the caller gets "cut short", never a late
answer, and the next check starts a fresh worker. A worker is ``python -m gpucluster.dra.worker``
(not multiprocessing: its spawn and forkserver methods re-import the parent's ``__main__`` in the
child, and forking a threaded server is unsafe); it starts in about 0.1 s.

Each worker keeps the last cluster it was sent; a check re-sends the cluster only when its
fingerprint (kind, name, resourceVersion and identity of every object) changed. Calls are
thread-safe and block (a webhook rule runs in a thread); :meth:`AllocatorWorker.check_async` is
the same for coroutines (the controller).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import signal
import subprocess
import sys
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
            answer = explain(claims, cluster, **options)
            # A search that gave up is no answer: "incomplete", like the deadline here.
            result: tuple[str, str | None] = (
                ("incomplete", answer.gave_up) if answer.gave_up else ("ok", answer.one_line() or None)
            )
        except AllocatorInputError as exc:
            result = ("ok", str(exc))  # input the API server would reject: the reason itself
        except Exception as exc:  # an allocator bug: reported, the worker lives on
            result = ("error", f"{type(exc).__name__}: {exc}")
        conn.send(result)


class _Slot:
    """One worker process, the two pipe ends the parent holds, and the fingerprint of its cluster."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.conn: Connection | None = None
        self.version: int | None = None

    def ensure_started(self) -> Connection:
        if self.conn is None or self.process is None or self.process.poll() is not None:
            self.stop()
            to_child_r, to_child_w = os.pipe()
            from_child_r, from_child_w = os.pipe()
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            try:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "gpucluster.dra.worker", str(to_child_r), str(from_child_w)],
                    pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, env=env,
                )  # fmt: skip
            finally:
                os.close(to_child_r)
                os.close(from_child_w)
            self.conn = _Duplex(from_child_r, to_child_w)
            self.version = None
        return self.conn

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(5)
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = self.version = None


class _Duplex(Connection):
    """A Connection reading one pipe and writing another (multiprocessing's framing and pickling)."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        super().__init__(read_fd, readable=True, writable=False)
        self._out = Connection(write_fd, readable=False, writable=True)

    def send(self, obj: Any) -> None:
        self._out.send(obj)

    def close(self) -> None:
        self._out.close()
        super().close()


class AllocatorWorker:
    """``processes`` workers; a check waits for a free one within its deadline."""

    def __init__(self, *, deadline: float = DEFAULT_DEADLINE, processes: int = 1) -> None:
        self.deadline = deadline
        self._slots = [_Slot() for _ in range(max(1, processes))]
        # Last in, first out: the worker used last (started, its cluster loaded) is taken first, so
        # workers start only when that many checks run at once, not one per check in turn.
        self._idle: queue.LifoQueue[_Slot] = queue.LifoQueue()
        for slot in reversed(self._slots):
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
        if status == "incomplete":
            return Feasibility(incomplete=f"feasibility check cut short: {text}")
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


if __name__ == "__main__":
    _serve(_Duplex(int(sys.argv[1]), int(sys.argv[2])))
