"""DRAListTypeAttributes in the allocator: set semantics of matchAttribute / distinctAttribute,
held against a brute-force search over combinations, and what explanations say."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest

from gpucluster.dra import gates
from gpucluster.dra.allocator import explain
from tests.test_allocator_upstream import CLASS_A, DRIVER_A, NODE1, POOL1, REGION1, claim, klass, node, request, rslice

ON = {gates.LIST_TYPE_ATTRIBUTES: True}
NO_SELECTORS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS_A}, "spec": {}}
Obj = dict[str, Any]


def _cluster(values: list[Obj | None]) -> list[Obj]:
    devs = [{"name": f"d{i}", **({"attributes": {"a": v}} if v is not None else {})} for i, v in enumerate(values)]
    return [klass(CLASS_A, DRIVER_A), rslice("s", NODE1, POOL1, DRIVER_A, *devs), node(NODE1, REGION1)]


def _claim(kind: str, counts: list[int]) -> Obj:
    reqs = [request(f"r{i}", CLASS_A, n) for i, n in enumerate(counts)]
    return claim("c", *reqs, constraints=[{kind: f"{DRIVER_A}/a"}])


def _set(v: Obj | None) -> tuple[str, frozenset[Any]] | None:
    if v is None:
        return None
    for key, kind in (("ints", "int"), ("strings", "string")):
        if v.get(key):
            return (kind, frozenset(v[key]))
    for kind in ("int", "string"):
        if kind in v:
            return (kind, frozenset([v[kind]]))
    return None


def _ok(kind: str, chosen: list[int], sets: list[tuple[str, frozenset[Any]] | None]) -> bool:
    found = [sets[i] for i in chosen]
    if any(s is None for s in found):
        return False
    if kind == "matchAttribute":
        return len({s[0] for s in found if s}) == 1 and bool(frozenset.intersection(*(s[1] for s in found if s)))
    return all(a[0] != b[0] or not a[1] & b[1] for a, b in itertools.combinations([s for s in found if s], 2))


def _brute(kind: str, counts: list[int], values: list[Obj | None]) -> list[tuple[str, str]] | None:
    """The first allocation in upstream's order: request after request, each a combination in
    device order of the devices the earlier requests left."""
    sets = [_set(v) for v in values]

    def search(ri: int, used: list[int], out: list[tuple[str, int]]) -> list[tuple[str, int]] | None:
        if ri == len(counts):
            return out if _ok(kind, used, sets) else None
        free = [i for i in range(len(values)) if i not in used]
        for combo in itertools.combinations(free, counts[ri]):
            if not _ok(kind, [*used, *combo], sets):
                continue
            found = search(ri + 1, [*used, *combo], [*out, *((f"r{ri}", i) for i in combo)])
            if found is not None:
                return found
        return None

    found = search(0, [], [])
    return None if found is None else sorted((r, f"d{i}") for r, i in found)


def _value(rng: random.Random) -> Obj | None:
    roll = rng.random()
    if roll < 0.1:
        return None
    if roll < 0.35:
        return {"int": rng.randrange(3)}
    if roll < 0.45:
        return {"string": rng.choice("xy")}
    if roll < 0.55:
        return {"strings": rng.sample("xyz", rng.randrange(1, 3))}
    return {"ints": rng.sample(range(4), rng.randrange(1, 4))}


@pytest.mark.parametrize("seed", range(150))
def test_set_semantics_agree_with_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    values = [_value(rng) for _ in range(rng.randrange(2, 8))]
    kind = rng.choice(("matchAttribute", "distinctAttribute"))
    counts = [rng.randrange(1, 4) for _ in range(rng.randrange(1, 3))]
    result = explain([_claim(kind, counts)], _cluster(values), kubernetes_version="1.36", feature_gates=ON)
    assert not result.errors
    got = sorted((a.request, a.device) for a in result.nodes[0].allocation) if result.satisfiable else None
    assert got == _brute(kind, counts, values), (kind, counts, values)


def test_backtracking_widens_the_common_values_again() -> None:
    # d0 fixes {1, 2}, d1 narrows it to {1}; r1 then needs 2, so the search backtracks to d2,
    # with {1, 2} & {2} = {2} (upstream's experimental allocator keeps {1} there and fails).
    values: list[Obj | None] = [{"ints": [1, 2]}, {"ints": [1]}, {"ints": [2]}, {"ints": [2, 3]}]
    result = explain([_claim("matchAttribute", [2, 1])], _cluster(values), kubernetes_version="1.36", feature_gates=ON)
    assert result.satisfiable
    assert sorted((a.request, a.device) for a in result.nodes[0].allocation) == [
        ("r0", "d0"),
        ("r0", "d2"),
        ("r1", "d3"),
    ]


def test_gate_off_list_attribute_is_a_cel_error_and_scalars_are_unchanged() -> None:
    lists: list[Obj | None] = [{"ints": [1]}, {"ints": [1]}]
    off = explain([_claim("matchAttribute", [2])], _cluster(lists), kubernetes_version="1.36")
    assert off.errors == ["class class-a: selector #0: CEL runtime error: attribute a: unsupported attribute value"]
    scalars: list[Obj | None] = [{"int": 1}, {"int": 2}, {"int": 1}]
    for version, gate in (("1.34", None), ("1.36", None), ("1.36", ON)):
        result = explain(
            [_claim("matchAttribute", [2])], _cluster(scalars), kubernetes_version=version, feature_gates=gate
        )
        assert sorted(a.device for a in result.nodes[0].allocation) == ["d0", "d2"]


def test_explanations_name_the_sets() -> None:
    values: list[Obj | None] = [{"strings": ["x"]}, {"strings": ["y", "z"]}, {}]
    result = explain(
        [_claim("matchAttribute", [2])],
        # A class without selectors: no CEL evaluation, so the empty attribute reaches the constraint.
        [NO_SELECTORS, *_cluster(values)[1:]],
        kubernetes_version="1.36",
        feature_gates=ON,
    )
    assert not result.satisfiable
    reasons = dict(result.nodes[0].requests[0].rejections)
    assert reasons[f"{DRIVER_A}/{POOL1}/d1"] == (
        f"constraint matchAttribute {DRIVER_A}/a (['y', 'z'] has no value in common with ['x'] of the devices already chosen)"
    )
    assert reasons[f"{DRIVER_A}/{POOL1}/d2"] == f"constraint matchAttribute {DRIVER_A}/a (unknown attribute type)"
    distinct = explain(
        [_claim("distinctAttribute", [2])],
        _cluster([{"ints": [1, 2]}, {"ints": [2]}]),
        kubernetes_version="1.36",
        feature_gates=ON,
    )
    assert dict(distinct.nodes[0].requests[0].rejections)[f"{DRIVER_A}/{POOL1}/d1"] == (
        f"constraint distinctAttribute {DRIVER_A}/a ([2] shares a value with [1, 2] already chosen)"
    )


def test_includes_in_a_request_selector_and_the_gates_reported() -> None:
    values: list[Obj | None] = [{"ints": [0, 1]}, {"ints": [2, 3]}]
    sel = {"cel": {"expression": f'device.attributes["{DRIVER_A}"].a.includes(3)'}}
    c = claim("c", request("r0", CLASS_A, 1, sel))
    result = explain([c], _cluster(values), kubernetes_version="1.36", feature_gates=ON)
    assert [a.device for a in result.nodes[0].allocation] == ["d1"]
    assert result.to_json()["featureGates"][gates.LIST_TYPE_ATTRIBUTES] is True
    with pytest.raises(Exception, match="undeclared reference to 'includes'"):
        explain([c], _cluster(values), kubernetes_version="1.36")


def test_cli_match_and_explain_with_the_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpucluster.cli import explain as explain_command
    from gpucluster.cli import match as match_command
    from gpucluster.errors import InputError
    from tests.test_explain_cli import _write
    from tests.test_gates_cli import _run

    cluster = _cluster([{"ints": [0, 1]}, {"ints": [1, 2]}])
    slices = _write(tmp_path / "s.yaml", [cluster[1]])
    expr = f'device.attributes["{DRIVER_A}"].a.includes(2)'
    gate = ("--kubernetes-version", "1.36", "--feature-gates", "DRAListTypeAttributes=true")
    assert _run(match_command, "match", "-e", expr, "-f", slices, *gate, "-o", "summary") == 0
    assert json.loads(capsys.readouterr().out)["expressions"][0] == {
        "expression": 0,
        "match": 1,
        "nomatch": 1,
        "error": 0,
    }
    with pytest.raises(InputError, match="compile error"):
        _run(match_command, "match", "-e", expr, "-f", slices, "--kubernetes-version", "1.36")
    with pytest.raises(InputError, match="--feature-gates: unrecognized feature gate: DRAListTypeAttributes"):
        _run(match_command, "match", "-e", expr, "-f", slices, "--feature-gates", "DRAListTypeAttributes=true")
    claim_file = _write(tmp_path / "c.yaml", [_claim("distinctAttribute", [2])])
    cluster_file = _write(tmp_path / "cluster.yaml", cluster)
    assert _run(explain_command, "explain", "--claim", claim_file, "--cluster", cluster_file, *gate, "-o", "json") == 1
    out = json.loads(capsys.readouterr().out)
    assert out["featureGates"]["DRAListTypeAttributes"] is True
    # Compared as sets: d1's [1, 2] shares 1 with d0's [0, 1].
    assert out["nodes"][0]["reasons"][-1] == (
        f"request r0: {DRIVER_A}/{POOL1}/d1: constraint distinctAttribute {DRIVER_A}/a ([1, 2] shares a value with "
        "[0, 1] already chosen)"
    )
    # matchAttribute over the same lists: 1 in common, both devices fit.
    claim_file = _write(tmp_path / "c.yaml", [_claim("matchAttribute", [2])])
    assert _run(explain_command, "explain", "--claim", claim_file, "--cluster", cluster_file, *gate, "-o", "json") == 0
    out = json.loads(capsys.readouterr().out)
    assert [(a["request"], a["device"]) for a in out["nodes"][0]["allocation"]] == [("r0", "d0"), ("r0", "d1")]
