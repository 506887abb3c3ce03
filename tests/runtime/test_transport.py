"""runtime/transport.py and the client's session: built from public constructors, HTTP/1.1 only, every
request bounded by one deadline whose error names the phase it stopped in.

The deadline tests run the real client (``Client.connect``: kr8s' configuration, our session, httpcore,
the fenced backend) against local servers on 127.0.0.1 that stop answering at one point each: a listen
queue that is full (no connection), a TCP server that never speaks TLS, a TLS server that never sends
headers, one that sends headers and stalls the body, a proxy that never answers CONNECT. Small deadlines;
the phase is asserted, never the elapsed time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib.util
import socket
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpcore
import httpx
import orjson
import pytest
import yaml
from test_fence_wire import certificate_pair

from gpustack_worker.devcluster.procs import free_port
from gpustack_worker.runtime import wire
from gpustack_worker.runtime.client import TRANSPORT_ERRORS, Client, RequestTimeout, Unauthorized, _Api
from gpustack_worker.runtime.pool import LINEAR_POOL_HTTPCORE, LinearHTTPProxy, LinearPool
from gpustack_worker.runtime.resources import CONFIG_MAP
from gpustack_worker.runtime.transport import (
    EXCEPTIONS,
    Http2Refused,
    SocksUnavailable,
    Transport,
    build_pool,
    mapped,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from pathlib import Path

DEADLINE = 0.5
VERSION = orjson.dumps({"major": "1", "minor": "35", "gitVersion": "v1.35.0"})


@dataclass(frozen=True)
class Route:
    """A proxy route as ``proxy.route_for`` gives it."""

    url: str
    source: str = "test"


# -- local servers ---------------------------------------------------------------------------------


async def _head(reader: asyncio.StreamReader) -> str:
    """One request's head (``""`` at EOF); request bodies are skipped by Content-Length."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return ""
    head = raw.decode("latin-1")
    for line in head.split("\r\n"):
        if line.lower().startswith("content-length:"):
            await reader.readexactly(int(line.split(":", 1)[1]))
    return head


async def _answer(writer: asyncio.StreamWriter, body: bytes, status: str = "200 OK") -> None:
    writer.write(
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Accepts, reads everything, never writes a byte."""
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while await reader.read(65536):
            pass
    writer.close()


def _version_then(rest: Callable[[asyncio.StreamReader, asyncio.StreamWriter, str], Awaitable[bool]]) -> Any:
    """A handler answering ``GET /version``, and any other request with ``rest`` (False: stop serving)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            while head := await _head(reader):
                if head.startswith("GET /version "):
                    await _answer(writer, VERSION)
                elif not await rest(reader, writer, head):
                    break
            while await reader.read(65536):
                pass
        writer.close()

    return handle


async def _never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: str) -> bool:
    return False  # never answers; reads until the client hangs up


def _tls_server_context(cert: Path, key: Path, alpn: list[str] | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if alpn:
        context.set_alpn_protocols(alpn)
    return context


@contextlib.asynccontextmanager
async def serving(handler: Any, tls: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=tls)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, bytes]:
    cert, key = certificate_pair()
    d = tmp_path_factory.mktemp("transport-tls")
    (d / "cert.pem").write_bytes(cert)
    (d / "key.pem").write_bytes(key)
    return d / "cert.pem", d / "key.pem", cert


def write_kubeconfig(path: Path, server: str, ca: bytes | None, *, proxy: str | None = None) -> str:
    cluster: dict[str, Any] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    if proxy:
        cluster["proxy-url"] = proxy
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


async def timed_out(kubeconfig: str) -> RequestTimeout:
    """The first request's :class:`RequestTimeout` (``Client.connect`` must raise it)."""
    with pytest.raises(RequestTimeout) as caught:
        await Client.connect(kubeconfig, timeout_s=DEADLINE)
    return caught.value


# -- every request has a deadline, named by its phase -----------------------------------------------


