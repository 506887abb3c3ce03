"""The write fence on the wire (issue 17, defect 1): the real client and HTTP stack (kr8s, httpx, httpcore,
our network backend) against a real HTTP(S) server in a thread that records every byte it receives.

A write whose task runs right behind a synchronous stretch longer than the fence has left is refused at
the write, not sent: the server never sees a byte of it. The fence is asked at each write, not only
before the attempt; a fence that closes between the headers and the body closes the connection (the
server never gets a complete request, and the next request uses a new connection); a request that left
whole and then outlived the fence is reported as cut off, maybe applied. The property test closes the
fence at every possible check, with bodies large enough to need several sends.
"""

from __future__ import annotations

import asyncio
import base64
import socketserver
import ssl
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from gpustack_worker.devcluster.pki import self_signed
from gpustack_worker.runtime import wire
from gpustack_worker.runtime.client import Client, Fenced
from gpustack_worker.runtime.resources import CONFIG_MAP
from gpustack_worker.runtime.transport import Transport
from tests.kit.properties import examples

if TYPE_CHECKING:
    import socket
    from collections.abc import Iterator

    import httpx

NS = "default"
#: kr8s asks ``/version`` when it connects.
VERSION = b'{"gitVersion": "v1.34.0", "major": "1", "minor": "34"}'
NOTHING_SENT = "refused: the write fence closed before any byte of it was written, nothing was sent"
INCOMPLETE = "refused: the write fence closed before the request was complete"


class Recorder(socketserver.ThreadingTCPServer):
    """An HTTP/1.1 server that records every byte received and every complete request, and answers each
    complete request with ``200 {}`` (a request whose target contains ``slow`` waits for :attr:`release`;
    after one containing ``drop`` it closes the connection without a ``Connection: close``)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, tls: ssl.SSLContext | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.tls = tls
        self.lock = threading.Lock()
        self.received = bytearray()
        #: ``(method, target)`` of every request that arrived complete (headers and the whole body).
        self.requests: list[tuple[str, str]] = []
        self.release = threading.Event()
        self.connections = 0
        self.closed = 0
        self._changed = threading.Condition(self.lock)

    def wait_closed(self, count: int) -> bool:
        """Wait until ``count`` connections ended on the server's side: every byte they carried is in."""
        with self._changed:
            return self._changed.wait_for(lambda: self.closed >= count, timeout=30)

    def connection_ended(self) -> None:
        with self._changed:
            self.closed += 1
            self._changed.notify_all()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.server_address[1]}"

    def complete(self, name: str) -> list[tuple[str, str]]:
        with self.lock:
            return [r for r in self.requests if name in r[1]]

    def saw_bytes_of(self, name: str) -> bool:
        """Whether any byte of the request line of a write to ConfigMap ``name`` arrived."""
        with self.lock:
            return f"/configmaps/{name}".encode() in self.received


class _Handler(socketserver.BaseRequestHandler):
    server: Recorder

    def handle(self) -> None:
        conn: socket.socket = self.request
        if self.server.tls is not None:
            try:
                conn = self.server.tls.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError):
                return
        with self.server.lock:
            self.server.connections += 1
        buf = b""
        try:
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    return
                with self.server.lock:
                    self.server.received += data
                buf += data
                while True:
                    head, sep, rest = buf.partition(b"\r\n\r\n")
                    if not sep:
                        break
                    lines = head.decode().split("\r\n")
                    headers = dict(line.split(": ", 1) for line in lines[1:])
                    length = int(headers.get("content-length") or headers.get("Content-Length") or 0)
                    if len(rest) < length:
                        break
                    buf = rest[length:]
                    method, target, _ = lines[0].split(" ", 2)
                    with self.server.lock:
                        self.server.requests.append((method, target))
                    if "slow" in target:
                        self.server.release.wait(30)
                    body = VERSION if target.rstrip("/") == "/version" else b"{}"
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                    if "drop" in target:
                        return  # close the kept-alive connection without saying so
        except (OSError, ssl.SSLError):
            return
        finally:
            conn.close()
            self.server.connection_ended()


def certificate_pair() -> tuple[bytes, bytes]:
    """A self-signed certificate for 127.0.0.1 and its key, PEM."""
    return self_signed("fence-wire-test")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, bytes]:
    cert, key = certificate_pair()
    d = tmp_path_factory.mktemp("tls")
    (d / "cert.pem").write_bytes(cert)
    (d / "key.pem").write_bytes(key)
    return d / "cert.pem", d / "key.pem", cert


def serve(tls: bool, certificate: tuple[Path, Path, bytes]) -> Recorder:
    context = None
    if tls:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certificate[0], certificate[1])
    server = Recorder(context)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server: Recorder) -> None:
    server.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture(params=["http", "https"])
def server(request: pytest.FixtureRequest, certificate: tuple[Path, Path, bytes]) -> Iterator[Recorder]:
    recorder = serve(request.param == "https", certificate)
    yield recorder
    stop(recorder)


