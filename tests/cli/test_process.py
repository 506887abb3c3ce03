"""What every long-running command gets from ``cli.process.running``: here, the event-loop lag monitor."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY

from gpustack_worker.cli.process import running
from gpustack_worker.runtime.looplag import LoopLagMonitor
from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


#: The coroutine the lag monitor's task runs.
MONITOR_RUN = LoopLagMonitor.run.__qualname__
VERSION = b'{"major": "1", "minor": "35", "gitVersion": "v1.35.4"}'


async def answer_version(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The one request the client makes on connecting: ``GET /version``."""
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n")
    writer.write(f"Content-Length: {len(VERSION)}\r\n\r\n".encode() + VERSION)
    await writer.drain()
    writer.close()


def lag_samples() -> float:
    return REGISTRY.get_sample_value("gpustack_event_loop_lag_seconds_count") or 0.0


def lag_monitors() -> set[asyncio.Task[None]]:
    """The running tasks of a ``LoopLagMonitor`` (the process starts one and keeps no handle to give out)."""
    return {t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") == MONITOR_RUN}


async def test_a_running_process_samples_its_event_loop_lag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await asyncio.start_server(answer_version, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        f"clusters: [{{name: t, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: t, user: {}}]\ncontexts: [{name: t, context: {cluster: t, user: t}}]\n"
    )
    monkeypatch.setenv("GPUSTACK_LOOP_LAG_INTERVAL_SECONDS", "0.01")
    before = lag_samples()
    others = lag_monitors()
    async with running(str(kubeconfig)):
        await eventually(lambda: lag_samples() >= before + 2, within=5, every=0.01)
        (monitor,) = lag_monitors() - others
    settled = lag_samples()
    # stopped with the process: the monitor task ends (cancelled), and records nothing more on its way out
    await eventually(monitor.done, within=5, every=0.01)
    assert monitor.cancelled()
    assert lag_samples() == settled
    server.close()
