"""Server-side ``Table`` output (meta.k8s.io/v1) for ``kubectl get``, per kind and from CRD printer columns."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from typing import Any

from gpucluster import timestamps
from gpucluster.sandbox.apiserver.resources import ResourceType

Obj = dict[str, Any]
Column = tuple[str, str, str, int, Callable[[Obj], Any]]  # name, type, format, priority, cell


def parse_time(value: str) -> dt.datetime | None:
    try:
        return timestamps.parse(str(value))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``: 5s, 3m20s, 2d3h, 1y20d ..."""
    s = int(seconds)
    if s < 0:
        s = 0
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years = hours // 24 // 365
        days = (hours // 24) % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


def age(timestamp: Any, now: dt.datetime | None = None) -> str:
    when = parse_time(str(timestamp)) if timestamp else None
    if when is None:
        return "<unknown>"
    now = now or dt.datetime.now(dt.UTC)
    return human_duration((now - when).total_seconds())


def _g(obj: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(p)
    return obj


def _name(o: Obj) -> str:
    return str(_g(o, "metadata", "name") or "")


def _age(o: Obj) -> str:
    return age(_g(o, "metadata", "creationTimestamp"))


NAME: Column = ("Name", "string", "name", 0, _name)
AGE: Column = ("Age", "string", "", 0, _age)


def _pod_ready(o: Obj) -> str:
    statuses = _g(o, "status", "containerStatuses") or []
    total = len(_g(o, "spec", "containers") or [])
    ready = sum(1 for s in statuses if s.get("ready"))
    return f"{ready}/{total}"


def _pod_status(o: Obj) -> str:
    if _g(o, "metadata", "deletionTimestamp"):
        return "Terminating"
    reason = _g(o, "status", "reason")
    if reason:
        return str(reason)
    for s in _g(o, "status", "initContainerStatuses") or []:
        waiting = _g(s, "state", "waiting", "reason")
        if waiting:
            return f"Init:{waiting}"
    for s in _g(o, "status", "containerStatuses") or []:
        waiting = _g(s, "state", "waiting", "reason")
        if waiting:
            return str(waiting)
        terminated = _g(s, "state", "terminated", "reason")
        if terminated:
            return str(terminated)
    for c in _g(o, "status", "conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "SchedulingGated":
            return "SchedulingGated"
    return str(_g(o, "status", "phase") or "Pending")


def _pod_restarts(o: Obj) -> int:
    return sum(int(s.get("restartCount") or 0) for s in _g(o, "status", "containerStatuses") or [])


def _node_status(o: Obj) -> str:
    ready = "Unknown"
    for c in _g(o, "status", "conditions") or []:
        if c.get("type") == "Ready":
            ready = "Ready" if c.get("status") == "True" else "NotReady"
    if _g(o, "spec", "unschedulable"):
        ready += ",SchedulingDisabled"
    return ready


def _node_roles(o: Obj) -> str:
    roles = sorted(
        k.split("/", 1)[1] for k in (_g(o, "metadata", "labels") or {}) if k.startswith("node-role.kubernetes.io/")
    )
    return ",".join(r for r in roles if r) or "<none>"


def _svc_ports(o: Obj) -> str:
    out = []
    for p in _g(o, "spec", "ports") or []:
        port = f"{p.get('port')}"
        if p.get("nodePort"):
            port += f":{p['nodePort']}"
        out.append(f"{port}/{p.get('protocol', 'TCP')}")
    return ",".join(out) or "<none>"


def _selector(o: Obj, *path: str) -> str:
    sel = _g(o, *path) or {}
    return ",".join(f"{k}={v}" for k, v in sorted(sel.items())) or "<none>"


def _event_object(o: Obj) -> str:
    inv = o.get("involvedObject") or o.get("regarding") or {}
    return f"{str(inv.get('kind', '')).lower()}/{inv.get('name', '')}"


def _event_last_seen(o: Obj) -> str:
    when = (
        o.get("lastTimestamp")
        or _g(o, "series", "lastObservedTime")
        or o.get("eventTime")
        or o.get("firstTimestamp")
        or _g(o, "metadata", "creationTimestamp")
    )
    return age(when)


def _count(field: str) -> Callable[[Obj], int]:
    return lambda o: len(o.get(field) or {})


def _num(*path: str) -> Callable[[Obj], int]:
    return lambda o: int(_g(o, *path) or 0)


def _str(*path: str, default: str = "") -> Callable[[Obj], str]:
    return lambda o: str(_g(o, *path) if _g(o, *path) is not None else default)


def _claim_state(o: Obj) -> str:
    states = []
    if _g(o, "metadata", "deletionTimestamp"):
        states.append("deleted")
    if _g(o, "status", "allocation"):
        states.append("allocated")
        if _g(o, "status", "reservedFor"):
            states.append("reserved")
    elif not states:
        states.append("pending")
    return ",".join(states)


def _created_at(o: Obj) -> str:
    return str(_g(o, "metadata", "creationTimestamp") or "")


BUILTIN: dict[tuple[str, str], list[Column]] = {
    ("", "pods"): [
        NAME,
        ("Ready", "string", "", 0, _pod_ready),
        ("Status", "string", "", 0, _pod_status),
        ("Restarts", "string", "", 0, _pod_restarts),
        AGE,
        ("IP", "string", "", 1, _str("status", "podIP", default="<none>")),
        ("Node", "string", "", 1, _str("spec", "nodeName", default="<none>")),
        ("Nominated Node", "string", "", 1, _str("status", "nominatedNodeName", default="<none>")),
        ("Readiness Gates", "string", "", 1, lambda o: "<none>"),
    ],
    ("", "nodes"): [
        NAME,
        ("Status", "string", "", 0, _node_status),
        ("Roles", "string", "", 0, _node_roles),
        AGE,
        ("Version", "string", "", 0, _str("status", "nodeInfo", "kubeletVersion")),
        (
            "Internal-IP",
            "string",
            "",
            1,
            lambda o: next(
                (a["address"] for a in _g(o, "status", "addresses") or [] if a.get("type") == "InternalIP"), "<none>"
            ),
        ),
    ],
    ("", "namespaces"): [NAME, ("Status", "string", "", 0, _str("status", "phase")), AGE],
    ("", "services"): [
        NAME,
        ("Type", "string", "", 0, _str("spec", "type", default="ClusterIP")),
        ("Cluster-IP", "string", "", 0, _str("spec", "clusterIP", default="<none>")),
        ("External-IP", "string", "", 0, lambda o: ",".join(_g(o, "spec", "externalIPs") or []) or "<none>"),
        ("Port(s)", "string", "", 0, _svc_ports),
        AGE,
        ("Selector", "string", "", 1, lambda o: _selector(o, "spec", "selector")),
    ],
    ("", "serviceaccounts"): [NAME, ("Secrets", "integer", "", 0, lambda o: len(o.get("secrets") or [])), AGE],
    ("", "configmaps"): [
        NAME,
        ("Data", "integer", "", 0, lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})),
        AGE,
    ],
    ("", "secrets"): [
        NAME,
        ("Type", "string", "", 0, _str("type", default="Opaque")),
        ("Data", "integer", "", 0, _count("data")),
        AGE,
    ],
    ("", "events"): [
        ("Last Seen", "string", "", 0, _event_last_seen),
        ("Type", "string", "", 0, _str("type")),
        ("Reason", "string", "", 0, _str("reason")),
        ("Object", "string", "", 0, _event_object),
        ("Message", "string", "", 0, lambda o: str(o.get("message") or o.get("note") or "").strip()),
    ],
    ("events.k8s.io", "events"): [
        ("Last Seen", "string", "", 0, _event_last_seen),
        ("Type", "string", "", 0, _str("type")),
        ("Reason", "string", "", 0, _str("reason")),
        ("Object", "string", "", 0, _event_object),
        ("Message", "string", "", 0, lambda o: str(o.get("note") or "").strip()),
    ],
    ("apps", "daemonsets"): [
        NAME,
        ("Desired", "integer", "", 0, _num("status", "desiredNumberScheduled")),
        ("Current", "integer", "", 0, _num("status", "currentNumberScheduled")),
        ("Ready", "integer", "", 0, _num("status", "numberReady")),
        ("Up-to-date", "integer", "", 0, _num("status", "updatedNumberScheduled")),
        ("Available", "integer", "", 0, _num("status", "numberAvailable")),
        ("Node Selector", "string", "", 0, lambda o: _selector(o, "spec", "template", "spec", "nodeSelector")),
        AGE,
    ],
    ("apps", "deployments"): [
        NAME,
        (
            "Ready",
            "string",
            "",
            0,
            lambda o: f"{int(_g(o, 'status', 'readyReplicas') or 0)}/{int(_g(o, 'spec', 'replicas') or 0)}",
        ),
        ("Up-to-date", "integer", "", 0, _num("status", "updatedReplicas")),
        ("Available", "integer", "", 0, _num("status", "availableReplicas")),
        AGE,
    ],
    ("apps", "replicasets"): [
        NAME,
        ("Desired", "integer", "", 0, _num("spec", "replicas")),
        ("Current", "integer", "", 0, _num("status", "replicas")),
        ("Ready", "integer", "", 0, _num("status", "readyReplicas")),
        AGE,
    ],
    ("coordination.k8s.io", "leases"): [NAME, ("Holder", "string", "", 0, _str("spec", "holderIdentity")), AGE],
    ("apiextensions.k8s.io", "customresourcedefinitions"): [NAME, ("Created At", "date", "", 0, _created_at)],
    ("rbac.authorization.k8s.io", "clusterroles"): [NAME, ("Created At", "date", "", 0, _created_at)],
    ("rbac.authorization.k8s.io", "roles"): [NAME, ("Created At", "date", "", 0, _created_at)],
    ("rbac.authorization.k8s.io", "clusterrolebindings"): [
        NAME,
        ("Role", "string", "", 0, lambda o: f"{_g(o, 'roleRef', 'kind')}/{_g(o, 'roleRef', 'name')}"),
        AGE,
    ],
    ("rbac.authorization.k8s.io", "rolebindings"): [
        NAME,
        ("Role", "string", "", 0, lambda o: f"{_g(o, 'roleRef', 'kind')}/{_g(o, 'roleRef', 'name')}"),
        AGE,
    ],
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): [
        NAME,
        ("Webhooks", "integer", "", 0, lambda o: len(o.get("webhooks") or [])),
        AGE,
    ],
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): [
        NAME,
        ("Webhooks", "integer", "", 0, lambda o: len(o.get("webhooks") or [])),
        AGE,
    ],
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"): [
        NAME,
        ("Validations", "integer", "", 0, lambda o: len(_g(o, "spec", "validations") or [])),
        ("ParamKind", "string", "", 0, lambda o: str(_g(o, "spec", "paramKind", "kind") or "<unset>")),
        AGE,
    ],
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"): [
        NAME,
        ("PolicyName", "string", "", 0, _str("spec", "policyName")),
        ("ParamRef", "string", "", 0, lambda o: str(_g(o, "spec", "paramRef", "name") or "<unset>")),
        AGE,
    ],
    ("resource.k8s.io", "resourceslices"): [
        NAME,
        ("Node", "string", "", 0, _str("spec", "nodeName", default="<none>")),
        ("Driver", "string", "", 0, _str("spec", "driver")),
        ("Pool", "string", "", 0, _str("spec", "pool", "name")),
        AGE,
    ],
    ("resource.k8s.io", "resourceclaims"): [NAME, ("State", "string", "", 0, _claim_state), AGE],
    ("resource.k8s.io", "resourceclaimtemplates"): [NAME, AGE],
    ("resource.k8s.io", "deviceclasses"): [NAME, AGE],
}

