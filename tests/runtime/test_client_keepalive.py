"""The API client keeps its connections alive however many requests it has in flight (issue 18).

httpcore 1.0 closes an idle connection whenever its pool holds more connections than the keep-alive
limit (httpx's default: 20 of 100), so a process with more requests and watches open at once than that
closed each connection as soon as its response was read and paid a new TCP and TLS handshake for the
next request: the ``--all-nodes`` agent (24 workers) opened a connection for about two requests in three.
The real client and HTTP stack (kr8s' configuration, our session and transport, httpcore's pool, our
network backend) against the recording
HTTP(S) server of the wire tests: rounds of concurrent requests reuse the connections the first round
opened, and the server sees none of them closed.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_fence_wire import NS, Recorder, certificate_pair, connect, serve, stop

from gpustack_worker.runtime.resources import CONFIG_MAP
from tests.kit.properties import examples
from tests.kit.waiting import eventually_sync

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client


def _arrived(server: Recorder, prefix: str, count: int) -> list[tuple[str, str]]:
    """The requests named ``prefix…`` that arrived complete, once there are ``count`` of them (a blocking
    wait, run in a thread: the server's handlers are threads)."""
    return eventually_sync(
        lambda: server.complete(prefix), lambda done: len(done) >= count, within=30, every=0.01
    )


async def _round(server: Recorder, client: Client, width: int, tag: str) -> None:
    """``width`` GETs in flight at once: each waits at the server until all of them have arrived."""
    server.release.clear()
    reads = [asyncio.ensure_future(client.get(CONFIG_MAP, f"slow-{tag}-{i}", NS)) for i in range(width)]
    await asyncio.to_thread(_arrived, server, f"slow-{tag}-", width)
    server.release.set()
    assert await asyncio.gather(*reads) == [{}] * width


def _opened_and_closed(width: int, rounds: int, tls: bool) -> tuple[int, int, int]:
    """(connections after the first round, after the last one, closed by then) on the server's side."""
    cert, key = certificate_pair()

    async def scenario(tmp: Path) -> tuple[int, int, int]:
        (tmp / "cert.pem").write_bytes(cert)
        (tmp / "key.pem").write_bytes(key)
        server = serve(tls, (tmp / "cert.pem", tmp / "key.pem", cert))
        client = await connect(tmp, server, cert)
        try:
            await _round(server, client, width, "0")
            first = server.connections
            for n in range(1, rounds):
                await _round(server, client, width, str(n))
            with server.lock:
                return first, server.connections, server.closed
        finally:
            await client.close()
            stop(server)

    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(scenario(Path(tmp)))


def test_forty_requests_in_flight_reuse_their_connections() -> None:
    """The agent's case: more requests at once than httpx keeps alive by default (20)."""
    first, last, closed = _opened_and_closed(40, 3, tls=True)
    assert first >= 40, "each request in flight has its own connection"
    assert last == first, f"rounds after the first opened {last - first} new connections"
    assert closed == 0, f"{closed} kept-alive connections were closed between rounds"


@settings(max_examples=examples(8))
@example(width=21, rounds=2, tls=False).via("one over httpx's default keep-alive limit")
@given(width=st.integers(1, 64), rounds=st.integers(2, 3), tls=st.booleans())
def test_no_connection_is_closed_while_the_pool_has_room(width: int, rounds: int, tls: bool) -> None:
    """Whatever the number of requests in flight (up to the pool's 100), later rounds open nothing new."""
    first, last, closed = _opened_and_closed(width, rounds, tls)
    assert first >= width
    assert (last, closed) == (first, 0)