async def test_a_server_whose_listen_queue_is_full_times_out_connecting(
    tmp_path: Path, tls_files: tuple[Path, Path, bytes]
) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = []
    for _ in range(4):  # the kernel queues a connection or two, then drops SYNs: connect() hangs
        sock = socket.socket()
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.connect(("127.0.0.1", port))
        filler.append(sock)
    try:
        err = await timed_out(write_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", tls_files[2]))
    finally:
        for sock in (*filler, listener):
            sock.close()
    assert (err.phase, err.method, err.path) == ("connect", "GET", "/version")
    assert err.server == f"https://127.0.0.1:{port}"
    assert err.seconds == DEADLINE
    assert str(err) == f"https://127.0.0.1:{port}: GET /version: no connection within 0.5 s"


async def test_a_server_that_accepts_and_never_speaks_tls_times_out_in_the_handshake(
    tmp_path: Path, tls_files: tuple[Path, Path, bytes]
) -> None:
    async with serving(_silent) as port:
        err = await timed_out(write_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", tls_files[2]))
    assert err.phase == "TLS handshake"
    assert "GET /version: no TLS handshake within 0.5 s" in str(err)
    assert isinstance(err, TRANSPORT_ERRORS), "callers treat it as no answer from the server"


async def test_a_plain_http_server_that_never_answers_times_out_waiting_for_headers(tmp_path: Path) -> None:
    async with serving(_silent) as port:
        err = await timed_out(write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}", None))
    assert err.phase == "response headers"


async def test_a_tls_server_that_never_sends_headers_times_out_waiting_for_headers(
    tmp_path: Path, tls_files: tuple[Path, Path, bytes]
) -> None:
    handshakes: list[str] = []

    async def silent_after_tls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handshakes.append(str(writer.get_extra_info("ssl_object").version()))
        await _silent(reader, writer)

    tls = _tls_server_context(tls_files[0], tls_files[1])
    async with serving(silent_after_tls, tls) as port:
        err = await timed_out(write_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", tls_files[2]))
    assert handshakes, "the TLS handshake completed"
    assert err.phase == "response headers"
    assert str(err).endswith("GET /version: no response headers within 0.5 s")


async def test_a_server_that_stalls_the_body_times_out_reading_it(
    tmp_path: Path, tls_files: tuple[Path, Path, bytes]
) -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await _head(reader):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            await writer.drain()
        await _silent(reader, writer)

    tls = _tls_server_context(tls_files[0], tls_files[1])
    async with serving(stall, tls) as port:
        err = await timed_out(write_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", tls_files[2]))
    assert err.phase == "response body"


async def test_a_proxy_that_never_answers_connect_times_out_in_the_proxy_phase(
    tmp_path: Path, tls_files: tuple[Path, Path, bytes]
) -> None:
    connects: list[str] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connects.append(await _head(reader))
        await _silent(reader, writer)

    async with serving(proxy) as port:
        kubeconfig = write_kubeconfig(
            tmp_path / "kc", "https://127.0.0.1:6443", tls_files[2], proxy=f"http://127.0.0.1:{port}"
        )
        err = await timed_out(kubeconfig)
    assert connects and connects[0].startswith("CONNECT 127.0.0.1:6443 "), connects
    assert err.phase == "proxy CONNECT"


async def test_every_request_after_the_first_has_the_deadline_too(
    tmp_path: Path, tls_files: tuple[Path, Path, bytes]
) -> None:
    tls = _tls_server_context(tls_files[0], tls_files[1])
    async with serving(_version_then(_never), tls) as port:
        client = await Client.connect(
            write_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", tls_files[2]), timeout_s=DEADLINE
        )
        try:
            with pytest.raises(RequestTimeout) as caught:
                await client._once("GET", "/api/v1/namespaces/ns/configmaps/x", params=None, content=None,
                                   content_type=None)  # fmt: skip
            assert (caught.value.method, caught.value.phase) == ("GET", "response headers")
            assert caught.value.path == "/api/v1/namespaces/ns/configmaps/x"
            assert client.requests_by_method["GET"] == 2, "the timed-out request is counted"
        finally:
            await client.close()


async def test_a_watch_is_bounded_while_it_opens(tmp_path: Path, tls_files: tuple[Path, Path, bytes]) -> None:
    tls = _tls_server_context(tls_files[0], tls_files[1])
    async with serving(_version_then(_never), tls) as port:
        client = await Client.connect(
            write_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", tls_files[2]), timeout_s=DEADLINE
        )
        try:
            with pytest.raises(RequestTimeout) as caught:
                async for _ in client.watch(
                    CONFIG_MAP, resource_version="1", namespace="ns", timeout_seconds=60
                ):
                    pass
            assert (caught.value.method, caught.value.phase) == ("WATCH", "response headers")
            assert caught.value.path == "/api/v1/namespaces/ns/configmaps"
        finally:
            await client.close()


async def test_an_open_watch_outlives_the_deadline_its_idle_limit_applies(
    tmp_path: Path, tls_files: tuple[Path, Path, bytes]
) -> None:
    send = asyncio.Event()

    async def watch(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: str) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        await writer.drain()
        await send.wait()
        line = orjson.dumps({"type": "ADDED", "object": {"metadata": {"name": "late"}}}) + b"\n"
        writer.write(f"{len(line):x}\r\n".encode() + line + b"\r\n0\r\n\r\n")
        await writer.drain()
        return False

    tls = _tls_server_context(tls_files[0], tls_files[1])
    async with serving(_version_then(watch), tls) as port:
        client = await Client.connect(
            write_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", tls_files[2]), timeout_s=DEADLINE
        )
        opened = asyncio.Event()

        async def release() -> None:
            await opened.wait()
            await asyncio.sleep(DEADLINE * 4)  # the deadline has long passed while the watch was idle
            send.set()

        releasing = asyncio.ensure_future(release())
        try:
            events = [
                e
                async for e in client.watch(
                    CONFIG_MAP, resource_version="1", namespace="ns", timeout_seconds=60, on_open=opened.set
                )
            ]
            assert [e["object"]["metadata"]["name"] for e in events] == ["late"]
        finally:
            releasing.cancel()
            await client.close()


# -- HTTP/1.1 only ----------------------------------------------------------------------------------


def test_http2_is_refused() -> None:
    with pytest.raises(Http2Refused, match=r"HTTP/1\.1 only"):
        build_pool("https://127.0.0.1:6443", ssl_context=ssl.create_default_context(), http2=True)


async def test_a_server_offering_h2_is_spoken_to_in_http1(
    tmp_path: Path, tls_files: tuple[Path, Path, bytes]
) -> None:
    chosen: list[str | None] = []

    async def version(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        chosen.append(writer.get_extra_info("ssl_object").selected_alpn_protocol())
        await _version_then(_never)(reader, writer)

    tls = _tls_server_context(tls_files[0], tls_files[1], alpn=["h2", "http/1.1"])
    async with serving(version, tls) as port:
        client = await Client.connect(
            write_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", tls_files[2]), timeout_s=5.0
        )
        try:
            async with client._api.call_api("GET", base="/version") as response:
                await response.aread()
            assert response.http_version == "HTTP/1.1"
        finally:
            await client.close()
    assert chosen and set(chosen) == {"http/1.1"}, chosen


# -- the session is ours, from public constructors --------------------------------------------------


def test_the_pools_are_httpcores_public_classes_on_the_fenced_backend() -> None:
    context = ssl.create_default_context()
    direct = build_pool("https://127.0.0.1:6443", ssl_context=context)
    proxied = build_pool("https://127.0.0.1:6443", ssl_context=context, route=Route("http://127.0.0.1:3128"))
    assert isinstance(direct, httpcore.AsyncConnectionPool)
    assert isinstance(proxied, httpcore.AsyncHTTPProxy)
    if httpcore.__version__ in LINEAR_POOL_HTTPCORE:
        assert (type(direct), type(proxied)) == (LinearPool, LinearHTTPProxy)
    else:
        assert (type(direct), type(proxied)) == (httpcore.AsyncConnectionPool, httpcore.AsyncHTTPProxy)
    assert context.get_ciphers()  # a usable context, now offering http/1.1 only (tested on the wire above)


@pytest.mark.skipif(importlib.util.find_spec("socksio") is not None, reason="socksio is installed")
def test_a_socks_proxy_without_socksio_is_one_clear_line() -> None:
    with pytest.raises(SocksUnavailable) as caught:
        build_pool("https://10.0.0.1:6443", ssl_context=ssl.create_default_context(),
                   route=Route("socks5://127.0.0.1:1080", "kubeconfig proxy-url"))  # fmt: skip
    assert "\n" not in str(caught.value)
    assert "socksio" in str(caught.value) and "kubeconfig proxy-url" in str(caught.value)


def _httpcore_exceptions() -> list[type[Exception]]:
    return [
        kind
        for kind in vars(httpcore).values()
        if isinstance(kind, type) and issubclass(kind, Exception) and kind.__module__.startswith("httpcore")
    ]


@pytest.mark.parametrize("kind", _httpcore_exceptions(), ids=lambda k: k.__name__)
def test_httpcore_errors_map_as_httpx_maps_them(kind: type[Exception]) -> None:
    """Our table against httpx's own transport's (the oracle), for every exception httpcore exports."""
    from httpx._transports.default import map_httpcore_exceptions

    exc = kind("boom")
    with pytest.raises(Exception) as theirs, map_httpcore_exceptions():
        raise exc
    ours = mapped(exc)
    assert type(ours) is type(theirs.value)
    assert str(ours) == "boom"
    assert {frm for frm, _ in EXCEPTIONS} <= set(_httpcore_exceptions())


def test_a_refused_write_passes_through_unmapped() -> None:
    exc = wire.FenceClosed(0)
    assert mapped(exc) is exc


async def test_transport_maps_errors_and_bodies(tls_files: tuple[Path, Path, bytes]) -> None:
    """Through the transport: a refused connection is ``httpx.ConnectError``; a body cut short is
    ``httpx.RemoteProtocolError``."""

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await _head(reader):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
            await writer.drain()
        writer.close()

    port = free_port()  # nobody listens there
    async with httpx.AsyncClient(
        transport=Transport(build_pool("http://x", ssl_context=ssl.create_default_context()))
    ) as s:
        with pytest.raises(httpx.ConnectError):
            await s.get(f"http://127.0.0.1:{port}/")
        async with serving(cut) as cut_port:
            with pytest.raises(httpx.RemoteProtocolError):
                await s.get(f"http://127.0.0.1:{cut_port}/")


# -- credentials reloaded into the session ------------------------------------------------------------


async def test_a_reloaded_token_replaces_the_header_of_the_same_session(tmp_path: Path) -> None:
    path = tmp_path / "kc"
    write_kubeconfig(path, "https://127.0.0.1:6443", None)
    api = _Api(user_agent="t", kubeconfig=str(path), context=None)
    await api.auth
    session = await api._open()
    assert session.headers["Authorization"] == "Bearer t"
    config = yaml.safe_load(path.read_text())
    config["users"][0]["user"]["token"] = "rotated"
    path.write_text(yaml.safe_dump(config))
    await api.reauthenticate()
    assert api.session is session, "the session (and every watch on it) survives"
    assert session.headers["Authorization"] == "Bearer rotated"
    await api.aclose()


async def test_reloaded_certificate_credentials_get_a_new_session(
    tmp_path: Path, tls_files: tuple[Path, Path, bytes]
) -> None:
    path = tmp_path / "kc"
    write_kubeconfig(path, "https://127.0.0.1:6443", tls_files[2])
    config = yaml.safe_load(path.read_text())
    config["users"][0]["user"] = {
        "client-certificate-data": base64.b64encode(tls_files[0].read_bytes()).decode(),
        "client-key-data": base64.b64encode(tls_files[1].read_bytes()).decode(),
    }
    path.write_text(yaml.safe_dump(config))
    api = _Api(user_agent="t", kubeconfig=str(path), context=None)
    await api.auth
    session = await api._open()
    assert "Authorization" not in session.headers
    await api.reauthenticate()
    assert api.session is None and session.is_closed, "certificates live in the TLS context: a new session"
    assert await api._open() is not session
    await api.aclose()


async def test_the_first_request_reloads_rejected_credentials_once(
    tmp_path: Path, tls_files: tuple[Path, Path, bytes]
) -> None:
    """``GET /version`` answered 401 then 200: the credentials are reloaded once and ``connect`` succeeds;
    answered 401 twice: the 401 is raised (never a loop)."""
    answers: list[int] = []

    def server(refusals: int) -> Any:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                while await _head(reader):
                    refused = len(answers) < refusals
                    answers.append(401 if refused else 200)
                    body = orjson.dumps({"kind": "Status", "code": 401}) if refused else VERSION
                    await _answer(writer, body, "401 Unauthorized" if refused else "200 OK")
            writer.close()

        return handle

    tls = _tls_server_context(tls_files[0], tls_files[1])
    async with serving(server(1), tls) as port:
        kubeconfig = write_kubeconfig(tmp_path / "kc", f"https://127.0.0.1:{port}", tls_files[2])
        client = await Client.connect(kubeconfig, timeout_s=5.0)
        await client.close()
    assert answers == [401, 200]
    assert client.reauthentications == 1
    answers.clear()
    async with serving(server(5), tls) as port:
        kubeconfig = write_kubeconfig(tmp_path / "kc2", f"https://127.0.0.1:{port}", tls_files[2])
        with pytest.raises(Unauthorized):
            await Client.connect(kubeconfig, timeout_s=5.0)
    assert answers == [401, 401]
