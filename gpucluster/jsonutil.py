"""Small helpers for Kubernetes JSON values (dicts, lists, scalars)."""

from __future__ import annotations

from typing import Any, TypeVar

import jsonpatch

T = TypeVar("T")


def clone(value: T) -> T:
    """A deep copy of a JSON value, several times faster than ``copy.deepcopy`` for such data."""
    kind = type(value)
    if kind is dict:
        return {k: clone(v) for k, v in value.items()}  # type: ignore[attr-defined,return-value]
    if kind is list:
        return [clone(v) for v in value]  # type: ignore[attr-defined,return-value]
    return value


_MISSING = object()


def pointer_token(key: str) -> str:
    """``key`` as one token of an RFC 6901 JSON pointer (``~`` and ``/`` escaped)."""
    return key.replace("~", "~0").replace("/", "~1")


def diff(original: Any, modified: Any, path: str = "") -> list[dict[str, Any]]:
    """RFC 6902 operations turning ``original`` into ``modified``.

    Shared subtrees (the same object on both sides, as a copy-on-write mutation leaves them) are
    skipped at once, equal ones at C speed (``==``); objects are compared key by key and lists of
    equal length item by item, so a mutation deep inside a pod yields operations on just the
    fields that changed. Anything else (lists that changed length, type changes) is diffed by
    ``jsonpatch``. ``jsonpatch.apply_patch(original, diff(original, modified)) == modified``.

    Limit: inside containers that compare equal, values Python holds equal (``1``, ``1.0``,
    ``True``) are not told apart; the mutations we diff never turn one into another.
    """
    if original is modified or (original == modified and type(original) is type(modified)):
        return []
    return _changed(original, modified, path)


def _changed(original: Any, modified: Any, path: str) -> list[dict[str, Any]]:
    """:func:`diff` of values known to differ (unequal, or equal of different types)."""
    if type(original) is dict and type(modified) is dict:
        ops: list[dict[str, Any]] = []
        for key, value in original.items():
            other = modified.get(key, _MISSING)
            if other is value:
                continue
            if other is _MISSING:
                ops.append({"op": "remove", "path": f"{path}/{pointer_token(key)}"})
            elif not (value == other and type(value) is type(other)):
                ops += _changed(value, other, f"{path}/{pointer_token(key)}")
        for key, value in modified.items():
            if key not in original:
                ops.append({"op": "add", "path": f"{path}/{pointer_token(key)}", "value": value})
        return ops
    if type(original) is list and type(modified) is list:
        if len(original) == len(modified):
            out: list[dict[str, Any]] = []
            for index, (a, b) in enumerate(zip(original, modified, strict=True)):
                out += diff(a, b, f"{path}/{index}")
            return out
        ops = jsonpatch.make_patch(original, modified).patch
        return [
            {**op, "path": path + op["path"], **({"from": path + op["from"]} if "from" in op else {})} for op in ops
        ]
    if path == "":
        return [{"op": "replace", "path": "", "value": modified}]
    return [{"op": "replace", "path": path, "value": modified}]
