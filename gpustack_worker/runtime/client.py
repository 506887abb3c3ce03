"""The one HTTP client every controller talks to the API server through.

kr8s gives us configuration and authentication (kubeconfig, in-cluster service account, token refresh on
401/403) and its low-level ``Api.call_api``; everything above that is ours, because kr8s has no
server-side apply, returns no list resourceVersion, cannot pass ``timeoutSeconds`` or
``allowWatchBookmarks`` to a watch, ends a watch silently, does not retry 429/5xx and creates its HTTP
session without timeouts (all true of kr8s 0.20.15; docs/runtime.md, "Why we own this"). So this module:

* speaks plain JSON dicts (no kr8s ``APIObject``: they cost ~10x per object on large lists);
* pages LISTs with ``limit``/``continue`` and returns the list's resourceVersion for a correct
  list-then-watch;
* streams WATCHes with our own ``timeoutSeconds``, resourceVersion and bookmarks, and turns an
  ``ERROR`` event into the matching :class:`ApiError` (410 -> :class:`Gone`), so the informer decides;
* retries 429 (honouring ``Retry-After``), 5xx and connection errors a bounded number of times;
* serialises apply bodies deterministically (orjson, sorted keys) so equal intent gives equal bytes;
* passes every write attempt through an optional :class:`WriteFence` (the leader elector installs one):
  it is asked before the attempt and again, by the session's network backend (:mod:`.wire`), in the same
  synchronous step as every ``send`` of the request's bytes, so a closed fence raises :class:`Fenced`
  instead of sending even when the loop stalled in between; the wait for the answer is bounded by the
  time the fence has left;
* counts every request in ``rest_client_requests_total{code,method,host}`` and in the per-instance
  :attr:`Client.requests_by_method` (tests assert "zero writes" with it), and traces each call as an
  OpenTelemetry span.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import gc
import os
import ssl
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import httpcore
import httpx
import kr8s
import orjson
import structlog
import yaml
from opentelemetry import trace
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, stop_after_delay

from gpustack_worker.runtime import proxy, transport, wire
from gpustack_worker.runtime.defaults import DEFAULT_TIMEOUT_S
from gpustack_worker.runtime.kubeconfig_check import document_problem, kubeconfig_problem, load_kubeconfig
from gpustack_worker.runtime.lines import byte_lines
from gpustack_worker.runtime.metrics import CLIENT_REAUTHENTICATIONS, FENCED_WRITES, REST_REQUESTS
from gpustack_worker.runtime.version import VERSION

if TYPE_CHECKING:
    import builtins
    import contextvars
    from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence

    from gpustack_worker.runtime.resources import Resource

__all__ = (
    "TRANSPORT_ERRORS",
    "WRITE_METHODS",
    "ApiError",
    "Client",
    "Conflict",
    "Fenced",
    "Gone",
    "KubeconfigError",
    "NotFound",
    "ProxyUnreachable",
    "RequestTimeout",
    "Unauthorized",
    "WriteFence",
    "api_of",
    "kubeconfig_source",
    "merge_kubeconfigs",
    "user_agent_of",
)

_TRACER: Final = trace.get_tracer(__name__)
#: Characters a request path keeps as they are (RFC 3986 ``pchar`` and ``/``); any other is %-encoded.
_PATH_SAFE: Final = "/:@-._~!$&'()*+,;="
_log = structlog.get_logger(__name__)
#: HTTP methods that change state; ``requests_by_method`` summed over these is the write count.
WRITE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_PATCH_TYPES: Final = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}
_RETRIABLE_STATUS: Final = frozenset({401, 429, 500, 502, 503, 504})
#: ``DeleteOptions.propagationPolicy`` values.
_PROPAGATION_POLICIES: Final = frozenset({"Background", "Foreground", "Orphan"})
#: User-Agent of a client that does not name itself (commands pass ``<program>/<identity>``).
DEFAULT_USER_AGENT: Final = "gpustack-worker"
#: Where kubectl (and kr8s, and so :meth:`Client.connect`) looks when neither ``--kubeconfig`` nor
#: ``$KUBECONFIG`` names a kubeconfig.
DEFAULT_KUBECONFIG: Final = "~/.kube/config"
#: How a fenced write ended (:attr:`Fenced.outcome`), pre-registered at zero per write verb.
FENCE_OUTCOMES: Final = ("refused", "incomplete", "cut_off")
for _verb in sorted(WRITE_METHODS):
    for _outcome in FENCE_OUTCOMES:
        FENCED_WRITES.labels(method=_verb, outcome=_outcome)


def user_agent_of(program: str | None) -> str:
    """The User-Agent of every request: ``<program>/<identity> gpustack-worker/<version>``, or
    ``gpustack-worker/<version>`` for a client that does not name itself.

    The program and its identity come first, so the API server's audit log (and a ``userAgent`` prefix
    match on it) still attributes each request to the process that made it, and the default field
    manager the server derives from it (the part before the first ``/``) stays the program's name; the
    version follows as a second product token, as in ``kubectl/v1.35.0 (linux/amd64) kubernetes/...``.
    """
    if not program or program == DEFAULT_USER_AGENT:
        return f"{DEFAULT_USER_AGENT}/{VERSION}"
    return f"{program} {DEFAULT_USER_AGENT}/{VERSION}"


class KubeconfigError(ValueError):
    """The client could not be configured: no credentials anywhere, a ``--kubeconfig`` that does not exist,
    a ``--context`` the kubeconfig lacks, or a kubeconfig that cannot be read. ``str`` is the one-line
    reason; :attr:`source` names where it looked (a path, or the in-cluster service account). A
    ``ValueError``, as kr8s' own errors for these were, so callers that caught those still do."""

    def __init__(self, message: str, *, source: str = "") -> None:
        super().__init__(message)
        self.source = source


