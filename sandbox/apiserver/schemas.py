"""The Kubernetes 1.34 schemas of the built-in kinds, and the unknown-field check kube-apiserver's decoder makes.

The definitions are the upstream OpenAPI definitions as kubernetes-validate 1.34 publishes them
(JSON Schema 2020-12: ``$defs``, ``"type": [T, "null"]``, ``oneOf`` for IntOrString/Quantity),
shipped gzipped beside this module so the sandbox needs neither kubernetes-validate (a 100 MB dev
dependency) nor network at run time. Regenerate with ``python -m gpucluster.sandbox.apiserver.schemas``
after upgrading kubernetes-validate; a test checks the copy still matches the installed package.

``unknown_fields`` reproduces what the strict JSON decoder of kube-apiserver reports (``unknown
field "spec.containers[0].imagee"``): keys that no property of the Go type declares. Such fields
are dropped from the stored object whatever the ``fieldValidation`` level, as decoding into Go
structs drops them.
"""

from __future__ import annotations

import functools
import gzip
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

DEFINITIONS_FILE = Path(__file__).with_name("k8s-1.34-definitions.json.gz")
_PACKAGE_FILE = "kubernetes-json-schema/v1.34.0-local/_definitions.json"


@functools.cache
def definitions() -> dict[str, Obj]:
    """Definition name (``io.k8s.api.core.v1.Pod``) -> 2020-12 schema, loaded once (about 10 ms)."""
    loaded: dict[str, Obj] = json.loads(gzip.decompress(DEFINITIONS_FILE.read_bytes()))
    return loaded