def kubeconfig(path: Path, server: Recorder, ca: bytes) -> Path:
    cluster: dict[str, Any] = {"server": server.url}
    if server.tls is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    return path


class Deadline:
    """A fence open until a point on the monotonic clock (what the leader's fence is); counts the asks."""

    def __init__(self, seconds: float) -> None:
        self.until = time.monotonic() + seconds
        self.asked = 0

    def remaining(self) -> float:
        self.asked += 1
        return self.until - time.monotonic()


class Script:
    """A fence that answers from a script (True: open), then stays open: it closes at a chosen check."""

    def __init__(self, answers: list[bool]) -> None:
        self.answers = list(answers)
        self.asked = 0

    def remaining(self) -> float:
        self.asked += 1
        return 5.0 if (self.answers.pop(0) if self.answers else True) else 0.0


def configmap(name: str, size: int = 0) -> dict[str, Any]:
    meta = {"name": name, "namespace": NS}
    data = {"blob": "x" * size} if size else {}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def fenced_patches(outcome: str) -> float:
    value = REGISTRY.get_sample_value("gpustack_fenced_writes_total", {"method": "PATCH", "outcome": outcome})
    return float(value or 0.0)


def stall_right_before_the_write(client: Client, name: str, seconds: float) -> None:
    """Block the event loop for ``seconds`` (``time.sleep`` in a loop callback) right before the request
    for ``name`` writes its headers, after it passed the fence: its next step (the write) is queued right
    behind the stall and runs before the loop gets to its timers, as a task does behind a relist ingest.
    Uses httpcore's ``trace`` extension, set on the request by an httpx request hook."""

    async def trace(event: str, info: dict[str, Any]) -> None:
        if event == "http11.send_request_headers.started":
            asyncio.get_running_loop().call_soon(time.sleep, seconds)
            await asyncio.sleep(0)

    async def hook(request: httpx.Request) -> None:
        if name in request.url.path:
            request.extensions["trace"] = trace

    session = client._api.session
    session.event_hooks["request"].append(hook)


async def connect(tmp_path: Path, server: Recorder, ca: bytes) -> Client:
    return await Client.connect(str(kubeconfig(tmp_path / "kubeconfig", server, ca)), user_agent="fence-wire")


async def test_a_write_queued_behind_a_loop_stall_longer_than_the_fence_is_refused_on_the_wire(
    server: Recorder, certificate: tuple[Path, Path, bytes], tmp_path: Path
) -> None:
    client = await connect(tmp_path, server, certificate[2])
    try:
        client.fence = Deadline(60.0)
        await client.apply(CONFIG_MAP, configmap("before"), field_manager="t")
        assert server.complete("before"), "the server records what it receives"
        assert isinstance(client._api.session._transport, Transport), "the session is ours"

        fence = Deadline(0.5)
        client.fence = fence
        stall_right_before_the_write(client, "late", 1.0)
        refused = fenced_patches("refused")
        with pytest.raises(Fenced, match=NOTHING_SENT) as caught:
            await client.apply(CONFIG_MAP, configmap("late"), field_manager="t")
        assert caught.value.outcome == "refused"
        assert fenced_patches("refused") == refused + 1
        assert fence.asked >= 2, "the write passed the first check: it was refused at the write"
        assert await asyncio.to_thread(server.wait_closed, 1), "the refused write left its connection open"
        assert not server.saw_bytes_of("late"), "a byte of the fenced write reached the server"
        assert not server.complete("late")

        client.fence = Deadline(60.0)
        await client.apply(CONFIG_MAP, configmap("after"), field_manager="t")
        assert server.complete("after"), "the client writes again once the fence is open"
    finally:
        await client.close()


async def test_the_fence_is_asked_at_the_write_not_only_before_the_attempt(
    server: Recorder, certificate: tuple[Path, Path, bytes], tmp_path: Path
) -> None:
    client = await connect(tmp_path, server, certificate[2])
    try:
        client.fence = Script([True, False])  # open when the attempt starts, closed when its bytes go out
        with pytest.raises(Fenced, match=NOTHING_SENT):
            await client.apply(CONFIG_MAP, configmap("closes-at-write"), field_manager="t")
        assert client.fence.asked == 2
        assert await asyncio.to_thread(server.wait_closed, 1), "the refused write left its connection open"
        assert not server.saw_bytes_of("closes-at-write")
        assert client.writes == 0, "a refused write is not counted as a request"
        assert await client.get(CONFIG_MAP, "read", NS) == {}, "reads are not fenced"
    finally:
        await client.close()


