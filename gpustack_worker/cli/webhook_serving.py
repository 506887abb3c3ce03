"""The controller's admission webhooks: one HTTPS server on every replica (leader or standby).

``--webhook-bind`` (default ``:9443``; empty disables) and ``--webhook-cert-dir`` (``tls.crt`` and
``tls.key``, the chart's mounted Secret) of ``gpustack-worker controller``. The handlers are the pure
review functions of the controller packages, registered at the paths of :mod:`gpustack_worker.api.webhooks`.
Handlers that read the running process's caches (the Workload fit pin reads the informer stores) are
built by the caller and passed as ``handlers`` (path → handler), e.g.
``handlers={webhooks.WORKLOAD_FIT_PATH: FitPinWebhook.from_registry(registry, settings).review}``.
Without a certificate in the directory (a controller started by hand, the demo, the tests' controllers)
the webhooks are not served and a warning says so; the chart always mounts one.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Final

import structlog

from gpustack_worker.api import webhooks
from gpustack_worker.runtime.webhook_server import WebhookServer
from gpustack_worker.topology import admission

if TYPE_CHECKING:
    import argparse
    from collections.abc import AsyncIterator, Mapping

    from gpustack_worker.runtime.webhook_server import Handler

__all__ = ("DEFAULT_BIND", "DEFAULT_CERT_DIR", "admission_webhooks", "webhook_server")

DEFAULT_BIND: Final = f":{webhooks.CONTAINER_PORT}"
DEFAULT_CERT_DIR: Final = "/etc/gpustack-worker/webhook-certs"
_log = structlog.get_logger("gpustack_worker.cli.webhooks")


def webhook_server(
    bind: str, cert_dir: str | Path, *, namespace: str, handlers: Mapping[str, Handler] | None = None
) -> WebhookServer:
    """The server with every stateless webhook of ours registered, plus ``handlers`` (path → handler, for
    the webhooks that read the process's caches); not started."""
    directory = Path(cert_dir)
    server = WebhookServer(bind, cert_file=directory / "tls.crt", key_file=directory / "tls.key")
    server.add(webhooks.TOPOLOGY_SOURCE_PATH, lambda r: admission.review(r, namespace=namespace))
    for path, handler in (handlers or {}).items():
        server.add(path, handler)
    return server


@contextlib.asynccontextmanager
async def admission_webhooks(
    args: argparse.Namespace, *, namespace: str, handlers: Mapping[str, Handler] | None = None
) -> AsyncIterator[WebhookServer | None]:
    """Serve the webhooks (and ``handlers``, path → handler) while the block runs (None when disabled or
    without a certificate)."""
    bind: str = getattr(args, "webhook_bind", DEFAULT_BIND) or ""
    cert_dir = Path(getattr(args, "webhook_cert_dir", None) or DEFAULT_CERT_DIR)
    if not bind:
        yield None
        return
    missing = [name for name in ("tls.crt", "tls.key") if not (cert_dir / name).is_file()]
    if missing:
        _log.warning(
            "admission webhooks not served: no certificate",
            cert_dir=str(cert_dir),
            missing=missing,
            hint="mount tls.crt/tls.key there, or pass --webhook-bind= to disable",
        )
        yield None
        return
    server = webhook_server(bind, cert_dir, namespace=namespace, handlers=handlers)
    await server.start()
    try:
        yield server
    finally:
        await server.close()
