"""runtime/wire.py: what a stream answers httpcore's ``is_readable`` (asked of every idle pooled
connection to tell whether the server dropped it) — over a real socket pair: nothing to read, data
waiting, the peer gone; and nothing once the stream itself is closed."""

from __future__ import annotations

import socket
import ssl

import pytest

from gpustack_worker.runtime import wire


async def test_is_readable_follows_the_socket_and_stops_at_close() -> None:
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    stream = wire._Stream(ours)
    try:
        assert stream.get_extra_info("is_readable") is False  # idle, nothing sent
        assert stream.get_extra_info("is_readable") is False  # asking again changes nothing
        peer.sendall(b"x")
        assert stream.get_extra_info("is_readable") is True  # data waiting
        assert ours.recv(1) == b"x"
        assert stream.get_extra_info("is_readable") is False
        peer.close()
        assert stream.get_extra_info("is_readable") is True  # the peer closed: a read returns at once
    finally:
        peer.close()
        await stream.aclose()
    assert stream.get_extra_info("is_readable") is None  # closed: never polled again


async def test_a_tls_session_the_context_refuses_to_begin_closes_the_socket() -> None:
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    stream = wire._Stream(ours)
    context = ssl.create_default_context()
    try:
        with pytest.raises(TypeError, match="null bytes"):  # a name the context cannot take: no session
            await stream.start_tls(context, server_hostname="bad\x00name")
        assert ours.fileno() == -1  # closed, not left for the garbage collector
    finally:
        peer.close()
        ours.close()
