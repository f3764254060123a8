"""One copy of what many cached objects repeat: strings interned, small maps shared.

Ten thousand ResourceSlices of one GPU model say ``{"string": "Hopper"}``, ``{"version":
"580.82.7"}`` and ``{"value": "81559Mi"}`` once per device: as parsed JSON each is a map of its
own (184 bytes) around a string of its own. :class:`Compactor` returns a copy of a JSON value in
which every string is interned (``sys.intern``) and every one-entry map whose value is a scalar
(or such a map) is one shared object per distinct content, so that 65,000 slices hold each of
them once. Maps of more entries and lists are copied (their contents compacted).

The shared maps are plain ``dict``s (readers check ``type(x) is dict``), so they must never be
modified: cached objects are read-only, as client-go's informer caches are. Shared maps that no
cached object holds any more (a node's GPU UUIDs after it left) are dropped from the table when
it has doubled since the last look, by their reference counts.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from sys import intern
from typing import Any

_SCALARS = (int, float, bool, type(None))


def _refcounts(table: dict[Hashable, Any]) -> dict[Hashable, int]:
    return {key: sys.getrefcount(value) for key, value in table.items()}


# What _refcounts says of a value only the table holds (the table, the items iterator, the loop
# variable and getrefcount's argument on CPython 3.11): measured, not assumed.
_ALONE = _refcounts({0: {}})[0]


class Compactor:
    """Compacts JSON values (see the module docstring); ``prune_at``: table size of the first prune."""

    def __init__(self, prune_at: int = 65536) -> None:
        self._shared: dict[str, dict[Hashable, dict[str, Any]]] = {}  # key -> identity of value -> the map
        self._size = 0
        self._minimum = prune_at
        self._prune_at = prune_at

    def __call__(self, value: Any) -> Any:
        return self._value(value)

    def __len__(self) -> int:
        """How many shared maps the table holds."""
        return self._size

    def _value(self, value: Any) -> Any:
        kind = type(value)
        if kind is str:
            return intern(value)
        if kind is dict:
            if len(value) == 1:
                return self._single(value)[0]
            return {
                (intern(k) if type(k) is str else k): (intern(v) if type(v) is str else self._value(v))
                for k, v in value.items()
            }
        if kind is list:
            return [intern(v) if type(v) is str else self._value(v) for v in value]
        return value

    def _single(self, value: dict[Any, Any]) -> tuple[dict[Any, Any], Hashable | None]:
        """A one-entry map compacted, and its identity when it is shared (else None)."""
        ((key, item),) = value.items()
        kind = type(item)
        identity: Hashable | None
        if kind is str:
            item = identity = intern(item)
        elif kind is dict and len(item) == 1:
            item, identity = self._single(item)
        elif kind in _SCALARS:
            identity = (kind, item)  # 1, 1.0 and True are equal, and must not be shared
        else:
            return {key: self._value(item)}, None
        if identity is None or type(key) is not str:
            return {key: item}, None
        return self._one(intern(key), item, identity)

    def _one(self, key: str, item: Any, identity: Hashable) -> tuple[dict[str, Any], Hashable]:
        table = self._shared.get(key)
        if table is None:
            table = self._shared[key] = {}
        found = table.get(identity)
        if found is None:
            found = table[identity] = {key: item}
            self._size += 1
            if self._size >= self._prune_at:
                self.prune()
        # A shared map's identity is its address: it cannot be reused while a map holding it is
        # in the table, and that map holds it.
        return found, (dict, id(found))

    def prune(self) -> None:
        """Drop the shared maps nothing but the table holds; the next prune when the table doubles."""
        changed = True
        while changed:  # a map dropped may leave the map it held alone
            changed = False
            for key in list(self._shared):
                table = self._shared[key]
                for identity in [k for k, refs in _refcounts(table).items() if refs <= _ALONE]:
                    del table[identity]
                    changed = True
                if not table:
                    del self._shared[key]
        self._size = sum(len(table) for table in self._shared.values())
        self._prune_at = max(self._minimum, 2 * self._size)
