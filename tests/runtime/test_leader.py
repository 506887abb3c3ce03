"""LeaderElector (client-go semantics) and its write fence, on a fake clock and an in-memory Lease API.

Every time below is the FakeClock's: nothing waits for real seconds and nothing depends on how fast the
machine is. The Client is the real one (fences, retries, request counting) over ``FakeApi``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpustack_worker.runtime.client import Client, Fenced
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.leader import LeaderElector, lease_seconds
from gpustack_worker.runtime.metrics import LEADER_SLOWPATH
from gpustack_worker.runtime.resources import CONFIG_MAP, LEASE
from tests.runtime.fake_api import FakeApi, FakeServer

NS = "gpustack-system"
NAME = "worker.gpustack.ai"
LEASE_PATH = LEASE.object_path(NAME, NS)
T0 = 1000.0


async def settle(rounds: int = 50) -> None:
    """Let every task that can run without the clock moving run."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def client_for(server: FakeServer, sender: str, **kwargs: Any) -> Client:
    return Client(FakeApi(server, sender), max_attempts=kwargs.pop("max_attempts", 1), **kwargs)


def elector(server: FakeServer, clock: FakeClock, identity: str, **kwargs: Any) -> LeaderElector:
    return LeaderElector(
        client_for(server, identity),
        name=NAME,
        namespace=NS,
        identity=identity,
        clock=clock,
        **kwargs,
    )


def lease_spec(server: FakeServer) -> dict[str, Any]:
    lease = server.get(LEASE_PATH)
    assert lease is not None
    spec: dict[str, Any] = lease["spec"]
    return spec


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}}


async def step(clock: FakeClock, seconds: float) -> None:
    await clock.advance(seconds)
    await settle()


async def walk(clock: FakeClock, seconds: float, by: float = 0.25) -> None:
    """Advance in small steps, so pollers run at their own pace."""
    for _ in range(round(seconds / by)):
        await step(clock, by)


async def test_acquires_a_free_lease_and_opens_the_fence() -> None:
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a = elector(server, clock, "a")
    assert a.fence.remaining() <= 0, "fence open before leading"
    await a.campaign()
    assert a.is_leader
    spec = lease_spec(server)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert spec["acquireTime"] == spec["renewTime"]
    assert a.fence.remaining() == pytest.approx(10.0)  # the renew deadline, from the attempt's start
    assert a.client.fence is a.fence, "the elector fences the client it was given"


async def test_does_not_acquire_a_held_unexpired_lease() -> None:
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a, b = elector(server, clock, "a"), elector(server, clock, "b")
    await a.campaign()
    holding = asyncio.ensure_future(a.hold())
    await settle()
    campaign = asyncio.ensure_future(b.campaign())
    try:
        for _ in range(200):  # 100 s of a renewing leader
            await step(clock, 0.5)
            assert not campaign.done() and not b.is_leader
        assert lease_spec(server)["holderIdentity"] == "a"
        assert b.fence.remaining() <= 0
        assert not server.writes(sender="b"), "a standby wrote to a held Lease"
        assert len(server.writes(sender="a", resource="leases")) >= 45  # renewed every retry period
    finally:
        campaign.cancel()
        a.step_down()
        await asyncio.gather(holding, campaign, return_exceptions=True)


async def test_acquires_after_expiry_measured_from_its_own_observation() -> None:
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a = elector(server, clock, "a")
    await a.campaign()  # and then a stops renewing (crashed)
    await step(clock, 100.0)  # the record is long stale by a's timestamps ...
    b = elector(server, clock, "b")
    campaign = asyncio.ensure_future(b.campaign())
    await settle()
    observed_at = clock.now()  # ... but b only counts from when it first saw it
    while clock.now() < observed_at + 15.0 - 0.25:
        await step(clock, 0.25)
        assert not campaign.done(), f"led at fake t+{clock.now() - observed_at} after observing, < lease"
    while not campaign.done():
        await step(clock, 0.25)
    handover = clock.now() - observed_at  # on the fake clock: arithmetic, not wall time
    assert 15.0 <= handover <= 15.0 + b.retry_period / 4 + 0.25
    spec = lease_spec(server)
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    assert spec["acquireTime"] == spec["renewTime"]


