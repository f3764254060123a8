"""Our allocator against upstream's on one case: the answers side by side, their differences,
and a minimiser that shrinks a disagreeing case to the parts that matter."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from gpucluster.dra.allocator import explain
from gpucluster.dra.model import AllocatorInputError, parse_quantity
from tests.oracle.client import Oracle
from tests.oracle.generate import Case

Obj = dict[str, Any]
Pick = tuple[str, str, str, str, str, bool, tuple[tuple[str, Any], ...]]


def _capacity(consumed: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, parse_quantity(str(v), "consumedCapacity")) for k, v in (consumed or {}).items()))


def ours(case: Case) -> Obj:
    """Our answer in the oracle's shape: per node satisfiable, error and the picks."""
    try:
        result = explain(
            copy.deepcopy(case.claims),
            copy.deepcopy(case.cluster()),
            kubernetes_version=case.version,
            feature_gates=dict(case.gates),
            deadline_ms=None,
        )
    except AllocatorInputError as exc:
        return {"inputError": str(exc)}
    nodes = []
    for node in result.nodes:
        picks = sorted(
            (a.claim, a.request, a.driver, a.pool, a.device, a.shared, _capacity(a.consumed_capacity))
            for a in node.allocation
        )
        nodes.append({"node": node.node, "satisfiable": node.satisfiable, "error": node.error, "picks": picks})
    return {"nodes": nodes, "errors": list(result.errors)}


def _outcome(raw: Obj) -> Obj:
    picks = sorted(
        (
            claim["claim"],
            d["request"],
            d["driver"],
            d["pool"],
            d["device"],
            bool(d.get("shared")),
            _capacity(d.get("consumedCapacity")),
        )
        for claim in raw.get("claims") or []
        for d in claim["devices"]
    )
    return {
        "satisfiable": raw.get("satisfiable", False),
        "error": raw.get("error", ""),
        "panic": raw.get("panic", ""),
        "picks": picks,
    }


def theirs(answer: Obj) -> Obj:
    """Upstream's answer per node: every distinct outcome of its runs (one from 1.36, where the
    pool order is fixed; several before, where it follows Go's map order)."""
    nodes = []
    for node in answer.get("nodes") or []:
        outcomes = [_outcome(node)] + [_outcome(o) for o in node.get("others") or []]
        nodes.append({"node": node["node"], "outcomes": outcomes})
    return {"nodes": nodes}


def panicked(upstream: Obj) -> str:
    """Upstream's allocator panicked on some node (a kube-scheduler crash): nothing to compare."""
    return next((o["panic"] for n in upstream["nodes"] for o in n["outcomes"] if o["panic"]), "")


def _agrees(mine: Obj, outcome: Obj) -> bool:
    if bool(mine["error"]) != bool(outcome["error"]):
        return False
    if outcome["error"]:
        return True
    return bool(mine["satisfiable"] == outcome["satisfiable"] and mine["picks"] == outcome["picks"])


def _difference(name: str, mine: Obj, outcome: Obj, alternatives: int) -> str:
    more = f" (or {alternatives - 1} other outcomes of upstream's pool orders)" if alternatives > 1 else ""
    if bool(mine["error"]) != bool(outcome["error"]):
        return f"{name}: error ours={mine['error']!r} upstream={outcome['error']!r}{more}"
    if mine["satisfiable"] != outcome["satisfiable"]:
        picks = outcome["picks"] if outcome["satisfiable"] else mine["picks"]
        side = "upstream" if outcome["satisfiable"] else "our"
        return f"{name}: satisfiable ours={mine['satisfiable']} upstream={outcome['satisfiable']}{more} ({side} picks {picks})"
    return f"{name}: devices ours={mine['picks']} upstream={outcome['picks']}{more}"


