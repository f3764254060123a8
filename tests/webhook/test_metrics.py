"""The review counter and latency histogram, kept as plain numbers: what a scrape shows is what
prometheus_client's own Counter and Histogram would show for the same reviews."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gpucluster.webhook.metrics import LATENCY_BUCKETS, WebhookMetrics

REVIEWS = [
    ("pods.mutate", "CREATE", "mutated", "mutate", 0.0005),  # on a bound: counted in that bucket
    ("pods.mutate", "CREATE", "mutated", "mutate", 0.0003),
    ("pods.mutate", "CREATE", "skipped", "mutate", 0.02),
    ("claims.validate", "CREATE", "allowed", "validate", 0.003),
    ("claims.validate", "UPDATE", "denied", "validate", 7.5),  # beyond the last bound: +Inf
]


def _lines(text: bytes, *names: str) -> list[str]:
    return sorted(line for line in text.decode().splitlines() if line.startswith(names))


def test_a_scrape_shows_what_prometheus_clients_own_metrics_show() -> None:
    ours = WebhookMetrics()
    registry = CollectorRegistry()
    counter = Counter("gpucluster_webhook_reviews", "", ["rule", "operation", "outcome"], registry=registry)
    histogram = Histogram(
        "gpucluster_webhook_review_duration_seconds", "", ["path"], buckets=LATENCY_BUCKETS, registry=registry
    )
    for rule, operation, outcome, path, seconds in REVIEWS:
        ours.observe(rule, operation, outcome, path, seconds)
        counter.labels(rule, operation, outcome).inc()
        histogram.labels(path).observe(seconds)
    names = (
        "gpucluster_webhook_reviews_total",
        "gpucluster_webhook_review_duration_seconds_bucket",
        "gpucluster_webhook_review_duration_seconds_count",
        "gpucluster_webhook_review_duration_seconds_sum",
    )
    got, expected = _lines(generate_latest(ours.registry), *names), _lines(generate_latest(registry), *names)
    assert got == expected
    assert 'gpucluster_webhook_review_duration_seconds_bucket{le="0.0005",path="mutate"} 2.0' in got
    assert 'gpucluster_webhook_review_duration_seconds_bucket{le="1.0",path="validate"} 1.0' in got
    assert 'gpucluster_webhook_review_duration_seconds_bucket{le="+Inf",path="validate"} 2.0' in got


def test_each_label_set_has_its_created_time() -> None:
    ours = WebhookMetrics()
    for rule, operation, outcome, path, seconds in REVIEWS:
        ours.observe(rule, operation, outcome, path, seconds)
    created = [
        line.rsplit(" ", 1) for line in _lines(generate_latest(ours.registry), "gpucluster_webhook_reviews_created")
    ]
    assert len(created) == len({r[:3] for r in REVIEWS})
    assert all(float(value) > 1.7e9 for _, value in created)