class ApiError(Exception):
    """A non-2xx answer from the API server (or an ``ERROR`` watch event).

    :attr:`server` (``https://host:port``) and :attr:`path` are those of the request the client sent
    (empty for an error built elsewhere), so a command can say which server refused what."""

    def __init__(self, status: int, reason: str, body: dict[str, Any], message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.body = body
        self.retry_after: float | None = None
        self.server = ""
        self.path = ""

    @property
    def message(self) -> str:
        """The server's ``Status.message`` (may be empty)."""
        return str(self.body.get("message") or "")

    @staticmethod
    def from_status(status: int, body: dict[str, Any]) -> ApiError:
        """Build the most specific subclass for ``status`` from a ``Status`` body."""
        reason = str(body.get("reason") or "")
        message = str(body.get("message") or "")
        cls = _BY_STATUS.get(status, ApiError)
        return cls(status, reason, body, message)


class Unauthorized(ApiError):
    """401: the credentials were rejected (an expired token); :meth:`Client.reauthenticate` reloads them."""


class NotFound(ApiError):
    """404: the object (or its kind) does not exist."""

    @property
    def api_missing(self) -> bool:
        """The API itself is not served (its group, version or resource: a CRD not installed), rather than
        one object of it missing.

        The one predicate for the difference: a kube-apiserver answers a missing object with a ``Status``
        whose ``details`` name the object, and a path no API serves with a ``Status`` whose ``details``
        name nothing (``the server could not find the requested resource``). A body that is not a
        ``Status`` at all says nothing either way and is taken as a missing object (a plain-text answer
        of the server's mux, for a path no API serves, is turned into a ``Status`` by ``_status_of``)."""
        if self.body.get("kind") != "Status":
            return False
        details = self.body.get("details") or {}
        return not (isinstance(details, dict) and details.get("name"))


def api_of(path: str) -> str:
    """The API a request path belongs to, as kubectl names it: ``resourceflavors.kueue.x-k8s.io/v1beta2``
    for ``/apis/kueue.x-k8s.io/v1beta2/resourceflavors/x``, ``nodes/v1`` for ``/api/v1/nodes``; ``""``
    for a path under neither."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
        version = parts[1]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    elif parts[:1] == ["apis"] and len(parts) == 2:
        return parts[1]
    else:
        return ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    resource = rest[0] if rest else ""
    qualified = f"{resource}.{group}" if resource and group else resource or group
    return f"{qualified}/{version}" if qualified else version


class Conflict(ApiError):
    """409: an optimistic-concurrency conflict, an AlreadyExists or a failed delete precondition."""


class Gone(ApiError):
    """410: the requested resourceVersion is older than etcd keeps; the caller must relist."""


_BY_STATUS: Final[dict[int, type[ApiError]]] = {401: Unauthorized, 404: NotFound, 409: Conflict, 410: Gone}


class RequestTimeout(Exception):
    """A request's deadline passed (:meth:`Client.connect`'s ``timeout_s``, for the whole request: waiting
    for a connection, connecting, TLS, a proxy's CONNECT, writing, the response headers and body; for a
    watch, its opening up to the headers). :attr:`phase` is where the request was (one of
    :data:`~.wire.CONNECT`, :data:`~.wire.TLS_HANDSHAKE`, :data:`~.wire.PROXY_CONNECT`,
    :data:`~.wire.REQUEST`, :data:`~.wire.HEADERS`, :data:`~.wire.BODY`); ``str`` is one line naming the
    server, the request and the phase."""

    def __init__(
        self, server: str, method: str, path: str, phase: str, seconds: float, *, via: str = ""
    ) -> None:
        through = f" ({via})" if via else ""
        super().__init__(
            f"{server}: {method} {path}: no {_PHASE_TEXT.get(phase, phase)} within {seconds:g} s{through}"
        )
        self.server = server
        self.method = method
        self.path = path
        self.phase = phase
        self.seconds = seconds
        #: The proxy the request went through (``via proxy <url> (<source>)``), ``""`` when direct.
        self.via = via


class ProxyUnreachable(httpx.ConnectError):
    """The connection to the proxy the session goes through could not be made (refused, no route, its
    name not resolving, timed out): the API server was never asked. :attr:`via` names the proxy and where
    the setting came from, so the error does not blame the API server."""

    def __init__(self, via: str, cause: Exception) -> None:
        super().__init__(f"cannot connect to the proxy ({via}): {cause}")
        self.via = via


def _proxy_failure(exc: Exception, progress: wire.Progress, via: str) -> Exception | None:
    """:class:`ProxyUnreachable` for ``exc`` when it failed the connection to the proxy itself (routed
    through one, still opening the TCP connection: the proxy's address is the one being connected)."""
    if via and progress.phase == wire.CONNECT and isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return ProxyUnreachable(via, exc)
    return None


#: What :class:`RequestTimeout` says did not happen, by phase.
_PHASE_TEXT: Final = {
    wire.CONNECT: "connection",
    wire.TLS_HANDSHAKE: "TLS handshake",
    wire.PROXY_CONNECT: "proxy CONNECT",
    wire.REQUEST: "request sent",
    wire.HEADERS: "response headers",
    wire.BODY: "complete response body",
}

#: Connection-level failures (refused, reset, timed out): no answer from the server at all.
TRANSPORT_ERRORS: Final = (httpx.TransportError, RequestTimeout, kr8s.APITimeoutError)


class _TransientError(Exception):
    """Internal marker: a connection-level failure worth retrying."""


class Fenced(Exception):
    """A write refused (or cut off) by the client's :class:`WriteFence`: this process must not write now.

    Never retried. The message says which of three things happened:

    * ``refused ... nothing was sent``: the fence was closed when the attempt started, or when its first
      byte was to be written; the server never saw the request.
    * ``refused ... before the request was complete``: part of the request had left while the fence was
      open, the fence closed before the rest was written, and the connection was closed; the server cannot
      act on a request whose body never arrived.
    * ``cut off``: the whole request left while the fence was open and the fence closed while waiting for
      the answer; it may or may not have been applied.

    :attr:`outcome` names them ``refused``, ``incomplete``, ``cut_off`` (the label of
    ``gpustack_fenced_writes_total``).
    """

    def __init__(self, message: str, *, outcome: str = "refused") -> None:
        super().__init__(message)
        self.outcome = outcome


class WriteFence(Protocol):
    """Decides whether this process may write (the leader elector's fence, see ``runtime/leader.py``)."""

    def remaining(self) -> float:
        """Seconds the fence stays open (<= 0: closed). Called before every write attempt."""
        ...


def _retriable(exc: BaseException) -> bool:
    if isinstance(exc, ApiError):
        return exc.status in _RETRIABLE_STATUS
    return isinstance(exc, httpx.TransportError | RequestTimeout | kr8s.APITimeoutError | _TransientError)


def _retry_wait(state: Any) -> float:
    """Exponential backoff 0.2 s x2 (cap 5 s), but never shorter than the server's Retry-After."""
    attempt = int(state.attempt_number)
    base: float = min(5.0, 0.2 * (2 ** (attempt - 1)))
    outcome = state.outcome
    exc = outcome.exception() if outcome is not None else None
    if isinstance(exc, ApiError) and exc.retry_after is not None:
        return float(max(base, min(exc.retry_after, 30.0)))
    return base


def _split(path: str) -> tuple[str, str]:
    """Split ``/apis/g/v/...`` into kr8s' ``base`` (``/apis``) and ``url`` (the rest)."""
    root, _, rest = path[1:].partition("/")
    return f"/{root}", rest


def _status_of(response: httpx.Response) -> dict[str, Any]:
    """The ``Status`` of an error answer. A body that is not JSON comes from none of the API's handlers
    (kube-apiserver's mux answers a path no API serves with ``404 page not found`` as plain text), so it
    is given as a ``Status`` that names no object (:attr:`NotFound.api_missing` holds for it)."""
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return {"kind": "Status", "code": response.status_code, "message": response.text[:500], "details": {}}
    return body if isinstance(body, dict) else {"message": str(body)}


def _fenced(
    method: str, path: str, fence: WriteFence, attempt: wire.Attempt | None, *, wired: bool
) -> Fenced:
    """The :class:`Fenced` for a write the fence stopped, counted in ``gpustack_fenced_writes_total``.

    ``attempt`` is None when the fence was closed before the attempt started; otherwise it says what left
    (and so whether the server may have acted on it). Without the fenced network backend (``wired`` is
    False: a test transport) nothing is known of what left, so the answer is the cautious one."""
    if attempt is None:
        outcome = "refused"
        what = "refused: the write fence is closed, nothing was sent"
    elif wired and attempt.bytes_sent == 0:
        outcome = "refused"
        what = "refused: the write fence closed before any byte of it was written, nothing was sent"
    elif wired and attempt.incomplete:
        outcome = "incomplete"
        what = (
            f"refused: the write fence closed before the request was complete ({attempt.bytes_sent} bytes"
            " of it sent); the connection was closed, so the server cannot act on it"
        )
    else:
        outcome = "cut_off"
        what = (
            "cut off: the write fence closed while waiting for the answer; the request had left while the"
            " fence was open and may or may not have been applied"
        )
    FENCED_WRITES.labels(method=method, outcome=outcome).inc()
    return Fenced(f"{method} {path} {what} ({fence!r})", outcome=outcome)


_T = TypeVar("_T")


def _as_is(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return items


class _GcPause:
    """The cyclic garbage collector off while at least one list page is being decoded and converted.

    A decoded page is ~130 containers per Node (66,000 for a page of 500 Nodes) that all die by reference
    counting the moment the page is dropped. Left to the collector, they trigger young collections in the
    middle of the decode, survive them (the page is still in use), get promoted, and then trigger full
    collections of the whole heap, each holding the GIL, so each stalls the event loop too (relist_bench:
    at 20,000 Nodes about half the relist time, and most of the longest loop stall). Paused, the page is
    freed before the collector looks. Counted across worker threads: the collector comes back when the
    last page is done, and only if it was on before.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._resume = False

    def __enter__(self) -> None:
        with self._lock:
            if self._holders == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._holders += 1

    def __exit__(self, *_: object) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._resume:
                gc.enable()


_GC_PAUSE: Final = _GcPause()


def _decode_page(
    body: bytes,
    resource: Resource,
    convert: Callable[[list[dict[str, Any]]], _T],
    on_continue: Callable[[str], None] | None = None,
) -> tuple[_T, str, str]:
    """A list page's bytes -> ``(convert(items), list resourceVersion, continue token)``; runs in a
    worker thread, the cyclic GC paused (:class:`_GcPause`) until the decoded page is dropped. Items get
    ``apiVersion``/``kind`` (the server omits them inside a List). ``on_continue(token)`` is called once
    the page is decoded and before it is converted (the next page can be asked for meanwhile)."""
    with _GC_PAUSE:
        page = orjson.loads(body) if body else {}
        if not isinstance(page, dict):
            page = {"items": page}
        items = page.get("items") or []
        for item in items:
            item["apiVersion"] = resource.api_version
            item["kind"] = resource.kind
        meta = page.get("metadata") or {}
        token = str(meta.get("continue") or "")
        if on_continue is not None:
            on_continue(token)
        converted = convert(items)
        del page, items
    return converted, str(meta.get("resourceVersion") or ""), token


def _resolve(future: asyncio.Future[str], value: str) -> None:
    if not future.done():
        future.set_result(value)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Done callback of a page fetch nobody awaits any more: its error is not left unretrieved."""
    if not task.cancelled():
        task.exception()


def request_target(path: str, params: Mapping[str, str] | None) -> str:
    """The request-target of ``path`` with ``params`` as its query (what :meth:`_Api._direct` sends):
    the path %-encoded but for RFC 3986 ``pchar`` and ``/``, each parameter name and value %-encoded
    whole (a space as ``%20``, ``&``, ``=``, ``+``, ``,``, ``(`` and ``!`` encoded too), so the server
    reads back exactly ``path`` and ``params`` (a label selector such as ``a in (x,y),!b`` included)."""
    target = quote(path, safe=_PATH_SAFE)
    if params:
        target = f"{target}?{urlencode(params, quote_via=quote, safe='')}"
    return target


class _Api:
    """One HTTP session to the API server, built by us from kr8s' configuration and credentials.

    kr8s gives :attr:`auth` (kubeconfig or in-cluster service account: ``server``, ``token``,
    ``ssl_context()``, ``proxy``, ``tls_server_name``, ``reauthenticate()``) and nothing else: the session
    is an ``httpx.AsyncClient`` over our :class:`~.transport.Transport` (httpcore's pool on the fenced
    network backend, through the proxy :func:`.proxy.route_for` chooses), built on first use and again
    when certificate credentials change. :meth:`call_api` keeps kr8s' ``call_api`` shape (``base`` +
    ``url``, an async context manager yielding the ``httpx.Response``), which the test doubles share."""

    def __init__(
        self, *, user_agent: str, kubeconfig: str | dict[str, Any] | None, context: str | None
    ) -> None:
        self.auth = kr8s.asyncio.Api(bypass_factory=True, kubeconfig=kubeconfig, context=context).auth
        self._user_agent = user_agent
        #: The session (None until the first request, and after :meth:`aclose`).
        self.session: httpx.AsyncClient | None = None
        self._lock = asyncio.Lock()
        #: The proxy the session goes through (:func:`.proxy.route_for`), known once it is opened.
        self.route: proxy.Route | None = None
        #: The session's transport, server URL and TLS name, for :meth:`_direct` (set with the session).
        self._transport: transport.Transport | None = None
        self._origin = httpx.URL()
        self._sni: str | None = None

    async def _open(self) -> httpx.AsyncClient:
        async with self._lock:
            if self.session is not None:
                return self.session
            auth = self.auth
            verify = await auth.ssl_context()  # type: ignore[no-untyped-call]
            context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context()
            route = proxy.route_for(auth.server, proxy_url=auth.proxy, env=os.environ)
            self.route = route
            if route is not None:
                _log.info(
                    "API server through a proxy", server=auth.server, proxy=route.display, source=route.source
                )
            pool = transport.build_pool(
                auth.server, ssl_context=context, route=route, tls_server_name=auth.tls_server_name or None
            )
            headers = {"User-Agent": self._user_agent}
            if auth.token:
                headers["Authorization"] = f"Bearer {auth.token}"
            self._sni = auth.tls_server_name or None
            self._transport = transport.Transport(pool, sni_hostname=self._sni)
            self._origin = httpx.URL(auth.server)
            self.session = httpx.AsyncClient(
                base_url=auth.server,
                headers=headers,
                transport=self._transport,
                timeout=None,  # the client bounds each request as a whole (Client._once)
                trust_env=False,  # proxies are chosen by proxy.route_for, as kubectl chooses them
                follow_redirects=True,
            )
            return self.session

    @contextlib.asynccontextmanager
    async def call_api(
        self,
        method: str = "GET",
        version: str = "",
        base: str = "",
        url: str = "",
        raise_for_status: bool = False,
        stream: bool = False,
        **kwargs: Any,
    ) -> AsyncIterator[httpx.Response]:
        """One request to ``base/url`` (``version`` is placed between them when set). The response is
        yielded once its headers are in (its body unread: ``stream`` is accepted for kr8s' shape and
        changes nothing); ``raise_for_status`` must be False (the client reads statuses itself)."""
        assert not raise_for_status, "the client reads statuses itself"
        session = self.session or await self._open()
        path = "/".join(part for part in (base, version, url) if part)
        if not stream and not session.event_hooks["request"]:
            yield await self._direct(session, method, path, **kwargs)
            return
        request = session.build_request(method, path, **kwargs)
        response = await session.send(request, stream=True)
        try:
            yield response
        finally:
            await response.aclose()

    async def _direct(
        self,
        session: httpx.AsyncClient,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
    ) -> httpx.Response:
        """One whole request (its body read) straight on the session's httpcore pool: the same pool,
        fenced backend, proxy route, TLS name and headers as :meth:`call_api`'s httpx path, without
        httpx's per-request machinery (``build_request``'s URL merge and parse, cookie extraction, the
        auth and redirect layers, the response stream wrappers) — about a third of the client's CPU per
        write (docs/performance.md, issue 28). No redirect is followed (the API server sends none); a
        compressed answer is decoded by the ``httpx.Response`` built from it. A session given request
        hooks (tests instrumenting requests) takes the httpx path, which runs them."""
        origin, core = self._origin, self._transport
        assert core is not None, "opened with the session"
        target = request_target(path, params)
        raw = [(b"Host", origin.netloc), *session.headers.raw]
        if content is not None:
            raw.append((b"Content-Length", str(len(content)).encode()))
        if headers:  # a mapping, or pairs where a name may repeat (preflight's impersonation headers)
            pairs = headers.items() if isinstance(headers, Mapping) else headers
            raw += [(k.encode(), v.encode()) for k, v in pairs]
        extensions: dict[str, Any] = {"sni_hostname": self._sni} if self._sni else {}
        request = httpcore.Request(
            method.encode(),
            httpcore.URL(
                scheme=origin.raw_scheme, host=origin.raw_host, port=origin.port, target=target.encode()
            ),
            headers=raw,
            content=content or b"",
            extensions=extensions,
        )
        try:
            answer = await core.pool.handle_async_request(request)
            progress = wire.PROGRESS.get()
            if progress is not None:
                progress.phase = wire.BODY
            try:
                body = b"".join([part async for part in answer.stream])  # type: ignore[union-attr]
            finally:
                await answer.aclose()
        except Exception as exc:
            error = transport.mapped(exc, httpx.Request(method, origin.join(target)))
            if error is exc:
                raise
            raise error from exc
        return httpx.Response(
            answer.status, headers=answer.headers, content=body, extensions=answer.extensions
        )

    async def reauthenticate(self) -> None:
        """Reload the credentials (kubeconfig, exec plugin or service-account token) into the session.

        A bearer token is a default header of the session, replaced in place: the session is shared by
        every open watch of the process, and a new one would cut them all. Certificate credentials live in
        the TLS context, so they get a new session (the old one is closed)."""
        await self.auth.reauthenticate()
        session = self.session
        if session is None or session.is_closed:
            self.session = None
            return  # the next request opens a session from the fresh credentials
        token = self.auth.token
        if token:
            session.headers["Authorization"] = f"Bearer {token}"
            return
        self.session = None
        await session.aclose()

    async def aclose(self) -> None:
        """Close the session (a later request opens a new one)."""
        session, self.session = self.session, None
        if session is not None:
            await session.aclose()


#: The fields of a kubeconfig's clusters and users that name a file (relative to the kubeconfig's own
#: directory, for kubectl).
_FILE_FIELDS: Final = {"clusters": ("certificate-authority",), "users": ("client-certificate", "client-key")}
_NAMED_LISTS: Final = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))


