"""Server-side apply and managedFields, after sigs.k8s.io/structured-merge-diff and apimachinery's
managedfields (its chain of managers: strip meta, managed-fields updater, cap, skip-non-applied).

Field sets are sets of paths; a path is a tuple of fieldsV1 elements: ``f:<field>``,
``k:<json of the key fields>`` (an item of a list merged by key, missing keys taken from their
defaults as SMD does, so ``ports`` keyed by containerPort and protocol knows an item without a
protocol as ``protocol: "TCP"``), ``v:<json value>`` (a set item). A node's own membership is the
path ending at it, written ``.`` in fieldsV1.

What an operation owns is SMD's: an apply owns its configuration's ``ToFieldSet`` (leaves, list
items, empty and null values, map keys that are not struct fields); an update owns what it changed
(``Compare``: added, modified, and removed from everybody), including map, list and list-item nodes
it added. Typed Go objects hold every non-pointer struct field; the sandbox's plain dicts do not,
so a struct field missing under a present parent counts as present and empty (built-in kinds have
no pointer information here: a pointer struct set for the first time is not owned as a node).

Lists and maps of built-in kinds are typed from the Kubernetes 1.34 OpenAPI definitions
(``x-kubernetes-list-type``/``-list-map-keys``/``-map-type``, else the patch strategy, as
kube-openapi's schemaconv infers them); kinds without a definition fall back to a table of field
names (``gpucluster.sandbox.apiserver.patch.MERGE_KEYS``). Simplified: versions are not converted (each
manager's entry records the apiVersion it used); client-side apply's last-applied annotation is not
looked at.
"""

from __future__ import annotations

import calendar
import copy
import functools
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.patch import SET_LISTS, merge_key

Obj = dict[str, Any]
Path = tuple[str, ...]
FieldSet = set[Path]

MAX_UPDATE_MANAGERS = 10  # managedfields.DefaultMaxUpdateManagers
ANCIENT_CHANGES = "ancient-changes"
BEFORE_FIRST_APPLY = "before-first-apply"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

# metadata fields nobody owns (the strip-meta manager's set, and what the registry sets itself).
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
    "clusterName",
}
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# List-map key defaults beyond the zero value of a required key (``+default`` markers).
_KEY_DEFAULTS: dict[tuple[str, str], Any] = {
    ("io.k8s.api.core.v1.ContainerPort", "protocol"): "TCP",
    ("io.k8s.api.core.v1.ServicePort", "protocol"): "TCP",
}


# ---------------------------------------------------------------- types


