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

:func:`install` puts the backend on every connection pool of an ``httpx.AsyncClient`` (kr8s builds the
session; httpx has no public way to pass a network backend).
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

    import httpx

__all__ = (
    "Attempt",
    "FenceClosed",
    "FencedBackend",
    "GuardFence",
    "current",
    "fenced",
    "install",
    "installed",
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


class _Stream(httpcore.AsyncNetworkStream):
    """A non-blocking socket (optionally TLS over memory BIOs) whose request writes pass the fence."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._tls: ssl.SSLObject | None = None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
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
        self._pending += self._outgoing.read()

    def _send_some(self, attempt: Attempt | None) -> None:
        """One ``send`` of what is pending (the caller has just checked the fence)."""
        try:
            sent = self._sock.send(self._pending)
        except (BlockingIOError, InterruptedError):
            return
        del self._pending[:sent]
        if attempt is not None:
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
        self._pending += self._outgoing.read()
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
        try:
            async with asyncio.timeout(timeout):
                if self._tls is None:
                    return await self._loop.sock_recv(self._sock, max_bytes)
                while True:
                    try:
                        data = self._tls.read(max_bytes)
                    except ssl.SSLWantReadError:
                        await self._receive()
                        continue
                    except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                        return b""  # like httpcore's anyio stream (standard_compatible=False)
                    if self._outgoing.pending:
                        await self._flush_control()
                    return data
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc)) from exc
        except (OSError, ssl.SSLError) as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def _receive(self) -> None:
        data = await self._loop.sock_recv(self._sock, _READ_CHUNK)
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()

    # -- connection --------------------------------------------------------------------------------

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        tls = ssl_context.wrap_bio(
            self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname
        )
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        tls.do_handshake()
                    except ssl.SSLWantReadError:
                        await self._flush_control()
                        await self._receive()
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


def _set_done(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class FencedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend for asyncio, with streams whose request writes pass the fence."""

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
                    return _Stream(sock)
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


def install(session: httpx.AsyncClient) -> None:
    """Put a :class:`FencedBackend` on every connection pool of ``session`` (its transport and the
    proxy mounts httpx made from the environment). Raises ``TypeError`` when httpx/httpcore no longer
    look as this module expects, so a version change cannot silently leave writes unfenced."""
    backend = FencedBackend()
    transports: list[Any] = [getattr(session, "_transport", None)]
    transports += [t for t in (getattr(session, "_mounts", None) or {}).values() if t is not None]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if not isinstance(pool, httpcore.AsyncConnectionPool) or not hasattr(pool, "_network_backend"):
            raise TypeError(f"cannot fence the writes of {transport!r}: not an httpcore connection pool")
        if pool.connections:
            raise TypeError(f"cannot fence the writes of {transport!r}: it already has connections")
        pool._network_backend = backend


def installed(session: httpx.AsyncClient) -> bool:
    """True when every connection pool of ``session`` uses a :class:`FencedBackend`."""
    transports: list[Any] = [getattr(session, "_transport", None)]
    transports += [t for t in (getattr(session, "_mounts", None) or {}).values() if t is not None]
    return all(
        isinstance(getattr(getattr(t, "_pool", None), "_network_backend", None), FencedBackend)
        for t in transports
    )
