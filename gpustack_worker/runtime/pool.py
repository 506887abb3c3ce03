"""httpcore's connection pool with its bookkeeping pass made linear in the number of connections.

httpcore 1.0 runs one bookkeeping pass (``_assign_requests_to_connections``) every time a request
enters or leaves the pool: it drops closed and expired connections, closes surplus idle ones, and gives
each queued request a connection. Its surplus test counts the pool's connections by building a list of
them — once per idle connection — so one pass costs O(connections²), and the pass runs a few times per
request. A process with a few dozen requests in flight (the ``--all-nodes`` agent's 24 workers, the
controller's workers and informers' LISTs) spent about a sixth of its CPU in that pass (py-spy of
``bench/agent_bench.py`` at 1,000 Nodes: 15 % of the agent's samples, a third of it the quadratic count).

:class:`LinearPool` makes the same decisions in the same order with one count kept as it goes: the same
connections are dropped, closed, reused or opened for the same requests (``tests/runtime/test_pool.py``
checks that against httpcore's own pass over random pools). :func:`make_linear` turns an existing pool of
an httpx transport into one (the class is swapped in place: it adds no state).
"""

from __future__ import annotations

from typing import Any

import httpcore

__all__ = ("LinearPool", "make_linear")


class LinearPool(httpcore.AsyncConnectionPool):
    """An :class:`httpcore.AsyncConnectionPool` whose bookkeeping pass is O(connections + queued ×
    connections) instead of O(connections²) per call."""

    def _assign_requests_to_connections(self) -> list[Any]:
        closing: list[Any] = []
        pool = self._connections
        # What is left after each removal: httpcore compares the pool's current size (not the number of
        # idle connections) with the keep-alive limit, one connection at a time in pool order.
        left = len(pool)
        for connection in list(pool):
            if connection.is_closed():
                pool.remove(connection)
                left -= 1
            elif connection.has_expired() or (
                connection.is_idle() and left > self._max_keepalive_connections
            ):
                pool.remove(connection)
                closing.append(connection)
                left -= 1
        for waiting in [r for r in self._requests if r.is_queued()]:
            origin = waiting.request.url.origin
            reuse = next((c for c in pool if c.can_handle_request(origin) and c.is_available()), None)
            if reuse is not None:
                waiting.assign_to_connection(reuse)
                continue
            if len(pool) >= self._max_connections:
                idle = next((c for c in pool if c.is_idle()), None)
                if idle is None:
                    continue  # stays queued until a connection frees up
                pool.remove(idle)  # a full pool makes room: its first idle connection goes
                closing.append(idle)
            opened = self.create_connection(origin)
            pool.append(opened)
            waiting.assign_to_connection(opened)
        return closing


def make_linear(pool: httpcore.AsyncConnectionPool) -> None:
    """Give ``pool`` :class:`LinearPool`'s pass (its own class must be httpcore's pool or ours)."""
    if type(pool) not in (httpcore.AsyncConnectionPool, LinearPool):
        raise TypeError(f"not httpcore's own connection pool: {type(pool).__qualname__}")
    pool.__class__ = LinearPool
