"""bench_provision's rounds: how the rows of several bursts become one row each."""

from __future__ import annotations

from typing import Any

from bench.bench_provision import combine


def _round(p99: float, events: int) -> list[dict[str, Any]]:
    return [
        {"name": "pod create -> ResourceClaim p50 (cold)", "value": p99 / 2, "unit": "s", "target": None, "ok": None},
        {"name": "pod create -> ResourceClaim p99 (cold)", "value": p99, "unit": "s", "target": "<= 1.0 s",
         "ok": p99 <= 1.0},
        {"name": "FailedResourceClaimCreation events (warm)", "value": events, "unit": "events", "target": "0",
         "ok": events == 0},
    ]  # fmt: skip


def test_the_median_round_is_judged_and_the_worst_is_shown() -> None:
    rows = {r["name"]: r for r in combine([_round(1.8, 0), _round(0.9, 0), _round(0.95, 0)])}
    p99 = rows["pod create -> ResourceClaim p99 (cold) (median of 3 rounds)"]
    assert (p99["value"], p99["ok"]) == (0.95, True)  # one slow round does not decide
    worst = rows["pod create -> ResourceClaim p99 (cold) (worst of 3 rounds)"]
    assert (worst["value"], worst["target"], worst["ok"]) == (1.8, None, None)
    assert rows["pod create -> ResourceClaim p50 (cold) (median of 3 rounds)"]["value"] == 0.475
    assert "pod create -> ResourceClaim p50 (cold) (worst of 3 rounds)" not in rows


def test_a_median_over_the_target_fails() -> None:
    rows = {r["name"]: r for r in combine([_round(1.2, 0), _round(0.9, 0), _round(1.1, 0)])}
    assert rows["pod create -> ResourceClaim p99 (cold) (median of 3 rounds)"]["ok"] is False


def test_events_in_any_round_fail_the_events_target() -> None:
    rows = {r["name"]: r for r in combine([_round(0.5, 0), _round(0.5, 2), _round(0.5, 0)])}
    events = rows["FailedResourceClaimCreation events (warm) (worst of 3 rounds)"]
    assert (events["value"], events["ok"]) == (2, False)


def test_one_round_is_reported_as_is() -> None:
    rows = combine([_round(0.7, 0)])
    assert [r["value"] for r in rows] == [0.35, 0.7, 0]
    assert all("worst of 1" not in r["name"] or r["unit"] == "events" for r in rows)