async def test_observation_restarts_on_every_record_change() -> None:
    """A renewal seen by the standby resets its count: it never takes a Lease renewed within the
    lease duration, however old the first observation is."""
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a, b = elector(server, clock, "a"), elector(server, clock, "b")
    await a.campaign()
    campaign = asyncio.ensure_future(b.campaign())
    try:
        for _ in range(5):
            await walk(clock, 12.0)  # a renews by hand every 12 s (< 15 s)
            a_client = a.client.with_fence(None)
            lease = await a_client.get(LEASE, NAME, NS)
            assert lease is not None
            lease["spec"]["renewTime"] = f"2026-01-01T00:00:{clock.now() % 60:09.6f}Z"
            await a_client.replace(LEASE, lease)
            renewed = clock.now()
            await settle()
            assert not campaign.done()
        await walk(clock, 14.75)
        assert not campaign.done()
        while not campaign.done():
            await step(clock, 0.25)
        assert b.is_leader
        assert renewed + 15.0 <= clock.now() <= renewed + 15.0 + b.retry_period / 4 + 0.25
    finally:
        campaign.cancel()
        await asyncio.gather(campaign, return_exceptions=True)


async def test_renews_every_retry_period_and_keeps_the_fence_open() -> None:
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a = elector(server, clock, "a")
    await a.campaign()
    holding = asyncio.ensure_future(a.hold())
    await settle()
    try:
        renew_times = set()
        for _ in range(30):  # 60 s, six renew deadlines
            await step(clock, 2.0)
            assert a.is_leader
            assert a.fence.remaining() > 0
            renew_times.add(lease_spec(server)["renewTime"])
        puts = server.writes(sender="a", resource="leases")
        assert len(puts) == 1 + 30  # the create, then one renewal per retry period
        assert all(p.method == "PUT" for p in puts[1:])
        assert [p.at for p in puts[1:]] == [T0 + 2.0 * i for i in range(1, 31)]
        assert lease_spec(server)["acquireTime"] != lease_spec(server)["renewTime"]
        assert lease_spec(server)["leaseTransitions"] == 0
        assert not holding.done()
    finally:
        a.step_down()
        await asyncio.gather(holding, return_exceptions=True)
    assert holding.done() and not a.lost


async def test_loses_leadership_exactly_at_the_renew_deadline_when_renewals_fail() -> None:
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a = elector(server, clock, "a")
    await a.campaign()
    server.fail("a", "leases", 500)
    slowpath = LEADER_SLOWPATH.labels(name=NAME)
    before = slowpath._value.get()
    holding = asyncio.ensure_future(a.hold())
    await settle()
    while not holding.done():
        assert a.is_leader == (clock.now() < T0 + 10.0)
        await step(clock, 0.25)
    assert clock.now() == T0 + 10.0, "hold() must return at the renew deadline, not a retry later"
    assert a.lost and not a.is_leader
    assert a.fence.remaining() <= 0
    failed = server.writes(sender="a", resource="leases")[1:]
    assert len(failed) >= 8, "renewals were retried every retry period until the deadline"
    assert all(r.status == 500 and r.at < T0 + 10.0 for r in failed)
    # client-go: each failed optimistic update falls back to GET + update (the slow path, counted);
    # losing the Lease itself is not a slow path.
    assert len(failed) % 2 == 0
    assert slowpath._value.get() == before + len(failed) // 2


async def test_a_hanging_renewal_is_abandoned_at_the_renew_deadline() -> None:
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a = elector(server, clock, "a")
    await a.campaign()
    server.hang("a", "leases")  # the renewal request never gets an answer
    holding = asyncio.ensure_future(a.hold())
    await settle()
    try:
        while not holding.done():
            assert clock.now() <= T0 + 10.0
            await step(clock, 0.25)
        assert clock.now() == T0 + 10.0 and a.lost and a.fence.remaining() <= 0
        hung = server.writes(sender="a", resource="leases")[1:]
        assert len(hung) == 1 and hung[0].at == T0 + 2.0
    finally:
        server.unhang()
        await settle()


