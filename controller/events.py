"""An aggregating core/v1 Event recorder, as client-go's EventRecorder correlates repeats.

The first occurrence of (object, type, reason, message) creates an Event; a repeat patches that
Event's ``count`` and ``lastTimestamp`` instead of creating another object. The remembered
Events are bounded (least recently seen forgotten first); a repeat of a forgotten, deleted or
expired Event creates a new one.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpucluster.clusterstate import KubeObject, metadata
from gpucluster.kube.client import KubeError

log = logging.getLogger("gpucluster.controller")

COMPONENT = "gpucluster-controller"
Write = Callable[..., Awaitable[KubeObject]]
Key = tuple[str, str, str, str, str, str, str]


@dataclass
class _Recorded:
    namespace: str
    name: str
    count: int


def event_key(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> Key:
    meta = metadata(obj)
    return (
        str(obj.get("kind")),
        str(meta.get("namespace") or ""),
        str(meta.get("name")),
        str(meta.get("uid") or ""),
        type_,
        reason,
        message,
    )


class EventRecorder:
    def __init__(self, write: Write, now: Callable[[], str], *, max_entries: int = 4096) -> None:
        self.write = write
        self.now = now
        self.max_entries = max_entries
        self._recorded: OrderedDict[Key, _Recorded] = OrderedDict()

    async def record(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Record an Event on ``obj`` (cluster-scoped objects get their events in 'default'); best effort."""
        key = event_key(obj, type_, reason, message)
        now = self.now()
        seen = self._recorded.get(key)
        try:
            if seen is not None:
                self._recorded.move_to_end(key)
                try:
                    await self.write(
                        "PATCH",
                        f"/api/v1/namespaces/{seen.namespace}/events/{seen.name}",
                        body={"count": seen.count + 1, "lastTimestamp": now},
                        content_type="application/merge-patch+json",
                    )
                    seen.count += 1
                    return
                except KubeError as exc:
                    if exc.status != 404:
                        raise
                    del self._recorded[key]
            created = await self.write(
                "POST",
                f"/api/v1/namespaces/{key[1] or 'default'}/events",
                body=_event(obj, type_, reason, message, now),
            )
            name = str(metadata(created).get("name") or "")
            if name:
                self._recorded[key] = _Recorded(key[1] or "default", name, 1)
                while len(self._recorded) > self.max_entries:
                    self._recorded.popitem(last=False)
        except (KubeError, OSError, TimeoutError) as exc:  # events are best effort
            log.warning("event not recorded reason=%s error=%s", reason, exc)


def _event(obj: Mapping[str, Any], type_: str, reason: str, message: str, now: str) -> dict[str, Any]:
    meta = metadata(obj)
    namespace = str(meta.get("namespace") or "default")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name')}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace") or "",
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
