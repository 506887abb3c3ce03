"""A small HTTPS server for admission webhooks: the API server POSTs an AdmissionReview, a handler answers.

What the API server needs from a webhook endpoint, and nothing more (no web framework dependency):

* **TLS** ≥ 1.2 with a certificate and key read from files (``tls.crt`` / ``tls.key`` of a mounted
  Secret). The files are re-read at each new TLS handshake and the context is rebuilt when they
  changed, so a rotated Secret is served without a restart; a pair that fails to load (caught half-way
  through a rotation) keeps the previous one until a later handshake loads the new pair. ALPN offers
  ``http/1.1`` only (the API server's Go client then skips HTTP/2).
* **HTTP/1.1 with keep-alive**: the API server reuses its connections, so one connection serves any
  number of requests in sequence; ``Connection: close`` or HTTP/1.0 ends it after the response. Bodies
  are read by ``Content-Length`` (the API server always sends one; chunked bodies get 411), capped at
  ``max_body`` (413, then the connection is closed). The request head must arrive within
  ``header_timeout`` once its first byte has, a body within ``body_timeout``; an idle kept-alive
  connection is closed after ``idle_timeout``.
* **Routing**: ``add(path, handler)`` registers a handler for POSTs to one path (the query string is
  ignored); other paths answer 404, other methods on a registered path 405.
* **Handlers** are synchronous pure functions from the decoded JSON body (the ``AdmissionReview``) to the
  JSON response body, called on the event loop. A body that is not a JSON object answers 400. A handler
  that raises is logged and answered with a *denied* review (``allowed: false``, code 500, the request's
  ``uid`` echoed) — never an HTTP 500, which the API server would retry and report less clearly.

* **Metrics**, controller-runtime's (:data:`~gpustack_worker.runtime.metrics.WEBHOOK_REQUESTS`,
  ``..._LATENCY``, ``..._IN_FLIGHT``, labelled ``webhook=<path>``): every answer to a request for a
  registered path is counted by its HTTP status, whatever it is (a review allowed or denied, a handler
  failure's denied review — 200 —, 400, 405, 408, 411, 413); the latency runs from the complete request
  head to the response written. Requests for other paths, and heads too malformed to name one, are not
  labelled (an unbounded label value), as controller-runtime's mux leaves them uninstrumented.

``start()`` binds (port 0 picks a free port, see :attr:`port`), ``close()`` stops listening and closes open
connections. This module knows nothing of the kinds it validates: the mutating and validating webhooks of
every controller are registered on one server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import orjson
import structlog

from gpustack_worker.runtime.health import parse_bind
from gpustack_worker.runtime.metrics import WEBHOOK_IN_FLIGHT, WEBHOOK_LATENCY, WEBHOOK_REQUESTS

if TYPE_CHECKING:
    import os

__all__ = ("Handler", "TlsFiles", "WebhookServer", "denied_review")

#: A webhook handler: the decoded request body → the response body.
Handler: TypeAlias = Callable[[dict[str, Any]], dict[str, Any]]

_log = structlog.get_logger("gpustack_worker.runtime.webhook_server")

#: Default request body cap; controller-runtime allows 7 MiB, an AdmissionReview of an object at the
#: API server's 1.5 MiB object limit (object + oldObject) fits in 3 MiB.
DEFAULT_MAX_BODY: Final = 3 * 1024 * 1024
_MAX_HEAD: Final = 64 * 1024
_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    431: "Request Header Fields Too Large",
    505: "HTTP Version Not Supported",
}


def denied_review(body: Any, code: int, message: str) -> dict[str, Any]:
    """An ``AdmissionReview`` response refusing the request ``body`` (its ``uid`` and apiVersion echoed)."""
    request = body.get("request") if isinstance(body, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    api_version = body.get("apiVersion") if isinstance(body, dict) else None
    return {
        "apiVersion": api_version if isinstance(api_version, str) else "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": uid if isinstance(uid, str) else "",
            "allowed": False,
            "status": {"status": "Failure", "code": code, "message": message},
        },
    }


def _signature(path: Path) -> bytes:
    # The content itself: a few KiB read per new connection (the API server keeps its connections),
    # and unlike mtime/size/inode it cannot miss a same-second, same-size rewrite in place.
    return path.read_bytes()


class TlsFiles:
    """The serving certificate and key files, as a server-side SSL context reloaded when they change."""

    def __init__(self, cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self._loaded: tuple[bytes, bytes] | None = None
        self._context: ssl.SSLContext | None = None
        #: How many times a changed pair was loaded (the first load included).
        self.loads = 0

    def _build(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["http/1.1"])
        ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def current(self) -> ssl.SSLContext:
        """The context for the pair on disk now; the last good one when the files cannot be loaded.

        Raises (``OSError`` / ``ssl.SSLError``) only when no pair was ever loaded.
        """
        try:
            sig = (_signature(self.cert_file), _signature(self.key_file))
            if sig != self._loaded or self._context is None:
                self._context = self._build()
                self._loaded = sig
                self.loads += 1
                if self.loads > 1:
                    _log.info("webhook serving certificate reloaded", cert=str(self.cert_file))
        except (OSError, ssl.SSLError) as exc:
            if self._context is None:
                raise
            _log.warning("webhook certificate reload failed; keeping the previous one", error=str(exc))
        return self._context


class _Reject(Exception):
    """Answer ``status`` and close the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class WebhookServer:
    """HTTPS admission webhooks on one port (see the module docstring)."""

    def __init__(
        self,
        bind: str,
        *,
        cert_file: str | os.PathLike[str],
        key_file: str | os.PathLike[str],
        max_body: int = DEFAULT_MAX_BODY,
        header_timeout: float = 10.0,
        body_timeout: float = 30.0,
        idle_timeout: float = 120.0,
    ) -> None:
        self.host, self._port = parse_bind(bind)
        self.tls = TlsFiles(cert_file, key_file)
        self.max_body = max_body
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.idle_timeout = idle_timeout
        self._handlers: dict[str, Handler] = {}
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        #: Requests answered, by (path, status), and connections accepted (for tests and logs).
        self.answered: dict[tuple[str, int], int] = {}
        self.connections = 0

    @property
    def port(self) -> int:
        """The bound port (the real one after :meth:`start` when 0 was asked for)."""
        return self._port

    def add(self, path: str, handler: Handler) -> None:
        """Serve POSTs to ``path`` with ``handler``."""
        if not path.startswith("/"):
            raise ValueError(f"webhook path must start with '/': {path!r}")
        self._handlers[path] = handler
        # Exported from the start, as controller-runtime's InstrumentedHook does (rates never start from
        # "absent").
        for code in ("200", "500"):
            WEBHOOK_REQUESTS.labels(webhook=path, code=code)
        WEBHOOK_LATENCY.labels(webhook=path)
        WEBHOOK_IN_FLIGHT.labels(webhook=path)

    async def start(self) -> None:
        """Load the certificate (raises if it cannot be) and listen."""
        base = self.tls.current()
        base.sni_callback = self._pick_context
        self._server = await asyncio.start_server(
            self._connection,
            self.host,
            self._port,
            ssl=base,
            ssl_handshake_timeout=self.header_timeout,
            limit=_MAX_HEAD,
        )
        self._port = int(self._server.sockets[0].getsockname()[1])
        _log.info(
            "serving admission webhooks", address=f"{self.host}:{self._port}", paths=sorted(self._handlers)
        )

    def _pick_context(
        self, sslobj: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _ctx: ssl.SSLContext
    ) -> None:
        # Called by OpenSSL for every ClientHello (with or without SNI): switch to the current pair.
        ctx = self.tls.current()
        ctx.sni_callback = self._pick_context
        sslobj.context = ctx

    async def close(self) -> None:
        """Stop listening and close every open connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self.connections += 1
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # never let one connection's surprise reach the event loop's handler
            _log.exception("webhook connection failed")
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_head(self, reader: asyncio.StreamReader) -> list[bytes] | None:
        """The request line and header lines; None when the peer closed an idle connection."""
        async with asyncio.timeout(self.idle_timeout):
            first = await reader.readline()
            while first in (b"\r\n", b"\n"):  # RFC 9112: ignore empty lines before a request
                first = await reader.readline()
        if not first:
            return None
        lines = [first]
        size = len(first)
        async with asyncio.timeout(self.header_timeout):
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # a single line above the stream limit
                    raise _Reject(431, "request header too large") from None
                if not line:
                    raise asyncio.IncompleteReadError(b"", None)
                if line in (b"\r\n", b"\n"):
                    return lines
                size += len(line)
                if size > _MAX_HEAD:
                    raise _Reject(431, "request header too large")
                lines.append(line)

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; whether the connection stays open."""
        target_path = ""  # the request's path (``answered``), once the head names one
        path = ""  # the same when it is a registered one (the metrics' ``webhook`` label)
        started = 0.0
        try:
            try:
                head = await self._read_head(reader)
            except TimeoutError:
                return False
            if head is None:
                return False
            method, target, version, headers = _parse_head(head)
            keep_alive = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
            target_path = target.split("?", 1)[0]
            if target_path in self._handlers:
                path, started = target_path, time.perf_counter()
                WEBHOOK_IN_FLIGHT.labels(webhook=path).inc()
            if "transfer-encoding" in headers:
                raise _Reject(411, "a Content-Length is required (chunked bodies are not accepted)")
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                raise _Reject(400, "invalid Content-Length") from None
            if length < 0:
                raise _Reject(400, "invalid Content-Length")
            if length > self.max_body:
                raise _Reject(413, f"request body too large: {length} bytes, limit {self.max_body}")
            if headers.get("expect", "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            try:
                async with asyncio.timeout(self.body_timeout):
                    body = await reader.readexactly(length) if length else b""
            except TimeoutError:
                raise _Reject(408, "request body not received in time") from None
            status, payload, extra = self._route(method, target_path, body)
        except _Reject as rej:
            await self._answer(
                writer, target_path, path, started, rej.status, _text(str(rej)), keep_alive=False
            )
            return False
        except BaseException:
            if path:  # no answer (the peer went away mid-body, or the server is closing)
                WEBHOOK_IN_FLIGHT.labels(webhook=path).dec()
            raise
        await self._answer(
            writer, target_path, path, started, status, payload, keep_alive=keep_alive, extra=extra
        )
        return keep_alive

    async def _answer(
        self,
        writer: asyncio.StreamWriter,
        target_path: str,
        path: str,
        started: float,
        status: int,
        payload: tuple[str, bytes],
        *,
        keep_alive: bool,
        extra: str = "",
    ) -> None:
        """:meth:`_respond`, counted under ``path`` when it is a registered one, "" otherwise (even when
        writing failed: the answer was decided, as controller-runtime counts a handler's status)."""
        try:
            await self._respond(writer, target_path, status, payload, keep_alive=keep_alive, extra=extra)
        finally:
            if path:
                WEBHOOK_IN_FLIGHT.labels(webhook=path).dec()
                WEBHOOK_REQUESTS.labels(webhook=path, code=str(status)).inc()
                WEBHOOK_LATENCY.labels(webhook=path).observe(time.perf_counter() - started)

    def _route(self, method: str, path: str, body: bytes) -> tuple[int, tuple[str, bytes], str]:
        handler = self._handlers.get(path)
        if handler is None:
            return 404, _text(f"no webhook at {path}"), ""
        if method != "POST":
            return 405, _text(f"{method} not allowed: POST an AdmissionReview"), "Allow: POST\r\n"
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return 400, _text(f"request body is not JSON: {exc}"), ""
        if not isinstance(decoded, dict):
            return 400, _text("request body is not a JSON object"), ""
        try:
            answer = handler(decoded)
            data = orjson.dumps(answer)
        except Exception as exc:  # a handler bug must not turn into a 500 the API server retries
            _log.exception("webhook handler failed", path=path)
            answer = denied_review(
                decoded, 500, f"internal error in webhook {path}: {type(exc).__name__}: {exc}"
            )
            data = orjson.dumps(answer)
        return 200, ("application/json", data), ""

    async def _respond(
        self,
        writer: asyncio.StreamWriter,
        path: str,
        status: int,
        payload: tuple[str, bytes],
        *,
        keep_alive: bool,
        extra: str = "",
    ) -> None:
        ctype, body = payload
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n{extra}"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
        self.answered[(path, status)] = self.answered.get((path, status), 0) + 1


def _text(message: str) -> tuple[str, bytes]:
    return "text/plain; charset=utf-8", (message + "\n").encode()


def _parse_head(lines: list[bytes]) -> tuple[str, str, str, dict[str, str]]:
    parts = lines[0].decode("latin-1").split()
    if len(parts) != 3:
        raise _Reject(400, "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise _Reject(505, f"{version} not supported")
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        name, sep, value = raw.decode("latin-1").partition(":")
        if not sep or not name or name != name.strip():
            raise _Reject(400, "malformed header line")
        lname = name.lower()
        value = value.strip()
        if lname == "content-length" and lname in headers and headers[lname] != value:
            raise _Reject(400, "conflicting Content-Length headers")
        headers[lname] = (
            f"{headers[lname]}, {value}" if lname in headers and lname != "content-length" else value
        )
    return method, target, version, headers
