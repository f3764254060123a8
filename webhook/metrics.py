"""Prometheus metrics of the webhook, in a registry of its own (one per server)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


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
        self.rejected = Counter(
            "gpucluster_webhook_rejected_requests",
            "HTTP requests refused before review (bad body, content type, size).",
            ["path", "code"],
            registry=self.registry,
        )
