"""httpcore's connection pools with their bookkeeping pass made linear in the number of connections —
on the exact httpcore versions that pass was verified on, and httpcore's own pools on any other.

httpcore 1.0 runs one bookkeeping pass (``_assign_requests_to_connections``) every time a request
enters or leaves the pool: it drops closed and expired connections, closes surplus idle ones, and gives
each queued request a connection. Its surplus test counts the pool's connections by building a list of
them — once per idle connection — so one pass costs O(connections²), and the pass runs a few times per
request. A process with a few dozen requests in flight (the ``--all-nodes`` agent's 24 workers, the
controller's workers and informers' LISTs) spent about a sixth of its CPU in that pass (py-spy of
``bench/agent_bench.py`` at 1,000 Nodes: 15 % of the agent's samples, a third of it the quadratic count).

:class:`LinearPool` (and :class:`LinearHTTPProxy`, :class:`LinearSOCKSProxy` for a proxy's pool) makes
the same decisions in the same order with one count kept as it goes: the same connections are dropped,
closed, reused or opened for the same requests (``tests/runtime/test_pool.py`` checks that against
httpcore's own pass over random pools). The pass overrides a private method, so it is the one piece of the
HTTP session that depends on httpcore's internals: :func:`pool_classes` gives the linear classes only when
``httpcore.__version__`` is in :data:`LINEAR_POOL_HTTPCORE` (the versions the equivalence test passed on)
and httpcore's own classes otherwise, with a log line and ``gpustack_http_pool_stock`` set to 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, NamedTuple

import httpcore
import structlog

from gpustack_worker.runtime.metrics import HTTP_POOL_STOCK

if TYPE_CHECKING:
    from httpcore import AsyncConnectionInterface

__all__ = (
    "LINEAR_POOL_HTTPCORE",
    "LinearHTTPProxy",
    "LinearPool",
    "LinearSOCKSProxy",
    "PoolClasses",
    "pool_classes",
)

_log = structlog.get_logger(__name__)

#: The httpcore releases whose ``AsyncConnectionPool._assign_requests_to_connections`` the linear pass
#: was checked against (``tests/runtime/test_pool.py``, run on each by ``nox -s http_deps``). The method
#: first appeared in 1.0.4; on any other version the stock pools are used.
LINEAR_POOL_HTTPCORE: Final = frozenset({"1.0.4", "1.0.5", "1.0.6", "1.0.7", "1.0.8", "1.0.9"})


def _linear_pass(pool: httpcore.AsyncConnectionPool) -> list[AsyncConnectionInterface]:
    """httpcore's ``_assign_requests_to_connections``, the same decisions in O(connections + queued ×
    connections)."""
    closing: list[AsyncConnectionInterface] = []
    connections = pool._connections
    # What is left after each removal: httpcore compares the pool's current size (not the number of
    # idle connections) with the keep-alive limit, one connection at a time in pool order.
    left = len(connections)
    keepalive = pool._max_keepalive_connections
    for connection in list(connections):
        if connection.is_closed():
            connections.remove(connection)
            left -= 1
        elif connection.has_expired() or (connection.is_idle() and left > keepalive):
            connections.remove(connection)
            closing.append(connection)
            left -= 1
    for waiting in [r for r in pool._requests if r.is_queued()]:
        origin = waiting.request.url.origin
        reuse = next((c for c in connections if c.can_handle_request(origin) and c.is_available()), None)
        if reuse is not None:
            waiting.assign_to_connection(reuse)
            continue
        if len(connections) >= pool._max_connections:
            idle = next((c for c in connections if c.is_idle()), None)
            if idle is None:
                continue  # stays queued until a connection frees up
            connections.remove(idle)  # a full pool makes room: its first idle connection goes
            closing.append(idle)
        opened = pool.create_connection(origin)
        connections.append(opened)
        waiting.assign_to_connection(opened)
    return closing


class LinearPool(httpcore.AsyncConnectionPool):
    """An :class:`httpcore.AsyncConnectionPool` whose bookkeeping pass is linear (:func:`_linear_pass`)."""

    def _assign_requests_to_connections(self) -> list[AsyncConnectionInterface]:
        return _linear_pass(self)


class LinearHTTPProxy(httpcore.AsyncHTTPProxy):
    """An :class:`httpcore.AsyncHTTPProxy` (a pool of connections through an HTTP(S) proxy) with the
    linear pass."""

    def _assign_requests_to_connections(self) -> list[AsyncConnectionInterface]:
        return _linear_pass(self)


class LinearSOCKSProxy(httpcore.AsyncSOCKSProxy):
    """An :class:`httpcore.AsyncSOCKSProxy` with the linear pass (constructible only with ``socksio``)."""

    def _assign_requests_to_connections(self) -> list[AsyncConnectionInterface]:
        return _linear_pass(self)


class PoolClasses(NamedTuple):
    """The pool classes a session is built from."""

    direct: type[httpcore.AsyncConnectionPool]
    http_proxy: type[httpcore.AsyncHTTPProxy]
    socks_proxy: type[Any]
    linear: bool


_LINEAR: Final = PoolClasses(LinearPool, LinearHTTPProxy, LinearSOCKSProxy, linear=True)
_STOCK: Final = PoolClasses(
    httpcore.AsyncConnectionPool, httpcore.AsyncHTTPProxy, httpcore.AsyncSOCKSProxy, linear=False
)


#: Versions already logged (one line per process, not one per session).
_LOGGED: Final[set[str]] = set()


def pool_classes(version: str | None = None) -> PoolClasses:
    """The pool classes for httpcore ``version`` (default: the installed one): the linear ones when the
    pass was verified on it, httpcore's own otherwise (logged, and ``gpustack_http_pool_stock`` set to
    1). Called once per session build."""
    version = httpcore.__version__ if version is None else version
    if version in LINEAR_POOL_HTTPCORE:
        HTTP_POOL_STOCK.set(0)
        return _LINEAR
    HTTP_POOL_STOCK.set(1)
    if version in _LOGGED:
        return _STOCK
    _LOGGED.add(version)
    _log.warning(
        "httpcore version not verified for the linear pool pass: using httpcore's own pool",
        httpcore=version,
        verified=sorted(LINEAR_POOL_HTTPCORE),
    )
    return _STOCK
