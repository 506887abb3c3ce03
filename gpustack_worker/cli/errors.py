"""What a failed command prints: one line, ``gpustack-worker: error: <server>: <cause>``, never a traceback.

``gpustack-worker``'s ``main`` catches every exception a command raises and hands it to :func:`error_line`
(unless ``--debug`` or ``GPUSTACK_DEBUG`` asks for the traceback). This module is the one place that turns
what can go wrong between a command and its API server into words, the way kubectl does:

* the server cannot be reached (refused, no route, a name that does not resolve, a timeout);
* TLS fails (a certificate the kubeconfig's CA does not sign, a wrong server name);
* no credentials at all, a ``--kubeconfig`` that does not exist, a ``--context`` the kubeconfig lacks;
* 401 (the credentials were rejected), 403 (the user may not do this: the server's own message names the
  user, the verb and the resource), 404 for an API the server does not serve (a CRD not installed: the
  API is named), any other status with the server's message.

The controller and the agent run their work in anyio task groups, which raise an ``ExceptionGroup``;
:func:`root_cause` unwraps it (and ``raise ... from`` chains of the client's libraries) to the error
that explains it.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Final

import httpx
import kr8s

from gpustack_worker.runtime.client import ApiError, Fenced, KubeconfigError, NotFound, api_of

__all__ = ("PREFIX", "describe", "error_line", "root_cause")

#: Every error line starts with this (kubectl: ``error: ...``).
PREFIX: Final = "gpustack-worker: error: "
_KNOWN: Final = (ApiError, KubeconfigError, Fenced, httpx.TransportError, kr8s.APITimeoutError)


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
        if isinstance(link, ApiError) and link.server:
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


def _transport_cause(exc: BaseException) -> str:
    for link in _chain(exc):
        if isinstance(link, ssl.SSLCertVerificationError):
            return f"TLS: the server's certificate is not trusted: {link.verify_message or link.reason}"
        if isinstance(link, ssl.SSLError):
            return f"TLS: {link.reason or link}"
    if any(isinstance(link, httpx.TimeoutException | kr8s.APITimeoutError) for link in _chain(exc)):
        return "no answer: timed out waiting for the server"
    detail = next((str(link) for link in _chain(exc) if str(link)), type(exc).__name__)
    return f"cannot connect: {detail}"


def describe(exc: BaseException) -> str:
    """``<server>: <cause>`` (or just the cause when no server is involved) for ``exc`` (its root cause:
    :func:`root_cause`), on one line."""
    cause_exc = root_cause(exc)
    if isinstance(cause_exc, ApiError):
        cause = _api_cause(cause_exc)
    elif isinstance(cause_exc, httpx.TransportError | kr8s.APITimeoutError):
        cause = _transport_cause(cause_exc)
    elif isinstance(cause_exc, KubeconfigError | Fenced):
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
