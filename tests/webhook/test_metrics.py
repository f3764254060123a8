"""The per-review metrics are exposed exactly as prometheus_client's own Counter and Histogram
expose them (the webhook keeps them as plain numbers and builds the families at scrape time)."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gpucluster.webhook.metrics import LATENCY_BUCKETS, WebhookMetrics

OBSERVED = [
    ("pods.mutate.gpucluster.nvidia.com", "CREATE", "mutated", "mutate", 0.0003),
    ("pods.mutate.gpucluster.nvidia.com", "CREATE", "mutated", "mutate", 0.0005),  # on a bound: that bucket
    ("pods.mutate.gpucluster.nvidia.com", "CREATE", "skipped", "mutate", 0.004),
    ("gpuclusters.validate.gpucluster.nvidia.com", "UPDATE", "denied", "validate", 0.02),
    ("pods.mutate.gpucluster.nvidia.com", "CREATE", "mutated", "mutate", 3.5),  # past the last bound: +Inf
]


def reference() -> bytes:
    """The same observations through prometheus_client's classes, as the webhook made them before."""
    registry = CollectorRegistry()
    reviews = Counter(
        "gpucluster_webhook_reviews",
        "Admission reviews answered, by rule, operation and outcome.",
        ["rule", "operation", "outcome"],
        registry=registry,
    )
    latency = Histogram(
        "gpucluster_webhook_review_duration_seconds",
        "Time to answer one admission review, by path.",
        ["path"],
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    for rule, operation, outcome, path, seconds in OBSERVED:
        reviews.labels(rule, operation, outcome).inc()
        latency.labels(path).observe(seconds)
    return generate_latest(registry)


def without_created_values(text: bytes) -> str:
    # _created holds the time a series first appeared: the same lines, other numbers.
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", text.decode())


def test_review_metrics_expose_what_prometheus_clients_classes_expose() -> None:
    metrics = WebhookMetrics()
    for observation in OBSERVED:
        metrics.observe(*observation)
    ours = without_created_values(generate_latest(metrics.registry))
    expected = without_created_values(reference())
    assert expected in ours  # the other metrics of the registry follow
    assert ours.index("gpucluster_webhook_reviews_total") < ours.index("gpucluster_webhook_rejected_requests")


def test_review_metrics_are_read_as_samples() -> None:
    metrics = WebhookMetrics()
    for observation in OBSERVED:
        metrics.observe(*observation)
    sample = metrics.registry.get_sample_value
    labels = {"rule": "pods.mutate.gpucluster.nvidia.com", "operation": "CREATE", "outcome": "mutated"}
    assert sample("gpucluster_webhook_reviews_total", labels) == 3.0
    assert sample("gpucluster_webhook_review_duration_seconds_bucket", {"path": "mutate", "le": "0.0005"}) == 2.0
    assert sample("gpucluster_webhook_review_duration_seconds_bucket", {"path": "mutate", "le": "1.0"}) == 3.0
    assert sample("gpucluster_webhook_review_duration_seconds_count", {"path": "mutate"}) == 4.0
    assert sample("gpucluster_webhook_review_duration_seconds_sum", {"path": "mutate"}) == 0.0003 + 0.0005 + 0.004 + 3.5
