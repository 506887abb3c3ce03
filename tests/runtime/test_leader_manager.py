"""The Manager under a LeaderElector, on a fake clock and the in-memory API: losing the Lease cancels
in-flight reconciles, hands out no queued key and refuses every later write; a graceful stop keeps
renewing while the queues drain, then releases."""

from __future__ import annotations

import asyncio
from typing import Any

from gpustack_worker.runtime.client import Client, Fenced
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.controller import Controller, Result
from gpustack_worker.runtime.leader import LeaderElector
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.queue import WorkQueue
from gpustack_worker.runtime.resources import CONFIG_MAP, LEASE
from tests.kit.waiting import eventually
from tests.runtime.fake_api import FakeApi, FakeServer

NS = "gpustack-system"
NAME = "worker.gpustack.ai"
T0 = 1000.0


async def settle(rounds: int = 50) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def step(clock: FakeClock, seconds: float) -> None:
    await clock.advance(seconds)
    await settle()


def mirror(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}}


def setup(server: FakeServer, clock: FakeClock, identity: str) -> tuple[Client, LeaderElector]:
    client = Client(FakeApi(server, identity), max_attempts=1)
    elector = LeaderElector(client, name=NAME, namespace=NS, identity=identity, clock=clock)
    return client, elector


async def test_lost_lease_cancels_in_flight_reconciles_and_refuses_their_writes() -> None:
    clock = FakeClock(T0)
    server = FakeServer(clock)
    client, elector = setup(server, clock, "a")
    events: list[tuple[str, str, float]] = []
    detached: list[asyncio.Task[None]] = []

    async def late_write(key: str) -> None:
        """Work that escaped the reconcile (no one cancels it): only the fence stops it."""
        await clock.sleep(30.0)
        try:
            await client.apply(CONFIG_MAP, mirror(f"{key}-late"), field_manager="test")
            events.append(("wrote", key, clock.now()))
        except Fenced:
            events.append(("refused", key, clock.now()))

    async def reconcile(key: str) -> Result:
        events.append(("started", key, clock.now()))
        if key == "detached":
            detached.append(asyncio.ensure_future(late_write(key)))
            return Result.done()
        try:
            await clock.sleep(30.0)  # in flight far past the renew deadline
        except asyncio.CancelledError:
            events.append(("cancelled", key, clock.now()))
            try:  # a reconcile that still tries to write on its way out: the fence refuses it
                await client.apply(CONFIG_MAP, mirror(f"{key}-cleanup"), field_manager="test")
                events.append(("wrote", f"{key}-cleanup", clock.now()))
            except Fenced:
                events.append(("refused", f"{key}-cleanup", clock.now()))
            raise
        await client.apply(CONFIG_MAP, mirror(key), field_manager="test")
        events.append(("wrote", key, clock.now()))
        return Result.done()

    slow = Controller("slow", reconcile, WorkQueue("slow", clock=clock), workers=1)
    other = Controller("other", reconcile, WorkQueue("other", clock=clock), workers=1)
    manager = Manager(elector=elector, shutdown_timeout=60.0)
    manager.add_controller(slow)
    manager.add_controller(other)
    run = asyncio.ensure_future(manager.run(asyncio.Event()))
    await eventually(manager.leading.is_set, within=10, every=0.001)
    slow.queue.add("slow")
    slow.queue.add("queued")  # waits behind "slow" (one worker)
    other.queue.add("detached")
    await eventually(lambda: len([e for e in events if e[0] == "started"]) == 2, within=10, every=0.001)
    server.fail("a", "leases", 500)  # from now on every renewal fails
    while not run.done():
        assert clock.now() < T0 + 60.0, "the Manager did not stop"
        await step(clock, 0.5)
    assert run.result() == 1
    deadline = T0 + elector.renew_deadline
    assert elector.lost and not elector.is_leader and elector.fence.remaining() <= 0
    assert ("cancelled", "slow", deadline) in events, events
    assert ("refused", "slow-cleanup", deadline) in events, events
    assert not [e for e in events if e[0] == "wrote"], "a write went out"
    assert not [e for e in events if e[1] == "queued"], "a queued key was handed out after the loss"
    while not detached[0].done():
        await step(clock, 1.0)
    assert ("refused", "detached", T0 + 30.0) in events
    assert not server.writes(resource="configmaps"), "the server saw a write from a fenced replica"
    assert all(w.at < deadline for w in server.writes(sender="a"))


async def test_graceful_stop_keeps_renewing_while_draining_then_releases() -> None:
    clock = FakeClock(T0)
    server = FakeServer(clock)
    client, elector = setup(server, clock, "a")
    _, standby = setup(server, clock, "b")
    finish = asyncio.Event()
    events: list[tuple[str, str]] = []

    async def reconcile(key: str) -> Result:
        events.append(("started", key))
        await finish.wait()  # in flight until the test says so, whatever the clock does
        await client.apply(CONFIG_MAP, mirror(key), field_manager="test")
        events.append(("wrote", key))
        return Result.done()

    ctl = Controller("drain", reconcile, WorkQueue("drain", clock=clock), workers=1)
    manager = Manager(elector=elector, shutdown_timeout=60.0)
    manager.add_controller(ctl)
    stop = asyncio.Event()
    run = asyncio.ensure_future(manager.run(stop))
    await eventually(manager.leading.is_set, within=10, every=0.001)
    campaign = asyncio.ensure_future(standby.campaign())
    ctl.queue.add("k")
    await eventually(lambda: ("started", "k") in events, within=10, every=0.001)
    stop.set()
    await settle()
    stopped_at = clock.now()
    for _ in range(int(3 * elector.lease_duration / 0.5)):  # three lease durations of draining
        await step(clock, 0.5)
        assert elector.is_leader and elector.fence.remaining() > 0, "stopped leading during the drain"
        assert not campaign.done(), "the standby took over during the drain"
    assert not run.done()
    renewals = [w for w in server.writes(sender="a", resource="leases") if w.at > stopped_at]
    assert len(renewals) >= 3 * elector.lease_duration / elector.retry_period - 1
    assert all(w.status == 200 for w in renewals)
    finish.set()
    await eventually(run.done, within=10, every=0.001)  # the Manager finishes after the drain
    assert run.result() == 0
    assert events == [("started", "k"), ("wrote", "k")]
    release = server.writes(sender="a")[-1]
    assert release.method == "PUT" and release.resource == "leases"
    assert release.body is not None and release.body["spec"]["holderIdentity"] == ""
    cm_write = server.writes(sender="a", resource="configmaps")
    assert len(cm_write) == 1 and server.requests.index(cm_write[0]) < server.requests.index(release)
    assert elector.fence.remaining() <= 0
    while not campaign.done():
        await step(clock, 0.5)
    assert standby.is_leader
    lease = await client.get(LEASE, NAME, NS)
    assert lease is not None and lease["spec"]["holderIdentity"] == "b"
