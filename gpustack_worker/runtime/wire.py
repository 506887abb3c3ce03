"""The network backend under the API client's HTTP session: a write fence checked on the wire.

A fence checked once before a request (and then left to ``asyncio.timeout``, an event-loop callback that
cannot pre-empt anything) does not stop a request whose task runs right behind a long synchronous stretch
(a relist ingest, a GC pause): the task passed the check, the loop stalled, the fence closed, and the task
then put the request on the wire anyway, because its next step ran before the timeout's callback did. So
the fence is checked again at the only moment that matters, when the request's bytes are handed to the
kernel: :meth:`_Stream.write` asks the fence of the request being written and calls ``socket.send`` in
the same synchronous step, with no ``await`` in between. No other code path sends a request byte.

Why our own stream instead of wrapping httpcore's anyio one: anyio's ``SocketStream.send`` awaits a
checkpoint before ``transport.write``, and an asyncio transport keeps what the kernel did not take at once
in a buffer that the event loop flushes later from a callback that knows nothing of fences. Here every
``send`` of request bytes is preceded by a fence check in the same step, and bytes the kernel did not
accept stay with us until the next check passes. TLS runs over memory BIOs (``ssl.SSLObject``), so the
ciphertext goes through the same checked ``send``.

Which fence: :func:`fenced` sets a :class:`~contextvars.ContextVar` to an :class:`Attempt` around one
request. httpx and httpcore run a request in the calling task, so the stream writing it sees that
attempt; writes of other requests on other connections (reads, watches, unfenced views) see their own or
none. A refused write closes its connection (never a half-written request left on a pooled connection)
and raises :class:`FenceClosed`, which is not an httpcore exception: httpcore treats a ``WriteError`` as
"the server may have answered early" and goes on to read, and httpx would map it to a retriable transport
error. The client turns it into :class:`~gpustack_worker.runtime.client.Fenced`.

The backend is passed to httpcore's pool through its public constructor (:mod:`.transport` builds the
client's session). Its streams also say where a request is (:class:`Progress`, one per request, set by the
client around it): connecting, in the TLS handshake, in a proxy's CONNECT, writing the request, waiting
for the response headers; the client names that phase when the request's deadline passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import select
import socket
import ssl
from typing import TYPE_CHECKING, Any, Final, Protocol

import httpcore

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = (
    "BODY",
    "CONNECT",
    "HEADERS",
    "PROGRESS",
    "PROXY_CONNECT",
    "REQUEST",
    "TLS_HANDSHAKE",
    "Attempt",
    "FenceClosed",
    "FencedBackend",
    "GuardFence",
    "Progress",
    "current",
    "fenced",
    "time_left",
)

#: Bytes asked of the kernel per ``recv``.
_READ_CHUNK: Final = 64 * 1024


class GuardFence(Protocol):
    """What the wire asks (the client's ``WriteFence``)."""

    def remaining(self) -> float: ...


def time_left(fence: GuardFence) -> float:
    """Seconds ``fence`` stays open, 0.0 when it is closed (anything not above zero, NaN included): the
    one reading of a fence, before an attempt and at each write."""
    left = fence.remaining()
    return left if left > 0 else 0.0


class Attempt:
    """One fenced request attempt: its fence, and how much of the request has left the process."""

    __slots__ = ("bytes_sent", "fence", "incomplete")

    def __init__(self, fence: GuardFence) -> None:
        self.fence = fence
        #: Request bytes the kernel accepted for this attempt (the fence was open at each send).
        self.bytes_sent = 0
        #: True when the attempt ended with part of the request unwritten (its connection was closed).
        self.incomplete = False


class FenceClosed(Exception):
    """The fence of the request being written was closed at the moment of a send; nothing more was sent
    and the connection was closed. ``bytes_sent`` bytes of the request had left before (0: none)."""

    def __init__(self, bytes_sent: int) -> None:
        super().__init__(f"the write fence closed at the write ({bytes_sent} bytes of the request sent)")
        self.bytes_sent = bytes_sent


_CURRENT: Final[contextvars.ContextVar[Attempt | None]] = contextvars.ContextVar(
    "fence_attempt", default=None
)


def current() -> Attempt | None:
    """The fenced attempt the running task is writing, if any."""
    return _CURRENT.get()


@contextlib.contextmanager
def fenced(fence: GuardFence) -> Iterator[Attempt]:
    """Make ``fence`` the fence of every request byte the current task writes inside the block."""
    attempt = Attempt(fence)
    token = _CURRENT.set(attempt)
    try:
        yield attempt
    finally:
        _CURRENT.reset(token)


#: The phases of one request, in order (a request on a kept-alive connection starts at :data:`REQUEST`).
CONNECT: Final = "connect"
TLS_HANDSHAKE: Final = "TLS handshake"
PROXY_CONNECT: Final = "proxy CONNECT"
REQUEST: Final = "request"
HEADERS: Final = "response headers"
BODY: Final = "response body"


class Progress:
    """Where one request is: :attr:`phase` is one of the phases above. The client creates one per request
    and sets :data:`PROGRESS` to it around the request; the backend's streams move it forward (a plain
    attribute write at each step, no per-byte work); the client sets :data:`BODY` once the headers are in."""

    __slots__ = ("phase",)

    def __init__(self) -> None:
        #: Waiting for a connection of the pool, or opening one.
        self.phase: str = CONNECT


#: The progress of the request the running task is making (None: nobody is asking).
PROGRESS: Final[contextvars.ContextVar[Progress | None]] = contextvars.ContextVar(
    "request_progress", default=None
)


class _Stream(httpcore.AsyncNetworkStream):
    """A non-blocking socket (optionally TLS over memory BIOs) whose request writes pass the fence."""

    def __init__(self, sock: socket.socket, *, tunnel: bool = False, server_name: str | None = None) -> None:
        self._sock = sock
        #: The name the server's certificate is checked against when it is not the URL's host (the
        #: kubeconfig's ``tls-server-name``): httpcore passes a request's ``sni_hostname`` to the TLS of a
        #: direct connection but not to the server's TLS inside a proxy's tunnel (see :meth:`start_tls`).
        self._server_name = server_name
        #: True while this is a connection to a proxy whose tunnel to the server is not open yet: what is
        #: written and read until the server's TLS handshake is the proxy's CONNECT (or SOCKS) exchange.
        self._tunnel = tunnel
        #: Something was written (a proxy's TLS comes before the CONNECT, the server's after it).
        self._wrote = False
        self._loop = asyncio.get_running_loop()
        #: The innermost TLS session, once its handshake is done (what request bytes are written to).
        self._tls: ssl.SSLObject | None = None
        #: TLS sessions, the outermost (the socket's peer) first: two through an https:// proxy, the
        #: server's inside the proxy's (see :meth:`start_tls`).
        self._layers: list[_Layer] = []
        #: Bytes (ciphertext under TLS) handed to us and not yet accepted by the kernel.
        self._pending = bytearray()
        self._closed = False
        #: One poll set per stream for :meth:`get_extra_info` ``"is_readable"``: httpcore asks it of every
        #: idle connection in every pass of its pool (several per request), and building a poll set per
        #: question was a tenth of the --all-nodes agent's CPU. Never polled once the socket is closed
        #: (its descriptor number may be reused).
        self._readable = select.poll()
        self._readable.register(sock, select.POLLIN)

    # -- writing -----------------------------------------------------------------------------------

    # httpcore's interface passes timeouts as arguments (hence the ASYNC109 exemptions below).
    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        progress = PROGRESS.get()
        if progress is not None:
            progress.phase = PROXY_CONNECT if self._tunnel else REQUEST
        self._wrote = True
        attempt = _CURRENT.get()
        try:
            async with asyncio.timeout(timeout):
                # The check and the hand-over to the kernel happen in one synchronous step.
                self._check(attempt)
                self._append(buffer)
                self._send_some(attempt)
                while self._pending:
                    await self._writable()
                    self._check(attempt)
                    self._send_some(attempt)
        except FenceClosed:
            raise
        except TimeoutError as exc:
            self._abort(attempt)
            raise httpcore.WriteTimeout(str(exc)) from exc
        except (OSError, ssl.SSLError) as exc:
            self._abort(attempt)
            raise httpcore.WriteError(str(exc)) from exc
        except BaseException:
            # Cancelled in the middle of a request (the fence's answer deadline, a shutdown): the request
            # is incomplete on this connection, which must not be reused.
            self._abort(attempt)
            raise

    def _check(self, attempt: Attempt | None) -> None:
        if attempt is not None and not time_left(attempt.fence):
            self._abort(attempt)
            raise FenceClosed(attempt.bytes_sent)

    def _append(self, data: bytes) -> None:
        if self._tls is None:
            self._pending += data
            return
        self._tls.write(data)
        self._pump()

    def _pump(self) -> None:
        """Move TLS output down the layers, in one synchronous step: each session's ciphertext is the
        plaintext of the session under it, and the outermost's goes to :attr:`_pending` (the socket)."""
        for level in range(len(self._layers) - 1, -1, -1):
            data = self._layers[level].outgoing.read()
            if not data:
                continue
            if level:
                self._layers[level - 1].tls.write(data)
            else:
                self._pending += data

    def _send_some(self, attempt: Attempt | None) -> None:
        """One ``send`` of what is pending (the caller has just checked the fence)."""
        try:
            sent = self._sock.send(self._pending)
        except (BlockingIOError, InterruptedError):
            return
        del self._pending[:sent]
        if attempt is not None and not self._tunnel:
            # A proxy's CONNECT (or SOCKS) exchange, written by the request's task on a new tunnel, is
            # checked like any write but is none of the request's bytes.
            attempt.bytes_sent += sent

    def _abort(self, attempt: Attempt | None) -> None:
        if attempt is not None:
            attempt.incomplete = True
        self._close()

    async def _writable(self) -> None:
        waiter: asyncio.Future[None] = self._loop.create_future()
        fd = self._sock.fileno()
        self._loop.add_writer(fd, _set_done, waiter)
        try:
            await waiter
        finally:
            self._loop.remove_writer(fd)

    async def _flush_control(self) -> None:
        """Send TLS protocol bytes (handshake, key updates): no request data, so not fenced."""
        self._pump()
        while self._pending:
            try:
                sent = self._sock.send(self._pending)
            except (BlockingIOError, InterruptedError):
                sent = 0
            del self._pending[:sent]
            if self._pending:
                await self._writable()

    # -- reading -----------------------------------------------------------------------------------

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        progress = PROGRESS.get()
        if progress is not None and progress.phase == REQUEST:
            progress.phase = HEADERS
        try:
            async with asyncio.timeout(timeout):
                if self._tls is None:
                    return await self._loop.sock_recv(self._sock, max_bytes)
                data = await self._read_level(len(self._layers) - 1, max_bytes)
                if any(layer.outgoing.pending for layer in self._layers):
                    await self._flush_control()
                return data
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc)) from exc
        except (OSError, ssl.SSLError) as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def _read_level(self, level: int, max_bytes: int) -> bytes:
        """Plaintext of TLS layer ``level`` (-1: the socket's bytes); b"" at its end."""
        if level < 0:
            return await self._loop.sock_recv(self._sock, max_bytes)
        tls = self._layers[level].tls
        while True:
            try:
                return tls.read(max_bytes)
            except ssl.SSLWantReadError:
                await self._receive(level)
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""  # like httpcore's anyio stream (standard_compatible=False)

    async def _receive(self, level: int) -> None:
        """Feed TLS layer ``level`` what the layer under it (or the socket) has."""
        data = await self._read_level(level - 1, _READ_CHUNK)
        if data:
            self._layers[level].incoming.write(data)
        else:
            self._layers[level].incoming.write_eof()

    # -- connection --------------------------------------------------------------------------------

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        self._starting_tls()
        if self._server_name and not self._tunnel:  # the server's TLS (direct or tunnelled), no proxy's
            server_hostname = self._server_name
        # On a stream that is TLS already (an https:// proxy, then the server inside its CONNECT tunnel),
        # the new session is layered over the last one: its records are that session's plaintext.
        level = len(self._layers)
        try:
            layer = _Layer(ssl_context, server_hostname)  # inside: a refused context closes the socket too
            tls = layer.tls
            self._layers.append(layer)
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        tls.do_handshake()
                    except ssl.SSLWantReadError:
                        await self._flush_control()
                        await self._receive(level)
                        continue
                    break
                await self._flush_control()
        except TimeoutError as exc:
            self._close()
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except (OSError, ssl.SSLError) as exc:
            self._close()
            raise httpcore.ConnectError(str(exc)) from exc
        except BaseException:
            self._close()
            raise
        self._tls = tls
        return self

    def _starting_tls(self) -> None:
        """A TLS handshake starts: the proxy's (before anything was written) or the server's (after a
        proxy's CONNECT, which ends the tunnel's set-up, or on a direct connection)."""
        progress = PROGRESS.get()
        if progress is not None:
            progress.phase = TLS_HANDSHAKE
        if self._wrote:
            self._tunnel = False

    async def aclose(self) -> None:
        self._close()

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pending.clear()
            self._sock.close()

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._tls
        if self._closed:
            return None
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "server_addr":
            return self._sock.getpeername()
        if info == "socket":
            return self._sock
        if info == "is_readable":
            # True when a read would not block: data, or the peer closed (httpcore asks this of an idle
            # connection to tell whether the server dropped it).
            return bool(self._readable.poll(0))
        return None


