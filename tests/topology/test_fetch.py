"""The webhook arm's HTTPS client against a real local TLS server (reference §6.5, one test per rule)."""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import threading
from typing import TYPE_CHECKING, Any

import pytest
from cryptography.hazmat.primitives import serialization

from gpustack_worker.devcluster.procs import free_port
from gpustack_worker.topology import fetch as fetch_module
from gpustack_worker.topology.fetch import (
    MAX_SNAPSHOT_BYTES,
    Credentials,
    FetchError,
    credentials_from,
    fetch,
    ssl_context,
)
from tests.topology.https_server import DEFAULT_SNAPSHOT, Mode, Pki, SnapshotServer

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path

TOKEN = "t0ken-Value_42"
TIMEOUT = 10.0  # generous: only the deadline tests rely on a deadline firing


@pytest.fixture(scope="module")
def pki() -> Pki:
    return Pki.create()


@pytest.fixture(scope="module")
def rogue() -> Pki:
    return Pki.create("rogue CA")


@pytest.fixture
def server(pki: Pki) -> Iterator[SnapshotServer]:
    with SnapshotServer(pki, bearer_token=TOKEN) as srv:
        yield srv


def bearer(pki: Pki, token: str = TOKEN) -> Credentials:
    return Credentials(bearer_token=token, ca_bundle_pem=pki.cert_pem)


# --- bearer token --------------------------------------------------------------------------------------


async def test_bearer_token_reaches_the_server_and_the_body_comes_back(
    server: SnapshotServer, pki: Pki
) -> None:
    body = await fetch(server.url, bearer(pki), timeout=TIMEOUT)

    assert body == DEFAULT_SNAPSHOT
    [request] = server.requests
    assert (request.method, request.path) == ("GET", "/snapshot")
    assert request.authorization == f"Bearer {TOKEN}"
    assert request.headers["accept-encoding"] == "identity"


async def test_the_server_can_change_the_snapshot_between_polls(server: SnapshotServer, pki: Pki) -> None:
    assert await fetch(server.url, bearer(pki), timeout=TIMEOUT) == DEFAULT_SNAPSHOT
    server.body = b'{"revision": "r2"}'
    assert await fetch(server.url, bearer(pki), timeout=TIMEOUT) == b'{"revision": "r2"}'
    assert server.request_count == 2


@pytest.mark.parametrize("credentials_token", ["wrong-token", None])
async def test_a_wrong_or_absent_token_is_a_401_error(
    server: SnapshotServer, pki: Pki, credentials_token: str | None
) -> None:
    credentials = Credentials(bearer_token=credentials_token, ca_bundle_pem=pki.cert_pem)
    with pytest.raises(FetchError, match=r"HTTP 401 Unauthorized \(expected 200\)") as caught:
        await fetch(server.url, credentials, timeout=TIMEOUT)
    assert "wrong-token" not in str(caught.value)
    assert "\n" not in str(caught.value)
    [request] = server.requests
    assert request.authorization == (None if credentials_token is None else "Bearer wrong-token")


# --- client certificate (mTLS) ---------------------------------------------------------------------------


@pytest.fixture
def mtls_server(pki: Pki) -> Iterator[SnapshotServer]:
    with SnapshotServer(pki, require_client_cert=True) as srv:
        yield srv


async def test_a_client_certificate_signed_by_the_ca_is_accepted(
    mtls_server: SnapshotServer, pki: Pki
) -> None:
    cert, key = pki.issue("topology-client", server=False)
    credentials = Credentials(client_cert_pem=cert, client_key_pem=key, ca_bundle_pem=pki.cert_pem)

    assert await fetch(mtls_server.url, credentials, timeout=TIMEOUT) == DEFAULT_SNAPSHOT

    [request] = mtls_server.requests
    assert request.client_cert_cn == "topology-client"
    assert request.authorization is None


