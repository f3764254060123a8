"""Label and field selectors, with the grammar and errors of apimachinery's ``labels.Parse``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox.apiserver.errors import ApiError, bad_request

Obj = dict[str, Any]


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op == "=":
            return present and labels[self.key] == self.values[0]
        if self.op == "!=":
            return not present or labels[self.key] != self.values[0]
        if self.op == "in":
            return present and labels[self.key] in self.values
        if self.op == "notin":
            return not present or labels[self.key] not in self.values
        if self.op in ("gt", "lt"):
            if not present:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if self.op == "gt" else have < want
        raise AssertionError(self.op)


Selector = tuple[Requirement, ...]

_TOKEN = re.compile(r"\s*(!=|==|=|!|\(|\)|,|>|<|[^\s!=,()<>]+)")
_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m:
            raise bad_request(f"unable to parse requirement: {text!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def parse_labels(text: str) -> Selector:
    """Parse a label selector string: ``a=b,c!=d,e in (f,g),h notin (i),j,!k,l>1``."""
    toks = _tokens(text)
    reqs: list[Requirement] = []
    i = 0

    def fail(why: str) -> ApiError:
        return bad_request(f"unable to parse requirement: {why}")

    while i < len(toks):
        negate = False
        if toks[i] == "!":
            negate = True
            i += 1
        if i >= len(toks):
            raise fail("found '', expected: identifier")
        key = toks[i]
        if not _KEY.match(key) or len(key) > 317:
            raise fail(f"invalid label key {key!r}")
        i += 1
        if negate:
            reqs.append(Requirement(key, "!"))
        elif i >= len(toks) or toks[i] == ",":
            reqs.append(Requirement(key, "exists"))
        else:
            op = toks[i]
            i += 1
            if op in ("=", "==", "!=", ">", "<"):
                value = ""
                if i < len(toks) and toks[i] not in (",",):
                    value = toks[i]
                    i += 1
                if not _VALUE.match(value) or len(value) > 63:
                    raise fail(f"invalid label value: {value!r}")
                name = {"==": "=", ">": "gt", "<": "lt"}.get(op, op)
                reqs.append(Requirement(key, name, (value,)))
            elif op in ("in", "notin"):
                if i >= len(toks) or toks[i] != "(":
                    raise fail(f"found {toks[i] if i < len(toks) else ''!r}, expected: '('")
                i += 1
                values: list[str] = []
                while i < len(toks) and toks[i] != ")":
                    if toks[i] != ",":
                        values.append(toks[i])
                    i += 1
                if i >= len(toks):
                    raise fail("found '', expected: ')'")
                i += 1
                reqs.append(Requirement(key, op, tuple(sorted(set(values)))))
            else:
                raise fail(f"found {op!r}, expected: in, notin, =, ==, !=, gt, lt")
        if i < len(toks):
            if toks[i] != ",":
                raise fail(f"found {toks[i]!r}, expected: ','")
            i += 1
    return tuple(reqs)


def label_selector_from_object(selector: Obj | None) -> Selector | None:
    """A metav1.LabelSelector (matchLabels/matchExpressions); None selects nothing, {} selects everything."""
    if selector is None:
        return None
    reqs = [Requirement(k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        reqs.append(Requirement(expr["key"], ops[expr["operator"]], tuple(expr.get("values") or ())))
    return tuple(reqs)


def matches_labels(selector: Selector, obj: Obj) -> bool:
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in selector)


# ---------------------------------------------------------------- fields


FieldGetter = Callable[[Obj], str]


def _path(*parts: str) -> FieldGetter:
    def get(obj: Obj) -> str:
        cur: Any = obj
        for p in parts:
            if not isinstance(cur, dict):
                return ""
            cur = cur.get(p)
        if cur is None:
            return ""
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return str(cur)

    return get


COMMON_FIELDS: dict[str, FieldGetter] = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}

# Extra fields kube-apiserver supports per kind (GetAttrs / field label conversion funcs).
KIND_FIELDS: dict[tuple[str, str], dict[str, FieldGetter]] = {
    ("", "Pod"): {
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": lambda o: "true" if (o.get("spec") or {}).get("hostNetwork") else "false",
        "status.phase": _path("status", "phase"),
        "status.podIP": _path("status", "podIP"),
        "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    },
    ("", "Node"): {"spec.unschedulable": lambda o: "true" if (o.get("spec") or {}).get("unschedulable") else "false"},
    ("", "Namespace"): {"status.phase": _path("status", "phase")},
    ("", "Secret"): {"type": _path("type")},
    ("", "Event"): {
        **{
            f"involvedObject.{f}": _path("involvedObject", f)
            for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
        },
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": lambda o: str((o.get("source") or {}).get("component") or o.get("reportingComponent") or ""),
        "type": _path("type"),
    },
    ("events.k8s.io", "Event"): {
        **{
            f"regarding.{f}": _path("regarding", f)
            for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
        },
        "reason": _path("reason"),
        "type": _path("type"),
        "reportingController": _path("reportingController"),
    },
    ("resource.k8s.io", "ResourceSlice"): {
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.driver": _path("spec", "driver"),
    },
}


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    op: str  # "=" or "!="
    value: str
    getter: FieldGetter


FieldSelector = tuple[FieldRequirement, ...]


def _unescape(value: str) -> str:
    return value.replace("\\,", ",").replace("\\=", "=").replace("\\\\", "\\")


def parse_fields(text: str, group: str, kind: str, *, custom: bool = False) -> FieldSelector:
    """Parse ``a=b,c!=d``; unsupported fields are a 400 like upstream's ``field label not supported``."""
    if not text.strip():
        return ()
    supported = dict(COMMON_FIELDS)
    supported.update(KIND_FIELDS.get((group, kind), {}))
    out: list[FieldRequirement] = []
    for part in re.split(r"(?<!\\),", text):
        part = part.strip()
        if not part:
            continue
        m = re.match(r"^([^=!]+)(!=|==|=)(.*)$", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        name, op, value = m.group(1).strip(), m.group(2), _unescape(m.group(3))
        if name not in supported:
            if custom:
                raise bad_request(f'"{name}" is not a known field selector: only "metadata.name", "metadata.namespace"')
            raise bad_request(f"field label not supported: {name}")
        out.append(FieldRequirement(name, "!=" if op == "!=" else "=", value, supported[name]))
    return tuple(out)


def matches_fields(selector: FieldSelector, obj: Obj) -> bool:
    for req in selector:
        have = req.getter(obj)
        if (have == req.value) != (req.op == "="):
            return False
    return True


def single_name(selector: FieldSelector) -> str | None:
    """The name a selector pins with ``metadata.name=X``, for a fast path."""
    for req in selector:
        if req.field == "metadata.name" and req.op == "=":
            return req.value
    return None
