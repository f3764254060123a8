"""A Swagger 2.0 document as gnostic's ``openapi.v2.Document`` protobuf.

client-go's discovery client asks for ``/openapi/v2`` only as
``application/com.github.proto-openapi.spec.v2@v1.0+protobuf`` (and on 404/406 falls back to
the long-gone ``/swagger-2.0.0.pb-v1``, never to JSON), so kubectl's client-side validation and
Helm's manifest validation need this encoding. Field numbers are those of gnostic's
``openapiv2/OpenAPIv2.proto``; vendor extensions, defaults, enums and examples travel as
``Any{yaml}`` text (JSON is valid YAML), as gnostic's compiler emits them.
Only what the sandbox's documents contain is encoded; unknown keys are skipped.
"""

from __future__ import annotations

import json
import struct
from typing import Any

Obj = dict[str, Any]

MEDIA_TYPES = (
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
)


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes(number: int, data: bytes) -> bytes:
    return _key(number, 2) + _varint(len(data)) + data


def _string(number: int, value: Any) -> bytes:
    text = value if isinstance(value, str) else str(value)
    return _bytes(number, text.encode()) if text else b""


def _bool(number: int, value: Any) -> bytes:
    return _key(number, 0) + b"\x01" if value else b""


def _int(number: int, value: Any) -> bytes:
    return _key(number, 0) + _varint(int(value)) if value else b""


def _double(number: int, value: Any) -> bytes:
    return _key(number, 1) + struct.pack("<d", float(value)) if value else b""


def _any(value: Any) -> bytes:
    """gnostic ``Any``: field 2 is the YAML text of the value."""
    return _string(2, json.dumps(value, separators=(",", ":")))


def _named_any(number: int, name: str, value: Any) -> bytes:
    return _bytes(number, _string(1, name) + _bytes(2, _any(value)))


def _extensions(number: int, obj: Obj) -> bytes:
    return b"".join(_named_any(number, k, v) for k, v in obj.items() if k.startswith("x-"))


def schema(s: Obj) -> bytes:
    out = bytearray()
    out += _string(1, s.get("$ref", ""))
    out += _string(2, s.get("format", ""))
    out += _string(3, s.get("title", ""))
    out += _string(4, s.get("description", ""))
    if "default" in s:
        out += _bytes(5, _any(s["default"]))
    out += _double(6, s.get("multipleOf"))
    out += _double(7, s.get("maximum"))
    out += _bool(8, s.get("exclusiveMaximum"))
    out += _double(9, s.get("minimum"))
    out += _bool(10, s.get("exclusiveMinimum"))
    out += _int(11, s.get("maxLength"))
    out += _int(12, s.get("minLength"))
    out += _string(13, s.get("pattern", ""))
    out += _int(14, s.get("maxItems"))
    out += _int(15, s.get("minItems"))
    out += _bool(16, s.get("uniqueItems"))
    out += _int(17, s.get("maxProperties"))
    out += _int(18, s.get("minProperties"))
    for r in s.get("required") or []:
        out += _string(19, r)
    for e in s.get("enum") or []:
        out += _bytes(20, _any(e))
    extra = s.get("additionalProperties")
    if isinstance(extra, dict):
        out += _bytes(21, _bytes(1, schema(extra)))
    elif isinstance(extra, bool):
        out += _bytes(21, _key(2, 0) + (b"\x01" if extra else b"\x00"))
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        out += _bytes(22, b"".join(_string(1, t) for t in types))
    items = s.get("items")
    if isinstance(items, dict):
        out += _bytes(23, _bytes(1, schema(items)))
    elif isinstance(items, list):
        out += _bytes(23, b"".join(_bytes(1, schema(i)) for i in items))
    for sub in s.get("allOf") or []:
        out += _bytes(24, schema(sub))
    props = s.get("properties")
    if isinstance(props, dict):
        out += _bytes(25, b"".join(_bytes(1, _string(1, k) + _bytes(2, schema(v))) for k, v in props.items()))
    out += _bool(27, s.get("readOnly"))
    if "example" in s:
        out += _bytes(30, _any(s["example"]))
    out += _extensions(31, s)
    return bytes(out)