async def test_fence_closes_at_the_renew_deadline_before_a_standby_can_acquire() -> None:
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a, b = elector(server, clock, "a"), elector(server, clock, "b")
    await a.campaign()
    holding = asyncio.ensure_future(a.hold())
    await settle()
    await step(clock, 2.0)  # one good renewal at T0 + 2 (attempt start)
    last_renewal = T0 + 2.0
    assert lease_spec(server)["renewTime"] != lease_spec(server)["acquireTime"]
    campaign = asyncio.ensure_future(b.campaign())
    await settle()
    server.fail("a", "leases", 503)  # a is cut off from the Lease from now on
    fenced_client = a.client
    last_open = None
    refused_after_close = 0
    try:
        while not campaign.done():
            if a.fence.remaining() > 0:
                last_open = clock.now()
                await fenced_client.apply(CONFIG_MAP, configmap(f"w{clock.now()}"), field_manager="t")
            else:
                with pytest.raises(Fenced):
                    await fenced_client.apply(CONFIG_MAP, configmap(f"w{clock.now()}"), field_manager="t")
                refused_after_close += 1
            await step(clock, 0.1)
        acquired_at = clock.now()
    finally:
        campaign.cancel()
        await asyncio.gather(holding, campaign, return_exceptions=True)
    assert last_open is not None
    assert last_open < last_renewal + a.renew_deadline <= last_open + 0.1 + 1e-9
    assert acquired_at >= last_renewal + a.lease_duration, "the standby took over before the lease expired"
    assert refused_after_close > 0
    a_writes = [w for w in server.writes(sender="a") if w.resource == "configmaps"]
    assert a_writes and max(w.at for w in a_writes) < last_renewal + a.renew_deadline
    b_acquire = server.writes(sender="b", resource="leases")[-1]
    assert all(w.at < b_acquire.at for w in server.writes(sender="a"))
    assert lease_spec(server)["holderIdentity"] == "b"


async def test_lease_duration_seconds_is_rounded_up_and_timings_are_validated() -> None:
    assert lease_seconds(15.0) == 15
    assert lease_seconds(15.1) == 16
    assert lease_seconds(15.9) == 16
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a = elector(server, clock, "a", lease_duration=15.9, renew_deadline=10.0, retry_period=2.0)
    await a.campaign()
    assert lease_spec(server)["leaseDurationSeconds"] == 16
    holding = asyncio.ensure_future(a.hold())
    await settle()
    await step(clock, 2.0)
    a.step_down()
    await holding
    assert lease_spec(server)["leaseDurationSeconds"] == 16
    bad = [
        {"lease_duration": 10.0, "renew_deadline": 10.0, "retry_period": 2.0},
        {"lease_duration": 15.0, "renew_deadline": 2.4, "retry_period": 2.0},
        {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 0.0},
        {"lease_duration": float("inf"), "renew_deadline": 10.0, "retry_period": 2.0},
        {"lease_duration": float("nan"), "renew_deadline": 10.0, "retry_period": 2.0},
    ]
    for timings in bad:
        with pytest.raises(ValueError, match="must be"):
            elector(server, clock, "x", **timings)


async def test_release_empties_the_holder_and_a_standby_takes_over_at_its_next_look() -> None:
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a, b = elector(server, clock, "a"), elector(server, clock, "b")
    await a.campaign()
    campaign = asyncio.ensure_future(b.campaign())
    await step(clock, 1.0)
    assert not campaign.done()
    await a.release()
    assert not a.is_leader and a.fence.remaining() <= 0
    spec = lease_spec(server)
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    await step(clock, b.retry_period / 4)
    assert campaign.done() and b.is_leader
    assert lease_spec(server)["holderIdentity"] == "b"
    with pytest.raises(Fenced):
        await a.client.apply(CONFIG_MAP, configmap("late"), field_manager="t")
    await a.release()  # idempotent: not ours any more, nothing written
    assert server.writes(sender="a")[-1].method == "PUT"
    assert len(server.writes(sender="a")) == 2


