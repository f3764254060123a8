"""The one Kubernetes time format helper (gpucluster/timestamps.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from gpucluster import timestamps


def test_metav1_time_is_whole_seconds_in_utc_with_z() -> None:
    moment = dt.datetime(2026, 12, 2, 7, 30, 15, 999_999, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert timestamps.rfc3339(moment) == "2026-12-02T05:30:15Z"
    assert timestamps.rfc3339(dt.datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"  # naive is UTC
    assert timestamps.rfc3339_micro(moment) == "2026-12-02T05:30:15.999999Z"
    assert timestamps.from_epoch(0) == "1970-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2026-12-02T05:30:15Z", 1796189415),
        ("2026-12-02T05:30:15.5Z", 1796189415.5),
        ("2026-12-02T07:30:15+02:00", 1796189415),
        ("2026-12-02T05:30:15", 1796189415),
    ],
)
def test_parse_reads_what_kubernetes_writes(text: str, seconds: float) -> None:
    assert timestamps.parse(text).timestamp() == seconds


def test_parse_refuses_what_is_not_a_time() -> None:
    with pytest.raises(ValueError):
        timestamps.parse("yesterday")
