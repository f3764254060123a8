"""Pruning of matchAttribute values and shared counters never changes an answer.

Random small nodes are decided by the allocator and by a brute force over combinations in
entry order (the first combination that satisfies every constraint is upstream's first-fit
answer for one request); infeasible shapes that the unpruned search would walk for thousands of
steps are decided in a handful. distinctAttribute is not pruned: upstream remembers one value
per request (tests/oracle judges it).
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction
from typing import Any

import pytest

from gpucluster.dra.allocator import explain
from tests.test_allocator import GATED_ON, GPU, claim, consumes, counter_set, dev, device_class, exact, rslice

Obj = dict[str, Any]


def _gib(n: int) -> str:
    return f"{n}Gi"


def _random_node(rng: random.Random) -> tuple[list[Obj], list[tuple[str, dict[str, Any], dict[str, int]]]]:
    """One slice with random devices: attributes x, y and memory taken from one of two counter sets."""
    sets = {"gpu-0": rng.randint(2, 10), "gpu-1": rng.randint(2, 10)}
    devices: list[Obj] = []
    plain: list[tuple[str, dict[str, Any], dict[str, int]]] = []
    for i in range(rng.randint(3, 9)):
        attrs = {"x": f"x{rng.randint(0, 4)}", "y": rng.randint(0, 3)}
        extra: Obj = {}
        want: dict[str, int] = {}
        if rng.random() < 0.7:
            set_name = rng.choice(sorted(sets))
            amount = rng.randint(1, 5)
            extra["consumesCounters"] = consumes(_gib(amount), set_name)
            want[set_name] = amount
        devices.append(dev(f"d{i}", attrs, **extra))
        plain.append((f"d{i}", attrs, want))
    shared = [counter_set(name, memory=_gib(v)) for name, v in sets.items()]
    # Counter sets in a slice of their own (1.35+; the test runs at 1.36).
    counters = rslice("counters", "n1", "p1", count=2, sharedCounters=shared)
    del counters["spec"]["devices"]
    cluster = [counters, rslice("s1", "n1", "p1", *devices, count=2), device_class()]
    return cluster, [(n, a, {**w, **{f"cap:{k}": v for k, v in sets.items()}}) for n, a, w in plain]


def _first_fit(
    devices: list[tuple[str, dict[str, Any], dict[str, int]]], counts: list[int], match: list[str]
) -> list[str] | None:
    """Requests one after the other, each a combination in entry order of the devices the
    earlier ones left; the first choice for all of them that satisfies the claim's constraints."""
    caps = {k.removeprefix("cap:"): v for k, v in devices[0][2].items() if k.startswith("cap:")} if devices else {}

    def ok(chosen: list[tuple[str, dict[str, Any], dict[str, int]]]) -> bool:
        if any(len({d[1][a] for d in chosen}) > 1 for a in match):
            return False
        used = dict.fromkeys(caps, 0)
        for _, _, want in chosen:
            for k, v in want.items():
                if not k.startswith("cap:"):
                    used[k] += v
        return all(used[k] <= caps[k] for k in caps)

    def search(chosen: list[Any], rest: list[int]) -> list[Any] | None:
        if not rest:
            return chosen
        free = [d for d in devices if d not in chosen]
        for combo in itertools.combinations(free, rest[0]):
            if ok(chosen + list(combo)):
                found = search(chosen + list(combo), rest[1:])
                if found is not None:
                    return found
        return None

    found = search([], counts)
    return None if found is None else [d[0] for d in found]


@pytest.mark.parametrize("seed", range(80))
def test_pruned_answers_are_the_first_fit_combination(seed: int) -> None:
    rng = random.Random(seed)
    cluster, devices = _random_node(rng)
    match = rng.choice([[], ["y"], ["x"]])
    constraints = [{"matchAttribute": f"{GPU}/{a}"} for a in match]
    shapes = [[n] for n in range(1, len(devices) + 1)]
    shapes += [[a, b] for a in range(1, 4) for b in range(1, 4) if a + b <= len(devices)]
    for counts in shapes:
        requests = [exact(f"r{i}", count=n) for i, n in enumerate(counts)]
        # 1.36: counters taken by a device a constraint refuses are given back (1.34 and 1.35
        # keep them, which no first-fit model has; tests/oracle judges those).
        result = explain(
            [claim(*requests, constraints=constraints)], cluster, feature_gates=GATED_ON, kubernetes_version="1.36"
        )
        expected = _first_fit(devices, counts, match)
        got = [a.device for a in result.nodes[0].allocation] if result.satisfiable else None
        assert got == expected, (seed, counts, constraints)


def _mig_node(partitions_per_gpu: int, slices_per_gpu: int) -> list[Obj]:
    # Two GPUs of one slice, each a counter set of `slices_per_gpu` memory slices; every
    # partition takes one slice of its GPU (like MIG 1g profiles).
    devices = [
        dev(f"gpu-{g}-mig-{p}", {"gpu": g}, consumesCounters=consumes("1Gi", f"gpu-{g}"))
        for g in range(2)
        for p in range(partitions_per_gpu)
    ]
    shared = [counter_set(f"gpu-{g}", memory=f"{slices_per_gpu}Gi") for g in range(2)]
    return [rslice("s1", "n1", "p1", *devices, sharedCounters=shared), device_class()]


def test_shared_counters_too_small_together_are_decided_without_searching() -> None:
    # 20 partitions, 7 + 7 slices: 15 partitions never fit, but any 14 of them fit one counter
    # set at a time. Unpruned, the search walks the sets of up to 14 partitions (far more than
    # 2,000 steps); pruned, the first step sees that 15 shares of 1/7 exceed the two sets.
    cluster = _mig_node(10, 7)
    result = explain([claim(exact(count=15))], cluster, feature_gates=GATED_ON, max_steps=2000)
    assert not result.satisfiable and not result.nodes[0].gave_up
    assert result.nodes[0].steps == 1
    assert result.nodes[0].requests[0].rejections[0] == (
        f"{GPU}/p1/gpu-0-mig-0",
        "counters of gpu-0, gpu-1: 15 more device(s) from here on do not fit in what is left",
    )
    # 14 fit: the first 7 of each GPU, in entry order.
    result = explain([claim(exact(count=14))], cluster, feature_gates=GATED_ON)
    assert [a.device for a in result.nodes[0].allocation] == [f"gpu-{g}-mig-{p}" for g in range(2) for p in range(7)]


def test_one_counter_too_small_for_the_count_names_the_counter() -> None:
    cluster = _mig_node(10, 7)
    # Only gpu-0's partitions are selectable: 8 of them need 8 slices of its 7.
    selector = [{"cel": {"expression": f'device.attributes["{GPU}"].gpu == 0'}}]
    result = explain([claim(exact(count=8, selectors=selector))], cluster, feature_gates=GATED_ON, max_steps=2000)
    assert not result.satisfiable and not result.nodes[0].gave_up
    assert result.nodes[0].steps == 1
    assert dict(result.nodes[0].requests[0].rejections)[f"{GPU}/p1/gpu-0-mig-0"] == (
        "counter gpu-0/memory: 8 more device(s) from here on would consume at least 8Gi, 7Gi left"
    )


def test_fractions_of_counters_are_exact() -> None:
    assert Fraction(1, 3) * 3 == 1  # the per-counter bound compares exact amounts