_DESCRIPTIONS = {
    "Name": "Name must be unique within a namespace. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    "Age": "CreationTimestamp is a timestamp representing the server time when this object was created.",
}


# ---------------------------------------------------------------- JSONPath (printer columns)


_SEGMENT = re.compile(
    r"\.([A-Za-z0-9_\-/]+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.\-]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]|\['([^']+)'\]"
)


def jsonpath(obj: Any, expr: str) -> list[Any]:
    """The values at a CRD printer column's jsonPath (``.a.b``, ``[0]``, ``[*]``, ``[?(@.k=="v")]``)."""
    expr = expr.strip()
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1]
    if expr.startswith("$"):
        expr = expr[1:]
    current = [obj]
    pos = 0
    while pos < len(expr):
        m = _SEGMENT.match(expr, pos)
        if not m:
            return []
        pos = m.end()
        nxt: list[Any] = []
        for value in current:
            if m.group(1) is not None or m.group(5) is not None:
                key = m.group(1) if m.group(1) is not None else m.group(5)
                if isinstance(value, dict) and key in value:
                    nxt.append(value[key])
            elif m.group(2) is not None:
                if isinstance(value, list):
                    if m.group(2) == "*":
                        nxt.extend(value)
                    elif int(m.group(2)) < len(value):
                        nxt.append(value[int(m.group(2))])
            elif isinstance(value, list):
                field, want = m.group(3), m.group(4)
                for item in value:
                    got: Any = item
                    for part in field.split("."):
                        got = got.get(part) if isinstance(got, dict) else None
                    if got is not None and str(got) == want:
                        nxt.append(item)
        current = nxt
    return current


