"""The fenced network backend through a real proxy process (proxy.py): TLS inside TLS, and the fence.

With an ``https://`` proxy httpcore's ``AsyncHTTPProxy`` calls ``start_tls`` on the proxy connection (TLS
to the proxy) and then again on the same stream for the API server inside the CONNECT tunnel: the second
session must be layered over the first (its records are the first session's plaintext). The server here
is the recording HTTPS server of ``test_fence_wire``; the proxy's own log shows the tunnels it opened. The
fence still refuses a write on the wire through both layers, and a kept-alive tunnel is reused.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING

import httpcore
import pytest

from gpustack_worker.devcluster.pki import self_signed
from gpustack_worker.runtime import transport, wire
from gpustack_worker.runtime.proxy import Route
from tests.runtime.proxy_server import RealProxy, running_proxy
from tests.runtime.test_fence_wire import Recorder, Script, serve, stop

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="module", params=["http", "https"])
def proxy(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealProxy]:
    with running_proxy(tmp_path_factory.mktemp(f"proxy-{request.param}"), tls=request.param == "https") as p:
        yield p


@pytest.fixture
def server(certificate: tuple[Path, Path, bytes]) -> Iterator[Recorder]:
    recorder = serve(True, certificate)
    yield recorder
    stop(recorder)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, bytes]:
    cert, key = self_signed("proxy-wire-test")
    d = tmp_path_factory.mktemp("server-tls")
    (d / "cert.pem").write_bytes(cert)
    (d / "key.pem").write_bytes(key)
    return d / "cert.pem", d / "key.pem", cert


def pool_through(proxy: RealProxy, server: Recorder, server_ca: bytes) -> httpcore.AsyncConnectionPool:
    """The session's pool to ``server`` through ``proxy``, as the client builds it."""
    server_tls = ssl.create_default_context(cadata=server_ca.decode())
    proxy_tls = None
    if proxy.ca_pem is not None:
        proxy_tls = ssl.create_default_context(cadata=proxy.ca_pem.decode())
    route = Route(proxy.url, "test")
    return transport.build_pool(server.url, ssl_context=server_tls, route=route, proxy_ssl_context=proxy_tls)


def tunnels_to(proxy: RealProxy, server: Recorder) -> int:
    return proxy.connects().count(f"127.0.0.1:{server.server_address[1]}")


async def test_requests_go_through_the_proxy_with_tls_inside_tls(
    proxy: RealProxy, server: Recorder, certificate: tuple[Path, Path, bytes]
) -> None:
    async with pool_through(proxy, server, certificate[2]) as pool:
        for i in range(5):
            response = await pool.request("GET", f"{server.url}/api/v1/namespaces/default/configmaps/r{i}")
            assert response.status == 200
        body = b"x" * 3_000_000  # many TLS records, several sends, through both layers
        response = await pool.request("PATCH", f"{server.url}/configmaps/big", content=body)
        assert response.status == 200
        assert ("PATCH", "/configmaps/big") in server.complete("big")
        assert len(server.requests) == 6
        assert tunnels_to(proxy, server) >= 1, "the proxy opened no tunnel to the server"
        assert server.connections == 1, "a kept-alive tunnel was not reused"
        [connection] = pool.connections
        info = connection.info()
        assert "HTTP/1.1" in info