def differences(case: Case, mine: Obj, upstream: Obj) -> list[str]:
    """Empty when the two agree on every node: fits or not, fatal error or not, the same devices
    (with shares and consumed capacity) for the same claims and requests. Before 1.36 our
    answer must be one of upstream's (its pool order is random there)."""
    if "inputError" in mine:
        return [f"we refuse the input: {mine['inputError']}"]
    if panicked(upstream):
        return []
    if mine["errors"] and not mine["nodes"]:
        return [f"we stop before the nodes: {mine['errors']}; upstream: {upstream['nodes']}"]
    out = []
    by_node = {n["node"]: n for n in mine["nodes"]}
    for node in upstream["nodes"]:
        name = node["node"]
        our_node = by_node.get(name)
        if our_node is None:
            out.append(f"{name}: we have no answer")
        elif not any(_agrees(our_node, o) for o in node["outcomes"]):
            out.append(_difference(name, our_node, node["outcomes"][0], len(node["outcomes"])))
    return out


def check(case: Case, oracle: Oracle) -> list[str]:
    return differences(case, ours(case), theirs(oracle.ask(case.oracle_request())))


# ------------------------------------------------------------------ minimising


def _reductions(data: Obj) -> list[Callable[[Obj], None]]:
    """Every one-step simplification of a case, most drastic first."""
    steps: list[Callable[[Obj], None]] = []

    def remove(path: list[Any], index: int) -> Callable[[Obj], None]:
        def apply(d: Obj) -> None:
            target: Any = d
            for key in path:
                target = target[key]
            del target[index]

        return apply

    def drop(path: list[Any], key: Any) -> Callable[[Obj], None]:
        def apply(d: Obj) -> None:
            target: Any = d
            for k in path:
                target = target[k]
            target.pop(key, None)

        return apply

    for top in ("nodes", "allocated", "claims", "slices"):
        for i in range(len(data[top])):
            if top in ("nodes", "claims") and len(data[top]) == 1:
                continue  # a case needs a node and a claim
            steps.append(remove([top], i))
    for i, s in enumerate(data["slices"]):
        for j in range(len(s["spec"].get("devices", []))):
            steps.append(remove(["slices", i, "spec", "devices"], j))
    for i, c in enumerate(data["claims"]):
        devices = c["spec"]["devices"]
        for j in range(len(devices.get("constraints", []))):
            steps.append(remove(["claims", i, "spec", "devices", "constraints"], j))
        for j, r in enumerate(devices["requests"]):
            body = r.get("exactly")
            if body:
                for key in ("selectors", "tolerations", "capacity", "adminAccess"):
                    if key in body:
                        steps.append(drop(["claims", i, "spec", "devices", "requests", j, "exactly"], key))
            for k in range(len(r.get("firstAvailable", []))):
                steps.append(remove(["claims", i, "spec", "devices", "requests", j, "firstAvailable"], k))
    for i, s in enumerate(data["slices"]):
        for j, dev in enumerate(s["spec"].get("devices", [])):
            for key in ("taints", "bindingConditions", "consumesCounters", "capacity", "bindsToNode"):
                if key in dev:
                    steps.append(drop(["slices", i, "spec", "devices", j], key))
            for attr in list(dev.get("attributes", {})):
                steps.append(drop(["slices", i, "spec", "devices", j, "attributes"], attr))
    return steps


def minimise(case: Case, oracle: Oracle, budget: int = 400) -> Case:
    """Greedy delta debugging: apply each simplification that keeps a disagreement (where both
    sides still accept the input and upstream can run it)."""
    data = case.to_json()
    tries = 0
    changed = True
    while changed and tries < budget:
        changed = False
        for step in _reductions(data):
            tries += 1
            candidate = copy.deepcopy(data)
            try:
                step(candidate)
            except (IndexError, KeyError):
                continue
            smaller = Case.from_json(candidate)
            try:
                found = check(smaller, oracle)
            except Exception:
                continue
            if found and not found[0].startswith("we refuse the input"):
                data, changed = candidate, True
                break
            if tries >= budget:
                break
    return Case.from_json(data)


def describe(case: Case, found: list[str]) -> str:
    return (
        f"seed {case.seed} at {case.version} (features {', '.join(case.features)}):\n  "
        + "\n  ".join(found)
        + "\n"
        + json.dumps(case.to_json(), indent=1, sort_keys=True)
    )
