"""Prometheus metrics of the webhook, in a registry of its own (one per server)."""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector


class WebhookMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # Reviews are counted in plain numbers, turned into the counter and histogram at scrape
        # time: prometheus_client's children take a lock per increment, a cost every review paid.
        # Reviews are counted on the event loop only, and scraped there too.
        self.reviews = _ReviewCounts()
        self.registry.register(self.reviews)
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
        """Count one review and its latency."""
        self.reviews.observe(rule, operation, outcome, path, seconds)


LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class _ReviewCounts(Collector):
    """gpucluster_webhook_reviews (by rule, operation and outcome) and
    gpucluster_webhook_review_duration_seconds (by path)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str], int] = {}
        # per path: the number of reviews in each bucket (not cumulative; the last is +Inf), and their sum
        self.latency: dict[str, tuple[list[int], list[float]]] = {}
        self.created: dict[tuple[str, str, str], float] = {}  # a label set's first review: its _created

    def observe(self, rule: str, operation: str, outcome: str, path: str, seconds: float) -> None:
        key = (rule, operation, outcome)
        count = self.counts.get(key)
        if count is None:
            count = 0
            self.created[key] = time.time()
        self.counts[key] = count + 1
        found = self.latency.get(path)
        if found is None:
            found = self.latency[path] = ([0] * (len(LATENCY_BUCKETS) + 1), [0.0])
        found[0][bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        found[1][0] += seconds

    def collect(self) -> Iterator[Metric]:
        reviews = CounterMetricFamily(
            "gpucluster_webhook_reviews",
            "Admission reviews answered, by rule, operation and outcome.",
            labels=["rule", "operation", "outcome"],
        )
        for key, count in sorted(self.counts.items()):
            reviews.add_metric(list(key), count, created=self.created[key])
        yield reviews
        latency = HistogramMetricFamily(
            "gpucluster_webhook_review_duration_seconds",
            "Time to answer one admission review, by path.",
            labels=["path"],
        )
        bounds = [*(repr(b) for b in LATENCY_BUCKETS), "+Inf"]  # as prometheus_client writes these bounds
        for path, (counts, total) in sorted(self.latency.items()):
            latency.add_metric([path], list(zip(bounds, itertools.accumulate(counts), strict=True)), total[0])
        yield latency
