"""The HTTPS client of the TopologySource ``webhook`` arm (docs/topology.md, "Webhook arm").

:func:`credentials_from` resolves a source's ``spec.webhook`` references (bearer-token Secret, client
certificate Secret, CA bundle ConfigMap) from the caches into :class:`Credentials`; :func:`fetch` makes
the authenticated ``GET`` and returns the body. Every failure is a :class:`FetchError` whose text is a
one-line status message (the reconciler reports it as ``WebhookReadFailed``) and never carries a secret.

What :func:`fetch` guarantees (each is what GPUStack's webhook arm requires too, each has a test):

* only ``https`` URLs, without userinfo or fragment; TLS 1.2 or newer; a CA bundle, when given,
  replaces the system roots (it is the only trust anchor);
* redirects are never followed: a ``3xx`` is an error and its ``Location`` is never contacted, so a
  bearer token or client certificate reaches no endpoint but the configured one (the TopologySource
  contract);
* proxies and CA settings from the environment (``HTTPS_PROXY``, ``ALL_PROXY``, ``SSL_CERT_FILE`` …)
  are ignored: the request goes directly to the URL's host;
* the status must be exactly ``200``; the body is streamed and a body over ``max_bytes`` is an error
  (at most ``max_bytes + 1`` bytes are kept; a ``Content-Length`` over the cap fails before reading);
  the request asks for ``identity`` encoding and refuses a compressed body, so the cap bounds what is
  held in memory and no decompression bomb can get around it;
* ``timeout`` is the deadline of the whole exchange (connect, TLS, headers and body): a server that
  trickles bytes cannot hold the reconcile past it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.to_thread
import httpx

from gpustack_worker.api import keys

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ("MAX_SNAPSHOT_BYTES", "Credentials", "FetchError", "credentials_from", "fetch", "ssl_context")

#: The body cap, 1 MiB (``1 << 20``), GPUStack's cap for the same arm: a snapshot larger than this is
#: refused.
MAX_SNAPSHOT_BYTES: Final = 1 << 20
_USER_AGENT: Final = "gpustack-worker-topology"
_ACCEPT: Final = "application/yaml, application/json;q=0.9, */*;q=0.1"


class FetchError(Exception):
    """A webhook fetch (or its credentials) failed; ``str(e)`` is a one-line status message."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """What authenticates one webhook request. The secret fields are left out of ``repr``."""

    bearer_token: str | None = field(default=None, repr=False)
    client_cert_pem: bytes | None = field(default=None, repr=False)
    client_key_pem: bytes | None = field(default=None, repr=False)
    ca_bundle_pem: bytes | None = None
    """Replaces the system roots when set."""


# --- credentials -------------------------------------------------------------------------------------


def _ref(spec_webhook: Mapping[str, Any], field_name: str) -> tuple[str, str] | None:
    ref = spec_webhook.get(field_name)
    if ref is None:
        return None
    if not isinstance(ref, Mapping) or not ref.get("name") or not ref.get("namespace"):
        raise FetchError(f"webhook.{field_name} must name a namespace and a name")
    return str(ref["namespace"]), str(ref["name"])


def _data_value(obj: Mapping[str, Any], key: str, *, what: str) -> bytes | None:
    """The bytes under ``key``: ``data`` (base64 for a Secret, text for a ConfigMap), then ``binaryData``
    (ConfigMap, base64), then ``stringData`` (a Secret as written, before the API server folds it)."""
    is_secret = what.startswith("Secret")
    data = obj.get("data") or {}
    if key in data and data[key] is not None:
        value = data[key]
        if not is_secret:
            return str(value).encode()
        try:
            return base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise FetchError(f"{what} key {key!r} is not valid base64") from None
    binary = obj.get("binaryData") or {}
    if not is_secret and key in binary and binary[key] is not None:
        try:
            return base64.b64decode(str(binary[key]), validate=True)
        except (binascii.Error, ValueError):
            raise FetchError(f"{what} binaryData key {key!r} is not valid base64") from None
    string_data = obj.get("stringData") or {}
    if is_secret and key in string_data and string_data[key] is not None:
        return str(string_data[key]).encode()
    return None


def _lookup(
    getter: Callable[[str, str], Mapping[str, Any] | None], kind: str, ref: tuple[str, str]
) -> tuple[Mapping[str, Any], str]:
    namespace, name = ref
    what = f"{kind} {namespace}/{name}"
    obj = getter(namespace, name)
    if obj is None:
        raise FetchError(f"{what} not found")
    return obj, what


def _required(obj: Mapping[str, Any], key: str, what: str) -> bytes:
    value = _data_value(obj, key, what=what)
    if value is None:
        raise FetchError(f"{what} has no key {key!r}")
    if not value.strip():
        raise FetchError(f"{what} key {key!r} is empty")
    return value


def credentials_from(
    spec_webhook: Mapping[str, Any],
    *,
    secret: Callable[[str, str], Mapping[str, Any] | None],
    config_map: Callable[[str, str], Mapping[str, Any] | None],
) -> Credentials:
    """Resolve ``spec.webhook``'s references (camelCase, as served) into :class:`Credentials`.

    ``secret(namespace, name)`` / ``config_map(namespace, name)`` are cache lookups (``None`` when
    absent). Raises :class:`FetchError` naming the object and key that is missing, empty or unusable;
    never a value. Namespace policy (references in the worker namespace) is the caller's check.
    """
    bearer_ref = _ref(spec_webhook, "bearerTokenSecretRef")
    cert_ref = _ref(spec_webhook, "tlsClientCertificateSecretRef")
    ca_ref = _ref(spec_webhook, "caBundleConfigMapRef")
    if (bearer_ref is None) == (cert_ref is None):
        raise FetchError(
            "webhook must set exactly one of bearerTokenSecretRef and tlsClientCertificateSecretRef"
        )

    ca_pem: bytes | None = None
    if ca_ref is not None:
        obj, what = _lookup(config_map, "ConfigMap", ca_ref)
        ca_pem = _required(obj, keys.WEBHOOK_CA_BUNDLE_KEY, what)
        _check_ca_bundle(ca_pem, f"{what} key {keys.WEBHOOK_CA_BUNDLE_KEY!r}")

    if bearer_ref is not None:
        obj, what = _lookup(secret, "Secret", bearer_ref)
        raw = _required(obj, keys.WEBHOOK_TOKEN_KEY, what)
        try:
            token = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise FetchError(f"{what} key {keys.WEBHOOK_TOKEN_KEY!r} is not UTF-8 text") from None
        if not token.isascii() or not token.isprintable():
            # An HTTP header value must be visible ASCII; a newline would split the request.
            raise FetchError(
                f"{what} key {keys.WEBHOOK_TOKEN_KEY!r} holds characters not allowed in an HTTP header"
            )
        return Credentials(bearer_token=token, ca_bundle_pem=ca_pem)

    assert cert_ref is not None
    obj, what = _lookup(secret, "Secret", cert_ref)
    cert_pem = _required(obj, keys.WEBHOOK_TLS_CERT_KEY, what)
    key_pem = _required(obj, keys.WEBHOOK_TLS_KEY_KEY, what)
    try:
        _load_client_certificate(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), cert_pem, key_pem)
    except FetchError as exc:
        raise FetchError(f"{what}: {exc}") from None
    return Credentials(client_cert_pem=cert_pem, client_key_pem=key_pem, ca_bundle_pem=ca_pem)


# --- TLS ---------------------------------------------------------------------------------------------


def _check_ca_bundle(ca_pem: bytes, what: str) -> None:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=ca_pem.decode("ascii"))
    except (ssl.SSLError, ValueError, UnicodeDecodeError):
        raise FetchError(f"{what} holds no usable PEM certificate") from None


def _no_password() -> bytes:
    # An encrypted key must fail, not make OpenSSL prompt on a terminal for a passphrase.
    raise ValueError("encrypted private keys are not supported")


@contextlib.contextmanager
def _private_files(cert_pem: bytes, key_pem: bytes) -> Iterator[tuple[str, str]]:
    """Paths holding the certificate and key for ``load_cert_chain`` (the stdlib reads only paths).

    On Linux they are anonymous memory files (``memfd_create``): the key never touches a disk and no
    other process can open it. Elsewhere a private (0700) temporary directory with 0600 files, removed
    as soon as the chain is loaded.
    """
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None and Path("/proc/self/fd").is_dir():
        fds: list[int] = []
        try:
            for blob in (cert_pem, key_pem):
                fd = memfd_create("gpustack-webhook-tls", getattr(os, "MFD_CLOEXEC", 0))
                fds.append(fd)
                os.write(fd, blob)
            yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="gpustack-webhook-tls-") as directory:
        paths = []
        for name, blob in (("tls.crt", cert_pem), ("tls.key", key_pem)):
            path = os.path.join(directory, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(blob)
            paths.append(path)
        yield paths[0], paths[1]


def _load_client_certificate(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    with _private_files(cert_pem, key_pem) as (cert_path, key_path):
        try:
            context.load_cert_chain(cert_path, key_path, password=_no_password)
        except ValueError:
            raise FetchError("the private key is encrypted (a passphrase-less key is required)") from None
        except ssl.SSLError as exc:
            reason = exc.reason or "unreadable PEM"
            raise FetchError(
                f"unusable client certificate or key ({reason}; a PEM certificate and its matching key "
                "are required)"
            ) from None


def ssl_context(credentials: Credentials) -> ssl.SSLContext:
    """The client TLS context: TLS ≥ 1.2, host name checked, the CA bundle (if any) as the only roots."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname + CERT_REQUIRED by default
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if credentials.ca_bundle_pem is not None:
        try:
            context.load_verify_locations(cadata=credentials.ca_bundle_pem.decode("ascii"))
        except (ssl.SSLError, ValueError, UnicodeDecodeError):
            raise FetchError("the CA bundle holds no usable PEM certificate") from None
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if credentials.client_cert_pem is not None or credentials.client_key_pem is not None:
        if credentials.client_cert_pem is None or credentials.client_key_pem is None:
            raise FetchError("a client certificate needs both the certificate and its key")
        _load_client_certificate(context, credentials.client_cert_pem, credentials.client_key_pem)
    return context