async def test_the_temporary_file_fallback_loads_the_client_certificate_and_leaves_nothing(
    mtls_server: SnapshotServer, pki: Pki, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delattr(os, "memfd_create")  # as on a platform without anonymous memory files
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cert, key = pki.issue("fallback-client", server=False)
    credentials = Credentials(client_cert_pem=cert, client_key_pem=key, ca_bundle_pem=pki.cert_pem)

    assert await fetch(mtls_server.url, credentials, timeout=TIMEOUT) == DEFAULT_SNAPSHOT

    assert [r.client_cert_cn for r in mtls_server.requests] == ["fallback-client"]
    assert os.listdir(tmp_path) == []  # the key file and its directory are gone


async def test_without_a_client_certificate_the_mtls_server_refuses(
    mtls_server: SnapshotServer, pki: Pki
) -> None:
    with pytest.raises(FetchError, match=r"^GET https://127\.0\.0\.1:\d+/snapshot: \w+"):
        await fetch(mtls_server.url, bearer(pki), timeout=TIMEOUT)
    assert mtls_server.requests == []  # the handshake failed: no request was ever read


async def test_a_client_certificate_from_another_ca_is_refused(
    mtls_server: SnapshotServer, pki: Pki, rogue: Pki
) -> None:
    cert, key = rogue.issue("intruder", server=False)
    credentials = Credentials(client_cert_pem=cert, client_key_pem=key, ca_bundle_pem=pki.cert_pem)
    with pytest.raises(FetchError, match=r"^GET https://127\.0\.0\.1:\d+/snapshot: "):
        await fetch(mtls_server.url, credentials, timeout=TIMEOUT)
    assert mtls_server.requests == []


# --- redirects -----------------------------------------------------------------------------------------


async def test_a_redirect_is_refused_and_its_target_is_never_contacted(
    server: SnapshotServer, pki: Pki
) -> None:
    with SnapshotServer(pki, bearer_token=TOKEN) as elsewhere:
        server.mode = Mode.REDIRECT
        server.redirect_to = elsewhere.url

        with pytest.raises(FetchError, match=r"HTTP 302 Found: redirects are not followed"):
            await fetch(server.url, bearer(pki), timeout=TIMEOUT)

        assert server.request_count == 1
        assert elsewhere.connections == 0  # not even a TCP connection: the token went nowhere else
        assert elsewhere.requests == []


@pytest.mark.parametrize("status", [301, 303, 307, 308])
async def test_every_redirect_status_is_an_error(server: SnapshotServer, pki: Pki, status: int) -> None:
    server.mode, server.status = Mode.STATUS, status
    with pytest.raises(FetchError, match=rf"HTTP {status} .*redirects are not followed"):
        await fetch(server.url, bearer(pki), timeout=TIMEOUT)


# --- the deadline ---------------------------------------------------------------------------------------


async def test_a_server_slower_than_the_timeout_is_an_error(server: SnapshotServer, pki: Pki) -> None:
    server.mode, server.delay = Mode.SLOW, 60.0  # stop() wakes the handler
    with pytest.raises(FetchError, match=r"^GET https://127\.0\.0\.1:\d+/snapshot: timed out after 0\.5 s$"):
        await fetch(server.url, bearer(pki), timeout=0.5)
    assert server.request_count == 1


async def test_the_timeout_covers_the_body_not_only_each_read(server: SnapshotServer, pki: Pki) -> None:
    # Every slice arrives well within the timeout, but the whole body takes about ten times as long: a
    # per-read timeout would never fire, the whole-request deadline does.
    server.mode, server.delay = Mode.TRICKLE, 0.4
    with pytest.raises(FetchError, match=r"timed out after 1 s$"):
        await fetch(server.url, bearer(pki), timeout=1.0)


# --- the body cap ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("content_length", [True, False], ids=["declared", "streamed"])
async def test_a_body_over_the_cap_is_an_error(
    server: SnapshotServer, pki: Pki, content_length: bool
) -> None:
    server.mode, server.huge_size, server.content_length = Mode.HUGE, 4 * MAX_SNAPSHOT_BYTES, content_length
    with pytest.raises(FetchError, match=r"response body exceeds the 1048576-byte limit"):
        await fetch(server.url, bearer(pki), timeout=TIMEOUT)


@pytest.mark.parametrize("content_length", [True, False], ids=["declared", "streamed"])
async def test_a_body_of_exactly_the_cap_is_accepted(
    server: SnapshotServer, pki: Pki, content_length: bool
) -> None:
    server.body, server.content_length = b"y" * MAX_SNAPSHOT_BYTES, content_length
    assert await fetch(server.url, bearer(pki), timeout=TIMEOUT) == b"y" * MAX_SNAPSHOT_BYTES


@pytest.mark.parametrize("content_length", [True, False], ids=["declared", "streamed"])
async def test_one_byte_over_a_custom_cap_is_an_error(
    server: SnapshotServer, pki: Pki, content_length: bool
) -> None:
    server.body, server.content_length = b"z" * 101, content_length
    with pytest.raises(FetchError, match=r"exceeds the 100-byte limit"):
        await fetch(server.url, bearer(pki), timeout=TIMEOUT, max_bytes=100)
    assert await fetch(server.url, bearer(pki), timeout=TIMEOUT, max_bytes=101) == b"z" * 101


async def test_a_compressed_body_is_refused(pki: Pki) -> None:
    gzip_server = SnapshotServer(pki, bearer_token=TOKEN, headers={"Content-Encoding": "gzip"})
    with gzip_server as srv, pytest.raises(FetchError, match=r"unsupported Content-Encoding 'gzip'"):
        await fetch(srv.url, bearer(pki), timeout=TIMEOUT)


async def test_a_malformed_body_is_returned_as_is_for_the_decoder_to_judge(
    server: SnapshotServer, pki: Pki
) -> None:
    server.mode = Mode.MALFORMED
    assert await fetch(server.url, bearer(pki), timeout=TIMEOUT) == b"{this is: [not a snapshot\n"


# --- status ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "text"), [(500, "Internal Server Error"), (204, "No Content"), (404, "Not Found")]
)
async def test_any_status_but_200_is_an_error(
    server: SnapshotServer, pki: Pki, status: int, text: str
) -> None:
    server.mode, server.status = Mode.STATUS, status
    with pytest.raises(FetchError, match=rf"HTTP {status} {text} \(expected 200\)$"):
        await fetch(server.url, bearer(pki), timeout=TIMEOUT)


