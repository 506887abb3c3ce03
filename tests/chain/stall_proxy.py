"""A loopback TCP proxy that can silently stall the connections passing through it (the fault suite's
stalled watch stream, issue 17).

It forwards bytes unchanged in both directions (TLS passes through: the client still talks to the API
server's certificate, valid for 127.0.0.1), on the test's event loop. :meth:`StallProxy.freeze` stops
forwarding on every connection open at that moment, in both directions, without closing anything: the
client's socket stays established and its reads simply never return — what a middlebox that lost its flow
state (a NAT or conntrack entry expired, a load balancer failed over) does to a long-lived watch. Bytes
already read from a frozen side are held, not delivered; reading stops, so TCP backpressure does the rest.
Connections opened afterwards are forwarded normally. :func:`proxied_kubeconfig` rewrites a kubeconfig to
go through the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import yaml

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ("StallProxy", "proxied_kubeconfig")

_CHUNK = 65536


@dataclass(eq=False)
class _Conn:
    writers: tuple[asyncio.StreamWriter, asyncio.StreamWriter]
    flowing: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        for w in self.writers:
            w.close()


class StallProxy:
    """Forwards ``127.0.0.1:<port>`` to ``upstream`` (``host:port``) until :meth:`close`."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open: set[_Conn] = set()
        self._frozen: list[_Conn] = []
        self._tasks: set[asyncio.Task[None]] = set()
        #: Connections accepted in total, and those accepted since the last :meth:`freeze`.
        self.accepted = 0
        self.accepted_since_freeze = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> StallProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def freeze(self) -> int:
        """Stop forwarding on every connection open now (new ones still flow); how many were frozen."""
        frozen = [c for c in self._open if c.flowing.is_set()]
        for conn in frozen:
            conn.flowing.clear()
        self._frozen.extend(frozen)
        self.accepted_since_freeze = 0
        return len(frozen)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._open) + self._frozen:
            conn.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.accepted_since_freeze += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        conn = _Conn((writer, up_writer))
        self._open.add(conn)
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer, conn)),
            asyncio.create_task(self._pump(up_reader, writer, conn)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            self._tasks.difference_update(pumps)
            self._open.discard(conn)
            if conn.flowing.is_set():
                conn.close()

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, conn: _Conn) -> None:
        while True:
            data = await src.read(_CHUNK)
            await conn.flowing.wait()  # frozen: hold what was read, read no more, close nothing
            if not data:
                with contextlib.suppress(OSError):
                    dst.write_eof()
                return
            dst.write(data)
            await dst.drain()


def proxied_kubeconfig(source: Path, target: Path, proxy: StallProxy) -> Path:
    """Copy kubeconfig ``source`` to ``target`` with every cluster's server behind ``proxy`` (same scheme,
    host 127.0.0.1 — the API server's certificate covers it)."""
    config = yaml.safe_load(source.read_text())
    for entry in config.get("clusters") or ():
        server = urlsplit(entry["cluster"]["server"])
        entry["cluster"]["server"] = f"{server.scheme}://{proxy.address}"
    target.write_text(yaml.safe_dump(config, sort_keys=True))
    target.chmod(0o600)
    return target
