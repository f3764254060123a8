"""core/v1 Events of the simulated controllers: the shared recorder (:mod:`gpucluster.kube.events`,
client-go's correlation: identical events bump ``count``, similar ones are combined, a spam
filter per object), written through the sandbox's ``ApiCore`` like any client.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gpucluster.kube import events
from gpucluster.sandbox.apiserver.core import ApiCore, Context
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.sim.base import Obj

EVENTS = ("", "events")
log = logging.getLogger("sandbox.sim.events")


class CoreSink:
    """Writes Events through ``ApiCore`` as ``context()``'s user."""

    def __init__(self, core: ApiCore, context: Callable[[], Context]) -> None:
        self.core = core
        self.context = context

    async def create(self, event: dict[str, Any]) -> bool:
        rt = self.core.registry.get("", "v1", "events")
        if rt is None:
            return False
        try:
            await self.core.create(rt, event["metadata"]["namespace"], event, self.context(), managed=False)
        except ApiError as exc:
            if exc.code not in (403, 404, 409):
                log.warning("event not recorded reason=%s error=%s", event.get("reason"), exc)
            return False
        return True

    async def update(self, namespace: str, name: str, changes: dict[str, Any]) -> bool | None:
        rt = self.core.registry.get("", "v1", "events")
        existing = self.core.store.get(EVENTS, namespace, name)
        if rt is None or existing is None:
            return False
        try:
            await self.core.update(rt, namespace, name, {**existing, **changes}, self.context())
        except ApiError as exc:
            if exc.code == 404:
                return False
            log.warning("event not updated name=%s error=%s", name, exc)
            return None
        return True


class EventRecorder:
    """The shared recorder for one simulated component (``source.component``)."""

    def __init__(self, core: ApiCore, component: str, context: Callable[[], Context]) -> None:
        self.recorder = events.EventRecorder(CoreSink(core, context), component, now=core.now)

    @property
    def dropped(self) -> int:
        return self.recorder.dropped

    async def event(self, obj: Obj, kind: str, api_version: str, type_: str, reason: str, message: str) -> None:
        """Record ``reason``/``message`` about ``obj`` (a stored object of ``kind``)."""
        await self.recorder.record(obj, type_, reason, message, kind=kind, api_version=api_version)
