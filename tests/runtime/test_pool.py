"""runtime/pool.py: LinearPool makes httpcore's own decisions — over random pools (connections closed,
expired, idle, busy, for one origin or another; requests queued or not; limits below and at the pool's
size) its bookkeeping pass leaves the same connections in the same order, closes the same ones and gives
every queued request the same connection as httpcore's ``AsyncConnectionPool`` pass (run on each httpcore
version in ``LINEAR_POOL_HTTPCORE`` that ``nox -s http_deps`` installs); and sessions get it only on those
versions."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import httpcore
import pytest
import sniffio
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from gpustack_worker.runtime.pool import LINEAR_POOL_HTTPCORE, LinearHTTPProxy, LinearPool, pool_classes
from tests.kit.properties import examples

#: The equivalence tests compare with httpcore's own private pass, which the verified versions have.
verified = pytest.mark.skipif(
    httpcore.__version__ not in LINEAR_POOL_HTTPCORE,
    reason=f"httpcore {httpcore.__version__} is not a verified version: sessions use its own pool",
)

ORIGINS = ("https://a.example:443/", "https://b.example:6443/")


@dataclass(eq=False)
class _Conn:
    """A connection's answers to the pool, fixed (every read is pure, as the pass expects)."""

    label: str
    origin: str
    closed: bool = False
    expired: bool = False
    idle: bool = False
    available: bool = False
    reads: list[str] = field(default_factory=list)

    def can_handle_request(self, origin: httpcore.Origin) -> bool:
        return httpcore.URL(self.origin).origin == origin

    def is_available(self) -> bool:
        return self.available

    def is_idle(self) -> bool:
        return self.idle

    def is_closed(self) -> bool:
        return self.closed

    def has_expired(self) -> bool:
        return self.expired


_conn = st.builds(
    lambda origin, closed, expired, idle, available: (origin, closed, expired, idle, available),
    st.sampled_from(ORIGINS),
    st.sampled_from([False, False, False, True]),  # closed: mostly not, so most connections stay
    st.sampled_from([False, False, False, True]),  # expired: likewise
    st.booleans(),
    st.booleans(),
)


def _pool(kind: type[httpcore.AsyncConnectionPool], state: dict[str, Any]) -> tuple[Any, list[Any]]:
    """A pool of ``kind`` holding ``state``'s connections and requests; new connections are labelled in
    the order they are opened, so two pools' choices compare by label."""
    limits = {"max_connections": state["max_connections"], "max_keepalive_connections": state["keepalive"]}
    if issubclass(kind, httpcore.AsyncHTTPProxy):
        pool = kind(proxy_url="http://127.0.0.1:3128", **limits)
    else:
        pool = kind(**limits)
    pool._connections = [
        _Conn(f"c{i}", origin, closed, expired, idle, available)
        for i, (origin, closed, expired, idle, available) in enumerate(state["connections"])
    ]
    counter = itertools.count()
    pool.create_connection = lambda origin: _Conn(f"new{next(counter)}", f"{origin}/")  # type: ignore[method-assign]
    requests = []
    for i, (origin, queued) in enumerate(state["requests"]):
        request = httpcore._async.connection_pool.AsyncPoolRequest(httpcore.Request("GET", f"{origin}r{i}"))
        if not queued:
            request.assign_to_connection(_Conn(f"busy{i}", origin))
        requests.append(request)
    pool._requests = list(requests)
    return pool, requests


def _outcome(pool: Any, requests: list[Any], closing: list[Any]) -> tuple[Any, ...]:
    return (
        [c.label for c in pool._connections],
        [c.label for c in closing],
        [None if r.connection is None else r.connection.label for r in requests],
    )


@verified
@settings(max_examples=examples(400))
@given(
    st.fixed_dictionaries(
        {
            "connections": st.lists(_conn, max_size=8),
            "requests": st.lists(st.tuples(st.sampled_from(ORIGINS), st.booleans()), max_size=5),
            "max_connections": st.integers(1, 5),  # often full: the make-room branch
            "keepalive": st.integers(0, 10),
        }
    )
)
def test_the_linear_pass_decides_as_httpcores_own(state: dict[str, Any]) -> None:
    # A request's assignment sets an event of the running async library: say which one it is.
    token = sniffio.current_async_library_cvar.set("asyncio")
    try:
        for stock, linear in (
            (httpcore.AsyncConnectionPool, LinearPool),
            (httpcore.AsyncHTTPProxy, LinearHTTPProxy),
        ):
            theirs, their_requests = _pool(stock, state)
            ours, our_requests = _pool(linear, state)
            expected = _outcome(theirs, their_requests, theirs._assign_requests_to_connections())
            assert _outcome(ours, our_requests, ours._assign_requests_to_connections()) == expected, linear
    finally:
        sniffio.current_async_library_cvar.reset(token)


@verified
def test_a_pool_of_many_idle_connections_is_read_linearly() -> None:
    """40 idle connections: httpcore asks each for is_idle once per idle connection (1,640 reads); ours
    asks each once."""
    reads = {"n": 0}

    class Counting(_Conn):
        def is_idle(self) -> bool:
            reads["n"] += 1
            return True

    for kind, most in ((httpcore.AsyncConnectionPool, 40 * 41), (LinearPool, 40)):
        reads["n"] = 0
        pool = kind(max_connections=100, max_keepalive_connections=100)
        pool._connections = [Counting(f"c{i}", ORIGINS[0]) for i in range(40)]
        pool._assign_requests_to_connections()
        assert reads["n"] == most, kind


def test_the_linear_pass_is_used_only_on_the_verified_httpcore_versions() -> None:
    """The private pass on a verified version, httpcore's own pools (and the metric at 1) on any other."""
    gauge = "gpustack_http_pool_stock"
    for version in sorted(LINEAR_POOL_HTTPCORE):
        classes = pool_classes(version)
        assert (classes.direct, classes.http_proxy, classes.linear) == (LinearPool, LinearHTTPProxy, True)
        assert REGISTRY.get_sample_value(gauge) == 0
    for version in ("1.0.3", "1.0.10", "1.1.0", "2.0.0"):
        classes = pool_classes(version)
        assert classes.direct is httpcore.AsyncConnectionPool, version
        assert classes.http_proxy is httpcore.AsyncHTTPProxy, version
        assert classes.socks_proxy is httpcore.AsyncSOCKSProxy, version
        assert not classes.linear
        assert REGISTRY.get_sample_value(gauge) == 1
    pool_classes()  # the installed version: the gauge says which pools the next session gets
    assert REGISTRY.get_sample_value(gauge) == (0 if httpcore.__version__ in LINEAR_POOL_HTTPCORE else 1)


def test_the_verified_versions_have_the_private_pass() -> None:
    """On a verified version the method the linear pass replaces exists under that name (the gate is
    only as good as its list: a listed version without the method would silently run httpcore's)."""
    if httpcore.__version__ in LINEAR_POOL_HTTPCORE:
        assert callable(getattr(httpcore.AsyncConnectionPool, "_assign_requests_to_connections", None))
        assert callable(getattr(httpcore.AsyncHTTPProxy, "_assign_requests_to_connections", None))
