"""Just enough of Kubernetes' protobuf encoding to read what kubectl's generators send.

``kubectl create configmap|secret|namespace|serviceaccount`` post protobuf bodies
(``application/vnd.kubernetes.protobuf``) through the typed client, and Helm deletes (its
release Secrets, hook objects) with a protobuf ``DeleteOptions``. This decodes the ``k8s\\x00``
envelope (runtime.Unknown) and those few kinds into JSON-shaped dicts; any other kind is a 415
(kube-apiserver decodes protobuf for every built-in kind, never for custom resources).
Responses are always JSON (clients send ``Accept: application/vnd.kubernetes.protobuf,application/json``).
"""

from __future__ import annotations

import base64
from typing import Any

from gpucluster import timestamps
from gpucluster.sandbox.apiserver.errors import ApiError

Obj = dict[str, Any]
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# field number -> (json name, type); types: string, bytes, int64, bool, time, map_ss, map_sb,
# strings (repeated string), or a nested schema name (optionally prefixed with "*" for repeated).
SCHEMAS: dict[str, dict[int, tuple[str, str]]] = {
    "TypeMeta": {1: ("apiVersion", "string"), 2: ("kind", "string")},
    "Unknown": {
        1: ("typeMeta", "TypeMeta"),
        2: ("raw", "raw"),
        3: ("contentEncoding", "string"),
        4: ("contentType", "string"),
    },
    "ObjectMeta": {
        1: ("name", "string"),
        2: ("generateName", "string"),
        3: ("namespace", "string"),
        5: ("uid", "string"),
        6: ("resourceVersion", "string"),
        7: ("generation", "int64"),
        8: ("creationTimestamp", "time"),
        11: ("labels", "map_ss"),
        12: ("annotations", "map_ss"),
        13: ("ownerReferences", "*OwnerReference"),
        14: ("finalizers", "strings"),
    },
    "OwnerReference": {
        1: ("kind", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
        5: ("apiVersion", "string"),
        6: ("controller", "bool"),
        7: ("blockOwnerDeletion", "bool"),
    },
    "ObjectReference": {
        1: ("kind", "string"),
        2: ("namespace", "string"),
        3: ("name", "string"),
        4: ("uid", "string"),
        5: ("apiVersion", "string"),
    },
    "LocalObjectReference": {1: ("name", "string")},
    "ConfigMap": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "map_ss"),
        3: ("binaryData", "map_sb"),
        4: ("immutable", "bool"),
    },
    "Secret": {
        1: ("metadata", "ObjectMeta"),
        2: ("data", "map_sb"),
        3: ("type", "string"),
        4: ("stringData", "map_ss"),
        5: ("immutable", "bool"),
    },
    "Namespace": {1: ("metadata", "ObjectMeta"), 2: ("spec", "NamespaceSpec")},
    "NamespaceSpec": {1: ("finalizers", "strings")},
    "ServiceAccount": {
        1: ("metadata", "ObjectMeta"),
        2: ("secrets", "*ObjectReference"),
        3: ("imagePullSecrets", "*LocalObjectReference"),
        4: ("automountServiceAccountToken", "bool"),
    },
    "Time": {1: ("seconds", "int64"), 2: ("nanos", "int64")},
    # meta/v1 options bodies: pointer fields ("?" types) keep their zero values (gracePeriodSeconds: 0
    # means "now"), as Go's generated unmarshaller sets the pointer whenever the field is on the wire.
    "DeleteOptions": {
        1: ("gracePeriodSeconds", "?int64"),
        2: ("preconditions", "Preconditions"),
        3: ("orphanDependents", "?bool"),
        4: ("propagationPolicy", "string"),
        5: ("dryRun", "strings"),
        6: ("ignoreStoreReadErrorWithClusterBreakingPotential", "?bool"),
    },
    "Preconditions": {1: ("uid", "string"), 2: ("resourceVersion", "string")},
}
KINDS = {("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "Namespace"), ("v1", "ServiceAccount")}
# Option kinds are registered in every group-version (and as meta.k8s.io/v1): the envelope names
# whichever the client's REST client uses.
OPTION_KINDS = {"DeleteOptions"}


def _unsupported(why: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the sandbox API server decodes protobuf only for ConfigMap, Secret, Namespace and ServiceAccount ({why}); send JSON or YAML, e.g. kubectl create -f",
    )


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise _unsupported("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise _unsupported(f"wire type {wire}")
        out.append((number, wire, value))
    return out


def _map_entry(raw: bytes) -> tuple[str, bytes]:
    key, value = "", b""
    for number, _, v in _fields(raw):
        if number == 1:
            key = bytes(v).decode()
        elif number == 2:
            value = bytes(v)
    return key, value


def _message(raw: bytes, schema: str) -> Obj:
    fields = SCHEMAS[schema]
    out: Obj = {}
    keep: set[str] = set()
    for number, _, value in _fields(raw):
        if number not in fields:
            continue
        name, kind = fields[number]
        if kind.startswith("?"):
            kind = kind[1:]
            keep.add(name)
        if kind == "string":
            out[name] = bytes(value).decode()
        elif kind == "raw":
            out[name] = bytes(value)
        elif kind == "int64":
            out[name] = int(value) - (1 << 64) if int(value) >= 1 << 63 else int(value)
        elif kind == "bool":
            out[name] = bool(value)
        elif kind == "time":
            t = _message(bytes(value), "Time")
            out[name] = timestamps.from_epoch(int(t.get("seconds", 0)))
        elif kind == "map_ss":
            k, v = _map_entry(bytes(value))
            out.setdefault(name, {})[k] = v.decode()
        elif kind == "map_sb":
            k, v = _map_entry(bytes(value))
            out.setdefault(name, {})[k] = base64.b64encode(v).decode()
        elif kind == "strings":
            out.setdefault(name, []).append(bytes(value).decode())
        elif kind.startswith("*"):
            out.setdefault(name, []).append(_message(bytes(value), kind[1:]))
        else:
            out[name] = _message(bytes(value), kind)
    # Go writes zero values of non-pointer fields; JSON omits them (omitempty)
    return {
        k: v
        for k, v in out.items()
        if k in keep or v not in ("", 0, False, "1970-01-01T00:00:00Z") or isinstance(v, dict | list)
    }


def decode(body: bytes) -> Obj:
    """A protobuf-encoded object as a JSON-shaped dict (415 for kinds it does not know)."""
    if not body.startswith(MAGIC):
        raise _unsupported("no k8s protobuf envelope")
    unknown = _message(body[len(MAGIC) :], "Unknown")
    type_meta = unknown.get("typeMeta") or {}
    api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
    if (api_version, kind) not in KINDS and kind not in OPTION_KINDS:
        raise _unsupported(f"got {api_version} {kind}")
    obj = _message(unknown.get("raw", b""), kind)
    return {"apiVersion": api_version, "kind": kind, **obj}
