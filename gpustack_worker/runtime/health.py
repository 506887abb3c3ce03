"""The operations endpoint: ``/healthz``, ``/readyz`` and Prometheus ``/metrics`` on one port.

A deliberately tiny HTTP/1.1 responder on asyncio streams (no web framework dependency): the kubelet's
probes and a Prometheus scraper send simple GETs and read one response. ``/healthz`` answers 200 while
the event loop serves requests; ``/readyz`` answers 200 once the caller-supplied readiness check
passes (informers synced).

When ``/metrics`` is served over HTTPS with authentication instead
(:mod:`gpustack_worker.runtime.metrics_serving`), :attr:`HealthServer.metrics_elsewhere` says where, and this
plain port answers ``/metrics`` with 404 naming it: the metrics are never readable without a token then,
while the kubelet's probes (which carry none) keep working here, as controller-runtime keeps its health
probes on a port apart from its secure metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Final

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("HealthServer", "parse_bind")

_log = structlog.get_logger("gpustack_worker.runtime.health")
_REASONS: Final = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
_PATH_OF_METRICS: Final = "/metrics"


def parse_bind(bind: str) -> tuple[str, int]:
    """``"127.0.0.1:8080"`` / ``":8080"`` → (host, port); an empty host means all interfaces."""
    host, _, port = bind.rpartition(":")
    return (host.strip("[]") or "0.0.0.0"), int(port)


class HealthServer:
    """Serves health, readiness and metrics until closed."""

    def __init__(self, bind: str, ready: Callable[[], bool]) -> None:
        self.host, self.port = parse_bind(bind)
        self._ready = ready
        self._server: asyncio.Server | None = None
        #: Where ``/metrics`` is served instead (e.g. ``"https://:8443/metrics"``); None: served here.
        self.metrics_elsewhere: str | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        sock = self._server.sockets[0].getsockname()
        self.port = int(sock[1])
        _log.info("serving health and metrics", address=f"{self.host}:{self.port}")

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    def route(self, method: str, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for one request."""
        path = path.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"method not allowed\n"
        if path in ("/healthz", "/livez"):
            return 200, "text/plain", b"ok\n"
        if path == "/readyz":
            if self._ready():
                return 200, "text/plain", b"ok\n"
            return 503, "text/plain", b"caches not synced\n"
        if path == _PATH_OF_METRICS:
            if self.metrics_elsewhere is not None:
                return 404, "text/plain", f"metrics are served at {self.metrics_elsewhere}\n".encode()
            return 200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY)
        return 404, "text/plain", b"not found\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                request = await reader.readline()
                while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    del line
            parts = request.decode("latin-1").split()
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("GET", "/")
            status, ctype, body = self.route(method, path)
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
