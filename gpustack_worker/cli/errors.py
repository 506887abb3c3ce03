"""What a failed command prints: one line, ``gpustack-worker: error: <server>: <cause>``, never a traceback.

``gpustack-worker``'s ``main`` catches every exception a command raises and hands it to :func:`error_line`
(unless ``--debug`` or ``GPUSTACK_DEBUG`` asks for the traceback). This module is the one place that turns
what can go wrong between a command and its API server into words, the way kubectl does:

* the server cannot be reached: the connection refused, no route to the host, a name that does not resolve,
  a connection closed without an answer;
* no answer in time: the client's :class:`~gpustack_worker.runtime.client.RequestTimeout` names the
  request and what did not happen within ``--request-timeout`` (the connection, the TLS handshake, the
  proxy's CONNECT answer, the response headers, the rest of the body);
* TLS fails (a certificate the kubeconfig's CA does not sign, a wrong server name, a server that does not
  speak TLS);
* a proxy refuses the tunnel (its CONNECT answer), or a proxy setting cannot be used;
* no credentials at all, a ``--kubeconfig`` that does not exist, a ``--context`` the kubeconfig lacks, a
  kubeconfig that lacks something (:mod:`gpustack_worker.runtime.kubeconfig_check` names it);
* 401 (the credentials were rejected), 403 (the user may not do this: the server's own message names the
  user, the verb and the resource), 404 for an API the server does not serve (a CRD not installed: the
  API is named), any other status with the server's message.

The controller and the agent run their work in anyio task groups, which raise an ``ExceptionGroup``;
:func:`root_cause` unwraps it (and ``raise ... from`` chains of the client's libraries) to the error
that explains it.
"""

from __future__ import annotations

import asyncio
import errno
import re
import socket
import ssl
from typing import Final

import httpx
import kr8s

from gpustack_worker.runtime.client import (
    ApiError,
    Fenced,
    KubeconfigError,
    NotFound,
    ProxyUnreachable,
    RequestTimeout,
    api_of,
)
from gpustack_worker.runtime.proxy import ProxyError
from gpustack_worker.runtime.transport import Http2Refused, SocksUnavailable

__all__ = ("PREFIX", "describe", "error_line", "root_cause")

#: Every error line starts with this (kubectl: ``error: ...``).
PREFIX: Final = "gpustack-worker: error: "
#: Errors whose text is already the one line (a setting, the file or the fence named in it).
_SAID: Final = (KubeconfigError, Fenced, ProxyError, Http2Refused, SocksUnavailable)
_KNOWN: Final = (ApiError, RequestTimeout, httpx.TransportError, kr8s.APITimeoutError, *_SAID)
#: Where ``--request-timeout`` comes from, for the timeout line.
_TIMEOUT_HINT: Final = "(the deadline: --request-timeout, or $GPUSTACK_API_TIMEOUT_SECONDS)"
#: ``[Errno N]`` in the text of an error that lost its ``OSError`` (httpcore keeps only the text).
_ERRNO: Final = re.compile(r"\[Errno (-?\d+)\]")
_UNREACHED: Final = {
    errno.ECONNREFUSED: "connection refused (is the API server running, and is this its address?)",
    errno.EHOSTUNREACH: "no route to the host",
    errno.ENETUNREACH: "the network is unreachable",
    errno.ECONNRESET: "the connection was reset by the server",
}


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def root_cause(exc: BaseException) -> BaseException:
    """The error that explains ``exc``: inside (nested) exception groups, the first one this module knows
    how to describe, else the first that is not a cancellation (a task cancelled because a sibling
    failed), else the first."""
    leaves = _leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, _KNOWN):
            return leaf
    for leaf in leaves:
        if not isinstance(leaf, asyncio.CancelledError):
            return leaf
    return leaves[0]


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what caused it (``__cause__``, else ``__context__``), outermost first."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _server_of(exc: BaseException) -> str:
    for link in _chain(exc):
        if isinstance(link, ApiError | RequestTimeout) and link.server:
            return link.server
        if isinstance(link, httpx.RequestError):
            try:
                url = link.request.url
            except RuntimeError:  # an error raised before any request was built
                continue
            return f"{url.scheme}://{url.netloc.decode()}"
    return ""


