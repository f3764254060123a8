"""core/v1 Events of the simulated controllers, recorded the way client-go's ``EventRecorder``
does it (``tools/record``: its ``EventCorrelator``), so that a thousand-node rollout does not
write thousands of events about one object:

* an identical event (same source, involved object, type, reason, message) bumps ``count`` and
  ``lastTimestamp`` of the event recorded before (an LRU of 4,096 keys remembers them);
* the 10th distinct message with the same source, object, type and reason within 10 minutes
  becomes one event ``(combined from similar events): <message>``, updated (count, message)
  by the later ones;
* a source may write 25 events about one object in a burst, then one every 5 minutes
  (``EventSourceObjectSpamFilter``); the rest are dropped.

Event names are ``<involved object name>.<hex of the time in nanoseconds>``, as client-go's.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sandbox.apiserver.core import ApiCore, Context
from sandbox.apiserver.errors import ApiError
from sandbox.sim.base import Obj, meta

EVENTS = ("", "events")
LRU_ENTRIES = 4096
AGGREGATE_MAX = 10
AGGREGATE_INTERVAL = 600.0
SPAM_BURST = 25
SPAM_REFILL = 1.0 / 300.0  # tokens per second
COMBINED = "(combined from similar events): "

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """A bounded mapping that forgets the least recently used key."""

    def __init__(self, size: int = LRU_ENTRIES) -> None:
        self.size = size
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.size:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


@dataclass
class _Aggregate:
    messages: set[str] = field(default_factory=set)
    last: float = 0.0


@dataclass
class _Bucket:
    tokens: float = float(SPAM_BURST)
    at: float = 0.0


class EventRecorder:
    """Records Events for one component (``source.component``) through ``ApiCore``."""

    def __init__(
        self, core: ApiCore, component: str, context: Callable[[], Context], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.core = core
        self.component = component
        self.context = context
        self.clock = clock
        self._seen: LRU[tuple[Any, ...], tuple[str, str]] = LRU()  # event key -> (namespace, event name)
        self._aggregates: LRU[tuple[Any, ...], _Aggregate] = LRU()
        self._spam: LRU[tuple[Any, ...], _Bucket] = LRU()
        self.dropped = 0

    def _accept(self, involved: tuple[Any, ...]) -> bool:
        now = self.clock()
        bucket = self._spam.get(involved)
        if bucket is None:
            bucket = _Bucket(at=now)
        bucket.tokens = min(float(SPAM_BURST), bucket.tokens + (now - bucket.at) * SPAM_REFILL)
        bucket.at = now
        self._spam.put(involved, bucket)
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    async def event(self, obj: Obj, kind: str, api_version: str, type_: str, reason: str, message: str) -> None:
        """Record ``reason``/``message`` about ``obj`` (a stored object of ``kind``)."""
        md = meta(obj)
        ns = str(md.get("namespace") or "default")
        involved = (self.component, kind, ns, md.get("name"), md.get("uid"), api_version)
        group = (*involved, type_, reason)
        now = self.clock()
        aggregate = self._aggregates.get(group)
        if aggregate is None or now - aggregate.last > AGGREGATE_INTERVAL:
            aggregate = _Aggregate()
        aggregate.messages.add(message)
        aggregate.last = now
        self._aggregates.put(group, aggregate)
        key: tuple[Any, ...] = (*group, message)
        if len(aggregate.messages) >= AGGREGATE_MAX:
            aggregate.messages.pop()
            key = (*group, None)
            message = COMBINED + message
        previous = self._seen.get(key)
        if not self._accept(involved):
            self.dropped += 1
            return
        rt = self.core.registry.get("", "v1", "events")
        if rt is None:
            return
        stamp = self.core.now()
        if previous is not None:
            existing = self.core.store.get(EVENTS, *previous)
            if existing is not None:
                body = {**existing, "count": int(existing.get("count") or 1) + 1, "lastTimestamp": stamp}
                body["message"] = message
                try:
                    await self.core.update(rt, previous[0], previous[1], body, self.context())
                    return
                except ApiError as exc:
                    if exc.code not in (404, 409):
                        raise
        name = f"{md.get('name')}.{time.time_ns():x}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                "kind": kind,
                "namespace": ns,
                "name": md.get("name"),
                "uid": md.get("uid"),
                "apiVersion": api_version,
                "resourceVersion": md.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "source": {"component": self.component},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "type": type_,
            "eventTime": None,
            "reportingComponent": self.component,
            "reportingInstance": "",
        }
        try:
            await self.core.create(rt, ns, event, self.context(), managed=False)
        except ApiError as exc:
            if exc.code not in (403, 404, 409):
                raise
            return
        self._seen.put(key, (ns, name))
