"""Our admission webhooks served in-process and registered in the dev cluster's API server (issue 30: one
copy for every module that needs the API server to call them).

In a cluster the controller process serves them behind a Service; here :func:`webhooks_served` serves
them on 127.0.0.1 with the dev cluster's serving certificate, registers both configurations by URL
(:mod:`gpustack_worker.devcluster.worker_webhooks`) and waits until the API server really calls them.
On exit the configurations are removed before the server stops: with ``failurePolicy: Fail`` a
registration left behind would refuse every later TopologySource write.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from typing import TYPE_CHECKING

from gpustack_worker.api import kinds
from gpustack_worker.cli.webhook_serving import webhook_server
from gpustack_worker.devcluster import worker_webhooks

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.webhook_server import Handler, WebhookServer

__all__ = ("webhooks_served",)


@contextlib.asynccontextmanager
async def webhooks_served(
    devcluster: DevCluster,
    cert_dir: Path,
    *,
    namespace: str = kinds.SYSTEM_NAMESPACE,
    handlers: Mapping[str, Handler] | None = None,
) -> AsyncIterator[WebhookServer]:
    """Serve our stateless webhooks (and ``handlers``, path → handler: the ones that read a process's
    caches) while the block runs, registered in ``devcluster`` and called by it; yields the server.

    ``cert_dir`` receives a copy of the serving certificate and key; ``namespace`` is the worker namespace
    the TopologySource webhook holds references to."""
    assert devcluster.pki is not None
    shutil.copyfile(devcluster.pki.serving_cert, cert_dir / "tls.crt")
    shutil.copyfile(devcluster.pki.serving_key, cert_dir / "tls.key")
    server = webhook_server("127.0.0.1:0", cert_dir, namespace=namespace, handlers=handlers)
    await server.start()
    api = devcluster.bootstrap()
    try:
        ca = devcluster.pki.ca_cert.read_bytes()
        # Blocking calls go to a thread: the API server calls back into this event loop meanwhile.
        await asyncio.to_thread(worker_webhooks.register, api, f"https://127.0.0.1:{server.port}", ca)
        await asyncio.to_thread(worker_webhooks.wait_served, api, 60.0)
        yield server
    finally:
        try:
            await asyncio.to_thread(worker_webhooks.unregister, api)
        finally:
            api.close()
            await server.close()
