"""In-memory object storage with a global resourceVersion, a bounded event history and watches.

Objects are plain dicts and are never mutated once stored: every write stores a new dict, so readers
(HTTP handlers, watchers, in-process controllers) share them without copying. Anyone who wants to
change a stored object must copy it first.

Storage is keyed by resource (group, plural) and then (namespace, name); cluster-scoped objects use
the namespace "". The store knows nothing about kinds or validation; ``gpucluster.sandbox.apiserver.core`` does.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpucluster.sandbox.apiserver import errors
from gpucluster.sandbox.apiserver.selectors import FieldSelector, Selector, matches_fields, matches_labels

Obj = dict[str, Any]
ResourceKey = tuple[str, str]  # (group, plural)
ObjectKey = tuple[str, str]  # (namespace, name)

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"
ERROR = "ERROR"


@dataclass(frozen=True)
class Event:
    """One committed change. ``obj`` is the stored object after the change (for DELETED: its final
    state, with the deletion's resourceVersion); ``old`` the object before (None for ADDED)."""

    type: str
    rv: int
    resource: ResourceKey
    obj: Obj
    old: Obj | None


def meta(obj: Obj) -> Obj:
    m: Obj = obj.setdefault("metadata", {})
    return m


def rv_of(obj: Obj) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _with_rv(obj: Obj, rv: int) -> Obj:
    """A shallow copy of ``obj`` whose metadata carries ``rv`` (the metadata dict is copied too)."""
    out = dict(obj)
    md = dict(out.get("metadata") or {})
    md["resourceVersion"] = str(rv)
    out["metadata"] = md
    return out


@dataclass
class _Resource:
    objects: dict[str, dict[str, Obj]] = field(default_factory=dict)
    history: deque[Event] = field(default_factory=deque)
    window_start: int = 0
    watchers: set[Watcher] = field(default_factory=set)
    count: int = 0
    # Every (namespace, name) in sorted order, kept on create and delete, so a list (and each page of
    # a paged list) starts by bisection instead of sorting and skipping: linear over all the pages.
    keys: list[ObjectKey] = field(default_factory=list)
    # Bumped when ``keys`` changes shape, so an iterator that yielded to its caller re-finds its place.
    key_changes: int = 0


class Watcher:
    """A filtered stream of events for one resource; iterate with ``async for``.

    The stream ends when ``stop()`` is called, when the store breaks all watches (a simulated
    restart), or after an ERROR event.
    """

    def __init__(
        self,
        store: Store,
        resource: ResourceKey,
        namespace: str | None,
        labels: Selector,
        fields: FieldSelector,
    ) -> None:
        self.store = store
        self.resource = resource
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.queue: asyncio.Queue[tuple[str, Obj] | None] = asyncio.Queue()
        self.closed = False

    def matches(self, obj: Obj) -> bool:
        if self.namespace is not None and (obj.get("metadata") or {}).get("namespace", "") != self.namespace:
            return False
        return matches_labels(self.labels, obj) and matches_fields(self.fields, obj)

    def offer(self, event: Event) -> None:
        if self.closed:
            return
        now = self.matches(event.obj)
        before = event.old is not None and self.matches(event.old)
        if event.type == ADDED:
            if now:
                self.queue.put_nowait((ADDED, event.obj))
        elif event.type == MODIFIED:
            if now and before:
                self.queue.put_nowait((MODIFIED, event.obj))
            elif now:
                self.queue.put_nowait((ADDED, event.obj))
            elif before:
                self.queue.put_nowait((DELETED, event.obj))
        elif event.type == DELETED and (now or before):
            self.queue.put_nowait((DELETED, event.obj))

    def send_error(self, status: Obj) -> None:
        self.queue.put_nowait((ERROR, status))
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)
            self.store._forget(self)

    def stop(self) -> None:
        self.close()

    def pending(self) -> bool:
        return not self.queue.empty()

    async def next(self, timeout: float | None = None) -> tuple[str, Obj] | None:
        """The next (type, object), None when the stream ended; raises TimeoutError after ``timeout``."""
        if timeout is None:
            return await self.queue.get()
        return await asyncio.wait_for(self.queue.get(), timeout)

    async def __aiter__(self) -> AsyncIterator[tuple[str, Obj]]:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            yield item


Subscriber = Callable[[Event], None]