@functools.cache
def by_gvk() -> dict[tuple[str, str, str], str]:
    """(group, version, kind) -> definition name, from each definition's x-kubernetes-group-version-kind."""
    out: dict[tuple[str, str, str], str] = {}
    for name, schema in definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            key = (gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", ""))
            # meta types (DeleteOptions, Status, ...) are listed under every group; keep the first.
            out.setdefault(key, name)
    return out


def definition_for(group: str, version: str, kind: str) -> str | None:
    return by_gvk().get((group, version, kind))


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def refs(schema: Any) -> Iterator[str]:
    """Names of the definitions one schema refers to directly."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                yield ref_name(value)
            else:
                yield from refs(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from refs(item)


def closure(names: list[str], defs: dict[str, Obj] | None = None) -> list[str]:
    """The named definitions and every definition they reach, in discovery order."""
    defs = definitions() if defs is None else defs
    seen: dict[str, None] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen[name] = None
        todo.extend(refs(defs[name]))
    return list(seen)


def _types(schema: Obj) -> set[str]:
    t = schema.get("type")
    if isinstance(t, list):
        return {str(x) for x in t}
    return {str(t)} if t else set()


def _walk(value: Any, schema: Obj, path: str, found: list[str], defs: dict[str, Obj], prune: bool) -> None:
    while "$ref" in schema:
        schema = defs.get(ref_name(schema["$ref"]), {})
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if isinstance(props, dict):
            for key in list(value):
                sub = props.get(key)
                where = f"{path}.{key}" if path else key
                if sub is None:
                    found.append(where)
                    if prune:
                        del value[key]
                    continue
                _walk(value[key], sub, where, found, defs, prune)
        elif isinstance(extra, dict):
            for key, item in value.items():
                _walk(item, extra, f"{path}.{key}" if path else key, found, defs, prune)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict) and "array" in _types(schema):
        for i, item in enumerate(value):
            _walk(item, schema["items"], f"{path}[{i}]", found, defs, prune)


def unknown_fields(group: str, version: str, kind: str, obj: Obj, *, prune: bool = False) -> list[str]:
    """Paths of the fields of ``obj`` its kind's schema does not declare (removed when ``prune``)."""
    name = definition_for(group, version, kind)
    if name is None:
        return []
    defs = definitions()
    found: list[str] = []
    _walk(obj, defs[name], "", found, defs, prune)
    return found


INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_INT32 = (-(2**31), 2**31 - 1)


def int32_overflows(group: str, version: str, kind: str, obj: Obj) -> list[tuple[str, Obj | list[Any], Any, bool]]:
    """Integers of ``obj`` that an int32 field (or an IntOrString) cannot hold: each as (the Go
    struct field as the JSON decoder names it, ``Struct.json.path``; the containing dict or list;
    its key there; whether the field is an IntOrString), in document order."""
    name = definition_for(group, version, kind)
    if name is None:
        return []
    defs = definitions()
    found: list[tuple[str, Obj | list[Any], Any, bool]] = []

    def walk(value: Any, schema: Obj, struct: str, path: str) -> None:
        while "$ref" in schema:
            struct = ref_name(schema["$ref"])
            schema = defs.get(struct, {})
        if isinstance(value, dict):
            props = schema.get("properties")
            for key, child in value.items():
                sub = props.get(key) if isinstance(props, dict) else schema.get("additionalProperties")
                if isinstance(sub, dict):
                    check(value, key, child, sub, struct, f"{path}.{key}" if path else key)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                check(value, i, item, schema["items"], struct, path)

    def check(holder: Obj | list[Any], key: Any, value: Any, schema: Obj, struct: str, path: str) -> None:
        is_int = isinstance(value, int) and not isinstance(value, bool)
        target = ref_name(schema["$ref"]) if "$ref" in schema else ""
        if is_int and not _INT32[0] <= value <= _INT32[1]:
            if target == INT_OR_STRING:
                found.append((f"{struct.rsplit('.', 1)[-1]}.{path}", holder, key, True))
                return
            if schema.get("format") == "int32":
                found.append((f"{struct.rsplit('.', 1)[-1]}.{path}", holder, key, False))
                return
        walk(value, schema, struct, path)

    walk(obj, defs[name], name, "")
    return found


def check_int32_fields(group: str, version: str, kind: str, obj: Obj) -> None:
    """What decoding a create or update body does with an integer an int32 field cannot hold: 400."""
    found = int32_overflows(group, version, kind, obj)
    if found:
        from gpucluster.sandbox.apiserver import errors

        field, holder, key, _ = found[0]
        raise errors.bad_request(
            f'{kind} in version "{version}" cannot be handled as a {kind}: json: cannot unmarshal number '
            f"{holder[key]} into Go struct field {field} of type int32"
        )


def check_unknown_fields(
    group: str, version: str, kind: str, obj: Obj, field_validation: str, warnings: list[str] | None
) -> None:
    """Drop undeclared fields of a built-in object, as decoding does; 400 them under Strict, warn under Warn."""
    found = unknown_fields(group, version, kind, obj, prune=True)
    if not found:
        return
    if field_validation == "Strict":
        from gpucluster.sandbox.apiserver import errors

        unknown = ", ".join(f'unknown field "{p}"' for p in found)
        raise errors.bad_request(
            f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding error: {unknown}'
        )
    if field_validation == "Warn" and warnings is not None:
        warnings.extend(f'unknown field "{p}"' for p in found)


def duplicate_fields(raw: bytes) -> list[str]:
    """Paths of keys a JSON body repeats within one object (Go's strict decoder reports them)."""
    flagged: dict[int, list[str]] = {}

    def hook(pairs: list[tuple[str, Any]]) -> Obj:
        obj = dict(pairs)
        if len(obj) != len(pairs):
            seen: set[str] = set()
            dups: list[str] = []
            for key, _ in pairs:
                if key in seen and key not in dups:
                    dups.append(key)
                seen.add(key)
            flagged[id(obj)] = dups
        return obj

    try:
        root = json.loads(raw, object_pairs_hook=hook)
    except (ValueError, UnicodeDecodeError):
        return []
    found: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            found.extend(f"{path}.{k}" if path else k for k in flagged.get(id(value), []))
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else key)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")

    if flagged:
        walk(root, "")
    return found


def check_duplicate_fields(kind: str, version: str, raw: bytes, field_validation: str, warnings: list[str]) -> None:
    """400 (Strict) or warnings (Warn) for repeated keys of a JSON request body."""
    if field_validation == "Ignore":
        return
    found = duplicate_fields(raw)
    if not found:
        return
    if field_validation == "Strict":
        from gpucluster.sandbox.apiserver import errors

        dups = ", ".join(f'duplicate field "{p}"' for p in found)
        raise errors.bad_request(
            f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding error: {dups}'
        )
    warnings.extend(f'duplicate field "{p}"' for p in found)


def refresh() -> int:
    """Copy the definitions of the installed kubernetes-validate package beside this module."""
    import kubernetes_validate

    src = Path(kubernetes_validate.__file__).parent / _PACKAGE_FILE
    raw = json.dumps(json.loads(src.read_text())["$defs"], separators=(",", ":"), sort_keys=True).encode()
    with gzip.GzipFile(DEFINITIONS_FILE, "wb", compresslevel=9, mtime=0) as f:
        f.write(raw)
    print(f"wrote {DEFINITIONS_FILE} ({DEFINITIONS_FILE.stat().st_size} bytes) from {src}")
    return 0


if __name__ == "__main__":
    sys.exit(refresh())