# --- TLS ------------------------------------------------------------------------------------------------


async def test_a_server_certificate_not_signed_by_the_bundle_is_refused(pki: Pki, rogue: Pki) -> None:
    with SnapshotServer(rogue, bearer_token=TOKEN) as impostor:
        with pytest.raises(FetchError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            await fetch(impostor.url, bearer(pki), timeout=TIMEOUT)
        assert impostor.requests == []  # the token was never sent to it


async def test_without_a_bundle_the_system_roots_do_not_trust_a_private_ca(server: SnapshotServer) -> None:
    with pytest.raises(FetchError, match=r"certificate verify failed"):
        await fetch(server.url, Credentials(bearer_token=TOKEN), timeout=TIMEOUT)
    assert server.requests == []


async def test_a_certificate_for_another_host_name_is_refused(pki: Pki) -> None:
    with SnapshotServer(pki, bearer_token=TOKEN, hosts=("inventory.example",)) as srv:
        with pytest.raises(FetchError, match=r"certificate verify failed.*(IP address mismatch|match)"):
            await fetch(srv.url, bearer(pki), timeout=TIMEOUT)
        assert srv.requests == []


def test_the_client_context_requires_tls12_verification_and_only_the_bundle_roots(pki: Pki) -> None:
    context = ssl_context(bearer(pki))

    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    [root] = context.get_ca_certs()  # the bundle replaced the system roots
    assert str(root["subject"]) == "((('commonName', 'gpustack-worker test CA'),),)"


def test_an_unusable_ca_bundle_is_an_error() -> None:
    with pytest.raises(FetchError, match="CA bundle holds no usable PEM certificate"):
        ssl_context(Credentials(bearer_token=TOKEN, ca_bundle_pem=b"not a certificate"))


# --- the environment ------------------------------------------------------------------------------------


async def test_proxies_from_the_environment_are_ignored(
    server: SnapshotServer, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, dead)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)

    assert await fetch(server.url, bearer(pki), timeout=TIMEOUT) == DEFAULT_SNAPSHOT
    assert server.request_count == 1


