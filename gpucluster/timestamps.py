"""Kubernetes' time format (metav1.Time: RFC 3339 in UTC, whole seconds, ``Z``), and its
MicroTime (``.000000Z``), written and read in one place."""

from __future__ import annotations

import datetime as dt

FORMAT = "%Y-%m-%dT%H:%M:%SZ"
MICRO_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def rfc3339(moment: dt.datetime | None = None) -> str:
    """``moment`` (default: now) as metav1.Time writes it; a naive moment is taken as UTC."""
    moment = moment or dt.datetime.now(dt.UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).strftime(FORMAT)


def rfc3339_micro(moment: dt.datetime | None = None) -> str:
    """metav1.MicroTime (leases, events.k8s.io): microseconds, UTC, ``Z``."""
    moment = moment or dt.datetime.now(dt.UTC)
    return moment.astimezone(dt.UTC).strftime(MICRO_FORMAT)


def from_epoch(seconds: float) -> str:
    return rfc3339(dt.datetime.fromtimestamp(int(seconds), dt.UTC))


def parse(value: str) -> dt.datetime:
    """An RFC 3339 time (``Z`` or an offset; a naive one is UTC) as an aware datetime.
    Raises ``ValueError`` for anything else."""
    parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
