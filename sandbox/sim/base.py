"""A small level-triggered controller frame for the simulated cluster.

Controllers follow the store's event bus (``Store.subscribe``: synchronous, so ``on_event`` only
enqueues keys) into the shared work queue (:mod:`gpucluster.kube.workqueue`, the real
controller's), and a worker syncs the queued keys one at a time through ``ApiCore`` like any
client. A failing sync is retried with a per-key exponential backoff; a 409 conflict is retried at
once. ``idle()`` tells tests when nothing is queued or running (delayed retries do not count).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Hashable, Iterable
from typing import Any

from gpucluster.clusterstate import metadata as meta
from gpucluster.kube.workqueue import ItemExponentialFailureRateLimiter, WorkQueue, run_workers
from gpucluster.sandbox.apiserver.core import ApiCore, Context
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.resources import ResourceType
from gpucluster.sandbox.apiserver.store import Event

Obj = dict[str, Any]
__all__ = ["Controller", "Obj", "Retry", "meta"]
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
        self.queue: WorkQueue[Hashable] = WorkQueue(
            self.name, ItemExponentialFailureRateLimiter(self.backoff_base, self.backoff_max)
        )
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe: Any = None
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
        self.queue.shut_down()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def idle(self) -> bool:
        return self.queue.idle()

    # ------------------------------------------------------------ queue

    def enqueue(self, key: Hashable) -> None:
        self.queue.add(key)

    def enqueue_after(self, key: Hashable, delay: float) -> None:
        self.queue.add_after(key, delay)

    def _safe_on_event(self, event: Event) -> None:
        try:
            self.on_event(event)
        except Exception:  # a bug here must not break the writer that triggered the event
            log.exception("%s: event handler failed", self.name)

    async def _run(self) -> None:
        # One worker: the simulated controllers sync their keys in order, one at a time.
        await run_workers(self.queue, self._sync_one, on_error=lambda key, exc: None)  # logged by _sync_one

    async def _sync_one(self, key: Hashable) -> None:
        try:
            await self.sync(key)
        except ApiError as exc:
            if exc.code != 409:
                log.info("%s: sync %s failed, retrying: %s", self.name, key, exc)
                raise
            self.queue.add(key)  # a conflict is retried at once, after done()
        except Retry:
            raise
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: sync %s failed", self.name, key)
            raise
        finally:
            self.syncs += 1
        await asyncio.sleep(0)

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
