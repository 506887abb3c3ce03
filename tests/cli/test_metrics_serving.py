"""``--metrics-secure-bind``/``--metrics-cert-dir`` of ``controller`` and ``agent``: off by default (the
plain port keeps /metrics), on: an HTTPS server whose reviews go through an unfenced view of the process's
client, and the plain port's /metrics answering where it went."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from gpustack_worker.cli.main import build_parser
from gpustack_worker.cli.metrics_serving import secure_metrics
from gpustack_worker.runtime.health import HealthServer


class FencedClient:
    """Stands for the process's Client: ``with_fence(None)`` must be what the reviews use."""

    def __init__(self) -> None:
        self.views: list[Any] = []

    def with_fence(self, fence: Any) -> FencedClient:
        self.views.append(fence)
        return self


@pytest.mark.parametrize("command", ["controller", "agent"])
def test_both_processes_take_the_flags_and_default_to_off(command: str) -> None:
    args = build_parser().parse_args([command])
    assert (args.metrics_secure_bind, args.metrics_cert_dir) == ("", "")
    args = build_parser().parse_args(
        [command, "--metrics-secure-bind=:8443", "--metrics-cert-dir=/certs", "--metrics-bind=:8080"]
    )
    assert (args.metrics_secure_bind, args.metrics_cert_dir, args.metrics_bind) == (
        ":8443",
        "/certs",
        ":8080",
    )


async def test_off_serves_nothing_and_leaves_metrics_on_the_plain_port() -> None:
    health = HealthServer("127.0.0.1:0", ready=lambda: True)
    client = FencedClient()
    async with secure_metrics(argparse.Namespace(metrics_secure_bind=""), client, health) as server:  # type: ignore[arg-type]
        assert server is None
        assert health.route("GET", "/metrics")[0] == 200
    assert client.views == []


async def test_on_serves_https_with_unfenced_reviews_and_moves_metrics_off_the_plain_port() -> None:
    health = HealthServer("127.0.0.1:0", ready=lambda: True)
    client = FencedClient()
    args = argparse.Namespace(metrics_secure_bind="127.0.0.1:0", metrics_cert_dir="")
    async with secure_metrics(args, client, health) as server:  # type: ignore[arg-type]
        assert server is not None
        assert server.port != 0
        assert client.views == [None]  # an unfenced view: a standby's scrapes are reviewed too
        status, _, body = health.route("GET", "/metrics")
        assert (status, body) == (
            404,
            f"metrics are served at https://127.0.0.1:{server.port}/metrics\n".encode(),
        )
        assert health.route("GET", "/readyz")[0] == 200