def _printer_cell(column: Obj) -> Callable[[Obj], Any]:
    path = column.get("jsonPath", "")
    kind = column.get("type", "string")

    def cell(o: Obj) -> Any:
        values = jsonpath(o, path)
        if not values:
            return None
        value = values[0] if len(values) == 1 else values
        if kind == "date":
            return age(value)
        if isinstance(value, dict | list):
            return json.dumps(value, separators=(",", ":"))
        if kind == "integer" and isinstance(value, int | float):
            return int(value)
        if kind == "string":
            return str(value) if not isinstance(value, bool) else ("true" if value else "false")
        return value

    return cell


def columns_for(rt: ResourceType) -> list[Column]:
    if rt.custom:
        if not rt.printer_columns:
            return [NAME, AGE]
        out: list[Column] = [NAME]
        for col in rt.printer_columns:
            kind = str(col.get("type", "string"))
            out.append(
                (str(col["name"]), kind, str(col.get("format", "")), int(col.get("priority", 0)), _printer_cell(col))
            )
        return out
    return BUILTIN.get((rt.group, rt.plural), [NAME, AGE])


def table(rt: ResourceType, objects: list[Obj], *, include_object: str, list_meta: Obj, headers: bool = True) -> Obj:
    """A meta.k8s.io/v1 Table for ``objects``; ``include_object`` is None, Metadata or Object."""
    cols = columns_for(rt)
    definitions = [
        {
            "name": name,
            "type": kind,
            "format": fmt,
            "description": _DESCRIPTIONS.get(name, name),
            "priority": priority,
        }
        for name, kind, fmt, priority, _ in cols
    ]
    rows = []
    for obj in objects:
        row: Obj = {"cells": [cell(obj) for *_, cell in cols]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            }
        rows.append(row)
    out: Obj = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta}
    out["columnDefinitions"] = definitions if headers else []
    out["rows"] = rows
    return out
