"""Prometheus metrics of the webhook, in a registry of its own (one per server).

The two metrics every review updates (its count and its latency) are plain numbers added to on
the event loop and turned into metric families only when scraped (:class:`_ReviewMetrics`):
prometheus_client's Counter and Histogram take a lock per update and walk the buckets in Python,
which cost as much as the rest of a cached review's bookkeeping. The exposition is the one those
classes give (names, labels, ``_total``/``_bucket``/``_count``/``_sum``/``_created``; a test
compares them).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
# The bounds as prometheus_client's Histogram writes them in ``le`` ("0.0005", ..., "1.0", "+Inf").
_BUCKET_NAMES: tuple[str, ...] = (*(str(floatToGoString(b)) for b in LATENCY_BUCKETS), "+Inf")  # type: ignore[no-untyped-call]


class _ReviewMetrics(Collector):
    """``gpucluster_webhook_reviews`` (by rule, operation, outcome) and
    ``gpucluster_webhook_review_duration_seconds`` (by path), added to by :meth:`observe` (the
    event loop's thread) and read by :meth:`collect` (a scrape, any thread: it copies the tables
    first; a scrape racing an update may miss that one review, as with prometheus_client's own)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str], list[float]] = {}  # [count, created]
        self.latency: dict[str, tuple[list[int], list[float]]] = {}  # per-bucket counts, [sum, created]

    def observe(self, rule: str, operation: str, outcome: str, path: str, seconds: float) -> None:
        key = (rule, operation, outcome)
        count = self.counts.get(key)
        if count is None:
            count = self.counts[key] = [0.0, time.time()]
        count[0] += 1
        latency = self.latency.get(path)
        if latency is None:
            latency = self.latency[path] = ([0] * len(_BUCKET_NAMES), [0.0, time.time()])
        latency[0][bisect_left(LATENCY_BUCKETS, seconds)] += 1  # the first bucket whose bound is >= seconds
        latency[1][0] += seconds

    def collect(self) -> Iterable[Metric]:
        reviews = CounterMetricFamily(
            "gpucluster_webhook_reviews",
            "Admission reviews answered, by rule, operation and outcome.",
            labels=["rule", "operation", "outcome"],
        )
        for key, (value, created) in list(self.counts.items()):
            reviews.add_metric(key, value, created=created)
        latency = HistogramMetricFamily(
            "gpucluster_webhook_review_duration_seconds",
            "Time to answer one admission review, by path.",
            labels=["path"],
        )
        for path, (buckets, (total, created)) in list(self.latency.items()):
            cumulative, running = [], 0.0
            for name, count in zip(_BUCKET_NAMES, list(buckets), strict=True):
                running += count
                cumulative.append((name, running))
            latency.add_metric([path], cumulative, total)
            latency.samples.append(Sample(latency.name + "_created", {"path": path}, created))
        return [reviews, latency]


class WebhookMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._review_metrics = _ReviewMetrics()
        self.registry.register(self._review_metrics)
        self.rejected = Counter(
            "gpucluster_webhook_rejected_requests",
            "HTTP requests refused before review (bad body, content type, size).",
            ["path", "code"],
            registry=self.registry,
        )
        self.closed = Counter(
            "gpucluster_webhook_connections_closed",
            "Connections the server ended early: header-timeout, body-timeout, refused (over the cap), client-gone.",
            ["reason"],
            registry=self.registry,
        )
        self.connections = Gauge(
            "gpucluster_webhook_open_connections", "Open client connections.", registry=self.registry
        )
        self.certificate_expiry = Gauge(
            "gpucluster_webhook_certificate_expiry_seconds",
            "Seconds until the serving certificate's notAfter (negative once expired).",
            registry=self.registry,
        )

    def observe(self, rule: str, operation: str, outcome: str, path: str, seconds: float) -> None:
        """Count one review and its latency (this runs on every review)."""
        self._review_metrics.observe(rule, operation, outcome, path, seconds)
