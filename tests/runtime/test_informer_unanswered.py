"""The informer against a real HTTP server that accepts the watch's connection and request and never
answers (an API server behind a proxy that hangs): issue 17 defect 5. Through the real :class:`Client`
and its HTTP session; the LIST is answered, so the failure is the watch's alone."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import orjson

from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.clock import MonotonicClock
from gpustack_worker.runtime.informer import Informer, InformerOptions
from gpustack_worker.runtime.resources import CONFIG_MAP
from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

VERSION = b'{"major": "1", "minor": "35", "gitVersion": "v1.35.4"}'
LIST = orjson.dumps({
    "kind": "ConfigMapList",
    "apiVersion": "v1",
    "metadata": {"resourceVersion": "10"},
    "items": [{"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5"}, "data": {"v": "1"}}],
})  # fmt: skip


class HangingWatches:
    """Answers ``/version`` and LISTs; a WATCH request is read and never answered (no headers)."""

    def __init__(self) -> None:
        self.lists = 0
        self.watches = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1]
                if b"watch=1" in target:
                    self.watches += 1
                    await reader.read()  # until the client gives up and closes
                    return
                if target.startswith(b"/version"):
                    body = VERSION
                else:
                    self.lists += 1
                    body = LIST
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


class HealthAtSleep(MonotonicClock):
    """Real time; records whether the informer called itself healthy at each backoff sleep."""

    def __init__(self) -> None:
        super().__init__()
        self.informer: Informer | None = None
        self.healthy: list[bool] = []

    async def sleep(self, seconds: float) -> None:
        assert self.informer is not None
        self.healthy.append(self.informer.healthy)
        await super().sleep(seconds)


@contextlib.asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple[HangingWatches, Client]]:
    api = HangingWatches()
    server = await asyncio.start_server(api.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        f"clusters: [{{name: t, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: t, user: {}}]\ncontexts: [{name: t, context: {cluster: t, user: t}}]\n"
    )
    client = await Client.connect(str(kubeconfig))
    try:
        yield api, client
    finally:
        await client.close()
        server.close()


async def test_a_watch_never_answered_backs_off_relists_and_turns_unhealthy(tmp_path: Path) -> None:
    clock = HealthAtSleep()
    options = InformerOptions(
        inactivity_timeout_s=0.2,
        short_watch_s=0.05,  # as in production: shorter than the inactivity timeout (5 s at least)
        backoff_initial_s=0.01,
        backoff_max_s=0.01,
        unhealthy_after_failures=1,
    )
    async with serving(tmp_path) as (api, client):
        informer = clock.informer = Informer(client, CONFIG_MAP, namespace="ns", options=options, clock=clock)
        task = asyncio.ensure_future(informer.run())
        try:
            await eventually(lambda: api.watches >= 3 and len(clock.healthy) >= 2, within=20, every=0.01)
            assert informer.has_synced
            assert api.watches >= 3
            assert api.lists >= 3  # every unanswered watch was followed by a relist
            assert informer.relists_by_reason["error"] >= 2
            assert clock.healthy[:2] == [False, False]  # backed off each time, never called fresh
            assert informer.last_error is not None and "WatchNeverOpenedError" in informer.last_error
            assert not informer.watching
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
