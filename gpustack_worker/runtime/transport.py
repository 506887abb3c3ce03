"""The API client's HTTP transport, built from public httpx/httpcore constructors only.

httpx builds its own connection pool when given none, with httpcore's default network backend; the
client's writes must pass the fence on the wire (:mod:`.wire`), so the session is built here instead:
an ``httpcore.AsyncConnectionPool(network_backend=FencedBackend(), ...)`` (or, when a proxy applies,
``httpcore.AsyncHTTPProxy``/``AsyncSOCKSProxy`` with the same backend) wrapped in :class:`Transport`, our
``httpx.AsyncBaseTransport``, which :class:`httpx.AsyncClient` takes as ``transport=``. Nothing of
httpx or httpcore is written or swapped after construction; the one private piece is the pool's linear
bookkeeping pass, used only on verified httpcore versions (:mod:`.pool`).

HTTP/1.1 only: :func:`build_pool` refuses ``http2=True`` and the TLS context offers only ``http/1.1`` in
ALPN, so a server that prefers h2 (kube-apiserver does) answers over HTTP/1.1. HTTP/2 would multiplex
many requests on one connection: a write the fence refuses closes its connection, which would cut every
watch and request sharing it, and a ``send`` would carry other streams' frames, which the fence cannot
tell apart.

Errors: httpcore's exceptions are mapped to httpx's (:data:`EXCEPTIONS`) as httpx's own transport maps
them, so callers (the retry policy, ``cli/errors.py``) see ``httpx.TransportError`` subclasses.
:class:`~.wire.FenceClosed` passes through unmapped (it is not a transport failure).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

import httpcore
import httpx

from gpustack_worker.runtime import proxy, wire
from gpustack_worker.runtime.pool import pool_classes

if TYPE_CHECKING:
    import ssl
    from collections.abc import AsyncIterable, AsyncIterator

__all__ = (
    "ALPN",
    "EXCEPTIONS",
    "KEEPALIVE_EXPIRY_S",
    "MAX_CONNECTIONS",
    "Http2Refused",
    "ProxyRoute",
    "SocksUnavailable",
    "Transport",
    "build_pool",
    "http1_context",
    "mapped",
)

#: Connections one session may hold (httpx's default); every one of them is kept alive while the pool
#: has room (keep-alive limit = connection limit: ``docs/performance.md``, issue 18).
MAX_CONNECTIONS: Final = 100
#: Seconds an idle connection is kept (httpx's default).
KEEPALIVE_EXPIRY_S: Final = 5.0
#: The only application protocol offered in the TLS handshake.
ALPN: Final = ("http/1.1",)

#: httpcore's exception -> httpx's, most specific first (the table httpx's own transport applies).
EXCEPTIONS: Final[tuple[tuple[type[Exception], type[httpx.TransportError]], ...]] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)
_EXACT: Final = dict(EXCEPTIONS)


class Http2Refused(ValueError):
    """HTTP/2 was asked of the API client's transport, which speaks HTTP/1.1 only (module docstring)."""


class SocksUnavailable(ValueError):
    """A SOCKS proxy applies and the ``socksio`` package (httpx's ``socks`` extra) is not installed."""


class ProxyRoute(Protocol):
    """A proxy the session goes through (``proxy.Route``): its URL, and where the setting came from."""

    @property
    def url(self) -> str: ...

    @property
    def source(self) -> str: ...


def mapped(exc: Exception, request: httpx.Request | None = None) -> Exception:
    """httpx's exception for httpcore's ``exc`` (:data:`EXCEPTIONS`); ``exc`` itself when it is not one of
    httpcore's (a :class:`~.wire.FenceClosed`, a cancellation's aftermath)."""
    kind = _EXACT.get(type(exc))
    if kind is None:
        kind = next((to for frm, to in EXCEPTIONS if isinstance(exc, frm)), None)
        if kind is None:
            return exc
    return kind(str(exc), request=request)


def http1_context(context: ssl.SSLContext) -> ssl.SSLContext:
    """``context`` offering only HTTP/1.1 in ALPN (set once, at session build)."""
    context.set_alpn_protocols(list(ALPN))
    return context


