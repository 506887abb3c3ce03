"""The fence's residual window, measured: how long after the fence check that found it open the kernel
takes the bytes it allowed (docs/runtime.md, Fencing, "Residual window").

``runtime/wire.py`` checks the fence and hands the bytes to the kernel in one synchronous step
(``_Stream.write``: ``_check``, ``_append`` — the TLS encryption of the chunk — and ``_send_some``, no
``await`` in between). That step is short but not instantaneous: this script times it on the real client
(fenced server-side applies over TLS to a local server that answers ``200 {}``), from just before the
fence check to the return of ``socket.send``, for request bodies of several sizes, and prints the median,
the 99th percentile and the maximum. The hooks' own cost is included (the figures are upper bounds).

    python bench/fence_window_bench.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ssl
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpustack_worker.runtime import wire
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.resources import CONFIG_MAP
from tests.runtime.unanswered_servers import certificate


class _Open:
    """A fence that is always open (what is measured is the step after a check that passes)."""

    def remaining(self) -> float:
        return 3600.0


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
    writer.close()


def _serve(tmp: Path) -> tuple[int, bytes]:
    cert, key = certificate()
    (tmp / "c.pem").write_bytes(cert)
    (tmp / "k.pem").write_bytes(key)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(tmp / "c.pem", tmp / "k.pem")
    loop = asyncio.new_event_loop()
    started: list[int] = []
    ready = threading.Event()

    def run() -> None:
        server = loop.run_until_complete(asyncio.start_server(_answer, "127.0.0.1", 0, ssl=tls))
        started.append(server.sockets[0].getsockname()[1])
        ready.set()
        loop.run_forever()

    threading.Thread(target=run, daemon=True).start()
    ready.wait(30)
    return started[0], cert


def _kubeconfig(path: Path, port: int, ca: bytes) -> Path:
    cluster = {
        "server": f"https://127.0.0.1:{port}",
        "certificate-authority-data": base64.b64encode(ca).decode(),
    }
    path.write_text(
        yaml.safe_dump(
            {
                "current-context": "a",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return path


def _instrument() -> list[int]:
    """Time each check→send step of a fenced write: from just before ``_check`` to the return of the
    ``_send_some`` that follows it in the same synchronous step."""
    windows: list[int] = []
    started: list[int] = []
    check, send_some = wire._Stream._check, wire._Stream._send_some

    def timed_check(self: Any, attempt: Any) -> None:
        if attempt is not None:
            started.append(time.perf_counter_ns())
        check(self, attempt)

    def timed_send(self: Any, attempt: Any) -> None:
        send_some(self, attempt)
        if attempt is not None and started:
            windows.append(time.perf_counter_ns() - started.pop())

    wire._Stream._check = timed_check  # type: ignore[method-assign]
    wire._Stream._send_some = timed_send  # type: ignore[method-assign]
    return windows


async def _measure(kubeconfig: Path, requests: int, size: int, windows: list[int]) -> list[int]:
    client = await Client.connect(str(kubeconfig), timeout_s=30)
    fenced = client.with_fence(_Open())
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}}
    body["data"] = {"blob": "x" * size}
    try:
        for _ in range(50):  # warm-up: connection, TLS, code paths
            await fenced.apply(CONFIG_MAP, body, field_manager="fence-window-bench")
        windows.clear()
        for _ in range(requests):
            await fenced.apply(CONFIG_MAP, body, field_manager="fence-window-bench")
        return list(windows)
    finally:
        await client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port, ca = _serve(Path(tmp))
        kubeconfig = _kubeconfig(Path(tmp) / "kubeconfig", port, ca)
        windows = _instrument()
        print(
            f"{'body':>9}  {'steps':>6}  {'median':>9}  {'p99':>9}  {'max':>9}"
            "   (check → kernel took the bytes)"
        )
        for size in (1_000, 10_000, 100_000, 1_000_000):
            found = asyncio.run(
                _measure(kubeconfig, max(20, args.requests * 1_000 // max(size, 1_000)), size, windows)
            )
            found.sort()
            p99 = found[min(len(found) - 1, int(len(found) * 0.99))]
            print(
                f"{size:>8,}B  {len(found):>6}  {statistics.median(found) / 1000:>7.1f}µs  "
                f"{p99 / 1000:>7.1f}µs  {found[-1] / 1000:>7.1f}µs"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
