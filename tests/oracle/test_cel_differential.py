"""``gpucluster match``'s CEL selectors against Kubernetes' own DRA CEL environment (k8s.io/dynamic-resource-allocation/cel
on cel-go, run by the oracle) on random expressions and devices, for every supported version.

Per expression: both compile or both refuse it (a compile error, or an estimated cost over
CELSelectorExpressionMaxCost, which the API server refuses); where both compile, the same worst
case cost estimate; and per device the same verdict, or both a runtime error.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

from gpucluster.cli.match import _each_row, _programs
from gpucluster.dra.model import SUPPORTED_VERSIONS
from gpucluster.errors import InputError
from tests.oracle.cel_generate import generate
from tests.oracle.client import Oracle

CASES = int(os.environ.get("GPUCLUSTER_ORACLE_CASES", "5000"))
FIRST_SEED = int(os.environ.get("GPUCLUSTER_ORACLE_SEED", "0"))


def ours(case: dict[str, Any]) -> dict[str, Any]:
    """What ``gpucluster match`` answers: its own compile and per-device evaluation."""
    gates = case["gates"]
    lists = bool(gates["DRAListTypeAttributes"])
    try:
        [program] = _programs(
            [case["expression"]], consumable_capacity=bool(gates["DRAConsumableCapacity"]), list_type_attributes=lists
        )
    except InputError as exc:
        return {"compiled": False, "why": str(exc)}
    one = {"spec": {"driver": case["driver"], "pool": {"name": "p"}, "devices": [case["device"]]}}
    [row] = _each_row([one], [program], lists)
    outcome = {"match": True, "nomatch": False}.get(row["outcome"], "error")
    return {"compiled": True, "cost": int(program.max_cost), "outcome": outcome, "why": row["message"]}


def theirs(answer: dict[str, Any]) -> dict[str, Any]:
    if answer.get("compileError"):
        return {"compiled": False, "why": answer["compileError"]}
    cost = int(answer["cost"])
    if cost > int(answer["costLimit"]):
        return {"compiled": False, "why": f"estimated cost {cost} over the limit"}
    if answer.get("runtimeError"):
        return {"compiled": True, "cost": cost, "outcome": "error", "why": answer["runtimeError"]}
    return {"compiled": True, "cost": cost, "outcome": bool(answer["matches"])}


def difference(mine: dict[str, Any], upstream: dict[str, Any]) -> str:
    if mine["compiled"] != upstream["compiled"]:
        return f"compiles: ours={mine['compiled']} ({mine.get('why', '')}) upstream={upstream['compiled']} ({upstream.get('why', '')})"
    if not mine["compiled"]:
        return ""
    if mine["cost"] != upstream["cost"]:
        return f"cost estimate: ours={mine['cost']} upstream={upstream['cost']}"
    if mine["outcome"] != upstream["outcome"]:
        return f"outcome: ours={mine['outcome']} ({mine.get('why', '')}) upstream={upstream['outcome']} ({upstream.get('why', '')})"
    return ""


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_cel_agrees_with_upstream(version: str, oracles: dict[str, Oracle]) -> None:
    oracle = oracles[version]
    failing = []
    outcomes: Counter[str] = Counter()
    for seed in range(FIRST_SEED, FIRST_SEED + CASES):
        case = generate(seed, version)
        answer = oracle.ask({"kind": "cel", **{k: case[k] for k in ("expression", "driver", "device", "gates")}})
        upstream = theirs(answer)
        outcomes[str(upstream.get("outcome", "refused"))] += 1
        found = difference(ours(case), upstream)
        if found:
            failing.append((case, found))
    # Every kind of answer is reached, or agreement would mean little (a small run need not).
    if CASES >= 500:
        assert min(outcomes[k] for k in ("True", "False", "error", "refused")) > CASES // 50, outcomes
    if failing:
        shown = "\n".join(
            f"seed {c['seed']}: {c['expression']}\n  device {c['device']}\n  gates {c['gates']}\n  {f}"
            for c, f in failing[:8]
        )
        pytest.fail(f"{len(failing)} of {CASES} CEL cases disagree with upstream at {version}:\n{shown}")
