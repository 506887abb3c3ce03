"""``--metrics-secure-bind`` / ``--metrics-cert-dir``: ``/metrics`` over HTTPS with authentication, an option
of ``gpustack-worker controller`` and ``agent`` (docs/runtime.md, "Metrics serving").

Off by default: ``--metrics-bind`` serves ``/healthz``, ``/readyz`` and ``/metrics`` in plain HTTP, as
before. With ``--metrics-secure-bind=:8443``, ``/metrics`` is served there only, over TLS (``tls.crt`` /
``tls.key`` from ``--metrics-cert-dir``, else a self-signed certificate generated at start), every scrape
authenticated by a TokenReview and authorised by a SubjectAccessReview (``get`` on ``/metrics``); the
plain port keeps the probes and answers ``/metrics`` with 404 naming the secure address. The reviews go
through the process's client unfenced: they write nothing, and a standby's metrics matter as much as the
leader's.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from gpustack_worker.runtime.metrics_auth import DelegatedAuth
from gpustack_worker.runtime.metrics_serving import METRICS_PATH, SecureMetricsServer

if TYPE_CHECKING:
    import argparse
    from collections.abc import AsyncIterator

    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.health import HealthServer

__all__ = ("secure_metrics",)


@contextlib.asynccontextmanager
async def secure_metrics(
    args: argparse.Namespace, client: Client, health: HealthServer | None
) -> AsyncIterator[SecureMetricsServer | None]:
    """Serve authenticated ``/metrics`` while the block runs when ``--metrics-secure-bind`` is given (None
    otherwise), and turn ``/metrics`` off on ``health``'s plain port."""
    bind: str = getattr(args, "metrics_secure_bind", "") or ""
    if not bind:
        yield None
        return
    server = SecureMetricsServer(
        bind,
        DelegatedAuth(client.with_fence(None)),
        cert_dir=getattr(args, "metrics_cert_dir", "") or None,
    )
    await server.start()
    if health is not None:
        health.metrics_elsewhere = f"https://{bind.rpartition(':')[0]}:{server.port}{METRICS_PATH}"
    try:
        yield server
    finally:
        await server.close()