def _api_cause(exc: ApiError) -> str:
    message = exc.message
    if exc.status == 401:
        return "Unauthorized (401): the server rejected the credentials (an invalid or expired token?)"
    if exc.status == 403:
        return f"Forbidden (403): {message or 'the user may not do this'}"
    if isinstance(exc, NotFound) and exc.api_missing:
        api = api_of(exc.path) or exc.path or "the API"
        return f"the server does not serve the API {api} (404): is its CRD installed?"
    reason = exc.reason or "error"
    return f"{reason} ({exc.status}): {message}" if message else f"{reason} ({exc.status})"


def _unreached(exc: BaseException) -> str | None:
    """What kept the connection from being made, from the ``OSError`` in the chain or the errno in the
    text httpcore kept of it."""
    for link in _chain(exc):
        if isinstance(link, socket.gaierror):
            return f"the server's name does not resolve ({link.strerror or link})"
        if isinstance(link, OSError) and link.errno in _UNREACHED:
            return _UNREACHED[link.errno]
    for link in _chain(exc):
        if match := _ERRNO.search(str(link)):
            code = int(match.group(1))
            if code in _UNREACHED:
                return _UNREACHED[code]
            if code in (socket.EAI_NONAME, socket.EAI_AGAIN, socket.EAI_FAIL):
                return f"the server's name does not resolve ({str(link)[match.end() :].strip()})"
    return None


def _tls_cause(link: ssl.SSLError) -> str:
    if isinstance(link, ssl.SSLCertVerificationError):
        why = link.verify_message or link.reason
        return f"TLS: the server's certificate is not trusted: {why}"
    if link.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        return f"TLS: the server does not speak TLS (an http:// server?): {link.reason}"
    return f"TLS: {link.reason or link}"


def _transport_cause(exc: BaseException) -> str:
    for link in _chain(exc):
        if isinstance(link, ssl.SSLError):
            return _tls_cause(link)
    if isinstance(exc, ProxyUnreachable):
        # Not the API server's fault: the proxy in front of it could not be reached.
        unreached = _unreached(exc)
        reason = (unreached or "").split(" (is the API server", 1)[0] or str(exc.__cause__ or "")
        return f"cannot connect to the proxy ({exc.via}): {reason or 'no connection'}"
    if isinstance(exc, httpx.ProxyError):
        return f"the proxy refused the tunnel to the server (its answer to CONNECT: {exc})"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"the connection was closed without a complete answer ({exc})"
    if any(isinstance(link, httpx.TimeoutException | kr8s.APITimeoutError) for link in _chain(exc)):
        return "no answer: timed out waiting for the server"
    unreached = _unreached(exc)
    if unreached is not None:
        return f"cannot connect: {unreached}"
    detail = next((str(link) for link in _chain(exc) if str(link)), type(exc).__name__)
    return f"cannot connect: {detail}"


def _timeout_cause(exc: RequestTimeout) -> str:
    """``<METHOD> <path>: no <phase> within <N> s`` (the client's own line without its server, which
    :func:`describe` puts first) and where the deadline comes from."""
    text = str(exc)
    if exc.server and text.startswith(f"{exc.server}: "):
        text = text[len(exc.server) + 2 :]
    return f"{text} {_TIMEOUT_HINT}"


def describe(exc: BaseException) -> str:
    """``<server>: <cause>`` (or just the cause when no server is involved) for ``exc`` (its root cause:
    :func:`root_cause`), on one line."""
    cause_exc = root_cause(exc)
    if isinstance(cause_exc, ApiError):
        cause = _api_cause(cause_exc)
    elif isinstance(cause_exc, RequestTimeout):
        cause = _timeout_cause(cause_exc)
    elif isinstance(cause_exc, httpx.TransportError | kr8s.APITimeoutError):
        cause = _transport_cause(cause_exc)
    elif isinstance(cause_exc, _SAID):
        cause = str(cause_exc)
    elif isinstance(cause_exc, OSError) and cause_exc.strerror:
        where = f"{cause_exc.filename}: " if cause_exc.filename else ""
        cause = f"{where}{cause_exc.strerror}"
    else:
        text = str(cause_exc)
        cause = f"{type(cause_exc).__name__}: {text}" if text else type(cause_exc).__name__
        cause += " (run with --debug for the traceback)"
    server = _server_of(cause_exc)
    line = f"{server}: {cause}" if server else cause
    return " ".join(line.split())


def error_line(exc: BaseException) -> str:
    """The one line ``main`` prints on stderr for ``exc``."""
    return PREFIX + describe(exc)