async def test_release_is_skipped_when_the_lease_is_no_longer_provably_ours() -> None:
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a = elector(server, clock, "a")
    await a.campaign()
    await step(clock, 10.0)  # the renew deadline passed without a renewal
    writes = len(server.writes(sender="a"))
    await a.release()
    assert len(server.writes(sender="a")) == writes, "released a Lease that may be someone else's"
    assert lease_spec(server)["holderIdentity"] == "a"


async def test_graceful_step_down_while_renewing_then_release() -> None:
    """step_down() closes the fence at once; hold() returns; release() still goes out (the Lease is
    provably ours) through the lease view of the client."""
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a = elector(server, clock, "a")
    await a.campaign()
    holding = asyncio.ensure_future(a.hold())
    await settle()
    await step(clock, 3.0)
    a.step_down()
    await settle()
    assert holding.done() and not a.lost
    with pytest.raises(Fenced):
        await a.client.apply(CONFIG_MAP, configmap("x"), field_manager="t")
    await a.release()
    assert lease_spec(server)["holderIdentity"] == ""


def _lease_requests(server: FakeServer, sender: str, since: float) -> list[str]:
    mine = (r for r in server.requests if r.sender == sender and r.resource == "leases")
    return [r.method for r in mine if r.at > since]


async def test_a_healthy_leader_renews_with_one_update_and_never_takes_the_slow_path() -> None:
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a = elector(server, clock, "a")
    slowpath = LEADER_SLOWPATH.labels(name=NAME)
    before = slowpath._value.get()
    await a.campaign()
    holding = asyncio.ensure_future(a.hold())
    await settle()
    try:
        await walk(clock, 20.0)
        assert a.is_leader
        assert _lease_requests(server, "a", T0) == ["PUT"] * 10, "a renewal re-read the Lease"
        assert slowpath._value.get() == before
    finally:
        a.step_down()
        await asyncio.gather(holding, return_exceptions=True)


async def test_a_renewal_after_someone_else_wrote_the_lease_takes_the_slow_path_once() -> None:
    clock = FakeClock(T0)
    server = FakeServer(clock)
    a = elector(server, clock, "a")
    other = client_for(server, "kubectl")
    slowpath = LEADER_SLOWPATH.labels(name=NAME)
    await a.campaign()
    holding = asyncio.ensure_future(a.hold())
    await settle()
    try:
        await walk(clock, 1.0)
        lease = await other.get(LEASE, NAME, NS)
        assert lease is not None
        lease["metadata"]["annotations"] = {"touched": "yes"}
        await other.replace(LEASE, lease)  # the leader's last-written resourceVersion is stale now
        before = slowpath._value.get()
        mark = clock.now()
        await walk(clock, 4.0)
        assert a.is_leader
        # optimistic update refused (409), GET + update (slow path), then the fast path again
        assert _lease_requests(server, "a", mark) == ["PUT", "GET", "PUT", "PUT"]
        assert [r.status for r in server.requests if r.sender == "a" and r.at > mark][:1] == [409]
        assert slowpath._value.get() == before + 1
        assert lease_spec(server)["holderIdentity"] == "a"
    finally:
        a.step_down()
        await asyncio.gather(holding, return_exceptions=True)


async def test_a_restarted_holder_reacquiring_its_own_lease_counts_a_slow_path() -> None:
    # client-go's IsLeader() is "the Lease read says I hold it": a process restarted with the same
    # identity finds its own record and renews it through the slow path.
    clock = FakeClock(T0)
    server = FakeServer(clock)
    await elector(server, clock, "a").campaign()
    slowpath = LEADER_SLOWPATH.labels(name=NAME)
    before = slowpath._value.get()
    again = elector(server, clock, "a")
    await again.campaign()
    assert again.is_leader
    assert slowpath._value.get() == before + 1
    assert lease_spec(server)["leaseTransitions"] == 0
