"""A small level-triggered controller frame for the simulated cluster.

Controllers follow the store's event bus (``Store.subscribe``: synchronous, so ``on_event`` only
enqueues keys), and a task syncs the queued keys one at a time through ``ApiCore`` like any
client. A failing sync is retried with a per-key exponential backoff; a 409 conflict is retried at
once. ``idle()`` tells tests when nothing is queued or running (delayed retries do not count).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Hashable, Iterable
from typing import Any

from sandbox.apiserver.core import ApiCore, Context
from sandbox.apiserver.errors import ApiError
from sandbox.apiserver.resources import ResourceType
from sandbox.apiserver.store import Event

Obj = dict[str, Any]
log = logging.getLogger("sandbox.sim")


class Retry(Exception):
    """Sync again later (with backoff) without logging an error."""


class Controller:
    name = "controller"
    username = "system:serviceaccount:kube-system:controller"
    field_manager = "sandbox"
    backoff_base = 0.1
    backoff_max = 5.0

    def __init__(self, core: ApiCore) -> None:
        self.core = core
        self._dirty: dict[Hashable, None] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe: Any = None
        self._busy = False
        self._failures: dict[Hashable, int] = {}
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self.syncs = 0

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._task is not None:
            return
        self._unsubscribe = self.core.store.subscribe(self._safe_on_event)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"sandbox-{self.name}")
        for key in self.initial_keys():
            self.enqueue(key)

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def idle(self) -> bool:
        return not self._dirty and not self._busy

    # ------------------------------------------------------------ queue

    def enqueue(self, key: Hashable) -> None:
        self._dirty[key] = None
        self._wake.set()

    def enqueue_after(self, key: Hashable, delay: float) -> None:
        if delay <= 0:
            self.enqueue(key)
            return
        loop = asyncio.get_running_loop()
        existing = self._timers.get(key)
        if existing is not None:
            if existing.when() <= loop.time() + delay:
                return  # an earlier retry is already due
            existing.cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            self.enqueue(key)

        self._timers[key] = loop.call_later(delay, fire)

    def _safe_on_event(self, event: Event) -> None:
        try:
            self.on_event(event)
        except Exception:  # a bug here must not break the writer that triggered the event
            log.exception("%s: event handler failed", self.name)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                key = next(iter(self._dirty))
                del self._dirty[key]
                self._busy = True
                try:
                    await self.sync(key)
                    self._failures.pop(key, None)
                except ApiError as exc:
                    if exc.code == 409:
                        self.enqueue(key)
                    else:
                        self._backoff(key, exc)
                except Retry as exc:
                    self._backoff(key, exc, quiet=True)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # keep the controller alive, like a workqueue would
                    log.exception("%s: sync %s failed", self.name, key)
                    self._backoff(key, exc, quiet=True)
                finally:
                    self._busy = False
                    self.syncs += 1
                await asyncio.sleep(0)

    def _backoff(self, key: Hashable, exc: Exception, *, quiet: bool = False) -> None:
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        delay = min(self.backoff_base * (2**n), self.backoff_max)
        if not quiet:
            log.info("%s: sync %s failed, retry in %.1fs: %s", self.name, key, delay, exc)
        self.enqueue_after(key, delay)

    # ------------------------------------------------------------ for subclasses

    def initial_keys(self) -> Iterable[Hashable]:
        return ()

    def on_event(self, event: Event) -> None:
        raise NotImplementedError

    async def sync(self, key: Any) -> None:
        raise NotImplementedError

    def context(self) -> Context:
        return Context(
            user={"username": self.username, "groups": ["system:authenticated"]},
            field_manager=self.field_manager,
        )

    def rt(self, group: str, version: str, plural: str) -> ResourceType:
        found = self.core.registry.get(group, version, plural)
        if found is None:
            raise Retry(f"{group}/{version} {plural} not served")
        return found


def meta(obj: Obj | None) -> Obj:
    md = (obj or {}).get("metadata")
    return md if isinstance(md, dict) else {}