async def test_a_fence_closing_between_headers_and_body_closes_the_connection(
    server: Recorder, certificate: tuple[Path, Path, bytes], tmp_path: Path
) -> None:
    client = await connect(tmp_path, server, certificate[2])
    try:
        client.fence = Script([True, True, False])  # the attempt, the headers, then the body
        incomplete = fenced_patches("incomplete")
        with pytest.raises(Fenced, match=INCOMPLETE) as caught:
            await client.apply(CONFIG_MAP, configmap("half"), field_manager="t")
        assert caught.value.outcome == "incomplete"
        assert fenced_patches("incomplete") == incomplete + 1
        assert await asyncio.to_thread(server.wait_closed, 1), "the half-written connection was left open"
        assert server.saw_bytes_of("half"), "the headers left"
        assert not server.complete("half"), "the server got the whole request"
        client.fence = Script([])
        await client.apply(CONFIG_MAP, configmap("next"), field_manager="t")
        assert server.complete("next")
        assert server.connections == 2, "the half-written connection was reused"
    finally:
        await client.close()


async def test_a_request_that_left_whole_and_outlived_the_fence_is_cut_off(
    server: Recorder, certificate: tuple[Path, Path, bytes], tmp_path: Path
) -> None:
    client = await connect(tmp_path, server, certificate[2])
    try:
        client.fence = Deadline(0.5)  # real seconds: the wait for the answer is bounded by them
        cut_off = fenced_patches("cut_off")
        with pytest.raises(Fenced, match=r"cut off: .* may or may not have been applied") as caught:
            await client.apply(CONFIG_MAP, configmap("slow"), field_manager="t")
        assert caught.value.outcome == "cut_off"
        assert fenced_patches("cut_off") == cut_off + 1
        assert server.complete("slow"), "the request had left whole"
    finally:
        server.release.set()
        await client.close()


class Fixed:
    def __init__(self, value: float) -> None:
        self.value = value

    def remaining(self) -> float:
        return self.value


@settings(max_examples=examples(200))
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_fence_is_open_only_with_time_above_zero(value: float) -> None:
    left = wire.time_left(Fixed(value))
    assert (left > 0) == (value > 0)
    assert left == (value if value > 0 else 0.0)


async def test_a_fence_answering_nan_is_closed(
    server: Recorder, certificate: tuple[Path, Path, bytes], tmp_path: Path
) -> None:
    client = await connect(tmp_path, server, certificate[2])
    try:
        client.fence = Fixed(float("nan"))
        with pytest.raises(Fenced, match="refused"):
            await client.apply(CONFIG_MAP, configmap("nan"), field_manager="t")
        assert not server.saw_bytes_of("nan")
    finally:
        await client.close()


async def test_a_kept_alive_connection_the_server_dropped_is_not_reused(
    server: Recorder, certificate: tuple[Path, Path, bytes], tmp_path: Path
) -> None:
    client = await connect(tmp_path, server, certificate[2])
    try:
        assert await client.get(CONFIG_MAP, "drop", NS) == {}
        assert await asyncio.to_thread(server.wait_closed, 1)
        client.fence = Script([])
        await client.apply(CONFIG_MAP, configmap("after-drop"), field_manager="t")
        assert client.fence.asked == 3, "not one attempt (its check, headers, body): the dead one was tried"
        assert server.complete("after-drop")
        assert server.connections == 2
    finally:
        await client.close()


@settings(max_examples=examples(30))
@example(closes_at=3, size=3_000_000, tls=True).via("a body that needs several sends, cut in the middle")
@example(closes_at=2, size=10, tls=False).via("closed between the headers and the body")
@given(closes_at=st.integers(0, 40), size=st.sampled_from([0, 10, 200_000, 3_000_000]), tls=st.booleans())
def test_no_byte_leaves_after_the_fence_closed(closes_at: int, size: int, tls: bool) -> None:
    """Whatever check the fence closes at, the server gets the request complete only if the fence was
    open at every check; otherwise it gets nothing when the fence closed before the first byte, and an
    incomplete request (on a closed connection) after it; the message says which."""
    cert, key = certificate_pair()

    async def scenario(tmp: Path) -> None:
        (tmp / "cert.pem").write_bytes(cert)
        (tmp / "key.pem").write_bytes(key)
        server = serve(tls, (tmp / "cert.pem", tmp / "key.pem", cert))
        client = await connect(tmp, server, cert)
        try:
            fence = Script([True] * closes_at + [False])
            client.fence = fence
            try:
                await client.apply(CONFIG_MAP, configmap("obj", size), field_manager="t")
            except Fenced as exc:
                assert fence.asked == closes_at + 1, "the fence was asked again after it closed"
                if closes_at > 0:
                    assert await asyncio.to_thread(server.wait_closed, 1), "the connection was left open"
                assert not server.complete("obj"), "a refused request reached the server complete"
                if server.saw_bytes_of("obj"):
                    assert INCOMPLETE in str(exc)
                else:
                    assert NOTHING_SENT in str(exc) or "the write fence is closed" in str(exc)
                    assert (closes_at == 0) == ("the write fence is closed" in str(exc))
            else:
                assert fence.asked <= closes_at, "the request went out after the fence closed"
                assert server.complete("obj")
        finally:
            await client.close()
            stop(server)

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp)))