class _Layer:
    """One TLS session over memory BIOs: ``incoming`` takes the ciphertext from below (the socket or the
    session under it), ``outgoing`` holds the ciphertext for below."""

    __slots__ = ("incoming", "outgoing", "tls")

    def __init__(self, context: ssl.SSLContext, server_hostname: str | None) -> None:
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(
            self.incoming, self.outgoing, server_side=False, server_hostname=server_hostname
        )


def _set_done(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class FencedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend for asyncio, with streams whose request writes pass the fence.

    ``tunnel``: the backend of a proxy's pool, whose connections go to the proxy and carry its CONNECT (or
    SOCKS) exchange before the server's TLS (for :class:`Progress`). ``server_name``: the kubeconfig's
    ``tls-server-name``, given to the server's TLS (not an https proxy's), tunnelled ones included."""

    def __init__(self, *, tunnel: bool = False, server_name: str | None = None) -> None:
        self._tunnel = tunnel
        self._server_name = server_name

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        errors: list[OSError] = []
        progress = PROGRESS.get()
        if progress is not None:
            progress.phase = CONNECT
        try:
            async with asyncio.timeout(timeout):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                for family, kind, proto, _, address in infos:
                    sock = socket.socket(family, kind, proto)
                    try:
                        sock.setblocking(False)
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        for option in socket_options or ():
                            sock.setsockopt(*option)
                        if local_address:
                            sock.bind((local_address, 0))
                        await loop.sock_connect(sock, address)
                    except OSError as exc:
                        sock.close()
                        errors.append(exc)
                        continue
                    except BaseException:
                        sock.close()
                        raise
                    return _Stream(sock, tunnel=self._tunnel, server_name=self._server_name)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        raise httpcore.ConnectError("; ".join(str(e) for e in errors) or f"no address for {host}:{port}")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            for option in socket_options or ():
                sock.setsockopt(*option)
            async with asyncio.timeout(timeout):
                await loop.sock_connect(sock, path)
        except TimeoutError as exc:
            sock.close()
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            sock.close()
            raise httpcore.ConnectError(str(exc)) from exc
        except BaseException:
            sock.close()
            raise
        return _Stream(sock)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