# --- the request -------------------------------------------------------------------------------------


def _checked_url(url: str) -> tuple[httpx.URL, str]:
    """The parsed URL and a printable form of it (no query, which may carry something private)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise FetchError("webhook url is not a valid URL") from None
    if parsed.scheme != "https":
        raise FetchError("webhook url must use https")
    if not parsed.host:
        raise FetchError("webhook url has no host")
    if parsed.userinfo:
        raise FetchError("webhook url must not carry userinfo (credentials come from the Secret)")
    if parsed.fragment:
        raise FetchError("webhook url must not have a fragment")
    shown = str(parsed.copy_with(query=None))
    return parsed, shown


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cause(exc: BaseException) -> str:
    """The innermost useful description of a transport error (e.g. the TLS verification reason)."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = _one_line(str(current))
        if text and text not in parts:
            parts.append(text)
        current = current.__cause__ or current.__context__
    name = type(exc).__name__
    return f"{name}: {parts[-1]}" if parts else name


# ``timeout`` is the source's spec.webhook.timeout, a property of the request (not the caller's scope).
async def fetch(
    url: str,
    credentials: Credentials,
    *,
    timeout: float,  # noqa: ASYNC109
    max_bytes: int = MAX_SNAPSHOT_BYTES,
) -> bytes:
    """``GET url`` over HTTPS with ``credentials``; the body when the status is exactly 200.

    ``timeout`` (seconds, > 0) bounds the whole exchange. Raises :class:`FetchError` for everything
    else: a non-https URL, a 3xx (never followed), any other non-200 status, a body over ``max_bytes``,
    a compressed body, the deadline, and connection or TLS failures (with their cause).
    """
    if timeout <= 0:
        raise FetchError("webhook timeout must be positive")
    parsed, shown = _checked_url(url)
    # Building the context reads the system trust store (and the key): keep that off the event loop.
    context = await anyio.to_thread.run_sync(ssl_context, credentials)
    headers = {"Accept": _ACCEPT, "Accept-Encoding": "identity", "User-Agent": _USER_AGENT}
    if credentials.bearer_token is not None:
        headers["Authorization"] = f"Bearer {credentials.bearer_token}"
    try:
        with anyio.fail_after(timeout):
            async with httpx.AsyncClient(
                verify=context,
                trust_env=False,  # no proxies, no SSL_CERT_FILE, no .netrc from the environment
                follow_redirects=False,
                timeout=httpx.Timeout(timeout),
                limits=httpx.Limits(max_connections=1, max_keepalive_connections=0),
            ) as client:
                return await _exchange(client, parsed, shown, headers, max_bytes)
    except TimeoutError:
        raise FetchError(f"GET {shown}: timed out after {timeout:g} s") from None
    except httpx.TimeoutException:
        raise FetchError(f"GET {shown}: timed out after {timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise FetchError(f"GET {shown}: {_cause(exc)}") from None
    except OSError as exc:  # e.g. ssl.SSLError raised while reading (a TLS 1.3 client-certificate alert)
        raise FetchError(f"GET {shown}: {_cause(exc)}") from None


async def _exchange(
    client: httpx.AsyncClient, url: httpx.URL, shown: str, headers: dict[str, str], max_bytes: int
) -> bytes:
    async with client.stream("GET", url, headers=headers) as response:
        status = response.status_code
        if 300 <= status < 400:
            raise FetchError(
                f"GET {shown}: HTTP {status} {response.reason_phrase}: redirects are not followed "
                "(the credentials go to the configured URL only)"
            )
        if status != 200:
            raise FetchError(f"GET {shown}: HTTP {status} {response.reason_phrase} (expected 200)")
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise FetchError(
                f"GET {shown}: unsupported Content-Encoding {encoding!r} (identity was requested)"
            )
        too_big = f"GET {shown}: response body exceeds the {max_bytes}-byte limit"
        declared = response.headers.get("Content-Length")
        if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
            raise FetchError(too_big)
        body = bytearray()
        async for chunk in response.aiter_raw():
            room = max_bytes + 1 - len(body)
            body += chunk[:room]
            if len(body) > max_bytes:
                raise FetchError(too_big)
        return bytes(body)
