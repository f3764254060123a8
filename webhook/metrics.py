"""Prometheus metrics of the webhook, in a registry of its own (one per server)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WebhookMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reviews = Counter(
            "gpucluster_webhook_reviews",
            "Admission reviews answered, by rule, operation and outcome.",
            ["rule", "operation", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gpucluster_webhook_review_duration_seconds",
            "Time to answer one admission review, by path.",
            ["path"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=self.registry,
        )
        self._reviews: dict[tuple[str, str, str], Any] = {}
        self._latency: dict[str, Any] = {}
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
        """Count one review and its latency (label children cached: this runs on every review)."""
        key = (rule, operation, outcome)
        counter = self._reviews.get(key)
        if counter is None:
            counter = self._reviews[key] = self.reviews.labels(rule, operation, outcome)
        histogram = self._latency.get(path)
        if histogram is None:
            histogram = self._latency[path] = self.latency.labels(path)
        counter.inc()
        histogram.observe(seconds)