# --- the URL --------------------------------------------------------------------------------------------


async def test_only_https_urls_are_fetched(server: SnapshotServer, pki: Pki) -> None:
    with pytest.raises(FetchError, match="webhook url must use https"):
        await fetch(f"http://127.0.0.1:{server.port}/snapshot", bearer(pki), timeout=TIMEOUT)
    assert server.connections == 0


async def test_userinfo_in_the_url_is_refused_without_echoing_it(server: SnapshotServer, pki: Pki) -> None:
    with pytest.raises(FetchError, match="must not carry userinfo") as caught:
        await fetch(f"https://admin:hunter2@127.0.0.1:{server.port}/", bearer(pki), timeout=TIMEOUT)
    assert "hunter2" not in str(caught.value)
    assert server.connections == 0


async def test_a_fragment_is_refused(server: SnapshotServer, pki: Pki) -> None:
    with pytest.raises(FetchError, match="must not have a fragment"):
        await fetch(f"{server.url}#part", bearer(pki), timeout=TIMEOUT)


async def test_messages_leave_out_the_query(server: SnapshotServer, pki: Pki) -> None:
    server.mode, server.status = Mode.STATUS, 500
    with pytest.raises(FetchError) as caught:
        await fetch(f"{server.url}?sig=private", bearer(pki), timeout=TIMEOUT)
    assert "private" not in str(caught.value)
    assert server.requests[0].path == "/snapshot?sig=private"


async def test_a_refused_connection_names_the_cause(pki: Pki) -> None:
    with pytest.raises(FetchError, match=r"^GET https://127\.0\.0\.1:\d+/x: ConnectError: .*(refused|111)"):
        await fetch(f"https://127.0.0.1:{free_port()}/x", bearer(pki), timeout=TIMEOUT)


def test_credentials_repr_shows_no_secret(pki: Pki) -> None:
    cert, key = pki.issue("c", server=False)
    text = repr(Credentials(bearer_token=TOKEN, client_cert_pem=cert, client_key_pem=key))
    assert TOKEN not in text
    assert "PRIVATE KEY" not in text
    assert "BEGIN CERTIFICATE" not in text


# --- credentials_from -----------------------------------------------------------------------------------

NS = "gpustack-system"


def b64(value: bytes | str) -> str:
    return base64.b64encode(value.encode() if isinstance(value, str) else value).decode()


