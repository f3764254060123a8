"""Node selection shared by the simulated controllers: nodeSelector, required node affinity,
taints and tolerations, unschedulable nodes, extended resources (pure functions, plain dicts).

These follow kube-scheduler's NodeUnschedulable, TaintToleration, NodeAffinity and
NodeResourcesFit filters closely enough for workload status and scheduling in the sandbox:
CPU, memory and pod-count accounting are not modelled, extended resources are compared against
``status.allocatable`` without subtracting what running pods use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Obj = dict[str, Any]

# What kube-scheduler accounts as native resources (everything else is an extended resource).
NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")
NATIVE_PREFIXES = ("hugepages-", "requests.", "limits.")

# Tolerations the DaemonSet controller adds to every daemon pod (pkg/controller/daemon/util).
DAEMONSET_TOLERATIONS: tuple[Obj, ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)

UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"


def node_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether a Node change can change where pods fit: labels, spec (taints, unschedulable),
    allocatable, uid (a new incarnation)."""
    if old is None:
        return True
    return (
        labels_of(old) != labels_of(new)
        or (old.get("spec") or {}) != (new.get("spec") or {})
        or (old.get("status") or {}).get("allocatable") != (new.get("status") or {}).get("allocatable")
        or (old.get("metadata") or {}).get("uid") != (new.get("metadata") or {}).get("uid")
    )


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def _expression_matches(expr: Mapping[str, Any], values: Mapping[str, str]) -> bool:
    key, op = str(expr.get("key") or ""), expr.get("operator")
    wanted = [str(v) for v in expr.get("values") or []]
    present = key in values
    if op == "In":
        return present and values[key] in wanted
    if op == "NotIn":
        return not present or values[key] not in wanted
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and wanted:
        try:
            have, limit = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return have > limit if op == "Gt" else have < limit
    return False


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches nothing
    labels = labels_of(node)
    name = {"metadata.name": str((node.get("metadata") or {}).get("name") or "")}
    return all(_expression_matches(e, labels) for e in exprs) and all(_expression_matches(f, name) for f in fields)


def node_selector_terms_match(selector: Mapping[str, Any] | None, node: Mapping[str, Any]) -> bool:
    """A core/v1 NodeSelector: the terms are ORed; None matches every node."""
    if selector is None:
        return True
    return any(_term_matches(t, node) for t in selector.get("nodeSelectorTerms") or [])


def matches_node_affinity(spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """spec.nodeSelector and requiredDuringSchedulingIgnoredDuringExecution (NodeAffinity filter)."""
    labels = labels_of(node)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    return node_selector_terms_match(required, node)


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return str(toleration.get("value") or "") == str(taint.get("value") or "")


def untolerated_taint(
    tolerations: Iterable[Mapping[str, Any]],
    node: Mapping[str, Any],
    effects: tuple[str, ...] = ("NoSchedule", "NoExecute"),
) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint of ``node`` no toleration tolerates (None: all tolerated)."""
    tols = list(tolerations)
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in effects:
            continue
        if isinstance(taint, dict) and not any(_tolerates(t, taint) for t in tols):
            return taint
    return None


def taint_reason(taint: Mapping[str, Any]) -> str:
    return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"


def is_extended(resource: str) -> bool:
    return resource not in NATIVE_RESOURCES and not resource.startswith(NATIVE_PREFIXES) and "/" in resource


def extended_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Extended resources the pod asks for: max over init containers, sum over containers (integers)."""
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for name, value in _container_requests(c).items():
            total[name] = total.get(name, 0) + value
    for c in spec.get("initContainers") or []:
        for name, value in _container_requests(c).items():
            total[name] = max(total.get(name, 0), value)
    return total


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    out: dict[str, int] = {}
    for name, value in merged.items():
        if is_extended(str(name)):
            try:
                out[str(name)] = int(str(value))
            except ValueError:
                out[str(name)] = 1
    return out


def insufficient(spec: Mapping[str, Any], node: Mapping[str, Any]) -> list[str]:
    """Extended resources the node's allocatable cannot hold (NodeResourcesFit's ``Insufficient <name>``)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    out = []
    for name, wanted in sorted(extended_requests(spec).items()):
        try:
            have = int(str(allocatable.get(name, "0")))
        except ValueError:
            have = 0
        if wanted > have:
            out.append(name)
    return out


def filter_node(spec: Mapping[str, Any], node: Mapping[str, Any], *, daemon: bool = False) -> str | None:
    """The first reason ``node`` cannot run a pod with ``spec`` (None: it can), in the order of
    kube-scheduler's filters. ``daemon`` adds the DaemonSet controller's tolerations."""
    tolerations = list(spec.get("tolerations") or [])
    if daemon:
        tolerations += DAEMONSET_TOLERATIONS
    node_spec = node.get("spec") or {}
    if node_spec.get("unschedulable") and not any(
        _tolerates(t, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}) for t in tolerations
    ):
        return UNSCHEDULABLE
    taint = untolerated_taint(tolerations, node)
    if taint is not None:
        return taint_reason(taint)
    if not matches_node_affinity(spec, node):
        return AFFINITY
    missing = insufficient(spec, node)
    if missing:
        return f"Insufficient {missing[0]}"
    return None