def merge_kubeconfigs(files: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The kubeconfig ``$KUBECONFIG`` names when it lists several files, merged as kubectl merges them:
    a cluster, user or context comes from the first file that defines its name (later definitions of the
    same name are ignored); ``current-context`` is the first one set; a relative file reference
    (``certificate-authority``, ``client-certificate``, ``client-key``) is made absolute against the
    directory of the file it was read from. ``files`` is ``(path, parsed document)`` in list order."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "current-context": ""}
    for list_key, _ in _NAMED_LISTS:
        merged[list_key] = []
    seen: dict[str, set[str]] = {list_key: set() for list_key, _ in _NAMED_LISTS}
    for path, doc in files:
        base = os.path.dirname(os.path.abspath(os.path.expanduser(path)))
        if not merged["current-context"] and doc.get("current-context"):
            merged["current-context"] = str(doc["current-context"])
        for list_key, item_key in _NAMED_LISTS:
            for entry in doc.get(list_key) or ():
                if not isinstance(entry, Mapping) or not entry.get("name") or entry["name"] in seen[list_key]:
                    continue
                seen[list_key].add(entry["name"])
                body = dict(entry.get(item_key) or {})
                for field_name in _FILE_FIELDS.get(list_key, ()):
                    value = body.get(field_name)
                    if isinstance(value, str) and value and not os.path.isabs(os.path.expanduser(value)):
                        body[field_name] = os.path.join(base, value)
                merged[list_key].append({"name": entry["name"], item_key: body})
    return merged


def kubeconfig_source(
    flag: str | None, env: Mapping[str, str] | None = None
) -> tuple[str | dict[str, Any] | None, str]:
    """``(the kubeconfig to hand kr8s, how to name it in an error)``, chosen as kubectl chooses it:
    ``--kubeconfig`` (which must exist: :class:`KubeconfigError` otherwise); else ``$KUBECONFIG`` — a
    ``:``-separated list whose files that do not exist are skipped, one file given as its path, several
    merged by :func:`merge_kubeconfigs` (kr8s' own merge takes ``current-context`` from the first file
    only and lets a later definition of a name win); else ``None``: kr8s reads
    :data:`DEFAULT_KUBECONFIG`, else the in-cluster service account.

    One file is handed over as its path, so a re-authentication after a 401 reads it again (a rotated
    token is picked up); several are merged once, here, so their tokens are the ones read at start-up
    (an exec plugin still runs on every re-authentication)."""
    env = os.environ if env is None else env
    if flag:
        if not os.path.exists(os.path.expanduser(flag)):
            raise KubeconfigError(f"kubeconfig {flag}: no such file", source=flag)
        return flag, flag
    listed = env.get("KUBECONFIG") or ""
    if not listed:
        return None, DEFAULT_KUBECONFIG
    where = f"$KUBECONFIG ({listed})"
    existing = [p for p in listed.split(os.pathsep) if p and os.path.exists(os.path.expanduser(p))]
    if len(existing) <= 1:
        return (existing[0] if existing else listed), where
    docs: list[tuple[str, Mapping[str, Any]]] = []
    for path in existing:
        doc, unreadable = load_kubeconfig(path)
        unreadable = unreadable or document_problem(doc)
        if unreadable is not None:
            raise KubeconfigError(f"kubeconfig {path}: {unreadable}", source=path)
        docs.append((path, doc or {}))
    return merge_kubeconfigs(docs), where


def check_kubeconfig(source: str | dict[str, Any] | None, where: str, context: str | None) -> None:
    """Refuse the kubeconfig :func:`kubeconfig_source` chose when kr8s could not use it for ``context``:
    one :class:`KubeconfigError` naming the file, the context and what is missing
    (:func:`.kubeconfig_check.kubeconfig_problem`), before kr8s reads it (kr8s fails on such a file with
    whatever Python raised while indexing into it). ``None`` is the default kubeconfig, checked when it
    exists (else the in-cluster service account is used); a path that does not exist is left to kr8s (no
    credentials)."""
    if isinstance(source, dict):
        found = kubeconfig_problem(source, context=context, base_dir=None)
        if found is not None:
            raise KubeconfigError(f"kubeconfig {where}: {found}", source=where)
        return
    path = os.path.expanduser(source or DEFAULT_KUBECONFIG)
    if not os.path.isfile(path):
        return
    doc, found = load_kubeconfig(path)
    if found is None:
        found = kubeconfig_problem(doc, context=context, base_dir=os.path.dirname(os.path.abspath(path)))
    if found is not None:
        shown = source or DEFAULT_KUBECONFIG
        raise KubeconfigError(f"kubeconfig {shown}: {found}", source=shown)


async def _authenticate(api: _Api, where: str, context: str | None) -> None:
    """Load ``api``'s credentials (kr8s: kubeconfig, else the in-cluster service account), its failures as
    one :class:`KubeconfigError` that says where it looked.

    kr8s reads a default namespace from the kubeconfig's ``current-context`` even when ``context`` names
    another one, and fails when the file sets none (kubectl does not need it with ``--context``); the
    client names the namespace of every request itself, so kr8s' default is set here and never read."""
    api.auth.namespace = "default"
    try:
        await api.auth
    except ValueError as exc:
        text = str(exc)
        if context and text.startswith("No such context"):
            raise KubeconfigError(f'context "{context}" does not exist in {where}', source=where) from exc
        if text == "Unable to find valid credentials":
            raise KubeconfigError(
                f"no credentials: no kubeconfig at {where}, and not in a cluster (no service-account "
                "token at /var/run/secrets/kubernetes.io/serviceaccount)",
                source=where,
            ) from exc
        raise KubeconfigError(f"kubeconfig {where}: {text}", source=where) from exc
    except (KeyError, TypeError, OSError, yaml.YAMLError) as exc:  # what check_kubeconfig did not foresee
        raise KubeconfigError(f"kubeconfig {where}: cannot use it: {exc!r}", source=where) from exc


def _api_error_of(exc: kr8s.ServerError) -> ApiError:
    """kr8s' error for a refused request (it raises on ``GET /version``) as our :class:`ApiError`."""
    response = exc.response
    if response is None:
        return ApiError(0, "", {"message": str(exc)}, str(exc))
    err = ApiError.from_status(response.status_code, _status_of(response))
    url = response.request.url
    err.server, err.path = f"{url.scheme}://{url.netloc.decode()}", url.path
    return err


class Client:
    """Async Kubernetes API client over a kr8s-authenticated HTTP session.

    One instance per process is enough; it is safe for concurrent use by many tasks.
    """

    def __init__(
        self,
        api: Any,
        *,
        max_attempts: int = 5,
        retry_deadline_s: float = 30.0,
        watch_api: Any | None = None,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._api = api
        #: Every request's deadline, whole (a watch: its opening); None only for test doubles.
        self.timeout_s = timeout_s
        #: The session watches stream on (:meth:`connect` gives them their own; default: ``api``'s).
        self._watch_api = watch_api if watch_api is not None else api
        self._max_attempts = max_attempts
        self._retry_deadline_s = retry_deadline_s
        server = urlsplit(str(getattr(api.auth, "server", "") or ""))
        self.host: str = server.netloc
        #: ``scheme://host:port`` of the API server, as errors name it.
        self.server: str = f"{server.scheme}://{server.netloc}" if server.netloc else ""
        #: The kubeconfig context in use (``""``: in-cluster, or a client built without a kubeconfig).
        self.context: str = str(getattr(api.auth, "active_context", "") or "")
        #: Requests issued by this instance, by HTTP method (``WATCH`` counted separately from ``GET``).
        self.requests_by_method: collections.Counter[str] = collections.Counter()
        #: When set, every write attempt (POST/PUT/PATCH/DELETE) must pass it (:meth:`_fenced_once`).
        self.fence: WriteFence | None = None
        #: Credential reloads after a 401 (:meth:`reauthenticate`).
        self.reauthentications = 0
        #: The session's writes pass the fence on the wire (:mod:`.wire`); False only for test transports.
        self._wired = isinstance(api, _Api)

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | None = None,
        *,
        context: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        user_agent: str | None = None,
    ) -> Client:
        """Connect the way kubectl does: the kubeconfig ``kubeconfig`` (``--kubeconfig``; it must exist),
        else ``$KUBECONFIG`` (a ``:``-separated list, merged as kubectl merges it: the first file to set a
        cluster, user, context or ``current-context`` wins; files that do not exist are skipped), else
        :data:`DEFAULT_KUBECONFIG`, else the in-cluster service account. ``context`` selects the
        kubeconfig context (default: its ``current-context``).

        Raises :class:`KubeconfigError` when none of these yields credentials or the context does not
        exist, :class:`ApiError` when the server refuses the first request (``GET /version``: a 401 for a
        rejected token), :class:`RequestTimeout` when it does not answer within ``timeout_s``, and
        ``httpx.TransportError`` when it cannot be reached.

        Every request, this first one included, is bounded by ``timeout_s`` as a whole (a watch: its
        opening; then its idle limit applies). The HTTP sessions are ours (:class:`_Api`): kr8s gives the
        configuration and credentials only. Every request carries ``User-Agent:`` :func:`user_agent_of`
        ``(user_agent)``: processes name themselves and their identity
        (``gpustack-worker-controller/<identity> gpustack-worker/<version>``), so the API server's audit
        log attributes each write to a process and a version.

        Watches get a session of their own: each open watch holds one HTTP/1.1 connection for minutes, and
        httpcore's pool scans all its connections for every request it assigns (quadratically, for the
        idle ones), so the requests' pool holds only request connections. (Measured at a 2,000-Node cold
        start the scan stayed at ~7 s of CPU: with 8 profile workers the request connections alone are
        enough to make it quadratic — see docs/performance.md.)
        """
        path, where = kubeconfig_source(kubeconfig)
        check_kubeconfig(path, where, context)
        agent = user_agent_of(user_agent)
        api = _Api(kubeconfig=path, context=context, user_agent=agent)
        await _authenticate(api, where, context)
        watch_api = _Api(kubeconfig=path, context=context, user_agent=agent)
        await _authenticate(watch_api, where, context)  # its session opens with the first watch
        client = cls(api, watch_api=watch_api, timeout_s=timeout_s)
        try:
            await client._first_request()
        except BaseException:
            await client.close()
            raise
        return client

    async def _first_request(self) -> None:
        """``GET /version``: the server is reachable and accepts the credentials (a 401 reloads them once,
        as an expired token is reloaded on any request)."""
        try:
            await self._once("GET", "/version", params=None, content=None, content_type=None)
        except Unauthorized:
            await self._once("GET", "/version", params=None, content=None, content_type=None)

    @property
    def via(self) -> str:
        """``via proxy <url> (<source>)`` when the session goes through a proxy, else ``""`` (errors name
        it next to the server)."""
        route = getattr(self._api, "route", None)
        return str(route) if route is not None else ""

    def _apis(self) -> list[Any]:
        return [self._api] if self._watch_api is self._api else [self._api, self._watch_api]

    @property
    def writes(self) -> int:
        """Total write requests (POST/PUT/PATCH/DELETE) issued by this instance."""
        return sum(n for m, n in self.requests_by_method.items() if m in WRITE_METHODS)

    async def reauthenticate(self) -> None:
        """Reload the credentials (kubeconfig, exec plugin or service-account token) after a 401.

        Each session (:class:`_Api`) reloads them and replaces its bearer-token header in place (the
        request session is shared by all workers and the watch session by every open watch: a new session
        would cut them all); only certificate-based credentials, which live in the TLS context, get a new
        session.
        """
        self.reauthentications += 1
        CLIENT_REAUTHENTICATIONS.inc()
        _log.info("reloading credentials after 401", host=self.host, reauthentications=self.reauthentications)
        for api in self._apis():
            await api.reauthenticate()

    # -- transport ---------------------------------------------------------------------------------

    def _count(self, method: str, code: int | str) -> None:
        self.requests_by_method[method] += 1
        # client-go's rest_client_requests_total labels the HTTP verb: a WATCH is a GET there.
        verb = "GET" if method == "WATCH" else method
        REST_REQUESTS.labels(code=str(code), method=verb, host=self.host).inc()

    async def _once(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None,
        content: bytes | None,
        content_type: str | None,
    ) -> httpx.Response:
        base, url = _split(path)
        kwargs: dict[str, Any] = {"params": params or None}
        if content is not None:
            kwargs["content"] = content
            kwargs["headers"] = {"Content-Type": content_type or "application/json"}
        with _TRACER.start_as_current_span(f"k8s {method}") as span:
            span.set_attribute("http.request.method", method)
            span.set_attribute("url.path", path)
            progress = wire.Progress()
            token = wire.PROGRESS.set(progress)
            deadline = asyncio.timeout(self.timeout_s)
            try:
                async with (
                    deadline,
                    self._api.call_api(
                        method, version="", base=base, url=url, raise_for_status=False, **kwargs
                    ) as response,
                ):
                    progress.phase = wire.BODY
                    await response.aread()
            except (httpx.TransportError, kr8s.APITimeoutError) as exc:
                self._count(method, "<error>")
                unreachable = _proxy_failure(exc, progress, self.via)
                if unreachable is not None:
                    raise unreachable from exc
                raise
            except TimeoutError as exc:
                if not deadline.expired():
                    raise
                self._count(method, "<error>")
                raise RequestTimeout(
                    self.server, method, path, progress.phase, self.timeout_s or 0.0, via=self.via
                ) from exc
            finally:
                wire.PROGRESS.reset(token)
            code = response.status_code
            span.set_attribute("http.response.status_code", code)
            self._count(method, code)
            if code == 401:
                # kr8s only re-authenticates when it raises; refresh ourselves and let tenacity retry.
                await self.reauthenticate()
            if code >= 400:
                err = ApiError.from_status(code, _status_of(response))
                err.server, err.path = self.server, path
                retry_after = response.headers.get("Retry-After")
                if retry_after and retry_after.isdigit():
                    err.retry_after = float(retry_after)
                raise err
            result: httpx.Response = response
            return result

    def with_fence(self, fence: WriteFence | None) -> Client:
        """A view of this client (same session and request counters) whose writes pass ``fence``
        instead (``None``: unfenced). Closing a view closes the shared session."""
        view = copy.copy(self)
        view.fence = fence
        return view

    async def _fenced_once(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None,
        content: bytes | None,
        content_type: str | None,
    ) -> httpx.Response:
        """:meth:`_once`, but a write attempt passes the fence: asked first (and so before every retry),
        then again by the network backend in the same synchronous step as each ``send`` of the request's
        bytes (:mod:`.wire`: no ``await`` between the check and the kernel taking the bytes), so no byte
        of the request is sent after the fence closed, however long the loop stalled in between. The wait
        for the answer is bounded by the time the fence has left (``asyncio.timeout``)."""
        fence = self.fence if method in WRITE_METHODS else None
        if fence is None:
            return await self._once(method, path, params=params, content=content, content_type=content_type)
        left = wire.time_left(fence)
        if not left:
            raise _fenced(method, path, fence, None, wired=self._wired)
        scope = asyncio.timeout(left)
        with wire.fenced(fence) as attempt:
            try:
                async with scope:
                    return await self._once(
                        method, path, params=params, content=content, content_type=content_type
                    )
            except wire.FenceClosed as exc:
                raise _fenced(method, path, fence, attempt, wired=True) from exc
            except TimeoutError as exc:
                if not scope.expired():
                    raise
                raise _fenced(method, path, fence, attempt, wired=self._wired) from exc

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        content = orjson.dumps(body, option=orjson.OPT_SORT_KEYS) if body is not None else None
        raw = await self._send(method, path, params=params, content=content, content_type=content_type)
        data = orjson.loads(raw) if raw else {}
        return data if isinstance(data, dict) else {"items": data}

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None,
        content: bytes | None,
        content_type: str | None,
    ) -> bytes:
        """One request's raw answer body: every attempt passes the fence; 429, 5xx and connection errors
        are retried a bounded number of times (the one retry policy of every verb).

        The first attempt runs before any retry machinery is built (tenacity's per-call set-up was ~30 µs
        of every request, and almost every request succeeds at once); a retriable failure hands over to
        tenacity with that attempt counted as its first (re-raised in its first round) and the time it
        took deducted from the deadline, so attempts, waits and the deadline are those of one loop."""
        start = time.monotonic()
        try:
            response = await self._fenced_once(
                method, path, params=params, content=content, content_type=content_type
            )
            return response.content
        except Exception as exc:
            if not _retriable(exc):
                raise
            failed: Exception | None = exc
        retrying = AsyncRetrying(
            retry=retry_if_exception(_retriable),
            stop=stop_after_attempt(self._max_attempts)
            | stop_after_delay(max(0.0, self._retry_deadline_s - (time.monotonic() - start))),
            wait=_retry_wait,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                if failed is not None:
                    first, failed = failed, None
                    raise first
                response = await self._fenced_once(
                    method, path, params=params, content=content, content_type=content_type
                )
                return response.content
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    # -- verbs -------------------------------------------------------------------------------------

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """LIST every page; returns ``(items, list resourceVersion)``.

        ``resource_version`` / ``resource_version_match`` choose where the list is served from (the
        API's list semantics): unset is a consistent read; ``"0"`` is "any", served from the API server's
        watch cache; a real RV with ``"NotOlderThan"`` is served from the watch cache once it has caught
        up to that RV (with ``limit`` but no match the same RV would mean an exact read from etcd). Both
        go on the first page only: the server rejects them next to a ``continue`` token, which carries
        the snapshot's RV itself. Items get ``apiVersion``/``kind`` filled in (the server omits them
        inside a List) so they look like watch objects. Pages are decoded off the loop
        (:meth:`list_pages`); a caller that keeps only part of each item should use that instead, so
        the whole list is never held decoded at once.
        """
        items: list[dict[str, Any]] = []
        rv = ""
        async for page, page_rv in self.list_pages(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            resource_version=resource_version,
            resource_version_match=resource_version_match,
            convert=_as_is,
        ):
            items.extend(page)
            rv = page_rv
        return items, rv

    async def list_pages(
        self,
        resource: Resource,
        *,
        convert: Callable[[builtins.list[dict[str, Any]]], _T],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> AsyncGenerator[tuple[_T, str], None]:
        """LIST page by page: yields ``(convert(items of the page), list resourceVersion)``.

        Each page's bytes are fetched on the loop (retried as every request is), then decoded and passed
        to ``convert`` in a worker thread (:func:`asyncio.to_thread`), and dropped before the next page
        is converted: a large list neither holds the event loop for its whole decode, nor is ever held
        decoded in full (issue 17: 5,000 Nodes decoded at once are ~290 MiB). The next page is asked for
        as soon as this one's continue token is decoded, so the server reads and encodes it while this
        one is converted (the two cores work at once; issue 18: the ``--all-nodes`` agent's first LIST
        of 750 ``Devices`` was 0.7 s of its cold start): besides the page being converted, at most the
        next page's bytes are held. ``convert`` runs off the loop, so it must not touch loop state; it
        may mutate the items (they are its own). Parameters and their placement on the first page only
        are :meth:`list`'s.
        """
        path = resource.collection_path(namespace)
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if limit > 0:
            params["limit"] = str(limit)
        if resource_version is not None:
            params["resourceVersion"] = resource_version
            if resource_version_match:
                params["resourceVersionMatch"] = resource_version_match
        loop = asyncio.get_running_loop()
        fetching: asyncio.Task[bytes] | None = None
        decoding: asyncio.Future[tuple[_T, str, str]] | None = None

        def ask_for(token: str) -> asyncio.Task[bytes]:
            params.pop("resourceVersion", None)  # a continued list carries neither (the server refuses)
            params.pop("resourceVersionMatch", None)
            params["continue"] = token
            return asyncio.ensure_future(self._get_page(path, dict(params)))

        try:
            body = await self._get_page(path, params)
            while True:
                token_read: asyncio.Future[str] = loop.create_future()

                def on_continue(token: str, read: asyncio.Future[str] = token_read) -> None:
                    loop.call_soon_threadsafe(_resolve, read, token)

                decoding = asyncio.ensure_future(
                    asyncio.to_thread(_decode_page, body, resource, convert, on_continue)
                )
                del body
                await asyncio.wait((token_read, decoding), return_when=asyncio.FIRST_COMPLETED)
                if token_read.done() and token_read.result():
                    fetching = ask_for(token_read.result())
                converted, rv, token = await decoding
                decoding = None
                yield converted, rv
                if not token:
                    return
                if fetching is None:  # the token's hand-over came after the decode's end
                    fetching = ask_for(token)
                body, fetching = await fetching, None
        finally:
            # The consumer stopped early, a decode raised, or this task was cancelled: nothing is left
            # running for nobody, and no error is left unretrieved.
            for pending in (fetching, decoding):
                if pending is not None and not pending.done():
                    pending.cancel()
                if pending is not None:
                    pending.add_done_callback(_retrieved)

    async def _get_page(self, path: str, params: dict[str, str]) -> bytes:
        """One page's raw body (decoded by the caller, off the loop)."""
        return await self._send("GET", path, params=dict(params), content=None, content_type=None)

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int,
        bookmarks: bool = True,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Stream raw watch events ``{"type", "object"}`` until the server ends the watch.

        A non-2xx answer is raised as :class:`ApiError` (``Unauthorized`` for 401, not retried here)
        and ``ERROR`` events likewise (``Gone`` for 410) instead of yielded; ``on_open`` is called once
        the server has accepted the watch, so the caller can tell a refused watch from one that broke.
        The stream is not retried here: the informer owns reconnection, re-authentication, backoff and
        relisting. The HTTP read timeout is ``timeout_seconds`` plus a margin, so a dead connection
        cannot hang forever even without the informer's watchdog.
        """
        params: dict[str, str] = {
            "watch": "1",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
        }
        if bookmarks:
            params["allowWatchBookmarks"] = "true"
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        path = resource.collection_path(namespace)
        base, url = _split(path)
        # The opening (connection, TLS, request, headers) has the client's deadline; then each read
        # waits at most the idle limit.
        timeout = httpx.Timeout(None, read=float(timeout_seconds) + 30.0)
        with _TRACER.start_as_current_span("k8s WATCH") as span:
            span.set_attribute("url.path", path)
            span.set_attribute("k8s.resource_version", resource_version)
            progress = wire.Progress()
            opened = wire.PROGRESS.set(progress)
            token: contextvars.Token[wire.Progress | None] | None = opened
            deadline = asyncio.timeout(self.timeout_s)
            try:
                async with deadline, self._watch_api.call_api(
                    "GET", version="", base=base, url=url, stream=True, raise_for_status=False,
                    params=params, timeout=timeout,
                ) as response:  # fmt: skip
                    self._count("WATCH", response.status_code)
                    if response.status_code >= 400:
                        progress.phase = wire.BODY
                        await response.aread()
                        err = ApiError.from_status(response.status_code, _status_of(response))
                        err.server, err.path = self.server, path
                        raise err
                    deadline.reschedule(None)
                    wire.PROGRESS.reset(opened)  # before the first yield, in the context it was set in
                    token = None
                    if on_open is not None:
                        on_open()
                    async for line in byte_lines(response.aiter_bytes()):
                        event = orjson.loads(line)
                        if event.get("type") == "ERROR":
                            status = event.get("object") or {}
                            raise ApiError.from_status(int(status.get("code") or 500), status)
                        yield event
            except TimeoutError as exc:
                if not deadline.expired():
                    raise
                self._count("WATCH", "<error>")
                raise RequestTimeout(
                    self.server, "WATCH", path, progress.phase, self.timeout_s or 0.0, via=self.via
                ) from exc
            except httpx.TransportError as exc:
                unreachable = _proxy_failure(exc, progress, self.via)
                if unreachable is None:
                    raise
                self._count("WATCH", "<error>")
                raise unreachable from exc
            finally:
                if token is not None:
                    wire.PROGRESS.reset(token)

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """A real GET (not kr8s' LIST-and-poll); ``None`` when the object does not exist.

        A 404 because the API itself is not served (:attr:`NotFound.api_missing`: its CRD is not
        installed) is raised, not ``None``: "no such API" is not "no such object"."""
        try:
            return await self._request("GET", resource.object_path(name, namespace))
        except NotFound as exc:
            if exc.api_missing:
                raise
            return None

    async def create(
        self,
        resource: Resource,
        body: dict[str, Any],
        namespace: str | None = None,
        *,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """POST ``body``; the namespace defaults to ``body.metadata.namespace``. ``field_manager`` names
        the manager of the created fields (default: the server derives it from the User-Agent)."""
        ns = namespace or (body.get("metadata") or {}).get("namespace")
        params = {"fieldManager": field_manager} if field_manager else None
        return await self._request("POST", resource.collection_path(ns), params=params, body=body)

    async def apply(
        self,
        resource: Resource,
        body: dict[str, Any],
        *,
        field_manager: str,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Server-side apply ``body`` (name/namespace from its metadata) as ``field_manager``; with
        ``dry_run`` the server validates and admits it without persisting anything."""
        meta = body.get("metadata") or {}
        path = resource.object_path(meta["name"], meta.get("namespace"), subresource)
        params = {"fieldManager": field_manager}
        if force:
            params["force"] = "true"
        if dry_run:
            params["dryRun"] = "All"
        return await self._request(
            "PATCH", path, params=params, body=body, content_type=_PATCH_TYPES["apply"]
        )

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """PATCH with ``patch_type`` in ``merge`` | ``json`` | ``strategic`` | ``apply``."""
        params = {"fieldManager": field_manager} if field_manager else None
        return await self._request(
            "PATCH",
            resource.object_path(name, namespace, subresource),
            params=params,
            body=patch,
            content_type=_PATCH_TYPES[patch_type],
        )

    async def replace(
        self, resource: Resource, body: dict[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]:
        """PUT ``body`` (optimistic concurrency through its ``metadata.resourceVersion``)."""
        meta = body.get("metadata") or {}
        return await self._request(
            "PUT", resource.object_path(meta["name"], meta.get("namespace"), subresource), body=body
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation_policy: str | None = None,
    ) -> bool:
        """DELETE with optional uid/resourceVersion preconditions; ``False`` if already gone.

        A failed precondition raises :class:`Conflict`. Pass the ``uid`` to delete only the object you
        decided on (not a recreated one of the same name); add ``resource_version`` only when the
        decision depended on its exact content, since any write to the object (a status update by its
        controller) fails that precondition. ``propagation_policy`` is ``DeleteOptions.propagationPolicy``:
        ``Background``, ``Foreground`` or ``Orphan`` (the server's per-kind default when None).
        """
        if propagation_policy is not None and propagation_policy not in _PROPAGATION_POLICIES:
            allowed = sorted(_PROPAGATION_POLICIES)
            raise ValueError(f"propagation_policy must be one of {allowed}, not {propagation_policy!r}")
        preconditions: dict[str, str] = {}
        if uid:
            preconditions["uid"] = uid
        if resource_version:
            preconditions["resourceVersion"] = resource_version
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if preconditions:
            body["preconditions"] = preconditions
        if propagation_policy is not None:
            body["propagationPolicy"] = propagation_policy
        try:
            await self._request("DELETE", resource.object_path(name, namespace), body=body)
        except NotFound:
            return False
        return True

    async def close(self) -> None:
        """Close the HTTP sessions."""
        for api in self._apis():
            aclose = getattr(api, "aclose", None)
            if aclose is not None:
                await aclose()