class Objects:
    """A fake cache: ``secret``/``config_map`` lookups over dicts keyed by (namespace, name)."""

    def __init__(
        self,
        secrets: dict[str, Mapping[str, Any]] | None = None,
        config_maps: dict[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.secrets = secrets or {}
        self.config_maps = config_maps or {}

    def secret(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.secrets.get(name) if namespace == NS else None

    def config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.config_maps.get(name) if namespace == NS else None

    def resolve(self, spec: Mapping[str, Any]) -> Credentials:
        return credentials_from(spec, secret=self.secret, config_map=self.config_map)


def ref(name: str) -> dict[str, str]:
    return {"namespace": NS, "name": name}


def webhook(**refs: dict[str, str]) -> dict[str, Any]:
    return {"url": "https://inventory.example/snapshot", "pollInterval": "1m", "timeout": "10s", **refs}


def test_a_bearer_token_is_read_and_trimmed(pki: Pki) -> None:
    objects = Objects(
        {"tok": {"data": {"token": b64(f"  {TOKEN}\n\t")}}},
        {"ca": {"data": {"ca.crt": pki.cert_pem.decode()}}},
    )
    credentials = objects.resolve(webhook(bearerTokenSecretRef=ref("tok"), caBundleConfigMapRef=ref("ca")))
    assert credentials == Credentials(bearer_token=TOKEN, ca_bundle_pem=pki.cert_pem)


def test_string_data_and_binary_data_are_read_too(pki: Pki) -> None:
    objects = Objects(
        {"tok": {"stringData": {"token": TOKEN}}}, {"ca": {"binaryData": {"ca.crt": b64(pki.cert_pem)}}}
    )
    credentials = objects.resolve(webhook(bearerTokenSecretRef=ref("tok"), caBundleConfigMapRef=ref("ca")))
    assert credentials == Credentials(bearer_token=TOKEN, ca_bundle_pem=pki.cert_pem)


def test_a_client_certificate_is_read(pki: Pki) -> None:
    cert, key = pki.issue("client", server=False)
    objects = Objects({"tls": {"data": {"tls.crt": b64(cert), "tls.key": b64(key)}}})
    credentials = objects.resolve(webhook(tlsClientCertificateSecretRef=ref("tls")))
    assert credentials == Credentials(client_cert_pem=cert, client_key_pem=key)


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        (None, "Secret gpustack-system/tok not found"),
        ({"data": {}}, "Secret gpustack-system/tok has no key 'token'"),
        ({}, "Secret gpustack-system/tok has no key 'token'"),
        ({"data": {"token": ""}}, "Secret gpustack-system/tok key 'token' is empty"),
        ({"data": {"token": b64(" \n\t ")}}, "Secret gpustack-system/tok key 'token' is empty"),
        ({"data": {"token": "%%not-base64%%"}}, "Secret gpustack-system/tok key 'token' is not valid base64"),
        (
            {"data": {"token": b64("abc\r\nX-Injected: 1")}},
            "Secret gpustack-system/tok key 'token' holds characters not allowed in an HTTP header",
        ),
        ({"data": {"token": b64(b"\xff\xfe")}}, "Secret gpustack-system/tok key 'token' is not UTF-8 text"),
    ],
)
def test_bearer_token_problems_name_the_secret_and_key(secret: dict[str, Any] | None, message: str) -> None:
    objects = Objects({} if secret is None else {"tok": secret})
    with pytest.raises(FetchError) as caught:
        objects.resolve(webhook(bearerTokenSecretRef=ref("tok")))
    assert str(caught.value) == message
    assert "X-Injected" not in str(caught.value)


def test_a_reference_to_another_namespace_is_looked_up_there_and_reported_missing() -> None:
    objects = Objects({"tok": {"data": {"token": b64(TOKEN)}}})
    with pytest.raises(FetchError, match=r"^Secret other/tok not found$"):
        objects.resolve(webhook(bearerTokenSecretRef={"namespace": "other", "name": "tok"}))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "Secret gpustack-system/tls not found"),
        ({"tls.key": "KEY"}, "Secret gpustack-system/tls has no key 'tls.crt'"),
        ({"tls.crt": "CERT"}, "Secret gpustack-system/tls has no key 'tls.key'"),
        ({"tls.crt": "CERT", "tls.key": ""}, "Secret gpustack-system/tls key 'tls.key' is empty"),
    ],
)
def test_client_certificate_problems_name_the_secret_and_key(
    pki: Pki, data: dict[str, str] | None, message: str
) -> None:
    cert, key = pki.issue("client", server=False)
    values = {"CERT": b64(cert), "KEY": b64(key), "": ""}
    objects = Objects({} if data is None else {"tls": {"data": {k: values[v] for k, v in data.items()}}})
    with pytest.raises(FetchError) as caught:
        objects.resolve(webhook(tlsClientCertificateSecretRef=ref("tls")))
    assert str(caught.value) == message


