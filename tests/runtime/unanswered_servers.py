"""Local "API servers" on 127.0.0.1 that stop answering at one point each, served from a thread of their own
(so a test can run a CLI command as a subprocess against them and block on it).

Behaviours (:data:`BEHAVIOURS`):

* ``silent``: accepts TCP and never writes a byte (an ``https://`` client stops in its TLS handshake);
* ``no-headers``: completes TLS, reads the request, never answers;
* ``stalled-body``: completes TLS, sends the headers of a 200 and part of its body, then nothing;
* ``closes``: completes TLS and closes the connection on the first request;
* ``version-only``: completes TLS, answers ``GET /version``, never answers another request;
* ``plain-http``: speaks plain HTTP (a 400 to whatever it reads) where the client expects TLS;
* ``untrusted``: a TLS server whose certificate the kubeconfig's CA does not sign;
* ``wrong-name``: a certificate signed for another address than 127.0.0.1;
* ``proxy-silent``: an HTTP proxy that reads the CONNECT and never answers it;
* ``proxy-refuses``: an HTTP proxy that answers every CONNECT with ``403 Forbidden``.

:func:`kubeconfig` writes a kubeconfig pointing at one of them (through it, for the proxies).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import ssl
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import yaml

from gpustack_worker.devcluster.pki import self_signed

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

BEHAVIOURS: Final = (
    "silent",
    "no-headers",
    "stalled-body",
    "closes",
    "version-only",
    "plain-http",
    "untrusted",
    "wrong-name",
    "proxy-silent",
    "proxy-refuses",
)
_PROXIES: Final = ("proxy-silent", "proxy-refuses")
VERSION: Final = b'{"major": "1", "minor": "35", "gitVersion": "v1.35.0"}'


def certificate(address: str = "127.0.0.1") -> tuple[bytes, bytes]:
    """A self-signed CA certificate for ``address`` and its key, PEM."""
    return self_signed(f"unanswered-{address}", (address,))


async def _drain(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
        while await reader.read(65536):
            pass


async def _head(reader: asyncio.StreamReader) -> bytes:
    with contextlib.suppress(
        asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ssl.SSLError
    ):
        return await reader.readuntil(b"\r\n\r\n")
    return b""


@dataclass
class Server:
    """One behaviour served on 127.0.0.1 from a background thread."""

    behaviour: str
    tmp: Path
    port: int = 0
    #: The CA the kubeconfig trusts (the server's own, except for ``untrusted``).
    ca: bytes = b""
    #: Connections accepted so far (a positive signal that the client got this far).
    accepted: int = 0
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _thread: threading.Thread | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return (
            f"http://127.0.0.1:{self.port}"
            if self.behaviour in _PROXIES
            else f"https://127.0.0.1:{self.port}"
        )

    def _tls(self) -> ssl.SSLContext | None:
        if self.behaviour in ("silent", "plain-http", *_PROXIES):
            self.ca = certificate()[0]
            return None
        cert, key = certificate("127.0.0.2" if self.behaviour == "wrong-name" else "127.0.0.1")
        self.ca = certificate()[0] if self.behaviour == "untrusted" else cert
        (self.tmp / f"{self.behaviour}.crt").write_bytes(cert)
        (self.tmp / f"{self.behaviour}.key").write_bytes(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.tmp / f"{self.behaviour}.crt", self.tmp / f"{self.behaviour}.key")
        return context

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            if self.behaviour == "stalled-body":
                if await _head(reader):
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
                    )
                    await writer.drain()
            elif self.behaviour == "closes":
                await _head(reader)
                writer.close()
                return
            elif self.behaviour == "version-only":
                while (await _head(reader)).startswith(b"GET /version "):
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                        % (len(VERSION), VERSION)
                    )
                    await writer.drain()
            elif self.behaviour == "plain-http":
                await reader.read(65536)
                writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                await writer.drain()
                writer.close()
                return
            elif self.behaviour == "proxy-refuses":
                while await _head(reader):
                    writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
            await _drain(reader)
        except (ConnectionError, ssl.SSLError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
            if task is not None:
                self._tasks.discard(task)

    def start(self) -> Server:
        tls = self._tls()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)

            async def serve() -> asyncio.AbstractServer:
                return await asyncio.start_server(self._handle, sock=sock, ssl=tls)

            self._server = self._loop.run_until_complete(serve())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"unanswered-{self.behaviour}", daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError(f"the {self.behaviour} server did not start")
        return self

    def stop(self) -> None:
        async def close() -> None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        if self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()


@contextlib.contextmanager
def serving(behaviour: str, tmp: Path) -> Iterator[Server]:
    server = Server(behaviour, tmp).start()
    try:
        yield server
    finally:
        server.stop()


def kubeconfig(path: Path, server: Server) -> Path:
    """A kubeconfig for ``server`` (for a proxy: an API server address behind it that nothing serves)."""
    cluster: dict[str, Any] = {"server": server.url}
    if server.behaviour in _PROXIES:
        cluster = {"server": "https://10.255.255.1:6443", "proxy-url": server.url}
    cluster["certificate-authority-data"] = base64.b64encode(server.ca).decode()
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "unanswered",
                "clusters": [{"name": "unanswered", "cluster": cluster}],
                "users": [{"name": "unanswered", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "unanswered", "context": {"cluster": "unanswered", "user": "unanswered"}}
                ],
            }
        )
    )
    return path
