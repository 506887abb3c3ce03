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

With ``tls`` (:class:`TlsTermination`: the API server's serving certificate and key, and its CA) the proxy
terminates TLS on both sides instead (the client still verifies the same certificate) and reads the
HTTP/1.1 request heads it forwards, so it can tell a watch from any other request:
:meth:`StallProxy.hold_watches` makes the next ``n`` watch requests reach the server while their
responses never reach the client — no status line, no headers, nothing closed: a watch that never opens
(a proxy that buffers, an overloaded intermediary). Other requests, and later watches, flow.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import yaml

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ("StallProxy", "TlsTermination", "proxied_kubeconfig")

_CHUNK = 65536


@dataclass(frozen=True)
class TlsTermination:
    """What the proxy needs to stand in for the API server: its serving certificate and key (valid for
    127.0.0.1) and the CA to verify the real server with."""

    cert: Path
    key: Path
    ca: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cert), str(self.key))
        return ctx

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


@dataclass(eq=False)
class _Conn:
    writers: tuple[asyncio.StreamWriter, asyncio.StreamWriter]
    #: Cleared by :meth:`StallProxy.freeze`: nothing moves either way.
    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    #: Cleared once a held watch was forwarded: nothing more reaches the client.
    responses: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.flowing.set()
        self.responses.set()

    def close(self) -> None:
        for w in self.writers:
            w.close()


class StallProxy:
    """Forwards ``127.0.0.1:<port>`` to ``upstream`` (``host:port``) until :meth:`close`."""

    def __init__(self, upstream: str, *, tls: TlsTermination | None = None) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.tls = tls
        #: Watch requests whose responses were held back (:meth:`hold_watches`).
        self.held = 0
        self._watches_to_hold = 0
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
        ctx = self.tls.server_context() if self.tls is not None else None
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=ctx)
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

    def hold_watches(self, n: int) -> None:
        """Hold back the responses of the next ``n`` watch requests (needs ``tls``)."""
        if self.tls is None:
            raise RuntimeError("telling a watch from another request needs TLS termination")
        self._watches_to_hold += n

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
            if self.tls is None:
                up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            else:
                up_reader, up_writer = await asyncio.open_connection(
                    *self.upstream, ssl=self.tls.client_context(), server_hostname=self.upstream[0]
                )
        except OSError:
            writer.close()
            return
        conn = _Conn((writer, up_writer))
        self._open.add(conn)
        if self.tls is None:
            requests = self._pump(reader, up_writer, conn)
        else:
            requests = self._requests(reader, up_writer, conn)
        pumps = [
            asyncio.create_task(requests),
            asyncio.create_task(self._pump(up_reader, writer, conn, responses=True)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            self._tasks.difference_update(pumps)
            self._open.discard(conn)
            if conn.flowing.is_set():
                conn.close()

    async def _requests(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, conn: _Conn) -> None:
        """Client to server, one HTTP/1.1 request at a time (head, then a ``Content-Length`` body), so a
        watch request can be recognised; anything else (a chunked body) is forwarded as raw bytes."""
        while True:
            try:
                head = await src.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:  # the client is done
                dst.write(exc.partial)
                await self._pump(src, dst, conn)
                return
            except asyncio.LimitOverrunError:  # not a request head: raw bytes from here on
                await self._pump(src, dst, conn)
                return
            line, _, fields = head.partition(b"\r\n")
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (f.partition(b":") for f in fields.split(b"\r\n") if f)
            }
            if self._watches_to_hold > 0 and _is_watch(line):
                self._watches_to_hold -= 1
                self.held += 1
                conn.responses.clear()
            await conn.flowing.wait()
            dst.write(head)
            if b"chunked" in headers.get(b"transfer-encoding", b""):
                await self._pump(src, dst, conn)
                return
            length = int(headers.get(b"content-length", b"0") or 0)
            if length:
                dst.write(await src.readexactly(length))
            await dst.drain()

    @staticmethod
    async def _pump(
        src: asyncio.StreamReader, dst: asyncio.StreamWriter, conn: _Conn, *, responses: bool = False
    ) -> None:
        while True:
            data = await src.read(_CHUNK)
            await conn.flowing.wait()  # frozen: hold what was read, read no more, close nothing
            if responses:
                await conn.responses.wait()  # a held watch: its response never reaches the client
            if not data:
                with contextlib.suppress(OSError):
                    if dst.can_write_eof():
                        dst.write_eof()
                    else:  # TLS has no half-close
                        dst.close()
                return
            dst.write(data)
            await dst.drain()


def _is_watch(request_line: bytes) -> bool:
    """``GET <path>?…watch=1…`` (or ``watch=true``)."""
    _, _, query = request_line.partition(b"?")
    params = query.split(b" ", 1)[0].split(b"&")
    return request_line.startswith(b"GET ") and (b"watch=1" in params or b"watch=true" in params)


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
