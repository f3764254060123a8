"""Node selection: nodeSelector, required node affinity, taints and tolerations, unschedulable
nodes, extended resources (pure functions, plain dicts). Shared by the controller (which nodes a
DaemonSet must cover) and the sandbox's simulated DaemonSet controller, scheduler and kubelet.

These follow kube-scheduler's NodeUnschedulable, TaintToleration, NodeAffinity and
NodeResourcesFit filters closely enough for workload status and scheduling in the sandbox:
CPU, memory and pod-count accounting are not modelled, extended resources are compared against
``status.allocatable`` without subtracting what running pods use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpucluster.nodeselector import requirement_matches

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
# kube-scheduler's words for the nodes a PreFilter result (node names) left out, and for terms
# whose metadata.name requirements exclude each other.
NOT_IN_PREFILTER = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
AFFINITY_CONFLICT = "pod affinity terms conflict"
NODE_NAME_FIELD = "metadata.name"


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
    wanted = [str(v) for v in expr.get("values") or []]
    return requirement_matches(str(expr.get("key") or ""), str(expr.get("operator")), wanted, values)


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


def required_node_names(spec: Mapping[str, Any]) -> frozenset[str] | None:
    """The NodeAffinity PreFilter: the node names required node affinity restricts the pod to
    through ``matchFields`` ``metadata.name In [...]`` (intersected within a term, united over the
    terms), or None when some term (or no term) leaves every node possible. An empty set means
    the terms conflict."""
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    terms = (affinity or {}).get("nodeSelectorTerms") or []
    if not terms:
        return None
    names: set[str] = set()
    for term in terms:
        found: set[str] | None = None
        for req in term.get("matchFields") or []:
            if req.get("key") == NODE_NAME_FIELD and req.get("operator") == "In":
                values = {str(v) for v in req.get("values") or []}
                found = values if found is None else found & values
        if found is None:
            return None  # this term does not pin the pod: every node may match
        names |= found
    return frozenset(names)


def target_node(pod: Mapping[str, Any]) -> str | None:
    """The node a daemon pod is for: ``spec.nodeName``, else the ``metadata.name In [node]``
    requirement of its required node affinity (the DaemonSet controller's GetTargetNodeName)."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    for term in (affinity or {}).get("nodeSelectorTerms") or []:
        for req in term.get("matchFields") or []:
            if req.get("key") == NODE_NAME_FIELD and req.get("operator") == "In":
                values = req.get("values") or []
                return str(values[0]) if len(values) == 1 else None
    return None


def pin_to_node(spec: Mapping[str, Any], node: str) -> Obj:
    """A copy of the pod spec whose required node affinity is replaced by ``metadata.name In
    [node]`` (ReplaceDaemonSetPodNodeNameNodeAffinity: the whole required selector is replaced,
    preferred terms and pod (anti-)affinity stay). Shallow: only the changed path is new."""
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}]}]}
    affinity = dict(spec.get("affinity") or {})
    affinity["nodeAffinity"] = {
        **(affinity.get("nodeAffinity") or {}),
        "requiredDuringSchedulingIgnoredDuringExecution": selector,
    }
    return {**spec, "affinity": affinity}


def with_daemon_tolerations(spec: Mapping[str, Any]) -> Obj:
    """A copy of the pod spec with the DaemonSet controller's tolerations added (an identical
    toleration is not repeated; network-unavailable only for host-network pods)."""
    tolerations = list(spec.get("tolerations") or [])
    wanted = list(DAEMONSET_TOLERATIONS)
    if spec.get("hostNetwork"):
        wanted.append({"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"})
    for tol in wanted:
        same = [
            i
            for i, t in enumerate(tolerations)
            if t.get("key") == tol["key"] and t.get("effect") == tol["effect"] and t.get("operator") == tol["operator"]
        ]
        if same:
            tolerations[same[0]] = dict(tol)
        else:
            tolerations.append(dict(tol))
    return {**spec, "tolerations": tolerations}


def daemon_should_run(spec: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[bool, bool]:
    """(should run, should continue running) of a daemon pod with template ``spec`` on ``node``,
    as the DaemonSet controller's NodeShouldRunDaemonPod decides: a template ``nodeName`` must
    name the node, nodeSelector and required node affinity must match (else neither); an
    untolerated NoSchedule/NoExecute taint means no new pod, and an untolerated NoExecute taint
    also evicts the running one. The DaemonSet controller's default tolerations count."""
    name = str((node.get("metadata") or {}).get("name") or "")
    if spec.get("nodeName") and spec.get("nodeName") != name:
        return False, False
    if not matches_node_affinity(spec, node):
        return False, False
    tolerations = [*(spec.get("tolerations") or []), *DAEMONSET_TOLERATIONS]
    if untolerated_taint(tolerations, node) is not None:
        return False, untolerated_taint(tolerations, node, ("NoExecute",)) is None
    return True, True


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Condition Ready=True (podutil.IsPodReady). minReadySeconds are not modelled: ready is available."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
