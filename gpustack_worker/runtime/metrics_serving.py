"""``/metrics`` over HTTPS, each scrape authenticated and authorised by the API server (an option).

The anchor is controller-runtime's secure metrics serving (``metricsserver.Options{SecureServing: true,
FilterProvider: filters.WithAuthenticationAndAuthorization}``):

* **TLS** from ``tls.crt``/``tls.key`` in a given directory (re-read when they change, as the webhook
  server does: :class:`~gpustack_worker.runtime.webhook_server.TlsFiles`), else a **self-signed**
  certificate for ``localhost``/``127.0.0.1`` generated at start (an ECDSA P-256 key, kept in a private
  temporary directory removed at close), as controller-runtime falls back to
  ``GenerateSelfSignedCertKeyWithFixtures("localhost", 127.0.0.1)``: the scrape is encrypted; who the
  server is can only be verified with a certificate the admin provides. A plain-HTTP request to this
  port fails its TLS handshake and the connection is closed.
* **only** ``GET /metrics``: another path is 404 and another method 405, before any review (as
  controller-runtime's mux does). A ``/metrics`` request passes :class:`~.metrics_auth.DelegatedAuth`:
  no bearer token or one the API server does not authenticate → **401** ``Unauthorized``; authenticated
  but not allowed ``get`` on the non-resource URL ``/metrics`` → **403** ``Authorization denied for user
  <name>``; the API server could not be asked → **500** (``Authentication failed`` / ``Authorization
  for user <name> failed``), logged; else **200** and the exposition of the default registry.
* one request per connection (``Connection: close``), the head within ``header_timeout``.

The health probes stay on the plain port of :class:`~gpustack_worker.runtime.health.HealthServer` (the
kubelet's probes carry no token), which then refuses ``/metrics`` (its :attr:`metrics_elsewhere`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

import structlog
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from gpustack_worker.runtime.health import parse_bind
from gpustack_worker.runtime.metrics_auth import bearer_token
from gpustack_worker.runtime.webhook_server import TlsFiles

if TYPE_CHECKING:
    import ssl

    from gpustack_worker.runtime.metrics_auth import DelegatedAuth

__all__ = ("METRICS_PATH", "SecureMetricsServer", "write_self_signed")

METRICS_PATH: Final = "/metrics"
_MAX_HEAD: Final = 64 * 1024
_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}
_log = structlog.get_logger("gpustack_worker.runtime.metrics_serving")


def write_self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed serving certificate for ``localhost`` and ``127.0.0.1`` (one year) written as
    ``tls.crt``/``tls.key`` (mode 0600) in ``directory``; their paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost@gpustack-worker-metrics")])
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.touch(mode=0o600)
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


class SecureMetricsServer:
    """Authenticated ``/metrics`` over HTTPS on one port (see the module docstring)."""

    def __init__(
        self,
        bind: str,
        auth: DelegatedAuth,
        *,
        cert_dir: str | Path | None = None,
        header_timeout: float = 10.0,
    ) -> None:
        self.host, self._port = parse_bind(bind)
        self.auth = auth
        self.cert_dir = Path(cert_dir) if cert_dir else None
        self.header_timeout = header_timeout
        self.tls: TlsFiles | None = None
        #: Where the self-signed certificate was written (None when ``cert_dir`` provides one).
        self.self_signed_dir: Path | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        #: Answers by status (for tests and logs).
        self.answered: dict[int, int] = {}

    @property
    def port(self) -> int:
        """The bound port (the real one after :meth:`start` when 0 was asked for)."""
        return self._port

    def _certificate(self) -> TlsFiles:
        if self.cert_dir is not None:
            cert, key = self.cert_dir / "tls.crt", self.cert_dir / "tls.key"
            if cert.is_file() and key.is_file():
                return TlsFiles(cert, key)
            _log.warning(
                "metrics certificate not found; serving a self-signed one",
                cert_dir=str(self.cert_dir),
            )
        self.self_signed_dir = Path(tempfile.mkdtemp(prefix="gpustack-worker-metrics-"))
        return TlsFiles(*write_self_signed(self.self_signed_dir))

    async def start(self) -> None:
        """Load (or generate) the certificate and listen."""
        self.tls = self._certificate()
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
            "serving metrics over HTTPS (authenticated)",
            address=f"{self.host}:{self._port}",
            self_signed=self.self_signed_dir is not None,
        )

    def _pick_context(
        self, sslobj: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _ctx: ssl.SSLContext
    ) -> None:
        assert self.tls is not None
        ctx = self.tls.current()
        ctx.sni_callback = self._pick_context
        sslobj.context = ctx

    async def close(self) -> None:
        """Stop listening, close open connections, remove a self-signed certificate."""
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
        if self.self_signed_dir is not None:
            shutil.rmtree(self.self_signed_dir, ignore_errors=True)
            self.self_signed_dir = None

    async def answer(self, method: str, path: str, authorization: str | None) -> tuple[int, str, bytes]:
        """(status, content type, body) for one request."""
        if path.split("?", 1)[0] != METRICS_PATH:
            return 404, "text/plain", b"not found\n"
        if method != "GET":
            return 405, "text/plain", b"method not allowed\n"
        token = bearer_token(authorization)
        if token is None:
            return 401, "text/plain", b"Unauthorized\n"
        try:
            user = await self.auth.authenticate(token)
        except Exception as exc:
            _log.error("metrics authentication failed", error=str(exc))
            return 500, "text/plain", b"Authentication failed\n"
        if user is None:
            return 401, "text/plain", b"Unauthorized\n"
        try:
            allowed, reason = await self.auth.authorize(user, "get", METRICS_PATH)
        except Exception as exc:
            _log.error("metrics authorization failed", user=user.name, error=str(exc))
            return 500, "text/plain", f"Authorization for user {user.name} failed\n".encode()
        if not allowed:
            _log.debug("metrics scrape denied", user=user.name, reason=reason)
            return 403, "text/plain", f"Authorization denied for user {user.name}\n".encode()
        return 200, CONTENT_TYPE_LATEST, generate_latest(REGISTRY)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            head = await self._read_head(reader)
            if head is None:
                return
            if isinstance(head, int):
                status, ctype, body = head, "text/plain", b"bad request\n"
            else:
                status, ctype, body = await self.answer(*head)
            reply = (
                f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode("latin-1")
            writer.write(reply + body)
            await writer.drain()
            self.answered[status] = self.answered.get(status, 0) + 1
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        except Exception:  # never let one connection's surprise reach the event loop's handler
            _log.exception("metrics connection failed")
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_head(self, reader: asyncio.StreamReader) -> tuple[str, str, str | None] | int | None:
        """(method, target, Authorization header) of the request; a status for a bad head; None when the
        peer closed first."""
        async with asyncio.timeout(self.header_timeout):
            first = await reader.readline()
            if not first:
                return None
            authorization: str | None = None
            size = len(first)
            while True:
                try:
                    line = await reader.readline()
                except ValueError:
                    return 431
                if not line:
                    return None
                if line in (b"\r\n", b"\n"):
                    break
                size += len(line)
                if size > _MAX_HEAD:
                    return 431
                name, sep, value = line.decode("latin-1").partition(":")
                if sep and name.strip().lower() == "authorization":
                    authorization = value.strip()
        parts = first.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return 400
        return parts[0], parts[1], authorization
