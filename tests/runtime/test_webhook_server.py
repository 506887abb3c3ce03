"""The admission webhook server over real TLS on 127.0.0.1: keep-alive, routing, limits, handler
failures and certificate rotation."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from gpustack_worker.devcluster.pki import Pki, make_pki
from gpustack_worker.runtime.webhook_server import WebhookServer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

PATH = "/validate-test"


def review(uid: str, value: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": uid, "value": value},
    }


def echo(body: dict[str, Any]) -> dict[str, Any]:
    req = body["request"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": req["uid"], "allowed": req["value"] >= 0},
    }


def explode(body: dict[str, Any]) -> dict[str, Any]:
    raise KeyError("boom")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki-a"))


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki-b"))


@pytest.fixture
async def server(pki: Pki, tmp_path: Path) -> AsyncIterator[WebhookServer]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copyfile(pki.serving_cert, cert)
    shutil.copyfile(pki.serving_key, key)
    srv = WebhookServer("127.0.0.1:0", cert_file=cert, key_file=key, max_body=4096, header_timeout=0.5)
    srv.add(PATH, echo)
    srv.add("/explode", explode)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.close()


def client_context(ca: Path, **kwargs: Any) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    for name, value in kwargs.items():
        setattr(ctx, name, value)
    return ctx


class Conn:
    """A raw HTTP/1.1 client on one TLS connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, ca: Path, host: str = "127.0.0.1", **ctx: Any) -> Conn:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context(ca, **ctx), server_hostname=host
        )
        return cls(reader, writer)

    async def send(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> None:
        head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.writer.write(head.encode() + b"\r\n" + body)
        await self.writer.drain()

    async def response(self) -> tuple[int, dict[str, str], bytes]:
        async with asyncio.timeout(10):
            status_line = await self.reader.readline()
            assert status_line, "connection closed before a response"
            headers: dict[str, str] = {}
            while (line := await self.reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.lower()] = value.strip()
            body = await self.reader.readexactly(int(headers["content-length"]))
        return int(status_line.split()[1]), headers, body

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        await self.send(method, path, body, headers)
        return await self.response()

    async def closed_by_peer(self) -> bool:
        async with asyncio.timeout(10):
            return await self.reader.read(1) == b""

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await self.writer.wait_closed()


async def test_keep_alive_serves_several_reviews_on_one_connection(server: WebhookServer, pki: Pki) -> None:
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        tls = conn.writer.get_extra_info("ssl_object")
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
        for i, value in enumerate((1, -1, 2, 3)):
            status, headers, body = await conn.request(
                "POST", f"{PATH}?timeout=10s", orjson.dumps(review(f"u{i}", value))
            )
            assert status == 200
            assert headers["content-type"] == "application/json"
            assert headers["connection"] == "keep-alive"
            assert orjson.loads(body)["response"] == {"uid": f"u{i}", "allowed": value >= 0}
    finally:
        await conn.close()
    assert server.connections == 1
    assert server.answered[(PATH, 200)] == 4


async def test_sni_name_and_bare_ip_both_get_the_certificate(server: WebhookServer, pki: Pki) -> None:
    for host in ("localhost", "127.0.0.1"):  # an IP sends no SNI; a name does
        conn = await Conn.open(server.port, pki.ca_cert, host=host)
        try:
            status, _, _ = await conn.request("POST", PATH, orjson.dumps(review("x")))
            assert status == 200
        finally:
            await conn.close()


async def test_unknown_path_404_wrong_method_405_and_the_connection_stays_usable(
    server: WebhookServer, pki: Pki
) -> None:
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        status, _, body = await conn.request("POST", "/nope", b"{}")
        assert status == 404
        assert b"/nope" in body
        status, headers, _ = await conn.request("GET", PATH)
        assert status == 405
        assert headers["allow"] == "POST"
        status, _, body = await conn.request("PUT", PATH, b"{}")
        assert status == 405
        status, _, body = await conn.request("POST", PATH, orjson.dumps(review("after")))
        assert status == 200
        assert orjson.loads(body)["response"]["uid"] == "after"
    finally:
        await conn.close()
    assert server.connections == 1


async def test_body_over_the_cap_is_413_and_closes(server: WebhookServer, pki: Pki) -> None:
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        # Only the head is sent: the server must refuse on Content-Length without waiting for the body.
        conn.writer.write(f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 4097\r\n\r\n".encode())
        status, headers, body = await conn.response()
        assert status == 413
        assert headers["connection"] == "close"
        assert b"4097" in body
        assert b"4096" in body
        assert await conn.closed_by_peer()
    finally:
        await conn.close()


async def test_body_at_the_cap_is_read(server: WebhookServer, pki: Pki) -> None:
    payload = orjson.dumps(review("big"))
    padded = payload[:-1] + b"," + b'"pad":"' + b"x" * (4096 - len(payload) - 9) + b'"}'
    assert len(padded) == 4096
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        status, _, body = await conn.request("POST", PATH, padded)
        assert status == 200
        assert orjson.loads(body)["response"]["uid"] == "big"
    finally:
        await conn.close()


async def test_handler_exception_answers_a_denied_review(server: WebhookServer, pki: Pki) -> None:
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        status, _, body = await conn.request("POST", "/explode", orjson.dumps(review("uid-7")))
        assert status == 200
        answer = orjson.loads(body)
        assert answer["kind"] == "AdmissionReview"
        assert answer["apiVersion"] == "admission.k8s.io/v1"
        response = answer["response"]
        assert response["uid"] == "uid-7"
        assert response["allowed"] is False
        assert response["status"]["code"] == 500
        assert "KeyError" in response["status"]["message"]
        assert "boom" in response["status"]["message"]
        # the connection keeps serving
        status, _, _ = await conn.request("POST", PATH, orjson.dumps(review("next")))
        assert status == 200
    finally:
        await conn.close()


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b""])
async def test_a_body_that_is_not_a_json_object_is_400(server: WebhookServer, pki: Pki, body: bytes) -> None:
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        status, _, _ = await conn.request("POST", PATH, body)
        assert status == 400
    finally:
        await conn.close()