def _parameter(p: Obj) -> bytes:
    """A ``ParametersItem`` holding a body or a query/path parameter."""
    if "$ref" in p:
        return _bytes(2, _string(1, p["$ref"]))
    if p.get("in") == "body":
        body = (
            _string(1, p.get("description", ""))
            + _string(2, p.get("name", ""))
            + _string(3, "body")
            + _bool(4, p.get("required"))
            + _bytes(5, schema(p.get("schema") or {}))
        )
        return _bytes(1, _bytes(1, body))
    if p.get("in") == "path":
        sub = (
            _bool(1, p.get("required"))
            + _string(2, "path")
            + _string(3, p.get("description", ""))
            + _string(4, p.get("name", ""))
            + _string(5, p.get("type", ""))
            + _bool(19, p.get("uniqueItems"))
        )
        return _bytes(1, _bytes(2, _bytes(4, sub)))
    sub = (
        _bool(1, p.get("required"))
        + _string(2, p.get("in", "query"))
        + _string(3, p.get("description", ""))
        + _string(4, p.get("name", ""))
        + _string(6, p.get("type", ""))
        + _bool(20, p.get("uniqueItems"))
    )
    return _bytes(1, _bytes(2, _bytes(3, sub)))


def _operation(op: Obj) -> bytes:
    out = bytearray()
    for t in op.get("tags") or []:
        out += _string(1, t)
    out += _string(3, op.get("description", ""))
    out += _string(5, op.get("operationId", ""))
    for t in op.get("produces") or []:
        out += _string(6, t)
    for t in op.get("consumes") or []:
        out += _string(7, t)
    for p in op.get("parameters") or []:
        out += _bytes(8, _parameter(p))
    responses = bytearray()
    for code, resp in (op.get("responses") or {}).items():
        body = _string(1, resp.get("description", ""))
        if "schema" in resp:
            body += _bytes(2, _bytes(1, schema(resp["schema"])))
        responses += _bytes(1, _string(1, code) + _bytes(2, _bytes(1, body)))
    out += _bytes(9, bytes(responses))
    for t in op.get("schemes") or []:
        out += _string(10, t)
    out += _extensions(13, op)
    return bytes(out)


_METHODS = {"get": 2, "put": 3, "post": 4, "delete": 5, "options": 6, "head": 7, "patch": 8}


def _path_item(item: Obj) -> bytes:
    out = bytearray()
    for method, number in _METHODS.items():
        if method in item:
            out += _bytes(number, _operation(item[method]))
    for p in item.get("parameters") or []:
        out += _bytes(9, _parameter(p))
    out += _extensions(10, item)
    return bytes(out)


def encode_document(doc: Obj) -> bytes:
    """The ``openapi.v2.Document`` encoding of a Swagger 2.0 document (a dict)."""
    out = bytearray()
    out += _string(1, doc.get("swagger", "2.0"))
    info = doc.get("info") or {}
    out += _bytes(2, _string(1, info.get("title", "")) + _string(2, info.get("version", "")))
    paths = b"".join(_bytes(2, _string(1, k) + _bytes(2, _path_item(v))) for k, v in (doc.get("paths") or {}).items())
    out += _bytes(8, paths)
    definitions = b"".join(
        _bytes(1, _string(1, k) + _bytes(2, schema(v))) for k, v in (doc.get("definitions") or {}).items()
    )
    out += _bytes(9, definitions)
    for requirement in doc.get("security") or []:
        entries = b"".join(
            _bytes(1, _string(1, k) + _bytes(2, b"".join(_string(1, s) for s in v))) for k, v in requirement.items()
        )
        out += _bytes(12, entries)
    security = doc.get("securityDefinitions") or {}
    if security:
        items = bytearray()
        for name, d in security.items():
            api_key = (
                _string(1, d.get("type", ""))
                + _string(2, d.get("name", ""))
                + _string(3, d.get("in", ""))
                + _string(4, d.get("description", ""))
            )
            items += _bytes(1, _string(1, name) + _bytes(2, _bytes(2, api_key)))
        out += _bytes(13, bytes(items))
    return bytes(out)