class _Body(httpx.AsyncByteStream):
    """A response body from httpcore, its errors mapped to httpx's."""

    __slots__ = ("_request", "_stream")

    def __init__(self, stream: AsyncIterable[bytes], request: httpx.Request) -> None:
        self._stream = stream
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._stream:
                yield part
        except Exception as exc:
            error = mapped(exc, self._request)
            if error is exc:
                raise
            raise error from exc

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


class Transport(httpx.AsyncBaseTransport):
    """httpx's transport interface over one httpcore pool (:func:`build_pool`). ``sni_hostname``: the
    kubeconfig's ``tls-server-name`` (the name the server's certificate is checked against)."""

    def __init__(self, pool: httpcore.AsyncConnectionPool, *, sni_hostname: str | None = None) -> None:
        self.pool = pool
        self._sni = sni_hostname

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        extensions = request.extensions
        if self._sni:
            extensions = {**extensions, "sni_hostname": self._sni}
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=extensions,
        )
        try:
            response = await self.pool.handle_async_request(core)
        except Exception as exc:
            error = mapped(exc, request)
            if error is exc:
                raise
            raise error from exc
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(cast("AsyncIterable[bytes]", response.stream), request),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.pool.aclose()


def build_pool(
    server: str,
    *,
    ssl_context: ssl.SSLContext,
    route: ProxyRoute | None = None,
    proxy_ssl_context: ssl.SSLContext | None = None,
    max_connections: int = MAX_CONNECTIONS,
    keepalive_expiry: float = KEEPALIVE_EXPIRY_S,
    http2: bool = False,
    tls_server_name: str | None = None,
) -> httpcore.AsyncConnectionPool:
    """The connection pool of one session to ``server`` (``https://host:port``): direct, or through
    ``route``'s proxy (http://, https:// — TLS to the proxy, then TLS to the server inside the CONNECT
    tunnel — or socks5:// with ``socksio``). Every connection is opened by a :class:`~.wire.FencedBackend`
    and kept alive while the pool has room; HTTP/1.1 only (``http2=True`` raises :class:`Http2Refused`)."""
    if http2:
        raise Http2Refused(
            "the API client speaks HTTP/1.1 only: with HTTP/2 a write the fence refuses would close the"
            " connection under every request and watch multiplexed on it"
        )
    classes = pool_classes()
    # What every pool kind shares: our TLS context to the server, every connection kept alive while the
    # pool has room, HTTP/1.1 only.
    common: dict[str, Any] = {
        "ssl_context": http1_context(ssl_context),
        "max_connections": max_connections,
        "max_keepalive_connections": max_connections,
        "keepalive_expiry": keepalive_expiry,
        "http1": True,
        "http2": False,
    }
    if route is None:
        return classes.direct(network_backend=wire.FencedBackend(server_name=tls_server_name), **common)
    # Through a proxy to an https server, each connection carries the proxy's exchange (CONNECT, or
    # SOCKS) before the server's TLS handshake; to an http server an HTTP proxy forwards the requests.
    # The server's TLS inside the tunnel gets the kubeconfig's tls-server-name (httpcore does not pass it).
    https = server.startswith("https://")
    backend = wire.FencedBackend(tunnel=https, server_name=tls_server_name if https else None)
    scheme = route.url.split(":", 1)[0].lower()
    # httpcore ignores a proxy URL's user:password; client-go sends them (proxy.split_credentials).
    proxy_url, proxy_auth = proxy.split_credentials(route.url)
    if scheme in ("socks5", "socks5h"):
        if importlib.util.find_spec("socksio") is None:
            raise SocksUnavailable(
                f"proxy {proxy_url} ({route.source}): a SOCKS proxy needs the socksio package"
                " (pip install 'httpx[socks]')"
            )
        socks: httpcore.AsyncConnectionPool = classes.socks_proxy(
            proxy_url=proxy_url, proxy_auth=proxy_auth, network_backend=backend, **common
        )
        return socks
    proxy_context = None
    if scheme == "https":
        proxy_context = http1_context(proxy_ssl_context or httpx.create_ssl_context())
    return classes.http_proxy(
        proxy_url=proxy_url,
        proxy_auth=proxy_auth,
        proxy_ssl_context=proxy_context,
        network_backend=backend,
        **common,
    )
