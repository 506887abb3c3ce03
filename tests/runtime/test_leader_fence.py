"""The client side of the write fence: a closed fence sends nothing, reads are not fenced, every retry asks
again, and a write is cut off when the fence closes while it is in flight."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpustack_worker.runtime.client import Client, Fenced
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.resources import CONFIG_MAP
from tests.runtime.fake_api import FakeApi, FakeServer

NS = "default"


class Gate:
    """A fence the test opens and closes; counts how often it was asked."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.asked = 0

    def remaining(self) -> float:
        self.asked += 1
        return self.seconds


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}}


async def test_closed_fence_refuses_every_write_verb_without_sending() -> None:
    server = FakeServer(FakeClock())
    client = Client(FakeApi(server, "c"))
    await client.create(CONFIG_MAP, configmap("existing"), namespace=NS)
    client.fence = Gate(0.0)
    writes = [
        client.create(CONFIG_MAP, configmap("new"), namespace=NS),
        client.apply(CONFIG_MAP, configmap("new"), field_manager="t"),
        client.patch(CONFIG_MAP, "existing", {"data": {"a": "b"}}, namespace=NS),
        client.replace(CONFIG_MAP, {**configmap("existing"), "data": {}}),
        client.delete(CONFIG_MAP, "existing", NS),
    ]
    for write in writes:
        with pytest.raises(Fenced, match="refused"):
            await write
    assert len(server.writes()) == 1, "a fenced write reached the server"
    assert client.writes == 1
    assert await client.get(CONFIG_MAP, "existing", NS) is not None, "reads are not fenced"


async def test_open_fence_lets_writes_through_and_views_share_the_session() -> None:
    server = FakeServer(FakeClock())
    client = Client(FakeApi(server, "c"))
    gate = Gate(5.0)
    client.fence = gate
    await client.apply(CONFIG_MAP, configmap("a"), field_manager="t")
    assert gate.asked == 1
    unfenced = client.with_fence(None)
    gate.seconds = 0.0
    await unfenced.apply(CONFIG_MAP, configmap("b"), field_manager="t")
    with pytest.raises(Fenced):
        await client.apply(CONFIG_MAP, configmap("c"), field_manager="t")
    assert [w.path.rsplit("/", 1)[1] for w in server.writes()] == ["a", "b"]
    assert client.writes == unfenced.writes == 2, "views count into the same counters"
    assert client.fence is gate and unfenced.fence is None


async def test_every_retry_asks_the_fence_again() -> None:
    server = FakeServer(FakeClock())
    client = Client(FakeApi(server, "c"), max_attempts=5)
    server.fail("c", "configmaps", 503)  # retriable

    class ClosesAfterFirstAttempt(Gate):
        def remaining(self) -> float:
            left = super().remaining()
            self.seconds = 0.0
            return left

    gate = ClosesAfterFirstAttempt(5.0)
    client.fence = gate
    with pytest.raises(Fenced, match="refused"):
        await client.apply(CONFIG_MAP, configmap("a"), field_manager="t")
    assert gate.asked == 2
    assert len(server.writes()) == 1, "the retry after the fence closed was sent"


async def test_a_write_in_flight_is_cut_off_when_the_fence_closes() -> None:
    server = FakeServer(FakeClock())
    client = Client(FakeApi(server, "c"))
    server.hang("c", "configmaps")
    client.fence = Gate(0.05)  # real seconds: the Client bounds the attempt on the event loop's clock
    try:
        with pytest.raises(Fenced, match="cut off"):
            await client.apply(CONFIG_MAP, configmap("a"), field_manager="t")
    finally:
        server.unhang()
        await asyncio.sleep(0)