async def test_the_server_certificate_is_checked_inside_the_tunnel(
    proxy: RealProxy, server: Recorder
) -> None:
    other_ca, _ = _other_certificate()
    async with pool_through(proxy, server, other_ca) as pool:
        with pytest.raises(httpcore.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await pool.request("GET", f"{server.url}/version")


def _other_certificate() -> tuple[bytes, bytes]:
    return self_signed("another-ca")


@pytest.mark.parametrize(
    ("answers", "nothing_sent"),
    [([False], True), ([True, False], False)],
    ids=["closed-at-the-headers", "closed-between-headers-and-body"],
)
async def test_the_fence_refuses_a_write_through_the_proxy(
    proxy: RealProxy,
    server: Recorder,
    certificate: tuple[Path, Path, bytes],
    answers: list[bool],
    nothing_sent: bool,
) -> None:
    async with pool_through(proxy, server, certificate[2]) as pool:
        assert (await pool.request("GET", f"{server.url}/version")).status == 200
        fence = Script(answers)
        with pytest.raises(wire.FenceClosed) as caught, wire.fenced(fence) as attempt:
            await pool.request("PATCH", f"{server.url}/configmaps/fenced", content=b"{}" * 10)
        assert attempt.incomplete
        assert (caught.value.bytes_sent == 0) == nothing_sent
        assert fence.asked == len(answers), "the fence was asked again after it closed"
        assert await asyncio.to_thread(server.wait_closed, 1), "the refused write left its tunnel open"
        assert not server.complete("fenced"), "the refused write reached the server complete"
        assert server.saw_bytes_of("fenced") == (not nothing_sent)
        # The next request opens a new tunnel and goes through.
        assert (await pool.request("GET", f"{server.url}/after")).status == 200
        assert server.complete("after")
        assert server.connections == 2


async def test_a_write_refused_after_the_proxy_connect_reports_nothing_of_it_sent(
    proxy: RealProxy, server: Recorder, certificate: tuple[Path, Path, bytes]
) -> None:
    """On a new tunnel the fenced write's task also writes the proxy's CONNECT (and, for an https proxy,
    the TLS handshakes): those bytes are not the request's. Refused at the request's first send, nothing
    of the request left (the client's message says so: refused, not incomplete)."""
    async with pool_through(proxy, server, certificate[2]) as pool:
        fence = Script([True, False])  # open at the CONNECT, closed at the request's headers
        with pytest.raises(wire.FenceClosed) as caught, wire.fenced(fence) as attempt:
            await pool.request("PATCH", f"{server.url}/configmaps/after-connect", content=b"{}")
        assert fence.asked == 2, "the CONNECT and the request were not each checked"
        assert tunnels_to(proxy, server) >= 1, "the CONNECT did not go out"
        assert caught.value.bytes_sent == 0
        assert attempt.bytes_sent == 0
        assert attempt.incomplete
        assert not server.saw_bytes_of("after-connect")


#: A password with characters a URL must escape (``@``, ``:``, ``%``), as it appears in the proxy URL.
USER, PASSWORD = "kube", "p@ss:w%rd"
ESCAPED = "p%40ss%3Aw%25rd"


@pytest.fixture(scope="module")
def authenticating_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealProxy]:
    with running_proxy(
        tmp_path_factory.mktemp("proxy-auth"), tls=False, basic_auth=f"{USER}:{PASSWORD}"
    ) as p:
        yield p


def pool_with_url(url: str, server_ca: bytes) -> httpcore.AsyncConnectionPool:
    server_tls = ssl.create_default_context(cadata=server_ca.decode())
    return transport.build_pool("https://127.0.0.1", ssl_context=server_tls, route=Route(url, "test"))


async def test_the_credentials_in_a_proxy_url_authenticate_the_connect(
    authenticating_proxy: RealProxy, server: Recorder, certificate: tuple[Path, Path, bytes]
) -> None:
    """client-go sends a proxy URL's user and password (percent-decoded) as Proxy-Authorization: Basic."""
    port = authenticating_proxy.port
    async with pool_with_url(f"http://127.0.0.1:{port}", certificate[2]) as pool:
        with pytest.raises(httpcore.ProxyError, match="407"):
            await pool.request("GET", f"{server.url}/version")
    assert not server.requests, "the proxy let an unauthenticated CONNECT through"
    async with pool_with_url(f"http://{USER}:{ESCAPED}@127.0.0.1:{port}", certificate[2]) as pool:
        assert (await pool.request("GET", f"{server.url}/version")).status == 200
    assert tunnels_to(authenticating_proxy, server) == 1