def test_a_key_that_does_not_match_the_certificate_is_an_error_without_the_key(pki: Pki) -> None:
    cert, _ = pki.issue("client", server=False)
    _, other_key = pki.issue("other", server=False)
    objects = Objects({"tls": {"data": {"tls.crt": b64(cert), "tls.key": b64(other_key)}}})
    with pytest.raises(
        FetchError, match=r"^Secret gpustack-system/tls: unusable client certificate"
    ) as caught:
        objects.resolve(webhook(tlsClientCertificateSecretRef=ref("tls")))
    assert "PRIVATE KEY" not in str(caught.value)


def test_an_encrypted_key_is_an_error_and_never_prompts(pki: Pki) -> None:
    cert, key_pem = pki.issue("client", server=False)
    key = serialization.load_pem_private_key(key_pem, password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    )
    objects = Objects({"tls": {"data": {"tls.crt": b64(cert), "tls.key": b64(encrypted)}}})
    with pytest.raises(FetchError, match=r"^Secret gpustack-system/tls: the private key is encrypted"):
        objects.resolve(webhook(tlsClientCertificateSecretRef=ref("tls")))


@pytest.mark.parametrize(
    ("config_map", "message"),
    [
        (None, "ConfigMap gpustack-system/ca not found"),
        ({"data": {"other": "x"}}, "ConfigMap gpustack-system/ca has no key 'ca.crt'"),
        ({"data": {"ca.crt": "  \n"}}, "ConfigMap gpustack-system/ca key 'ca.crt' is empty"),
        (
            {"data": {"ca.crt": "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"}},
            "ConfigMap gpustack-system/ca key 'ca.crt' holds no usable PEM certificate",
        ),
    ],
)
def test_ca_bundle_problems_name_the_config_map_and_key(
    config_map: dict[str, Any] | None, message: str
) -> None:
    objects = Objects(
        {"tok": {"data": {"token": b64(TOKEN)}}}, {} if config_map is None else {"ca": config_map}
    )
    with pytest.raises(FetchError) as caught:
        objects.resolve(webhook(bearerTokenSecretRef=ref("tok"), caBundleConfigMapRef=ref("ca")))
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "refs",
    [{}, {"bearerTokenSecretRef": ref("tok"), "tlsClientCertificateSecretRef": ref("tls")}],
    ids=["neither", "both"],
)
def test_exactly_one_credential_is_required(refs: dict[str, dict[str, str]]) -> None:
    with pytest.raises(
        FetchError, match="exactly one of bearerTokenSecretRef and tlsClientCertificateSecretRef"
    ):
        Objects().resolve(webhook(**refs))


def test_a_reference_without_a_name_is_an_error() -> None:
    with pytest.raises(FetchError, match=r"webhook\.bearerTokenSecretRef must name a namespace and a name"):
        Objects().resolve(webhook(bearerTokenSecretRef={"namespace": NS}))


async def test_resolved_credentials_fetch_end_to_end(server: SnapshotServer, pki: Pki) -> None:
    objects = Objects(
        {"tok": {"data": {"token": b64(TOKEN + "\n")}}}, {"ca": {"data": {"ca.crt": pki.cert_pem.decode()}}}
    )
    credentials = objects.resolve(webhook(bearerTokenSecretRef=ref("tok"), caBundleConfigMapRef=ref("ca")))
    assert await fetch(server.url, credentials, timeout=TIMEOUT) == DEFAULT_SNAPSHOT
    assert fetch_module.MAX_SNAPSHOT_BYTES == 1 << 20


async def test_the_test_server_stops_a_sleeping_handler_and_leaves_no_thread(pki: Pki) -> None:
    with SnapshotServer(pki, mode=Mode.SLOW, delay=600.0) as srv:
        with pytest.raises(FetchError, match="timed out"):
            await fetch(srv.url, bearer(pki), timeout=0.3)
        assert srv.request_count == 1
    alive = [t.name for t in threading.enumerate()]
    assert not [name for name in alive if "process_request_thread" in name or name == "snapshot-server"]
