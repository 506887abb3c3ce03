"""The HTTPS /metrics server over real TLS on 127.0.0.1, with the reviews answered by a fake API: 401 / 403 /
500 / 200 as controller-runtime answers them, only GET /metrics, plain HTTP refused, a self-signed
certificate for localhost and 127.0.0.1 unless a certificate directory provides one; the plain health
port refuses /metrics when told where it is served."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
from typing import TYPE_CHECKING

import pytest
from cryptography import x509

from gpustack_worker.devcluster.pki import make_pki
from gpustack_worker.runtime.health import HealthServer
from gpustack_worker.runtime.metrics_auth import DelegatedAuth
from gpustack_worker.runtime.metrics_serving import SecureMetricsServer
from tests.runtime.test_metrics_auth import SA, FakeApi

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

DENIED = {"username": "system:serviceaccount:default:nobody", "groups": ["system:authenticated"]}


@pytest.fixture
async def served() -> AsyncIterator[tuple[SecureMetricsServer, FakeApi]]:
    api = FakeApi({"good": SA, "nobody": DENIED}, {SA["username"]})
    server = SecureMetricsServer("127.0.0.1:0", DelegatedAuth(api))  # type: ignore[arg-type]
    await server.start()
    try:
        yield server, api
    finally:
        await server.close()


def trusting(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


async def get(
    port: int,
    ctx: ssl.SSLContext | None,
    path: str = "/metrics",
    token: str | None = None,
    method: str = "GET",
    host: str = "127.0.0.1",
) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname=host if ctx else None
    )
    try:
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
        await writer.drain()
        async with asyncio.timeout(10):
            raw = await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def own_cert(server: SecureMetricsServer) -> Path:
    assert server.self_signed_dir is not None
    return server.self_signed_dir / "tls.crt"


async def test_answers_as_controller_runtime(served: tuple[SecureMetricsServer, FakeApi]) -> None:
    server, _ = served
    ctx = trusting(own_cert(server))
    assert await get(server.port, ctx) == (401, b"Unauthorized\n")
    assert await get(server.port, ctx, token="unknown") == (401, b"Unauthorized\n")
    assert await get(server.port, ctx, token="nobody") == (
        403,
        b"Authorization denied for user system:serviceaccount:default:nobody\n",
    )
    status, body = await get(server.port, ctx, token="good")
    assert status == 200
    assert b"# TYPE controller_runtime_webhook_requests_total counter" in body
    assert server.answered == {401: 2, 403: 1, 200: 1}


async def test_other_paths_and_methods_are_refused_before_any_review(
    served: tuple[SecureMetricsServer, FakeApi],
) -> None:
    server, api = served
    ctx = trusting(own_cert(server))
    assert (await get(server.port, ctx, path="/healthz", token="good"))[0] == 404
    assert (await get(server.port, ctx, path="/metricsx", token="good"))[0] == 404
    assert (await get(server.port, ctx, method="POST", token="good"))[0] == 405
    assert api.sent == []


async def test_an_api_error_is_500_and_the_next_scrape_asks_again(
    served: tuple[SecureMetricsServer, FakeApi],
) -> None:
    server, api = served
    ctx = trusting(own_cert(server))
    api.fail = ConnectionError("API server unreachable")
    assert await get(server.port, ctx, token="good") == (500, b"Authentication failed\n")
    api.fail = None
    assert (await get(server.port, ctx, token="good"))[0] == 200


async def test_the_self_signed_certificate_names_localhost_and_127001(
    served: tuple[SecureMetricsServer, FakeApi],
) -> None:
    server, _ = served
    ctx = trusting(own_cert(server))
    for host in ("localhost", "127.0.0.1"):
        assert (await get(server.port, ctx, token="good", host=host))[0] == 200
    directory = server.self_signed_dir
    assert directory is not None
    assert (directory / "tls.key").stat().st_mode & 0o077 == 0
    await server.close()
    assert not directory.exists()


async def test_plain_http_is_refused(served: tuple[SecureMetricsServer, FakeApi]) -> None:
    server, _ = served
    assert (await get(server.port, trusting(own_cert(server)), token="good"))[0] == 200  # it does serve
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\n\r\n")
        await writer.drain()
        async with asyncio.timeout(10):
            answer = await reader.read()
    except ConnectionError:
        answer = b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    assert not answer.startswith(b"HTTP/"), answer[:60]


async def test_a_certificate_directory_is_served(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    certs = tmp_path / "certs"
    certs.mkdir()
    shutil.copyfile(pki.serving_cert, certs / "tls.crt")
    shutil.copyfile(pki.serving_key, certs / "tls.key")
    api = FakeApi({"good": SA}, {SA["username"]})
    server = SecureMetricsServer("127.0.0.1:0", DelegatedAuth(api), cert_dir=certs)  # type: ignore[arg-type]
    await server.start()
    try:
        assert server.self_signed_dir is None
        assert (await get(server.port, trusting(pki.ca_cert), token="good"))[0] == 200
        _, writer = await asyncio.open_connection(
            "127.0.0.1", server.port, ssl=trusting(pki.ca_cert), server_hostname="127.0.0.1"
        )
        served_der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        expected = x509.load_pem_x509_certificate((certs / "tls.crt").read_bytes())
        assert x509.load_der_x509_certificate(served_der) == expected
    finally:
        await server.close()


async def test_a_certificate_directory_without_a_pair_falls_back_to_self_signed(tmp_path: Path) -> None:
    api = FakeApi({"good": SA}, {SA["username"]})
    server = SecureMetricsServer("127.0.0.1:0", DelegatedAuth(api), cert_dir=tmp_path)  # type: ignore[arg-type]
    await server.start()
    try:
        assert (await get(server.port, trusting(own_cert(server)), token="good"))[0] == 200
    finally:
        await server.close()


def test_the_health_port_refuses_metrics_served_elsewhere_and_keeps_the_probes() -> None:
    health = HealthServer("127.0.0.1:0", ready=lambda: True)
    assert health.route("GET", "/metrics")[0] == 200
    health.metrics_elsewhere = "https://0.0.0.0:8443/metrics"
    status, _, body = health.route("GET", "/metrics")
    assert (status, body) == (404, b"metrics are served at https://0.0.0.0:8443/metrics\n")
    assert health.route("GET", "/healthz")[0] == 200
    assert health.route("GET", "/readyz")[0] == 200
