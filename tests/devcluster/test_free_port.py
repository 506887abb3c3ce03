"""``free_port``: never a port the kernel may give an outgoing connection, never the same one twice, and
free when handed out."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from gpustack_worker.devcluster import procs

if TYPE_CHECKING:
    import pytest


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    low = procs._ephemeral_low()
    ports = [procs.free_port() for _ in range(40)]
    assert len(set(ports)) == len(ports)
    assert all(port < low and port < 30000 for port in ports), ports
    for port in ports[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))


def test_a_listened_port_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", procs.free_port()))
        held.listen()
        taken = held.getsockname()[1]
        procs._handed_out.discard(taken)  # as if another process had picked it
        # The listened port is the first candidate tried: it must be passed over for the next.
        monkeypatch.setattr(procs.random, "shuffle", lambda ports: ports.sort(key=lambda p: p != taken))
        port = procs.free_port()
        assert port != taken
        assert port in procs._PORTS
