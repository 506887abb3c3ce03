"""No ``*_created`` series: the exposition of the default registry (the one /metrics serves) has none,
in the Prometheus text format and in OpenMetrics, for counters and histograms that have children."""

from __future__ import annotations

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from gpustack_worker.runtime import metrics


def _names(exposition: bytes) -> list[str]:
    return [
        line.split("{", 1)[0].split(" ", 1)[0]
        for line in exposition.decode().splitlines()
        if line and not line.startswith("#")
    ]


def test_the_exposition_holds_no_created_sample() -> None:
    # children of a counter and of a histogram exist, so a _created sample would be exported for each
    metrics.REST_REQUESTS.labels(code="200", method="GET", host="no-created.test").inc()
    metrics.WEBHOOK_LATENCY.labels(webhook="/no-created").observe(0.001)
    for exposition in (generate_latest(REGISTRY), generate_openmetrics(REGISTRY)):
        names = _names(exposition)
        assert "rest_client_requests_total" in names
        assert "controller_runtime_webhook_latency_seconds_count" in names
        created = sorted({n for n in names if n.endswith("_created")})
        assert created == []