class Store:
    """Objects of every resource, one global resourceVersion counter, bounded per-resource history."""

    def __init__(self, history_limit: int = 2000) -> None:
        self.rv = 1
        self.history_limit = history_limit
        self._resources: dict[ResourceKey, _Resource] = {}
        self._subscribers: list[Subscriber] = []
        self._by_uid: dict[str, tuple[ResourceKey, str, str]] = {}
        self._dependents: dict[str, set[tuple[ResourceKey, str, str]]] = {}
        # Keys examined by iter(), for tests that prove a paged list does linear work.
        self.keys_visited = 0

    # ------------------------------------------------------------ reads

    def _res(self, resource: ResourceKey) -> _Resource:
        res = self._resources.get(resource)
        if res is None:
            res = self._resources[resource] = _Resource(window_start=self.rv)
        return res

    def get(self, resource: ResourceKey, namespace: str, name: str) -> Obj | None:
        res = self._resources.get(resource)
        if res is None:
            return None
        return res.objects.get(namespace, {}).get(name)

    def iter(
        self, resource: ResourceKey, namespace: str | None = None, *, after: ObjectKey | None = None
    ) -> Iterator[Obj]:
        """Objects in (namespace, name) order, optionally in one namespace, optionally after a key.

        Safe against creates and deletes between two items (the caller may write while iterating):
        the position is found again from the last key yielded."""
        res = self._resources.get(resource)
        if res is None:
            return
        keys = res.keys
        start: ObjectKey = (namespace, "") if namespace is not None else ("", "")
        if after is not None and after > start:
            last, i = after, bisect_right(keys, after)
        else:
            last, i = start, bisect_left(keys, start)
        seen = res.key_changes
        while True:
            if res.key_changes != seen:
                seen, i = res.key_changes, bisect_right(keys, last)
            if i >= len(keys):
                return
            key = keys[i]
            self.keys_visited += 1
            if namespace is not None and key[0] != namespace:
                return
            i += 1
            last = key
            yield res.objects[key[0]][key[1]]

    def count(self, resource: ResourceKey) -> int:
        res = self._resources.get(resource)
        return res.count if res else 0

    def by_uid(self, uid: str) -> tuple[ResourceKey, Obj] | None:
        where = self._by_uid.get(uid)
        if where is None:
            return None
        obj = self.get(*where)
        return (where[0], obj) if obj is not None else None

    def dependents(self, owner_uid: str) -> list[tuple[ResourceKey, Obj]]:
        out: list[tuple[ResourceKey, Obj]] = []
        for resource, ns, name in sorted(self._dependents.get(owner_uid, ())):
            obj = self.get(resource, ns, name)
            if obj is not None:
                out.append((resource, obj))
        return out

    def resources(self) -> list[ResourceKey]:
        return list(self._resources)

    # ------------------------------------------------------------ writes

    def create(self, resource: ResourceKey, obj: Obj) -> Obj:
        """Store a new object (its metadata.namespace/name say where) with the next resourceVersion."""
        md = obj["metadata"]
        ns, name = md.get("namespace", ""), md["name"]
        res = self._res(resource)
        names = res.objects.setdefault(ns, {})
        if name in names:
            raise errors.already_exists(resource[0], resource[1], name)
        self.rv += 1
        md["resourceVersion"] = str(self.rv)
        names[name] = obj
        res.count += 1
        insort(res.keys, (ns, name))
        res.key_changes += 1
        self._index(resource, ns, name, None, obj)
        self._emit(res, Event(ADDED, self.rv, resource, obj, None))
        return obj

    def update(self, resource: ResourceKey, obj: Obj, *, expected_rv: int | None = None) -> Obj:
        """Replace an existing object; with ``expected_rv`` a compare-and-swap (409 when stale)."""
        md = obj["metadata"]
        ns, name = md.get("namespace", ""), md["name"]
        res = self._res(resource)
        old = res.objects.get(ns, {}).get(name)
        if old is None:
            raise errors.not_found(resource[0], resource[1], name)
        if expected_rv is not None and rv_of(old) != expected_rv:
            raise errors.stale(resource[0], resource[1], name)
        self.rv += 1
        md["resourceVersion"] = str(self.rv)
        res.objects[ns][name] = obj
        self._index(resource, ns, name, old, obj)
        self._emit(res, Event(MODIFIED, self.rv, resource, obj, old))
        return obj

    def delete(self, resource: ResourceKey, namespace: str, name: str, *, expected_rv: int | None = None) -> Obj:
        """Remove an object; the returned final state carries the deletion's resourceVersion."""
        res = self._res(resource)
        old = res.objects.get(namespace, {}).get(name)
        if old is None:
            raise errors.not_found(resource[0], resource[1], name)
        if expected_rv is not None and rv_of(old) != expected_rv:
            raise errors.stale(resource[0], resource[1], name)
        self.rv += 1
        del res.objects[namespace][name]
        if not res.objects[namespace]:
            del res.objects[namespace]
        res.count -= 1
        del res.keys[bisect_left(res.keys, (namespace, name))]
        res.key_changes += 1
        final = _with_rv(old, self.rv)
        self._index(resource, namespace, name, old, None)
        self._emit(res, Event(DELETED, self.rv, resource, final, old))
        return final

    def drop_resource(self, resource: ResourceKey) -> None:
        """Forget a resource entirely (its CRD is gone): watches end, no events are sent."""
        res = self._resources.pop(resource, None)
        if res is None:
            return
        for names in res.objects.values():
            for obj in names.values():
                self._index(resource, obj["metadata"].get("namespace", ""), obj["metadata"]["name"], obj, None)
        for w in list(res.watchers):
            w.close()

    def _index(self, resource: ResourceKey, ns: str, name: str, old: Obj | None, new: Obj | None) -> None:
        where = (resource, ns, name)
        if old is not None:
            md = old.get("metadata") or {}
            if md.get("uid"):
                self._by_uid.pop(md["uid"], None)
            for ref in md.get("ownerReferences") or ():
                deps = self._dependents.get(ref.get("uid", ""))
                if deps is not None:
                    deps.discard(where)
                    if not deps:
                        del self._dependents[ref["uid"]]
        if new is not None:
            md = new["metadata"]
            if md.get("uid"):
                self._by_uid[md["uid"]] = where
            for ref in md.get("ownerReferences") or ():
                if ref.get("uid"):
                    self._dependents.setdefault(ref["uid"], set()).add(where)

    def _emit(self, res: _Resource, event: Event) -> None:
        res.history.append(event)
        while len(res.history) > self.history_limit:
            res.window_start = res.history.popleft().rv
        for w in list(res.watchers):
            w.offer(event)
        for fn in list(self._subscribers):
            fn(event)

    # ------------------------------------------------------------ watch / bus

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Call ``fn(event)`` synchronously after every committed change; returns an unsubscribe."""
        self._subscribers.append(fn)

        def unsubscribe() -> None:
            if fn in self._subscribers:
                self._subscribers.remove(fn)

        return unsubscribe

    def oldest_watchable(self, resource: ResourceKey) -> int:
        return self._res(resource).window_start

    def watch(
        self,
        resource: ResourceKey,
        namespace: str | None = None,
        *,
        resource_version: int | None = None,
        labels: Selector = (),
        fields: FieldSelector = (),
        initial: bool = False,
    ) -> Watcher:
        """A watch starting after ``resource_version`` (None: now).

        With ``initial`` every current matching object first arrives as ADDED (what a watch with
        resourceVersion "" or "0" does). A version older than the kept history yields a single ERROR
        event with a 410 Status, like the watch cache's "too old resource version".
        """
        res = self._res(resource)
        w = Watcher(self, resource, namespace, labels, fields)
        if resource_version is not None and not initial:
            if resource_version < res.window_start:
                w.send_error(errors.too_old(resource_version, res.window_start).status())
                return w
            for event in res.history:
                if event.rv > resource_version:
                    w.offer(event)
        if initial:
            for obj in self.iter(resource, namespace):
                if w.matches(obj):
                    w.queue.put_nowait((ADDED, obj))
        res.watchers.add(w)
        return w

    def _forget(self, w: Watcher) -> None:
        res = self._resources.get(w.resource)
        if res is not None:
            res.watchers.discard(w)

    def break_watches(self) -> int:
        """Close every open watch (a simulated API server restart); returns how many were closed."""
        closed = 0
        for res in self._resources.values():
            for w in list(res.watchers):
                w.close()
                closed += 1
        return closed

    def compact(self, resource: ResourceKey | None = None) -> None:
        """Drop the kept event history so that watches from any older version get 410."""
        targets = [resource] if resource else list(self._resources)
        for key in targets:
            res = self._res(key)
            res.history.clear()
            res.window_start = self.rv
