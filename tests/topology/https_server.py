"""A real HTTPS inventory endpoint on 127.0.0.1 for the webhook arm's tests, and its test CA.

:class:`Pki` (the dev cluster's :class:`~gpustack_worker.devcluster.pki.Authority`) makes a throw-away CA and
issues server and client certificates from it.
:class:`SnapshotServer` serves a snapshot body over TLS in a background thread::

    pki = Pki.create()
    with SnapshotServer(pki, bearer_token="s3cret", body=b"...") as server:
        creds = Credentials(bearer_token="s3cret", ca_bundle_pem=pki.cert_pem)
        body = await fetch(server.url, creds, timeout=5)
        server.body = b"..."            # the next request gets the new snapshot
        server.mode = Mode.SLOW         # ok / slow / trickle / huge / malformed / redirect / status
        assert server.request_count == 1

``headers`` are added to every response; ``hosts`` are the SANs of the server certificate.
Authentication: ``bearer_token`` answers 401 unless ``Authorization: Bearer <token>`` matches;
``require_client_cert`` makes the TLS handshake demand a client certificate issued by ``client_ca``
(default: the same :class:`Pki`). Every accepted TCP connection is counted (``connections``) and every
request that got as far as its headers is recorded (``requests``), so a test can prove that an endpoint
was never contacted. ``stop()`` wakes a handler that is still sleeping and joins every thread.
"""

from __future__ import annotations

import contextlib
import enum
import http.server
import os
import ssl
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from gpustack_worker.devcluster.pki import Authority

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ("DEFAULT_SNAPSHOT", "Mode", "Pki", "Recorded", "SnapshotServer")

DEFAULT_SNAPSHOT = b'{"apiVersion":"topology.gpustack.ai/v1alpha1","revision":"r1","nodes":{}}'


#: The test CA (``create(name)``, ``issue(...)``, ``cert_pem``).
Pki = Authority


class Mode(enum.Enum):
    """How the server answers the next requests."""

    OK = "ok"  # 200 + ``body``
    SLOW = "slow"  # waits ``delay`` seconds before the status line, then answers like OK
    TRICKLE = "trickle"  # 200 + headers at once, then ``body`` one slice per ``delay`` (10 slices)
    HUGE = "huge"  # 200 + ``huge_size`` bytes
    MALFORMED = "malformed"  # 200 + a body that is no snapshot
    REDIRECT = "redirect"  # 302 to ``redirect_to``
    STATUS = "status"  # ``status`` with a short body (none for 204/304)


@dataclass(frozen=True)
class Recorded:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    client_cert_cn: str | None

    @property
    def authorization(self) -> str | None:
        return self.headers.get("authorization")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the test reads ``requests`` and ``errors`` instead

    def do_GET(self) -> None:
        owner = self.server.owner
        peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        owner._record(
            Recorded(
                self.command,
                self.path,
                {k.lower(): v for k, v in self.headers.items()},
                _common_name(peer),
            )
        )
        self.close_connection = True
        if owner.bearer_token is not None and self.headers.get("Authorization") != (
            f"Bearer {owner.bearer_token}"
        ):
            self._send(401, b"unauthorized\n", extra={"WWW-Authenticate": "Bearer"})
            return
        mode = owner.mode
        if mode is Mode.SLOW:
            owner.stopping.wait(owner.delay)
            self._send(200, owner.body)
        elif mode is Mode.TRICKLE:
            self._trickle(owner.body, owner.delay, owner.stopping)
        elif mode is Mode.HUGE:
            self._send(200, b"x" * owner.huge_size)
        elif mode is Mode.MALFORMED:
            self._send(200, b"{this is: [not a snapshot\n")
        elif mode is Mode.REDIRECT:
            self._send(302, b"moved\n", extra={"Location": owner.redirect_to})
        elif mode is Mode.STATUS:
            self._send(owner.status, b"" if owner.status in (204, 304) else b"status body\n")
        else:
            self._send(200, owner.body)

    def _send(self, status: int, body: bytes, *, extra: dict[str, str] | None = None) -> None:
        owner = self.server.owner
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in {**owner.headers, **(extra or {})}.items():
            self.send_header(name, value)
        if status not in (204, 304) and owner.content_length:
            self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if body and status not in (204, 304):
            self.wfile.write(body)

    def _trickle(self, body: bytes, delay: float, stopping: threading.Event) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        slices = 10
        step = max(1, -(-len(body) // slices))
        for start in range(0, len(body), step):
            if stopping.wait(delay):
                return
            self.wfile.write(body[start : start + step])
            self.wfile.flush()


def _common_name(peer: Any) -> str | None:
    if not peer:
        return None
    for rdn in peer.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every handler thread
    block_on_close = True
    allow_reuse_address = False

    def __init__(self, owner: SnapshotServer, context: ssl.SSLContext) -> None:
        self.owner = owner
        self.context = context
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        self.owner._count_connection()
        super().process_request(request, client_address)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The handshake runs here, in the connection's own thread, so a stalled or failed client
        # cannot hold up the accept loop.
        request.settimeout(10)
        tls = self.context.wrap_socket(request, server_side=True)
        try:
            super().finish_request(tls, client_address)
        finally:
            with contextlib.suppress(OSError):
                tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        self.owner._error(f"{type(exc).__name__}: {exc}")


class SnapshotServer:
    """A local HTTPS snapshot endpoint (see the module docstring). Use as a context manager."""

    PATH: ClassVar[str] = "/snapshot"

    def __init__(
        self,
        pki: Pki,
        *,
        body: bytes = DEFAULT_SNAPSHOT,
        bearer_token: str | None = None,
        require_client_cert: bool = False,
        client_ca: Pki | None = None,
        mode: Mode = Mode.OK,
        delay: float = 5.0,
        huge_size: int = (1 << 20) + 1,
        redirect_to: str = "https://127.0.0.1:9/elsewhere",
        status: int = 500,
        content_length: bool = True,
        headers: dict[str, str] | None = None,
        hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    ) -> None:
        self.pki = pki
        self.body = body
        self.bearer_token = bearer_token
        self.mode = mode
        self.delay = delay
        self.huge_size = huge_size
        self.redirect_to = redirect_to
        self.status = status
        self.content_length = content_length
        self.headers = dict(headers or {})
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._requests: list[Recorded] = []
        self._errors: list[str] = []
        self._connections = 0

        cert_pem, key_pem = pki.issue("snapshot-server", server=True, hosts=hosts)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_chain(context, cert_pem, key_pem)
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cadata=(client_ca or pki).cert_pem.decode())
        self._server = _Server(self, context)
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> SnapshotServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="snapshot-server"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()  # joins the handler threads

    def __enter__(self) -> SnapshotServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- what the tests read -------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}{self.PATH}"

    @property
    def requests(self) -> list[Recorded]:
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self._requests)

    @property
    def connections(self) -> int:
        with self._lock:
            return self._connections

    @property
    def errors(self) -> list[str]:
        with self._lock:
            return list(self._errors)

    # --- called by the server threads ----------------------------------------------------------------
    def _record(self, request: Recorded) -> None:
        with self._lock:
            self._requests.append(request)

    def _count_connection(self) -> None:
        with self._lock:
            self._connections += 1

    def _error(self, text: str) -> None:
        with self._lock:
            self._errors.append(text)


def _load_chain(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        cert_path = os.path.join(directory, "tls.crt")
        key_path = os.path.join(directory, "tls.key")
        for path, blob in ((cert_path, cert_pem), (key_path, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(blob)
        context.load_cert_chain(cert_path, key_path)
