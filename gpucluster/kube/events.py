"""core/v1 Events recorded the way client-go's ``EventRecorder`` does (``tools/record``: its
``EventCorrelator``), so that a loop that keeps hitting the same condition, or a rollout over a
thousand nodes, does not write thousands of Event objects:

* an identical event (same source, involved object, type, reason, message) bumps ``count``,
  ``lastTimestamp`` (and the message) of the Event recorded before; an LRU of 4,096 keys
  remembers them; a repeat of a forgotten or deleted Event creates a new one;
* the 10th distinct message with the same source, object, type and reason within 10 minutes
  becomes one event ``(combined from similar events): <message>``, updated by the later ones;
* a source may write 25 events about one object in a burst, then one every 5 minutes
  (``EventSourceObjectSpamFilter``); the rest are dropped (counted in ``dropped``).

Event names are ``<involved object name>.<hex of the time in nanoseconds>``, as client-go's;
a cluster-scoped object's Events go to ``default``. Writing is the :class:`EventSink`'s job, so
the controller (through the API) and the sandbox's simulated controllers (through its core)
share this one recorder. Events are best effort: a sink reports a failed write, never raises.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpucluster.clusterstate import metadata
from gpucluster.lru import LRU

LRU_ENTRIES = 4096
AGGREGATE_MAX = 10
AGGREGATE_INTERVAL = 600.0
SPAM_BURST = 25
SPAM_REFILL = 1.0 / 300.0  # tokens per second
COMBINED = "(combined from similar events): "


class EventSink(Protocol):
    async def create(self, event: dict[str, Any]) -> bool:
        """Create ``event`` (its namespace and name are set); False when it was not written."""

    async def update(self, namespace: str, name: str, changes: dict[str, Any]) -> bool | None:
        """Merge ``changes`` (count, lastTimestamp, message) into that Event: True when written,
        False when it is gone (a new Event is then created), None on any other failure (this
        occurrence is dropped; the Event is kept for the next one, as client-go does)."""


@dataclass
class _Aggregate:
    messages: set[str] = field(default_factory=set)
    last: float = 0.0


@dataclass
class _Bucket:
    tokens: float = float(SPAM_BURST)
    at: float = 0.0


@dataclass
class _Seen:
    namespace: str
    name: str
    count: int


class EventRecorder:
    """Records Events for one component (``source.component``) through ``sink``."""

    def __init__(
        self,
        sink: EventSink,
        component: str,
        *,
        now: Callable[[], str],  # the Events' timestamps: the caller's clock (the API's, or the sandbox's)
        clock: Callable[[], float] = time.monotonic,
        instance: str = "",
    ) -> None:
        self.sink = sink
        self.component = component
        self.instance = instance
        self.clock = clock
        self.now = now
        self._seen: LRU[tuple[Any, ...], _Seen] = LRU(LRU_ENTRIES)
        self._aggregates: LRU[tuple[Any, ...], _Aggregate] = LRU(LRU_ENTRIES)
        self._spam: LRU[tuple[Any, ...], _Bucket] = LRU(LRU_ENTRIES)
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

    async def record(
        self,
        obj: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        *,
        kind: str | None = None,
        api_version: str | None = None,
    ) -> None:
        """Record ``reason``/``message`` about ``obj`` (its ``kind``/``apiVersion`` unless given)."""
        md = metadata(obj)
        kind = kind or str(obj.get("kind") or "")
        api_version = api_version or str(obj.get("apiVersion") or "")
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
        if not self._accept(involved):
            self.dropped += 1
            return
        stamp = self.now()
        previous = self._seen.get(key)
        if previous is not None:
            changes = {"count": previous.count + 1, "lastTimestamp": stamp, "message": message}
            updated = await self.sink.update(previous.namespace, previous.name, changes)
            if updated:
                previous.count += 1
                return
            if updated is None:
                return  # a transient failure: no duplicate Event with a count reset to 1
            self._seen.pop(key)
        name = f"{md.get('name')}.{time.time_ns():x}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                "kind": kind,
                "namespace": str(md.get("namespace") or ""),
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
            "reportingInstance": self.instance,
        }
        if await self.sink.create(event):
            self._seen.put(key, _Seen(ns, name, 1))
