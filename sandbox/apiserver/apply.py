"""Server-side apply and managedFields, after sigs.k8s.io/structured-merge-diff.

Field sets are sets of paths; a path is a tuple of fieldsV1 elements: ``f:<field>``,
``k:<json of the key fields>`` (an item of a list merged by key), ``v:<json value>`` (a set item).
A list item's own membership is the path ending at its ``k:``/``v:`` element, written ``.`` in
fieldsV1. Leaves are scalars, atomic lists and atomic maps.

Lists and maps of built-in kinds are typed from the Kubernetes 1.34 OpenAPI definitions
(``x-kubernetes-list-type``/``-list-map-keys``/``-map-type``, else the patch strategy, as
kube-openapi's schemaconv infers them); kinds without a definition fall back to a table of field
names (``sandbox.apiserver.patch.MERGE_KEYS``). What is simplified: versions are not converted
(each manager's entry records the apiVersion it used); there is no "before-first-apply" handling of
client-side-apply's last-applied annotation.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterable
from typing import Any, Protocol

from sandbox.apiserver.errors import ApiError
from sandbox.apiserver.patch import SET_LISTS, merge_key

Obj = dict[str, Any]
Path = tuple[str, ...]
FieldSet = set[Path]

_ITEM = object()  # value of a membership-only path (a list item as a whole)

# metadata fields the server owns; they are never tracked.
_UNTRACKED_META = {
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
}


class TypeInfo(Protocol):
    def list_type(self, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """("map", keys) | ("set", ()) | ("atomic", ()) for the list at the field-name path."""
        ...

    def atomic_map(self, names: tuple[str, ...]) -> bool: ...


class BuiltinTypes:
    """List semantics of built-in kinds, from the patch-merge-key table."""

    def list_type(self, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        if names and names[-1] in SET_LISTS:
            return ("set", ())
        key = merge_key(names)
        return ("map", (key,)) if key else ("atomic", ())

    def atomic_map(self, names: tuple[str, ...]) -> bool:
        return False


class DefinitionTypes:
    """List and map semantics of a built-in kind, from its OpenAPI definition (``$ref`` resolved)."""

    def __init__(self, definition: str) -> None:
        self.definition = definition

    @staticmethod
    def _resolve(node: Obj) -> Obj:
        from sandbox.apiserver.schemas import definitions, ref_name

        defs = definitions()
        for _ in range(16):
            ref = node.get("$ref") or next((s.get("$ref") for s in node.get("allOf") or [] if "$ref" in s), None)
            if not isinstance(ref, str):
                break
            node = {**defs.get(ref_name(ref), {}), **{k: v for k, v in node.items() if k.startswith("x-")}}
        return node

    def _node(self, names: tuple[str, ...]) -> Obj:
        from sandbox.apiserver.schemas import definitions

        node = self._resolve(definitions().get(self.definition, {}))
        for name in names:
            if name == "[]":
                node = self._resolve(node.get("items") or {})
                continue
            props = node.get("properties") or {}
            if name in props:
                node = self._resolve(props[name])
            elif isinstance(node.get("additionalProperties"), dict):
                node = self._resolve(node["additionalProperties"])
            else:
                return {}
        return node

    def list_type(self, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        return _cached_list_type(self.definition, names)

    def atomic_map(self, names: tuple[str, ...]) -> bool:
        return _cached_atomic_map(self.definition, names)


@functools.lru_cache(maxsize=4096)
def _cached_atomic_map(definition: str, names: tuple[str, ...]) -> bool:
    return DefinitionTypes(definition)._node(names).get("x-kubernetes-map-type") == "atomic"


@functools.lru_cache(maxsize=4096)
def _cached_list_type(definition: str, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    node = DefinitionTypes(definition)._node(names)
    if not node:
        return BuiltinTypes().list_type(names)
    kind = node.get("x-kubernetes-list-type")
    if kind == "map":
        return ("map", tuple(node.get("x-kubernetes-list-map-keys") or ()))
    if kind in ("set", "atomic"):
        return (str(kind), ())
    # No list type: kube-openapi infers it from the strategic-merge-patch strategy.
    if "merge" in str(node.get("x-kubernetes-patch-strategy") or "").split(","):
        key = node.get("x-kubernetes-patch-merge-key")
        return ("map", (str(key),)) if key else ("set", ())
    return ("atomic", ())


class SchemaTypes:
    """List and map semantics of a custom resource, from its structural schema."""

    def __init__(self, schema: Obj | None) -> None:
        self.schema = schema or {}

    def _node(self, names: tuple[str, ...]) -> Obj:
        node: Obj = self.schema
        for name in names:
            if name == "[]":
                node = node.get("items") or {}
                continue
            props = node.get("properties") or {}
            if name in props:
                node = props[name]
            elif isinstance(node.get("additionalProperties"), dict):
                node = node["additionalProperties"]
            else:
                return {}
        return node

    def list_type(self, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        node = self._node(names)
        kind = node.get("x-kubernetes-list-type")
        if kind == "map":
            return ("map", tuple(node.get("x-kubernetes-list-map-keys") or ()))
        if kind == "set":
            return ("set", ())
        if names == ("metadata", "finalizers"):
            return ("set", ())
        if names == ("metadata", "ownerReferences"):
            return ("map", ("uid",))
        return ("atomic", ())

    def atomic_map(self, names: tuple[str, ...]) -> bool:
        return self._node(names).get("x-kubernetes-map-type") == "atomic"


def _names(names: tuple[str, ...], item: bool = False) -> tuple[str, ...]:
    return (*names, "[]") if item else names


def _key_element(item: Obj, keys: tuple[str, ...]) -> str | None:
    if not all(k in item for k in keys):
        return None
    return "k:" + json.dumps({k: item[k] for k in sorted(keys)}, separators=(",", ":"), sort_keys=True)


def _value_element(value: Any) -> str:
    return "v:" + json.dumps(value, separators=(",", ":"), sort_keys=True)


def flatten(obj: Obj, types: TypeInfo) -> dict[Path, Any]:
    """Every tracked member path of ``obj`` with its value (``_ITEM`` for list items as a whole)."""
    out: dict[Path, Any] = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if key == "metadata" and isinstance(value, dict):
            for mkey, mvalue in value.items():
                if mkey in _UNTRACKED_META:
                    continue
                _walk(mvalue, ("f:metadata", f"f:{mkey}"), ("metadata", mkey), types, out)
            continue
        _walk(value, (f"f:{key}",), (key,), types, out)
    return out


def _walk(value: Any, path: Path, names: tuple[str, ...], types: TypeInfo, out: dict[Path, Any]) -> None:
    if isinstance(value, dict) and value and not types.atomic_map(names):
        for key, child in value.items():
            _walk(child, (*path, f"f:{key}"), (*names, key), types, out)
        return
    if isinstance(value, list) and value:
        kind, keys = types.list_type(names)
        if kind == "map" and all(isinstance(v, dict) and _key_element(v, keys) for v in value):
            for item in value:
                elem = _key_element(item, keys)
                assert elem is not None
                item_path = (*path, elem)
                out[item_path] = _ITEM
                for key, child in item.items():
                    _walk(child, (*item_path, f"f:{key}"), (*names, "[]", key), types, out)
            return
        if kind == "set":
            for item in value:
                out[(*path, _value_element(item))] = _ITEM
            return
    out[path] = value


def to_fields_v1(paths: Iterable[Path]) -> Obj:
    tree: Obj = {}
    for path in sorted(paths):
        node = tree
        for elem in path:
            node = node.setdefault(elem, {})
        if node:
            node["."] = {}
    # a path that is a strict prefix of another needs ".": walk again to mark them
    for path in paths:
        node = tree
        for elem in path:
            node = node[elem]
        if node and "." not in node:
            node["."] = {}
    return tree


def from_fields_v1(tree: Obj) -> FieldSet:
    out: FieldSet = set()

    def walk(node: Obj, path: Path) -> None:
        if not node:
            if path:
                out.add(path)
            return
        for elem, child in node.items():
            if elem == ".":
                out.add(path)
            else:
                walk(child or {}, (*path, elem))

    walk(tree, ())
    return out


def _scope(paths: dict[Path, Any], subresource: str, has_status: bool) -> dict[Path, Any]:
    if subresource == "status":
        return {p: v for p, v in paths.items() if p[0] == "f:status"}
    if has_status:
        return {p: v for p, v in paths.items() if p[0] != "f:status"}
    return paths


# ---------------------------------------------------------------- object surgery


def _find_item(items: list[Any], elem: str) -> int | None:
    kind, _, raw = elem.partition(":")
    want = json.loads(raw)
    for i, item in enumerate(items):
        if kind == "k" and isinstance(item, dict) and all(item.get(k) == v for k, v in want.items()):
            return i
        if kind == "v" and item == want:
            return i
    return None


def remove_path(obj: Obj, path: Path) -> None:
    """Delete the member at ``path`` from ``obj`` in place (no-op when absent)."""
    parent: Any = obj
    for elem in path[:-1]:
        if elem.startswith("f:"):
            if not isinstance(parent, dict) or elem[2:] not in parent:
                return
            parent = parent[elem[2:]]
        else:
            if not isinstance(parent, list):
                return
            i = _find_item(parent, elem)
            if i is None:
                return
            parent = parent[i]
    last = path[-1]
    if last.startswith("f:"):
        if isinstance(parent, dict):
            parent.pop(last[2:], None)
    elif isinstance(parent, list):
        i = _find_item(parent, last)
        if i is not None:
            parent.pop(i)


def merge_applied(live: Any, applied: Any, names: tuple[str, ...], types: TypeInfo) -> Any:
    """``applied`` merged into ``live``: maps recursively, keyed lists by key, sets as a union."""
    if isinstance(applied, dict) and not types.atomic_map(names):
        out = dict(live) if isinstance(live, dict) else {}
        for key, value in applied.items():
            out[key] = merge_applied(out.get(key), value, (*names, key), types)
        return out
    if isinstance(applied, list) and isinstance(live, list):
        kind, keys = types.list_type(names)
        if kind == "map" and all(isinstance(v, dict) and _key_element(v, keys) for v in applied + live):
            result = list(live)
            for item in applied:
                elem = _key_element(item, keys)
                assert elem is not None
                i = _find_item(result, elem)
                if i is None:
                    result.append(merge_applied(None, item, (*names, "[]"), types))
                else:
                    result[i] = merge_applied(result[i], item, (*names, "[]"), types)
            return result
        if kind == "set":
            return list(live) + [v for v in applied if v not in live]
    return copy.deepcopy(applied)


# ---------------------------------------------------------------- managers


def _entries(obj: Obj | None) -> list[Obj]:
    if not obj:
        return []
    return list((obj.get("metadata") or {}).get("managedFields") or [])


def _entry_key(entry: Obj) -> tuple[str, str, str]:
    return (entry.get("manager", ""), entry.get("operation", ""), entry.get("subresource", ""))


def _make_entry(manager: str, operation: str, api_version: str, subresource: str, paths: FieldSet, now: str) -> Obj:
    entry: Obj = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(paths),
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _rebuild(
    old_entries: list[Obj],
    sets: dict[tuple[str, str, str], FieldSet],
    mine: tuple[str, str, str],
    mine_entry: Obj | None,
) -> list[Obj]:
    out: list[Obj] = []
    seen_mine = False
    for entry in old_entries:
        key = _entry_key(entry)
        if key == mine:
            if mine_entry is not None and not seen_mine:
                out.append(mine_entry)
                seen_mine = True
            continue
        paths = sets.get(key, set())
        if not paths:
            continue
        if paths != from_fields_v1(entry.get("fieldsV1") or {}):
            entry = dict(entry)
            entry["fieldsV1"] = to_fields_v1(paths)
        out.append(entry)
    if mine_entry is not None and not seen_mine:
        out.append(mine_entry)
    return out


def track_update(
    old: Obj | None,
    new: Obj,
    *,
    manager: str,
    api_version: str,
    subresource: str,
    has_status: bool,
    types: TypeInfo,
    now: str,
) -> list[Obj]:
    """managedFields after a non-apply write: the manager owns what it changed, others lose it."""
    before = _scope(flatten(old, types), subresource, has_status) if old else {}
    after = _scope(flatten(new, types), subresource, has_status)
    changed = {p for p, v in after.items() if p not in before or (v is not _ITEM and before[p] != v)}
    removed = set(before) - set(after)
    entries = _entries(old)
    sets = {_entry_key(e): from_fields_v1(e.get("fieldsV1") or {}) for e in entries}
    mine = (manager, "Update", subresource)
    for key, paths in sets.items():
        if key != mine:
            paths -= changed
        paths -= removed
    owned = (sets.get(mine, set()) | changed) - removed
    owned = {p for p in owned if p in after}
    entry = _make_entry(manager, "Update", api_version, subresource, owned, now) if owned else None
    if entry is None and mine in sets:
        sets[mine] = set()
    return _rebuild(entries, sets, mine, entry)


def _conflict_error(kind_group: str, name: str, conflicts: list[tuple[str, str, Path]]) -> ApiError:
    def dotted(path: Path) -> str:
        out = ""
        for elem in path:
            if elem.startswith("f:"):
                out += "." + elem[2:]
            elif elem.startswith("k:"):
                out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(elem[2:]).items()) + "]"
            else:
                out += "[" + elem[2:] + "]"
        return out

    lines = [f'conflict with "{m}"' + (f" using {av}" if av else "") + f": {dotted(p)}" for m, av, p in conflicts]
    if len(lines) == 1:
        message = f"Apply failed with 1 conflict: {lines[0]}"
    else:
        message = f"Apply failed with {len(lines)} conflicts: " + "\n".join(["", *lines]).lstrip("\n")
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "{m}"' + (f" using {av}" if av else ""),
            "field": dotted(p),
        }
        for m, av, p in conflicts
    ]
    details: Obj = {"name": name, "kind": kind_group.split(".", 1)[0], "causes": causes}
    if "." in kind_group:
        details["group"] = kind_group.split(".", 1)[1]
    return ApiError(409, "Conflict", message, details=details)


def apply(
    live: Obj | None,
    applied: Obj,
    *,
    manager: str,
    force: bool,
    api_version: str,
    subresource: str,
    has_status: bool,
    types: TypeInfo,
    now: str,
    kind_group: str,
    name: str,
) -> Obj:
    """The object after ``manager`` applies ``applied`` to ``live`` (None: create), managedFields included.

    Raises a 409 listing the conflicting managers unless ``force``.
    """
    applied_flat = _scope(flatten(applied, types), subresource, has_status)
    base: Obj = copy.deepcopy(live) if live else {}
    if subresource == "status":
        scoped_applied: Obj = {k: v for k, v in applied.items() if k in ("apiVersion", "kind", "status")}
    elif has_status:
        scoped_applied = {k: v for k, v in applied.items() if k != "status"}
    else:
        scoped_applied = applied
    merged = merge_applied(base, scoped_applied, (), types)
    entries = _entries(live)
    sets = {_entry_key(e): from_fields_v1(e.get("fieldsV1") or {}) for e in entries}
    versions = {_entry_key(e): e.get("apiVersion", "") for e in entries}
    mine = (manager, "Apply", subresource)
    previously = sets.get(mine, set())
    # Fields this manager gave up and nobody else holds are removed.
    others: set[Path] = set()
    for key, paths in sets.items():
        if key != mine:
            others |= paths
    # Shortest first: a list item given up as a whole goes before its fields are looked at, since
    # removing a key field (a container's name) first would leave the item unfindable.
    for path in sorted(previously - set(applied_flat), key=len):
        if path in others or any(o[: len(path)] == path for o in others):
            continue
        remove_path(merged, path)
    # Conflicts: another manager owns a field whose value this apply changes.
    live_flat = flatten(live, types) if live else {}
    merged_flat = flatten(merged, types)
    conflicts: list[tuple[str, str, Path]] = []
    taken: set[Path] = set()
    for path, value in applied_flat.items():
        if value is _ITEM:
            continue
        if path in live_flat and live_flat[path] == merged_flat.get(path):
            continue
        for key, paths in sets.items():
            if key != mine and path in paths:
                conflicts.append((key[0], versions.get(key, ""), path))
                taken.add(path)
    if conflicts and not force:
        raise _conflict_error(kind_group, name, sorted(set(conflicts), key=lambda c: (c[0], c[2])))
    for key, paths in sets.items():
        if key != mine:
            paths -= taken
    sets[mine] = set(applied_flat)
    entry = _make_entry(manager, "Apply", api_version, subresource, set(applied_flat), now)
    out: Obj = merged
    out.setdefault("metadata", {})["managedFields"] = _rebuild(entries, sets, mine, entry)
    return out