class TypeInfo(Protocol):
    """What SMD's schema says about the node at a field-name path (``[]`` for a list's items)."""

    implicit_structs: bool
    """Whether struct fields missing under a present parent count as present and empty (typed
    objects: built-in kinds), or are absent (unstructured custom resources)."""

    def list_type(self, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """("map", keys) | ("set", ()) | ("atomic", ()) for the list at the field-name path."""
        ...

    def atomic_map(self, names: tuple[str, ...]) -> bool: ...

    def fields(self, names: tuple[str, ...]) -> frozenset[str] | None:
        """The declared fields of the struct at ``names``; None for a map (or an untyped node)."""
        ...

    def required(self, names: tuple[str, ...], key: str) -> bool:
        """Whether ``key`` is a required (never omitted) field of the struct at ``names``."""
        ...

    def key_defaults(self, names: tuple[str, ...]) -> Mapping[str, Any]:
        """Defaults of the list-map keys of the list at ``names``."""
        ...


class BuiltinTypes:
    """List semantics of built-in kinds, from the patch-merge-key table; every object is a struct
    (but one that is not there is not taken for an empty one: without a schema nothing says which
    fields are structs)."""

    implicit_structs = False

    def list_type(self, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        if names and names[-1] in SET_LISTS:
            return ("set", ())
        key = merge_key(names)
        return ("map", (key,)) if key else ("atomic", ())

    def atomic_map(self, names: tuple[str, ...]) -> bool:
        return False

    def fields(self, names: tuple[str, ...]) -> frozenset[str] | None:
        return _ANY_FIELD

    def required(self, names: tuple[str, ...], key: str) -> bool:
        return False

    def key_defaults(self, names: tuple[str, ...]) -> Mapping[str, Any]:
        return {}


class _AnyField(frozenset[str]):
    def __contains__(self, item: object) -> bool:
        return True


_ANY_FIELD = _AnyField()


def _resolve(node: Obj) -> tuple[str, Obj]:
    """A schema node with its ``$ref`` followed: (the definition's name or "", the node)."""
    from gpucluster.sandbox.apiserver.schemas import definitions, ref_name

    defs = definitions()
    name = ""
    for _ in range(16):
        ref = node.get("$ref") or next((s.get("$ref") for s in node.get("allOf") or [] if "$ref" in s), None)
        if not isinstance(ref, str):
            break
        name = ref_name(ref)
        node = {**defs.get(name, {}), **{k: v for k, v in node.items() if k.startswith("x-")}}
    return name, node


@functools.lru_cache(maxsize=8192)
def _definition_node(definition: str, names: tuple[str, ...]) -> tuple[str, Obj]:
    from gpucluster.sandbox.apiserver.schemas import definitions

    name, node = definition, _resolve(definitions().get(definition, {}))[1]
    for part in names:
        if part == "[]":
            name, node = _resolve(node.get("items") or {})
            continue
        props = node.get("properties") or {}
        if part in props:
            name, node = _resolve(props[part])
        elif isinstance(node.get("additionalProperties"), dict):
            name, node = _resolve(node["additionalProperties"])
        else:
            return "", {}
    return name, node


class DefinitionTypes:
    """List and map semantics of a built-in kind, from its OpenAPI definition (``$ref`` resolved)."""

    implicit_structs = True

    def __init__(self, definition: str) -> None:
        self.definition = definition

    def _node(self, names: tuple[str, ...]) -> Obj:
        return _definition_node(self.definition, names)[1]

    def list_type(self, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        return _cached_list_type(self.definition, names)

    def atomic_map(self, names: tuple[str, ...]) -> bool:
        return self._node(names).get("x-kubernetes-map-type") == "atomic"

    def fields(self, names: tuple[str, ...]) -> frozenset[str] | None:
        return _cached_fields(self.definition, names)

    def required(self, names: tuple[str, ...], key: str) -> bool:
        return key in (self._node(names).get("required") or ())

    def key_defaults(self, names: tuple[str, ...]) -> Mapping[str, Any]:
        return _cached_key_defaults(self.definition, names)


@functools.lru_cache(maxsize=8192)
def _cached_fields(definition: str, names: tuple[str, ...]) -> frozenset[str] | None:
    props = _definition_node(definition, names)[1].get("properties")
    return frozenset(props) if isinstance(props, dict) else None


@functools.lru_cache(maxsize=4096)
def _cached_key_defaults(definition: str, names: tuple[str, ...]) -> Mapping[str, Any]:
    kind, keys = _cached_list_type(definition, names)
    if kind != "map":
        return {}
    item_name, item = _definition_node(definition, (*names, "[]"))
    props, required = item.get("properties") or {}, item.get("required") or ()
    out: dict[str, Any] = {}
    for key in keys:
        if (item_name, key) in _KEY_DEFAULTS:
            out[key] = _KEY_DEFAULTS[(item_name, key)]
        elif key in required:  # kube-openapi defaults a required scalar to its zero value
            types = props.get(key, {}).get("type")
            kind_of = types if isinstance(types, str) else next((t for t in types or () if t != "null"), "")
            zero = {"string": "", "integer": 0, "number": 0, "boolean": False}.get(kind_of, MISSING)
            if zero is not MISSING:
                out[key] = zero
    return out


@functools.lru_cache(maxsize=4096)
def _cached_list_type(definition: str, names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    node = _definition_node(definition, names)[1]
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
    """List and map semantics of a custom resource, from its structural schema (metadata as ObjectMeta)."""

    implicit_structs = False

    def __init__(self, schema: Obj | None) -> None:
        self.schema = schema or {}
        self.meta = DefinitionTypes(_OBJECT_META)

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
        if names[:1] == ("metadata",):
            return self.meta.list_type(names[1:])
        node = self._node(names)
        kind = node.get("x-kubernetes-list-type")
        if kind == "map":
            return ("map", tuple(node.get("x-kubernetes-list-map-keys") or ()))
        if kind == "set":
            return ("set", ())
        return ("atomic", ())

    def atomic_map(self, names: tuple[str, ...]) -> bool:
        if names[:1] == ("metadata",):
            return self.meta.atomic_map(names[1:])
        return self._node(names).get("x-kubernetes-map-type") == "atomic"

    def fields(self, names: tuple[str, ...]) -> frozenset[str] | None:
        if names[:1] == ("metadata",):
            return self.meta.fields(names[1:])
        if not names:
            return frozenset((self._node(()).get("properties") or {}).keys() | {"apiVersion", "kind", "metadata"})
        props = self._node(names).get("properties")
        return frozenset(props) if isinstance(props, dict) else None

    def required(self, names: tuple[str, ...], key: str) -> bool:
        return False

    def key_defaults(self, names: tuple[str, ...]) -> Mapping[str, Any]:
        if names[:1] == ("metadata",):
            return self.meta.key_defaults(names[1:])
        kind, keys = self.list_type(names)
        props = self._node((*names, "[]")).get("properties") or {}
        return {k: props[k]["default"] for k in keys if "default" in (props.get(k) or {})} if kind == "map" else {}


# ---------------------------------------------------------------- path elements


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _elements(items: list[Any], names: tuple[str, ...], types: TypeInfo) -> list[str] | None:
    """The path element of each item of the list at ``names``; None when it is atomic (or its items
    cannot be told apart: a keyed item without a key or its default)."""
    kind, keys = types.list_type(names)
    if kind == "set":
        return [_value_element(item) for item in items]
    if kind != "map" or not keys:
        return None
    defaults = types.key_defaults(names)
    out: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            return None
        values: Obj = {}
        for key in keys:
            if key in item:
                values[key] = item[key]
            elif key in defaults:
                values[key] = defaults[key]
            else:
                return None
        out.append("k:" + _dumps(values))
    return out


def _value_element(value: Any) -> str:
    return "v:" + _dumps(value)


def _key_rank(elem: str) -> tuple[int, str]:
    """fieldpath.PathElement order: fields, then keys, then values, then indices."""
    return ({"f": 0, "k": 1, "v": 2, "i": 3}.get(elem[:1], 4), elem[2:])


def _iteration_key(path: Path) -> tuple[tuple[int, tuple[int, str]], ...]:
    """Set.Iterate's order: at each level the members, then the children, each in element order."""
    return tuple((0 if i == len(path) - 1 else 1, _key_rank(elem)) for i, elem in enumerate(path))


def _go_string(value: Any) -> str:
    """value.ToString: strings Go-quoted, numbers and booleans as Go prints them."""
    from gpucluster.sandbox.apiserver.selectors import go_quote

    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, list):
        return "[" + ",".join(_go_string(v) for v in value) + "]"
    if isinstance(value, dict):
        return "".join(f"{k}={_go_string(v)}" for k, v in value.items())
    return str(value)


def path_string(path: Path) -> str:
    """fieldpath.Path.String: ``.spec.containers[name="c"].ports[containerPort=80,protocol="TCP"]``."""
    out = ""
    for elem in path:
        kind, body = elem[:1], elem[2:]
        if kind == "f":
            out += "." + body
        elif kind == "k":
            out += "[" + ",".join(f"{k}={_go_string(v)}" for k, v in json.loads(body).items()) + "]"
        elif kind == "v":
            out += "[=" + _go_string(json.loads(body)) + "]"
        else:
            out += "[" + body + "]"
    return out


# ---------------------------------------------------------------- field sets


def _scoped(obj: Obj, subresource: str, has_status: bool) -> Iterable[tuple[str, Any]]:
    """The top-level fields an operation on ``subresource`` sees (the reset fields left out)."""
    for key, value in obj.items():
        if subresource == "status" and key != "status":
            continue
        if subresource != "status" and has_status and key == "status":
            continue
        yield key, value


def field_set(obj: Obj, types: TypeInfo, *, subresource: str = "", has_status: bool = False) -> FieldSet:
    """``ToFieldSet`` of an applied configuration, stripped of what nobody owns."""
    out: FieldSet = set()
    for key, value in _scoped(obj, subresource, has_status):
        if key in ("apiVersion", "kind"):
            continue
        if key == "metadata" and isinstance(value, dict):
            for mkey, mvalue in value.items():
                if mkey not in _UNTRACKED_META:
                    _to_set(mvalue, ("f:metadata", f"f:{mkey}"), ("metadata", mkey), types, out)
                    if mvalue is None or mvalue == {}:
                        out.add(("f:metadata", f"f:{mkey}"))
            continue
        _to_set(value, (f"f:{key}",), (key,), types, out)
        if value is None or value == {} or key not in (types.fields(()) or ()):
            out.add((f"f:{key}",))
    return out


def duplicate_entry(obj: Obj, types: TypeInfo) -> str | None:
    """Where an applied object repeats a list-map key or a set value, as structured-merge-diff's
    typed conversion refuses it: ``.spec.ports: duplicate entries for key [port=80,protocol="TCP"]``."""

    def walk(value: Any, path: Path, names: tuple[str, ...]) -> str | None:
        if isinstance(value, dict):
            if types.atomic_map(names):
                return None
            for key, child in value.items():
                found = walk(child, (*path, f"f:{key}"), (*names, key))
                if found:
                    return found
            return None
        if isinstance(value, list):
            elems = _elements(value, names, types)
            if elems is None:
                return None
            seen: set[str] = set()
            for elem in elems:
                if elem in seen:
                    return f"{path_string(path)}: duplicate entries for key {path_string((elem,))}"
                seen.add(elem)
            for elem, item in zip(elems, value, strict=True):
                found = walk(item, (*path, elem), (*names, "[]"))
                if found:
                    return found
        return None

    return walk(obj, (), ())


def flatten(obj: Obj, types: TypeInfo) -> FieldSet:
    """Every path ``obj`` sets (its ``ToFieldSet``)."""
    return field_set(obj, types)


def _to_set(value: Any, path: Path, names: tuple[str, ...], types: TypeInfo, out: FieldSet) -> None:
    if isinstance(value, dict):
        if types.atomic_map(names):
            out.add(path)
            return
        declared = types.fields(names) or frozenset()
        for key, child in value.items():
            child_path = (*path, f"f:{key}")
            _to_set(child, child_path, (*names, key), types, out)
            if child is None or child == {} or key not in declared:
                out.add(child_path)
        return
    if isinstance(value, list):
        elems = _elements(value, names, types)
        if elems is None:
            out.add(path)
            return
        counts: dict[str, int] = {}
        for elem in elems:
            counts[elem] = counts.get(elem, 0) + 1
        for elem, item in zip(elems, value, strict=True):
            item_path = (*path, elem)
            if counts[elem] == 1:
                _to_set(item, item_path, (*names, "[]"), types, out)
            out.add(item_path)
        return
    out.add(path)


@dataclass
class Comparison:
    added: FieldSet = field(default_factory=set)
    modified: FieldSet = field(default_factory=set)
    removed: FieldSet = field(default_factory=set)

    @property
    def changed(self) -> FieldSet:
        return self.added | self.modified


def _equal(a: Any, b: Any) -> bool:
    return a == b and (isinstance(a, bool) == isinstance(b, bool))


def compare(
    lhs: Obj | None, rhs: Obj, types: TypeInfo, *, subresource: str = "", has_status: bool = False
) -> Comparison:
    """SMD's ``Compare`` of two objects (``lhs`` None: the empty object of a create), in the scope
    of ``subresource``, without what nobody owns."""
    out = Comparison()
    left = dict(_scoped(lhs or {}, subresource, has_status))
    right = dict(_scoped(rhs, subresource, has_status))
    for side in (left, right):
        side.pop("apiVersion", None)
        side.pop("kind", None)
        if isinstance(side.get("metadata"), dict):
            side["metadata"] = {k: v for k, v in side["metadata"].items() if k not in _UNTRACKED_META}
    _compare_map(left, right, (), (), types, out, implicit_left=True, implicit_right=True)
    return out


def _compare(lhs: Any, rhs: Any, path: Path, names: tuple[str, ...], types: TypeInfo, out: Comparison) -> None:
    if lhs is not MISSING and rhs is not MISSING and (lhs is rhs or _equal(lhs, rhs)):
        return
    container = rhs if isinstance(rhs, (dict, list)) else lhs
    empty_lhs = lhs is MISSING or lhs is None or lhs == {} or lhs == []
    empty_rhs = rhs is MISSING or rhs is None or rhs == {} or rhs == []
    walk = not (empty_lhs and empty_rhs) and all(
        v is MISSING or v is None or isinstance(v, type(container)) for v in (lhs, rhs)
    )
    if walk and isinstance(container, dict) and not types.atomic_map(names):
        _compare_map(
            lhs if isinstance(lhs, dict) else None,
            rhs if isinstance(rhs, dict) else None,
            path, names, types, out,
            implicit_left=isinstance(lhs, dict), implicit_right=isinstance(rhs, dict),
        )  # fmt: skip
        _node_change(lhs, rhs, path, out)
        return
    if walk and isinstance(container, list):
        left = lhs if isinstance(lhs, list) else []
        right = rhs if isinstance(rhs, list) else []
        lelems, relems = _elements(left, names, types), _elements(right, names, types)
        if lelems is not None and relems is not None:
            _compare_items(left, lelems, right, relems, path, names, types, out)
            _node_change(lhs, rhs, path, out)
            return
    if lhs is MISSING:
        out.added.add(path)
    elif rhs is MISSING:
        out.removed.add(path)
    elif not _equal(lhs, rhs):
        out.modified.add(path)


def _node_change(lhs: Any, rhs: Any, path: Path, out: Comparison) -> None:
    if lhs is MISSING:
        out.added.add(path)
    elif rhs is MISSING:
        out.removed.add(path)


def _compare_map(
    lhs: Obj | None,
    rhs: Obj | None,
    path: Path,
    names: tuple[str, ...],
    types: TypeInfo,
    out: Comparison,
    *,
    implicit_left: bool,
    implicit_right: bool,
) -> None:
    left, right = lhs or {}, rhs or {}
    declared = types.fields(names)
    for key in {**left, **right}:
        lv, rv = left.get(key, MISSING), right.get(key, MISSING)
        child = (*names, key)
        if types.implicit_structs and declared is not None and key in declared:
            lv = _implicit(lv, child, names, key, types, implicit_left)
            rv = _implicit(rv, child, names, key, types, implicit_right)
            if lv is MISSING and rv is MISSING:
                continue
        _compare(lv, rv, (*path, f"f:{key}"), child, types, out)


def _implicit(
    value: Any, child: tuple[str, ...], names: tuple[str, ...], key: str, types: TypeInfo, parent: bool
) -> Any:
    """A field missing from a present struct as a typed object holds it: a struct field as an empty
    struct, a required field as null."""
    if value is not MISSING or not parent:
        return value
    if types.fields(child) is not None:
        return {}
    if types.required(names, key):
        return None
    return MISSING


def _compare_items(
    left: list[Any],
    lelems: list[str],
    right: list[Any],
    relems: list[str],
    path: Path,
    names: tuple[str, ...],
    types: TypeInfo,
    out: Comparison,
) -> None:
    lgroups: dict[str, list[Any]] = {}
    rgroups: dict[str, list[Any]] = {}
    for elem, item in zip(lelems, left, strict=True):
        lgroups.setdefault(elem, []).append(item)
    for elem, item in zip(relems, right, strict=True):
        rgroups.setdefault(elem, []).append(item)
    item_names = (*names, "[]")
    for elem in {**lgroups, **rgroups}:
        ls, rs = lgroups.get(elem, []), rgroups.get(elem, [])
        item_path = (*path, elem)
        if len(ls) <= 1 and len(rs) <= 1:
            _compare(ls[0] if ls else MISSING, rs[0] if rs else MISSING, item_path, item_names, types, out)
        elif len(ls) >= 2 and len(rs) >= 2:
            if ls != rs:
                out.modified.add(item_path)
        elif len(ls) >= 2:
            if rs:
                _compare(MISSING, rs[0], item_path, item_names, types, out)
            out.removed.add(item_path)
        else:
            if ls:
                _compare(ls[0], MISSING, item_path, item_names, types, out)
            out.added.add(item_path)


# ---------------------------------------------------------------- fieldsV1


def to_fields_v1(paths: Iterable[Path]) -> Obj:
    """A field set as fieldsV1, "." first and children in path-element order."""
    tree: dict[str, Any] = {}
    members: set[Path] = set()
    for path in paths:
        node = tree
        for elem in path:
            node = node.setdefault(elem, {})
        members.add(path)

    def emit(node: dict[str, Any], prefix: Path) -> Obj:
        out: Obj = {}
        if node and prefix in members:
            out["."] = {}
        for elem in sorted(node, key=_key_rank):
            out[elem] = emit(node[elem], (*prefix, elem))
        return out

    return emit(tree, ())


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
            elif isinstance(child, dict):
                walk(child, (*path, elem))
            else:
                raise ValueError(f"expected an object at {elem!r}")

    if not isinstance(tree, dict):
        raise ValueError("fieldsV1 must be an object")
    walk(tree, ())
    return out


# ---------------------------------------------------------------- object surgery


def _find_item(items: list[Any], elem: str, names: tuple[str, ...], types: TypeInfo | None) -> int | None:
    if types is not None:
        elems = _elements(items, names, types)
        if elems is not None:
            return elems.index(elem) if elem in elems else None
    kind, _, raw = elem.partition(":")
    want = json.loads(raw)
    for i, item in enumerate(items):
        if kind == "k" and isinstance(item, dict) and all(item.get(k) == v for k, v in want.items()):
            return i
        if kind == "v" and item == want:
            return i
    return None


def remove_path(obj: Obj, path: Path, types: TypeInfo | None = None) -> Path | None:
    """Delete the member at ``path`` from ``obj`` in place (no-op when absent). A list or map it
    leaves empty becomes null, as SMD's RemoveItems leaves it; returns its path then."""
    chain: list[tuple[Any, str, tuple[str, ...]]] = []  # (container, element, names of the container)
    parent: Any = obj
    names: tuple[str, ...] = ()
    for elem in path[:-1]:
        chain.append((parent, elem, names))
        if elem.startswith("f:"):
            if not isinstance(parent, dict) or elem[2:] not in parent:
                return None
            parent = parent[elem[2:]]
            names = (*names, elem[2:])
        else:
            if not isinstance(parent, list):
                return None
            i = _find_item(parent, elem, names, types)
            if i is None:
                return None
            parent = parent[i]
            names = (*names, "[]")
    last = path[-1]
    if last.startswith("f:"):
        if not isinstance(parent, dict) or last[2:] not in parent:
            return None
        parent.pop(last[2:])
    else:
        i = _find_item(parent, last, names, types) if isinstance(parent, list) else None
        if i is None:
            return None
        parent.pop(i)
    emptied = isinstance(parent, list) or (types is not None and types.fields(names) is None)
    if not parent and emptied and chain and isinstance(chain[-1][0], dict) and chain[-1][1].startswith("f:"):
        chain[-1][0][chain[-1][1][2:]] = None
        return path[:-1]
    return None


def _drop_null(obj: Obj, path: Path) -> None:
    """Remove the field at ``path`` if it is null (what a typed object, or a custom resource's
    pruning of nulls, does with an emptied list or map)."""
    parent: Any = obj
    for elem in path[:-1]:
        if not elem.startswith("f:") or not isinstance(parent, dict):
            return
        parent = parent.get(elem[2:])
    if isinstance(parent, dict) and path[-1].startswith("f:") and parent.get(path[-1][2:], MISSING) is None:
        del parent[path[-1][2:]]


def merge_applied(live: Any, applied: Any, names: tuple[str, ...], types: TypeInfo) -> Any:
    """``applied`` merged into ``live``: maps recursively, keyed lists by key, sets as a union."""
    if isinstance(applied, dict) and not types.atomic_map(names):
        out = dict(live) if isinstance(live, dict) else {}
        for key, value in applied.items():
            out[key] = merge_applied(out.get(key), value, (*names, key), types)
        return out
    if isinstance(applied, list) and isinstance(live, list):
        kind, _ = types.list_type(names)
        applied_elems, live_elems = _elements(applied, names, types), _elements(live, names, types)
        if kind == "map" and applied_elems is not None and live_elems is not None:
            result = list(live)
            elems = list(live_elems)
            for elem, item in zip(applied_elems, applied, strict=True):
                if elem in elems:
                    i = elems.index(elem)
                    result[i] = merge_applied(result[i], item, (*names, "[]"), types)
                else:
                    result.append(merge_applied(None, item, (*names, "[]"), types))
                    elems.append(elem)
            return result
        if kind == "set":
            return list(live) + [v for v in applied if v not in live]
    return copy.deepcopy(applied)


# ---------------------------------------------------------------- managers


ManagerKey = tuple[str, str, str, str]  # manager, operation, apiVersion (Update only), subresource


@dataclass
class Manager:
    """One managedFields entry, decoded."""

    manager: str
    operation: str
    api_version: str
    subresource: str
    time: str | None
    fields: FieldSet
    raw: Obj | None = field(default=None, compare=False, repr=False)
    """The entry it was decoded from, while neither its fields nor its time changed."""

    def take(self, paths: FieldSet) -> None:
        """Lose ``paths`` (another manager took them, or they are gone)."""
        if self.fields & paths:
            self.fields = self.fields - paths
            self.raw = None

    @property
    def key(self) -> ManagerKey:
        return (self.manager, self.operation, self.api_version if self.operation == "Update" else "", self.subresource)

    def identifier(self) -> str:
        """BuildManagerIdentifier: the entry's JSON without time and fields (apiVersion only for updates)."""
        out: Obj = {"manager": self.manager, "operation": self.operation}
        if self.operation == "Update" and self.api_version:
            out["apiVersion"] = self.api_version
        if self.subresource:
            out["subresource"] = self.subresource
        return json.dumps(out, separators=(",", ":"), ensure_ascii=False)

    def printed(self) -> str:
        """printManager: how a conflict names the manager."""
        from gpucluster.sandbox.apiserver.selectors import go_quote

        out = go_quote(self.manager)
        if self.subresource:
            out += f" with subresource {go_quote(self.subresource)}"
        if self.operation == "Update":
            out += f" using {self.api_version}"
        return out

    def entry(self) -> Obj:
        if self.raw is not None:
            return self.raw
        out: Obj = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version}
        if self.time is not None:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = to_fields_v1(self.fields)
        if self.subresource:
            out["subresource"] = self.subresource
        return out


Managers = dict[ManagerKey, Manager]


def decode_managers(entries: Any) -> Managers:
    """DecodeManagedFields; ValueError with its message for an entry it refuses."""
    out: Managers = {}
    for i, entry in enumerate(entries or []):
        if not isinstance(entry, dict):
            raise ValueError(f"managed fields entry {i} is not an object")
        operation = entry.get("operation")
        if operation not in ("Apply", "Update"):
            raise ValueError("operation must be `Apply` or `Update`")
        if not entry.get("apiVersion"):
            raise ValueError("apiVersion must not be empty")
        fields_type = entry.get("fieldsType") or ""
        if fields_type == "":
            raise ValueError(f"missing fieldsType in managed fields entry {i}")
        if fields_type != "FieldsV1":
            raise ValueError(f'invalid fieldsType "{fields_type}" in managed fields entry {i}')
        manager = Manager(
            str(entry.get("manager") or ""),
            str(operation),
            str(entry["apiVersion"]),
            str(entry.get("subresource") or ""),
            entry.get("time"),
            _decoded_fields(entry.get("fieldsV1") or {}),
            raw=entry,
        )
        out[manager.key] = manager
    return out


_DECODED: dict[int, tuple[Obj, frozenset[Path]]] = {}


def _decoded_fields(tree: Obj) -> FieldSet:
    """from_fields_v1 of a stored entry's fieldsV1, remembered (stored objects are never changed;
    the cache holds the tree, so its id is not reused while cached)."""
    cached = _DECODED.get(id(tree))
    if cached is not None and cached[0] is tree:
        return set(cached[1])
    paths = from_fields_v1(tree)
    if len(_DECODED) >= 8192:
        _DECODED.clear()
    _DECODED[id(tree)] = (tree, frozenset(paths))
    return paths


def _seconds(stamp: str | None) -> int:
    if not stamp:
        return 0
    try:
        return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return 0


def encode_managers(managers: Managers) -> list[Obj] | None:
    """encodeManagedFields: entries sorted by operation, time, manager, apiVersion, subresource;
    None when nobody manages anything."""
    if not managers:
        return None
    ordered = sorted(
        managers.values(),
        key=lambda m: (m.operation, _seconds(m.time), m.manager, m.api_version, m.subresource),
    )
    return [m.entry() for m in ordered]


def _is_reset(requested: Any) -> bool:
    """managedFields ``[]`` or ``[{}]`` in an update: forget every manager."""
    return isinstance(requested, list) and (requested == [] or requested == [{}])


def cap_update_managers(managers: Managers, limit: int = MAX_UPDATE_MANAGERS) -> None:
    """capManagersManager: the oldest update entries beyond ``limit`` merge into "ancient-changes"
    (one per apiVersion), which takes the time of the latest merged."""
    updaters = [m for m in managers.values() if m.operation == "Update"]
    if len(updaters) <= limit:
        return
    updaters.sort(key=lambda m: (_seconds(m.time), m.identifier()))
    first_of: dict[str, ManagerKey] = {}
    length = len(updaters)
    for m in updaters:
        if length <= limit:
            break
        bucket_key: ManagerKey = (ANCIENT_CHANGES, "Update", m.api_version, "")
        if m.api_version not in first_of:
            first_of[m.api_version] = m.key
            continue
        if bucket_key not in managers:
            first = managers.pop(first_of[m.api_version])
            managers[bucket_key] = Manager(ANCIENT_CHANGES, "Update", first.api_version, "", first.time, first.fields)
        bucket = managers[bucket_key]
        bucket.fields = bucket.fields | m.fields
        bucket.time, bucket.raw = m.time, None
        managers.pop(m.key, None)
        length -= 1


def _updated(
    base: Managers,
    live: Obj | None,
    new: Obj,
    *,
    manager: str,
    api_version: str,
    subresource: str,
    has_status: bool,
    types: TypeInfo,
    now: str,
) -> Managers:
    """The managers after ``manager`` updated ``live`` (None: created) to ``new``: it owns what it
    changed, the others lose that and everybody loses what was removed; update entries capped."""
    managers = {k: copy.copy(m) for k, m in base.items()}
    diff = compare(live, new, types, subresource=subresource, has_status=has_status)
    changed = diff.changed
    for m in managers.values():
        m.take(changed | diff.removed)
    for key in [k for k, m in managers.items() if not m.fields]:
        del managers[key]
    if changed:
        mine = Manager(manager or "unknown", "Update", api_version, subresource, now, set(changed))
        previous = managers.get(mine.key)
        if previous is not None:
            mine.fields |= previous.fields
        managers[mine.key] = mine
    cap_update_managers(managers)
    return managers


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
) -> list[Obj] | None:
    """managedFields after a non-apply write of ``new`` over ``old`` (None: a create).

    The managers to start from are the request's (``new``'s managedFields: ``[]`` or ``[{}]``
    forgets them all) unless it carries none or ones that do not decode, then ``old``'s; on a
    subresource always ``old``'s. An object that exists and has no managers is not tracked."""
    old_managers = _decode_or_empty((old or {}).get("metadata", {}).get("managedFields"))
    requested = (new.get("metadata") or {}).get("managedFields")
    if subresource:
        base = old_managers
    elif _is_reset(requested):
        base = {}
    else:
        try:
            base = decode_managers(requested)
        except ValueError:
            base = {}
        if not base:
            base = old_managers
    if not base and old is not None and (old.get("metadata") or {}).get("uid"):
        return None
    managers = _updated(
        base, old, new,
        manager=manager, api_version=api_version, subresource=subresource,
        has_status=has_status, types=types, now=now,
    )  # fmt: skip
    return encode_managers(managers)


def _decode_or_empty(entries: Any) -> Managers:
    try:
        return decode_managers(entries)
    except ValueError:
        return {}


def _conflict_error(conflicts: list[tuple[Manager, Path]]) -> ApiError:
    by_manager: dict[str, list[Path]] = {}
    printed: dict[str, str] = {}
    for m, path in conflicts:
        by_manager.setdefault(m.identifier(), []).append(path)
        printed[m.identifier()] = m.printed()
    ordered = [(ident, sorted(paths, key=_iteration_key)) for ident, paths in sorted(by_manager.items())]
    if len(conflicts) == 1:
        message = (
            f"Apply failed with 1 conflict: conflict with {printed[ordered[0][0]]}: {path_string(ordered[0][1][0])}"
        )
    else:
        lines: list[str] = []
        for ident, paths in ordered:
            lines.append(f"conflicts with {printed[ident]}:")
            lines.extend(f"- {path_string(p)}" for p in paths)
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {printed[ident]}", "field": path_string(p)}
        for ident, paths in ordered
        for p in paths
    ]
    return ApiError(409, "Conflict", message, details={"causes": causes})


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
) -> Obj:
    """The object after ``manager`` applies ``applied`` to ``live`` (None: create), managedFields included.

    An existing object without managers first gets a "before-first-apply" update entry owning what
    it holds. Raises a 409 listing the conflicting managers unless ``force``."""
    try:
        managers = decode_managers((live or {}).get("metadata", {}).get("managedFields"))
    except ValueError as exc:
        from gpucluster.sandbox.apiserver import errors

        raise errors.internal(f"failed to decode managed fields: {exc}") from None
    if not managers and live is not None:
        managers = _updated(
            {}, None, live,
            manager=BEFORE_FIRST_APPLY, api_version=api_version, subresource=subresource,
            has_status=has_status, types=types, now=now,
        )  # fmt: skip
    if subresource == "status":
        scoped_applied: Obj = {k: v for k, v in applied.items() if k in ("apiVersion", "kind", "status")}
    elif has_status:
        scoped_applied = {k: v for k, v in applied.items() if k != "status"}
    else:
        scoped_applied = applied
    base: Obj = copy.deepcopy(live) if live else {}
    merged = merge_applied(base, scoped_applied, (), types)
    applied_set = field_set(applied, types, subresource=subresource, has_status=has_status)
    mine_key: ManagerKey = (manager, "Apply", "", subresource)
    previous = managers.get(mine_key)
    last = previous.fields if previous is not None else set()
    # Fields this manager gave up and nobody else holds are removed.
    others: set[Path] = set()
    for key, m in managers.items():
        if key != mine_key:
            others |= m.fields
    # Shortest first: a list item given up as a whole goes before its fields are looked at, since
    # removing a key field (a container's name) first would leave the item unfindable.
    nulled: list[Path] = []
    for path in sorted(last - applied_set, key=len):
        if path in others or any(o[: len(path)] == path for o in others):
            continue
        emptied = remove_path(merged, path, types)
        if emptied is not None:
            nulled.append(emptied)
    diff = compare(live, merged, types, subresource=subresource, has_status=has_status)
    for path in nulled:
        _drop_null(merged, path)
    changed = diff.changed
    conflicts = [(m, path) for key, m in managers.items() if key != mine_key for path in m.fields & changed]
    if conflicts and not force:
        raise _conflict_error(conflicts)
    for key, m in managers.items():
        if key != mine_key:
            m.take(changed | diff.removed)
    unchanged = live is not None and merged == live
    stamp = (previous.time if previous is not None else None) if unchanged else now
    managers[mine_key] = Manager(manager, "Apply", api_version, subresource, stamp, applied_set)
    for key in [k for k, m in managers.items() if not m.fields]:
        del managers[key]
    out: Obj = merged
    encoded = encode_managers(managers)
    md = out.setdefault("metadata", {})
    if encoded:
        md["managedFields"] = encoded
    else:
        md.pop("managedFields", None)
    return out
