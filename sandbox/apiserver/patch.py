"""PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

Strategic merge patch follows k8s.io/apimachinery/pkg/util/strategicpatch for the fields of the
built-in types this project touches. The merge keys come from a table of field names (the Go
struct tags ``patchMergeKey``/``patchStrategy``) rather than from OpenAPI; lists not in the table
are replaced, as atomic lists are upstream. Supported directives: ``$patch: replace|delete|merge``
in maps and list items, ``$deleteFromPrimitiveList/<field>``, ``$setElementOrder/<field>`` (used for
the order of merged lists) and ``$retainKeys``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch

from gpucluster.sandbox.apiserver.errors import ApiError, bad_request

Obj = dict[str, Any]

# field name -> merge key, for lists merged by key (patchStrategy "merge" with patchMergeKey).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "ownerReferences": "uid",
    "conditions": "type",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
    "addresses": "type",
    "taints": "key",
    "secrets": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "ephemeralContainerStatuses": "name",
    "podIPs": "ip",
    "hostIPs": "ip",
    "resourceClaimStatuses": "name",
}
# Primitive lists merged as sets (patchStrategy "merge" on []string).
SET_LISTS = {"finalizers"}
# Lists whose merge key depends on the parent: container ports merge by containerPort, service ports by port.
PORTS_KEY = {"containers": "containerPort", "initContainers": "containerPort", "ephemeralContainers": "containerPort"}


def merge_key(path: tuple[str, ...]) -> str | None:
    """The merge key of the list at ``path`` (field names only), None for an atomic list."""
    name = path[-1] if path else ""
    if name == "ports":
        for parent in reversed(path[:-1]):
            if parent in PORTS_KEY:
                return PORTS_KEY[parent]
        return "port" if "spec" in path else None
    return MERGE_KEYS.get(name)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def json_patch(target: Obj, ops: Any) -> Obj:
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        result = jsonpatch.JsonPatch(ops).apply(target)
    except jsonpatch.JsonPatchConflict as exc:
        raise ApiError(
            422, "Invalid", f"the server rejected our request due to an error in our request: {exc}"
        ) from exc
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, KeyError, TypeError) as exc:
        raise ApiError(
            422, "Invalid", f"the server rejected our request due to an error in our request: {exc}"
        ) from exc
    if not isinstance(result, dict):
        raise bad_request("the patched object is not a JSON object")
    return result


def strategic_merge(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """Apply a strategic merge patch ``patch`` to ``target`` (neither is modified)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive not in (None, "merge"):
        raise bad_request(f"Unknown patch type: {directive!r}")
    out = dict(target)
    retain = patch.get("$retainKeys")
    orders: dict[str, list[Any]] = {}
    deletions: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$setElementOrder/"):
            orders[key.split("/", 1)[1]] = value or []
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            deletions[key.split("/", 1)[1]] = value or []
            continue
        child = (*path, key)
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list):
            merged = _merge_list(out.get(key), value, child)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        elif isinstance(value, dict):
            merged_map = strategic_merge(out.get(key), value, child)
            if merged_map is None:
                out.pop(key, None)
            else:
                out[key] = merged_map
        else:
            out[key] = value
    for key, removals in deletions.items():
        if isinstance(out.get(key), list):
            out[key] = [v for v in out[key] if v not in removals]
    for key, order in orders.items():
        if isinstance(out.get(key), list):
            out[key] = _reorder(out[key], order, merge_key((*path, key)))
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _merge_list(current: Any, patch: list[Any], path: tuple[str, ...]) -> list[Any] | None:
    name = path[-1]
    if name in SET_LISTS:
        base = list(current) if isinstance(current, list) else []
        for v in patch:
            if v not in base:
                base.append(v)
        return base
    key = merge_key(path)
    if key is None:
        items = [v for v in patch if not (isinstance(v, dict) and v.get("$patch"))]
        return copy.deepcopy(items)
    base = [copy.deepcopy(v) for v in current] if isinstance(current, list) else []
    for item in patch:
        if not isinstance(item, dict):
            raise bad_request(f"json: cannot unmarshal {type(item).__name__} into a list merged by {key}")
        directive = item.get("$patch")
        if directive == "replace":
            return [copy.deepcopy(v) for v in patch if not (isinstance(v, dict) and v.get("$patch"))]
        if key not in item:
            raise bad_request(f"map: {item} does not contain declared merge key: {key}")
        idx = next((i for i, v in enumerate(base) if isinstance(v, dict) and v.get(key) == item[key]), None)
        if directive == "delete":
            if idx is not None:
                base.pop(idx)
            continue
        if idx is None:
            base.append(strategic_merge({}, item, path))
        else:
            base[idx] = strategic_merge(base[idx], item, path)
    return base


def _reorder(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    def ident(v: Any) -> str:
        if key and isinstance(v, dict):
            return json.dumps(v.get(key), sort_keys=True)
        return json.dumps(v, sort_keys=True)

    rank = {ident(v): i for i, v in enumerate(order)}
    indexed = list(enumerate(items))
    indexed.sort(key=lambda p: rank.get(ident(p[1]), len(rank) + p[0]))
    return [v for _, v in indexed]