async def test_connection_close_and_http10_end_the_connection(server: WebhookServer, pki: Pki) -> None:
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        status, headers, _ = await conn.request(
            "POST", PATH, orjson.dumps(review("c")), {"Connection": "close"}
        )
        assert status == 200
        assert headers["connection"] == "close"
        assert await conn.closed_by_peer()
    finally:
        await conn.close()
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        body = orjson.dumps(review("old"))
        conn.writer.write(f"POST {PATH} HTTP/1.0\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        status, _, _ = await conn.response()
        assert status == 200
        assert await conn.closed_by_peer()
    finally:
        await conn.close()


async def test_chunked_body_is_refused_with_411(server: WebhookServer, pki: Pki) -> None:
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        conn.writer.write(
            f"POST {PATH} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n".encode()
        )
        status, _, _ = await conn.response()
        assert status == 411
        assert await conn.closed_by_peer()
    finally:
        await conn.close()


async def test_an_unfinished_request_head_is_dropped(server: WebhookServer, pki: Pki) -> None:
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        conn.writer.write(f"POST {PATH} HTTP/1.1\r\nHost: x\r\n".encode())  # never finished
        assert await conn.closed_by_peer()  # after header_timeout (0.5 s), not never
    finally:
        await conn.close()


async def test_tls_1_2_is_the_floor(server: WebhookServer, pki: Pki) -> None:
    # The local OpenSSL refuses to speak TLS 1.1 as a client at all, so the floor is checked on the
    # server's context, and a client capped at 1.2 (the API server's minimum) is served.
    assert server.tls.current().minimum_version == ssl.TLSVersion.TLSv1_2
    conn = await Conn.open(server.port, pki.ca_cert, maximum_version=ssl.TLSVersion.TLSv1_2)
    try:
        assert conn.writer.get_extra_info("ssl_object").version() == "TLSv1.2"
        status, _, _ = await conn.request("POST", PATH, orjson.dumps(review("tls12")))
        assert status == 200
    finally:
        await conn.close()


async def test_rotated_certificate_is_served_to_new_connections(
    server: WebhookServer, pki: Pki, other_pki: Pki
) -> None:
    before = await Conn.open(server.port, pki.ca_cert)
    assert server.tls.loads == 1
    # Rotate as a Secret volume does: both files replaced.
    shutil.copyfile(other_pki.serving_cert, server.tls.cert_file)
    shutil.copyfile(other_pki.serving_key, server.tls.key_file)
    try:
        after = await Conn.open(server.port, other_pki.ca_cert)
        try:
            status, _, _ = await after.request("POST", PATH, orjson.dumps(review("new")))
            assert status == 200
        finally:
            await after.close()
        assert server.tls.loads == 2
        with pytest.raises(ssl.SSLCertVerificationError):
            await Conn.open(server.port, pki.ca_cert)  # the old CA no longer verifies the server
        # a connection made before the rotation keeps working
        status, _, _ = await before.request("POST", PATH, orjson.dumps(review("old")))
        assert status == 200
    finally:
        await before.close()


async def test_a_half_written_rotation_keeps_the_previous_certificate(
    server: WebhookServer, pki: Pki
) -> None:
    server.tls.cert_file.write_text("-----BEGIN CERTIFICATE-----\ntruncated\n")
    conn = await Conn.open(server.port, pki.ca_cert)
    try:
        status, _, _ = await conn.request("POST", PATH, orjson.dumps(review("still")))
        assert status == 200
    finally:
        await conn.close()
    assert server.tls.loads == 1


async def test_start_fails_without_a_certificate(tmp_path: Path) -> None:
    srv = WebhookServer("127.0.0.1:0", cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key")
    with pytest.raises(OSError):
        await srv.start()


def test_paths_must_be_absolute(tmp_path: Path) -> None:
    srv = WebhookServer("127.0.0.1:0", cert_file=tmp_path / "c", key_file=tmp_path / "k")
    with pytest.raises(ValueError, match="must start with '/'"):
        srv.add("validate", echo)
