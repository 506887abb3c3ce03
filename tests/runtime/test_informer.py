"""``Informer.run`` against a scripted fake client and a fake clock (client-go's reflector tests per
failure mode): where lists are served from, when the informer backs off, relists, re-authenticates and
reports itself unhealthy. No wall-clock sleeps: time only moves when a test advances the clock."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import httpx
import pytest
from prometheus_client import REGISTRY

from gpustack_worker.runtime import informer as informer_module
from gpustack_worker.runtime.client import ApiError, Gone, Unauthorized
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.informer import (
    ADDED,
    DELETED,
    MODIFIED,
    Informer,
    InformerOptions,
    ShortWatchError,
    WatchNeverOpenedError,
    failure_reason,
)
from gpustack_worker.runtime.manager import Manager
from gpustack_worker.runtime.resources import CONFIG_MAP, Resource
from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Callable

    from gpustack_worker.runtime.client import Client

THINGS = CONFIG_MAP
NS = "ns"
#: client-go's backoff without jitter (the tests' rng draws 0): 0.8 s doubling to 30 s.
FIRST, SECOND, THIRD = 0.8, 1.6, 3.2
#: States reached through real loop time (the inactivity watchdog) are awaited with the kit's
#: ``eventually``, polled every 5 ms for at most 10 s (what the loop of 2000 five-millisecond sleeps allowed);
#: states reached by event-loop turns alone are awaited with :func:`until`, which counts turns.
WATCHDOG_WITHIN, WATCHDOG_EVERY = 10.0, 0.005


def obj(name: str, rv: str, value: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": rv},
        "data": {"v": value or rv},
    }


def event(kind: str, name: str, rv: str) -> dict[str, Any]:
    return {"type": kind, "object": obj(name, rv)}


def bookmark(rv: str) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"kind": "ConfigMap", "metadata": {"resourceVersion": rv}}}


def status(code: int, reason: str, *causes: str) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "code": code, "reason": reason}
    if causes:
        body["details"] = {"causes": [{"reason": c} for c in causes]}
    return body


def gone() -> Gone:
    return Gone(410, "Expired", status(410, "Expired"))


@dataclass(frozen=True)
class Advance:
    """A watch step: fake time passes while the stream is open."""

    seconds: float


@dataclass
class Watch:
    """One scripted WATCH: refused with ``refuse``, else opened and played ``steps`` (events, Advance,
    exceptions raised mid-stream), then ended by the server (or held open when ``hold``)."""

    steps: list[Any] = field(default_factory=list)
    refuse: BaseException | None = None
    hold: bool = False
    #: Accepted on TCP, never answered: no response headers (``on_open`` never called).
    never_open: bool = False


class ZeroJitter(random.Random):
    """Backoff without jitter and the shortest watch timeout, so delays are exact."""

    def random(self) -> float:
        return 0.0


class RecordingClock(FakeClock):
    """A fake clock that records every sleep (the informer only sleeps to back off)."""

    def __init__(self) -> None:
        super().__init__()
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await super().sleep(seconds)


class FakeClient:
    """``list`` and ``watch`` scripted per call and recorded; an exhausted script parks the informer."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.list_script: collections.deque[tuple[list[dict[str, Any]], str] | BaseException] = (
            collections.deque()
        )
        self.watch_script: collections.deque[Watch] = collections.deque()
        self.lists: list[dict[str, Any]] = []
        self.watches: list[dict[str, Any]] = []
        #: (lists so far, backoff sleeps so far) when each watch was requested.
        self.before_watch: list[tuple[int, int]] = []
        self.reauthentications = 0
        #: When set, a paged list waits for it between pages (``paused`` counts the waits).
        self.between_pages: asyncio.Event | None = None
        self.paused = 0
        self._parked = asyncio.Event()  # never set

    async def list(self, resource: Resource, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
        assert resource is THINGS
        self.lists.append(kwargs)
        if not self.list_script:
            await self._parked.wait()
        step = self.list_script.popleft()
        if isinstance(step, BaseException):
            raise step
        items, rv = step
        return [dict(i) for i in items], rv

    async def list_pages(
        self, resource: Resource, *, convert: Callable[[list[dict[str, Any]]], Any], **kwargs: Any
    ) -> AsyncGenerator[tuple[Any, str], None]:
        """:meth:`list`'s answer served one object per page; waits for :attr:`between_pages` (when set)
        after each page but the last."""
        items, rv = await self.list(resource, **kwargs)
        pages = [items[i : i + 1] for i in range(len(items))] or [[]]
        for n, page in enumerate(pages, start=1):
            yield convert(page), rv
            if self.between_pages is not None and n < len(pages):
                self.paused += 1
                await self.between_pages.wait()

    async def watch(
        self, resource: Resource, *, on_open: Callable[[], None] | None = None, **kwargs: Any
    ) -> AsyncGenerator[dict[str, Any], None]:
        assert resource is THINGS
        self.watches.append(kwargs)
        self.before_watch.append((len(self.lists), len(getattr(self.clock, "slept", ()))))
        if not self.watch_script:
            await self._parked.wait()
        script = self.watch_script.popleft()
        if script.refuse is not None:
            raise script.refuse
        if script.never_open:
            await self._parked.wait()
        if on_open is not None:
            on_open()
        for step in script.steps:
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, Advance):
                await self.clock.advance(step.seconds)
            else:
                yield step
        if script.hold:
            await self._parked.wait()

    async def reauthenticate(self) -> None:
        self.reauthentications += 1


@dataclass
class Rig:
    clock: RecordingClock
    client: FakeClient
    informer: Informer
    seen: list[tuple[str, str, str]]  # (event, name, data.v) as handlers received them

    def list_versions(self) -> list[tuple[str | None, str | None]]:
        return [(c.get("resource_version"), c.get("resource_version_match")) for c in self.client.lists]

    def watch_versions(self) -> list[str]:
        return [str(c["resource_version"]) for c in self.client.watches]


async def until(predicate: Callable[[], bool], spins: int = 2000) -> None:
    """Let the informer task run until ``predicate`` holds (event-loop turns, not wall time).

    Not the kit's ``eventually`` on purpose: these states need no real time at all (the clock is fake), so
    the bound is a count of loop turns — a state that only a real-time wait would reach fails here."""
    for _ in range(spins):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("the informer never reached the expected state")


@contextlib.asynccontextmanager
async def rig(
    lists: list[tuple[list[dict[str, Any]], str] | BaseException],
    watches: list[Watch],
    **options: Any,
) -> AsyncIterator[Rig]:
    clock = RecordingClock()
    client = FakeClient(clock)
    client.list_script.extend(lists)
    client.watch_script.extend(watches)
    informer = Informer(
        cast("Client", client),
        THINGS,
        namespace=NS,
        options=InformerOptions(**options),
        clock=clock,
        rng=ZeroJitter(),
    )
    seen: list[tuple[str, str, str]] = []

    def record(kind: str, old: Any, new: Any) -> None:
        current = new if new is not None else old
        seen.append((kind, current["metadata"]["name"], current["data"]["v"]))

    informer.add_handler(record)
    task = asyncio.ensure_future(informer.run())
    try:
        yield Rig(clock, client, informer, seen)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_process_listing_whole_collections_pages_its_first_list_then_relists_from_the_cache() -> None:
    # resourceVersion=0 is answered from the watch cache, which ignores limit: the first list asks for ""
    lists: list[tuple[list[dict[str, Any]], str] | BaseException] = [
        ([obj("a", "5")], "10"),
        ([obj("a", "12")], "20"),
    ]
    async with rig(lists, [Watch([gone()]), Watch(hold=True)], paged_first_list=True) as r:
        await until(lambda: r.clock.sleepers == 1)
        await r.clock.advance(FIRST)
        await until(lambda: len(r.client.watches) == 2)
        assert r.list_versions() == [("", None), ("10", "NotOlderThan")]
        assert [lst["limit"] for lst in r.client.lists] == [100, 100]


async def test_initial_list_from_watch_cache_then_watch_from_list_rv_and_bookmarks_advance_it() -> None:
    watches = [
        Watch([event(ADDED, "c", "11"), bookmark("15"), Advance(2.0)]),  # ends normally after 2 s
        Watch(hold=True),
    ]
    async with rig([([obj("a", "5"), obj("b", "7")], "10")], watches) as r:
        await until(lambda: len(r.client.watches) == 2)
        assert r.list_versions() == [("0", None)]  # served from the watch cache, no quorum read
        assert r.client.lists[0]["limit"] == InformerOptions().page_size == 100
        assert r.watch_versions() == ["10", "15"]  # resumed from the bookmark, without a relist
        assert r.client.watches[0]["timeout_seconds"] == 300  # random in [5, 10] min (rng draws 0)
        assert r.clock.slept == []  # a normal end is no failure
        assert r.informer.relists_by_reason == {"initial": 1}
        assert sorted(r.informer.store.keys()) == ["ns/a", "ns/b", "ns/c"]
        assert r.seen == [(ADDED, "a", "5"), (ADDED, "b", "7"), (ADDED, "c", "11")]
        assert r.informer.has_synced
        assert r.informer.healthy


async def test_410_on_watch_relists_from_the_last_seen_rv() -> None:
    watches = [Watch([event(MODIFIED, "a", "12"), gone()]), Watch(hold=True)]
    async with rig([([obj("a", "5")], "10"), ([obj("a", "20")], "21")], watches) as r:
        await until(lambda: r.clock.sleepers == 1)
        assert r.clock.slept == [FIRST]  # the 410 backs off like any failed watch (client-go)
        assert len(r.client.lists) == 1
        await r.clock.advance(FIRST)
        await until(lambda: len(r.client.watches) == 2)
        # not a quorum read: "at least as new as what we saw", answered from the watch cache
        assert r.list_versions() == [("0", None), ("12", "NotOlderThan")]
        assert r.watch_versions() == ["10", "21"]
        assert r.informer.relists_by_reason == {"initial": 1, "gone": 1}


@pytest.mark.parametrize(
    "refusal",
    [
        pytest.param(gone(), id="410"),
        pytest.param(
            ApiError(504, "Timeout", status(504, "Timeout", "ResourceVersionTooLarge")), id="rv-too-large"
        ),
    ],
)
async def test_410_on_list_backs_off_then_lists_consistently(refusal: ApiError) -> None:
    lists: list[tuple[list[dict[str, Any]], str] | BaseException] = [
        ([obj("a", "5")], "10"),
        refusal,  # the relist from RV 10 is refused too
        ([obj("a", "30")], "31"),
    ]
    watches = [Watch([gone()]), Watch(hold=True)]
    async with rig(lists, watches) as r:
        await until(lambda: r.clock.sleepers == 1)
        await r.clock.advance(FIRST)
        await until(lambda: len(r.client.lists) == 2 and r.clock.sleepers == 1)
        assert r.clock.slept == [FIRST, SECOND]  # the refused LIST backs off (no hot relist loop)
        assert r.informer.rv_unavailable
        await r.clock.advance(SECOND - 0.01)
        assert len(r.client.lists) == 2  # not before the backoff has passed
        await r.clock.advance(0.01)
        await until(lambda: len(r.client.watches) == 2)
        assert r.list_versions() == [("0", None), ("10", "NotOlderThan"), ("", None)]  # then consistent
        assert r.watch_versions() == ["10", "31"]
        assert not r.informer.rv_unavailable
        assert r.informer.relists_by_reason == {"initial": 1, "gone": 1}
        assert r.seen == [(ADDED, "a", "5"), (MODIFIED, "a", "30")]


async def test_a_watch_that_ends_at_once_without_events_backs_off_with_growing_delays() -> None:
    lists: list[tuple[list[dict[str, Any]], str] | BaseException] = [([obj("a", "5")], "10")] * 4
    watches = [Watch(), Watch(), Watch(), Watch(hold=True)]  # three "very short" watches
    async with rig(lists, watches) as r:
        for i, delay in enumerate((FIRST, SECOND, THIRD), start=1):
            await until(lambda: r.clock.sleepers == 1)
            assert len(r.client.watches) == i  # no reconnect before the backoff has passed
            await r.clock.advance(delay)
        await until(lambda: len(r.client.watches) == 4)
        assert r.clock.slept == [FIRST, SECOND, THIRD]
        # each short watch is a failed watch: client-go relists, from the last RV (watch cache)
        assert r.list_versions() == [("0", None)] + [("10", "NotOlderThan")] * 3
        assert r.informer.relists_by_reason == {"initial": 1, "error": 3}


async def test_a_watch_that_delivered_events_or_lasted_a_second_is_resumed_at_once() -> None:
    lists: list[tuple[list[dict[str, Any]], str] | BaseException] = [([], "10"), ([], "10")]
    watches = [
        Watch(),  # very short: a failure, backoff, relist
        Watch([event(ADDED, "a", "11")]),  # ends at once, but delivered an event
        Watch([Advance(1.0)]),  # no event, but open for a second
        Watch([Advance(1.0), httpx.RemoteProtocolError("incomplete chunked read")]),  # broke mid-stream
        Watch(hold=True),
    ]
    async with rig(lists, watches, unhealthy_after_failures=1) as r:
        await until(lambda: r.clock.sleepers == 1)
        assert r.informer.consecutive_failures == 1
        assert not r.informer.healthy
        await r.clock.advance(FIRST)
        await until(lambda: len(r.client.watches) == 5)
        assert r.clock.slept == [FIRST]  # the later ends were resumed without backing off
        assert r.watch_versions() == ["10", "10", "11", "11", "11"]
        assert r.informer.relists == 2  # only the short watch relisted
        assert r.informer.consecutive_failures == 0  # the watch with an event reset the failures
        assert r.informer.healthy


async def test_a_watch_that_never_opens_is_a_failure_backed_off_and_relisted() -> None:
    # issue 17 defect 5: accepted, never answered (no headers) until the inactivity watchdog fires
    lists: list[tuple[list[dict[str, Any]], str] | BaseException] = [([obj("a", "5")], "10")] * 2
    watches = [Watch(never_open=True), Watch(hold=True)]
    async with rig(lists, watches, inactivity_timeout_s=0.05, unhealthy_after_failures=1) as r:
        await eventually(lambda: r.clock.sleepers == 1, within=WATCHDOG_WITHIN, every=WATCHDOG_EVERY)
        assert r.clock.slept == [FIRST]  # backed off, not resumed at once
        assert r.informer.consecutive_failures == 1
        assert not r.informer.healthy  # the cache is not called fresh
        assert r.informer.last_error is not None and "WatchNeverOpenedError" in r.informer.last_error
        assert len(r.client.lists) == 1
        await r.clock.advance(FIRST)
        await eventually(lambda: len(r.client.watches) == 2, within=WATCHDOG_WITHIN, every=WATCHDOG_EVERY)
        assert r.list_versions() == [("0", None), ("10", "NotOlderThan")]  # relisted from the last RV
        assert r.informer.relists_by_reason == {"initial": 1, "error": 1}
        assert r.client.before_watch == [(1, 0), (2, 1)]


async def test_watches_that_never_open_turn_unhealthy_although_every_relist_between_them_succeeds() -> None:
    # the lists answer, the watches never do: the cache is only as fresh as the last relist, so the
    # relists must not reset the failure count (else readiness stays green with a frozen cache)
    lists: list[tuple[list[dict[str, Any]], str] | BaseException] = [([obj("a", "5")], "10")] * 4
    watches = [Watch(never_open=True)] * 3 + [Watch(hold=True)]
    failures = REGISTRY.get_sample_value(
        "gpustack_informer_failures_total", {"resource": THINGS.plural, "reason": "watch_never_opened"}
    ) or 0.0
    async with rig(lists, watches, inactivity_timeout_s=0.05, unhealthy_after_failures=3) as r:
        healthy: list[bool] = []
        for delay in (FIRST, SECOND, THIRD):
            await eventually(lambda: r.clock.sleepers == 1, within=WATCHDOG_WITHIN, every=WATCHDOG_EVERY)
            healthy.append(r.informer.healthy)
            await r.clock.advance(delay)
        assert healthy == [True, True, False]  # the third unopened watch in a row crosses the threshold
        await eventually(
            lambda: len(r.client.watches) == 4 and r.informer.watching,
            within=WATCHDOG_WITHIN,
            every=WATCHDOG_EVERY,
        )
        assert r.informer.relists_by_reason == {"initial": 1, "error": 3}  # every relist succeeded
        assert not r.informer.healthy  # still unproven: the relists alone do not make it fresh
        await r.clock.advance(1.0)
        assert r.informer.healthy  # a watch that stayed open does
    after = REGISTRY.get_sample_value(
        "gpustack_informer_failures_total", {"resource": THINGS.plural, "reason": "watch_never_opened"}
    )
    assert after == failures + 3


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (WatchNeverOpenedError("x"), "watch_never_opened"),
        (ShortWatchError("x"), "short_watch"),
        (Gone(410, "Expired", status(410, "Expired")), "gone"),
        (Unauthorized(401, "Unauthorized", status(401, "Unauthorized")), "unauthorized"),
        (ApiError(429, "TooManyRequests", status(429, "TooManyRequests")), "throttled"),
        (ApiError(503, "ServiceUnavailable", status(503, "ServiceUnavailable")), "server_error"),
        (ApiError(403, "Forbidden", status(403, "Forbidden")), "error"),
        (httpx.ConnectError("refused"), "connection"),
        (ValueError("undecodable"), "error"),
    ],
)
def test_failure_reason_names_what_failed(exc: BaseException, reason: str) -> None:
    assert failure_reason(exc) == reason


async def test_a_watch_that_opened_and_went_quiet_is_resumed_at_once() -> None:
    # opened (headers came), then silent past the inactivity timeout: a dropped stream, resumed from the
    # last RV without backoff or relist, and not a failure
    quiet = [Advance(1.0)]  # open for longer than a "very short" watch, then silent
    watches = [Watch([event(ADDED, "b", "11")], hold=True), Watch(quiet, hold=True), Watch(quiet, hold=True)]
    async with rig([([obj("a", "5")], "10")], watches, inactivity_timeout_s=0.05) as r:
        await eventually(lambda: len(r.client.watches) == 3, within=WATCHDOG_WITHIN, every=WATCHDOG_EVERY)
        assert r.client.before_watch == [(1, 0)] * 3  # no relist, no backoff between them
        assert r.watch_versions() == ["10", "11", "11"]
        assert r.informer.consecutive_failures == 0
        assert r.informer.relists == 1


async def test_401_on_watch_reauthenticates_then_recovers() -> None:
    expired = Unauthorized(401, "Unauthorized", status(401, "Unauthorized"))
    watches = [Watch(refuse=expired), Watch([event(ADDED, "b", "11")], hold=True)]
    async with rig([([obj("a", "5")], "10")], watches) as r:
        await until(lambda: r.clock.sleepers == 1)
        assert r.client.reauthentications == 1  # credentials reloaded before the retry
        assert r.clock.slept == [FIRST]
        await r.clock.advance(FIRST)
        await until(lambda: "ns/b" in r.informer.store)
        assert r.watch_versions() == ["10", "10"]  # the same watch again: nothing needed relisting
        assert len(r.client.lists) == 1
        assert r.informer.consecutive_failures == 0


@pytest.mark.parametrize(
    "refusal",
    [
        pytest.param(ApiError(429, "TooManyRequests", status(429, "TooManyRequests")), id="429"),
        pytest.param(httpx.ConnectError("connection refused"), id="connection-refused"),
    ],
)
async def test_a_refused_watch_backs_off_and_rewatches_without_relisting(refusal: BaseException) -> None:
    watches = [Watch(refuse=refusal), Watch(refuse=refusal), Watch(hold=True)]
    async with rig([([obj("a", "5")], "10")], watches) as r:
        await until(lambda: r.clock.sleepers == 1)
        await r.clock.advance(FIRST)
        await until(lambda: len(r.client.watches) == 2 and r.clock.sleepers == 1)
        await r.clock.advance(SECOND)
        await until(lambda: len(r.client.watches) == 3)
        assert r.clock.slept == [FIRST, SECOND]
        assert r.watch_versions() == ["10", "10", "10"]
        assert len(r.client.lists) == 1  # client-go: no relist on 429 / connection refused
        assert r.client.reauthentications == 0


async def test_an_error_event_relists_from_the_last_seen_rv() -> None:
    watches = [
        Watch([event(ADDED, "b", "11"), ApiError(500, "InternalError", status(500, "InternalError"))]),
        Watch(hold=True),
    ]
    async with rig([([obj("a", "5")], "10"), ([obj("a", "5"), obj("b", "11")], "12")], watches) as r:
        await until(lambda: r.clock.sleepers == 1)
        await r.clock.advance(FIRST)
        await until(lambda: len(r.client.watches) == 2)
        assert r.list_versions() == [("0", None), ("11", "NotOlderThan")]
        assert r.informer.relists_by_reason == {"initial": 1, "error": 1}
        assert r.seen == [(ADDED, "a", "5"), (ADDED, "b", "11")]  # the relist found nothing new


async def test_a_relist_over_several_pages_swaps_the_store_in_one_step() -> None:
    lists: list[tuple[list[dict[str, Any]], str] | BaseException] = [
        ([obj("a", "5"), obj("b", "6")], "10"),
        ([obj("a", "12"), obj("c", "13"), obj("d", "14")], "20"),  # b vanished, a changed, c and d new
    ]
    async with rig(lists, [Watch([gone()]), Watch(hold=True)]) as r:
        await until(lambda: r.clock.sleepers == 1)
        seen_before = list(r.seen)
        r.client.between_pages = asyncio.Event()
        await r.clock.advance(FIRST)
        await until(lambda: r.client.paused == 1)  # the first of the relist's three pages is in
        assert sorted(r.informer.store.keys()) == ["ns/a", "ns/b"]  # the old content, untouched
        assert r.informer.store.get("ns/a")["metadata"]["resourceVersion"] == "5"
        assert r.seen == seen_before and r.informer.last_resource_version == "10"
        r.client.between_pages.set()
        await until(lambda: len(r.client.watches) == 2)
        assert sorted(r.informer.store.keys()) == ["ns/a", "ns/c", "ns/d"]
        assert r.seen[len(seen_before) :] == [
            (DELETED, "b", "6"), (ADDED, "c", "13"), (ADDED, "d", "14"), (MODIFIED, "a", "12"),
        ]  # fmt: skip
        assert r.watch_versions() == ["10", "20"]


async def test_a_relist_emits_deletes_for_objects_that_vanished() -> None:
    lists: list[tuple[list[dict[str, Any]], str] | BaseException] = [
        ([obj("a", "5"), obj("b", "6"), obj("c", "7")], "10"),
        ([obj("b", "6"), obj("c", "19"), obj("d", "18")], "20"),  # a deleted, c changed, d created
    ]
    watches = [Watch([gone()]), Watch(hold=True)]
    async with rig(lists, watches) as r:
        await until(lambda: r.clock.sleepers == 1)
        await r.clock.advance(FIRST)
        await until(lambda: len(r.client.watches) == 2)
        assert r.seen[3:] == [(DELETED, "a", "5"), (ADDED, "d", "18"), (MODIFIED, "c", "19")]
        assert sorted(r.informer.store.keys()) == ["ns/b", "ns/c", "ns/d"]


async def test_unhealthy_after_consecutive_failures_until_a_watch_stays_open() -> None:
    refused = ApiError(503, "ServiceUnavailable", status(503, "ServiceUnavailable"))
    lists: list[tuple[list[dict[str, Any]], str] | BaseException] = [
        ([obj("a", "5")], "10"),
        refused,
        refused,
        ([obj("a", "5")], "10"),
    ]
    watches = [Watch(), Watch(hold=True)]  # one short watch, then a relist refused twice
    async with rig(lists, watches, unhealthy_after_failures=3) as r:
        healthy: list[bool] = []
        for delay in (FIRST, SECOND, THIRD):
            await until(lambda: r.clock.sleepers == 1)
            healthy.append(r.informer.healthy)
            await r.clock.advance(delay)
        assert healthy == [True, True, False]  # the third failure in a row crosses the threshold
        await until(lambda: len(r.client.watches) == 2 and r.informer.watching)
        assert r.informer.has_synced  # a synced cache can still be stale: that is what healthy says
        assert r.informer.consecutive_failures == 3  # a list proves the server answers, not a fresh cache
        assert not r.informer.healthy  # accepted, but not yet proven
        await r.clock.advance(1.0)  # the watch has stayed open for short_watch_s
        assert r.informer.healthy


async def test_healthy_again_once_a_quiet_watch_has_stayed_open() -> None:
    refused = Unauthorized(401, "Unauthorized", status(401, "Unauthorized"))
    watches = [Watch(refuse=refused), Watch(refuse=refused), Watch(hold=True)]
    async with rig([([obj("a", "5")], "10")], watches, unhealthy_after_failures=2) as r:
        await until(lambda: r.clock.sleepers == 1)
        await r.clock.advance(FIRST)
        await until(lambda: len(r.client.watches) == 2 and r.clock.sleepers == 1)
        assert not r.informer.healthy  # an expired token: readiness must not stay green
        assert r.client.reauthentications == 2
        await r.clock.advance(SECOND)
        await until(lambda: r.informer.watching)
        assert not r.informer.healthy  # accepted, but not yet proven
        await r.clock.advance(1.0)
        assert r.informer.healthy


async def test_readiness_follows_informer_health() -> None:
    refused = Unauthorized(401, "Unauthorized", status(401, "Unauthorized"))
    watches = [Watch(refuse=refused), Watch(hold=True)]
    async with rig([([obj("a", "5")], "10")], watches, unhealthy_after_failures=1) as r:
        manager = Manager()
        manager.add_informer(r.informer)
        manager.synced.set()  # as after the first sync
        await until(lambda: r.clock.sleepers == 1)
        assert not manager.ready()  # /readyz turns 503 while the cache is stale
        await r.clock.advance(FIRST)
        await until(lambda: r.informer.watching)
        await r.clock.advance(1.0)
        assert manager.ready()


async def test_a_list_of_more_than_one_page_gives_its_freed_memory_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[int] = []

    def trim() -> bool:
        trims.append(len(trims))
        return True

    monkeypatch.setattr(informer_module, "release_free_memory", trim)
    lists: list[tuple[list[dict[str, Any]], str] | BaseException] = [
        ([obj("a", "5")], "10"),  # less than a page: nothing to give back
        ([obj("a", "12"), obj("b", "13"), obj("c", "14")], "20"),  # more than one page of 2
    ]
    async with rig(lists, [Watch([gone()]), Watch(hold=True)], page_size=2) as r:
        await until(lambda: r.clock.sleepers == 1)
        assert trims == []
        await r.clock.advance(FIRST)
        # the trim runs in a worker thread: loop turns alone may not see it end on a loaded machine
        await eventually(lambda: len(r.client.watches) == 2, within=WATCHDOG_WITHIN, every=WATCHDOG_EVERY)
        assert trims == [0]
        assert sorted(r.informer.store.keys()) == ["ns/a", "ns/b", "ns/c"]


async def test_handlers_can_tell_the_diffs_of_a_list_from_watch_events() -> None:
    """``dispatching_list`` is True exactly while a LIST's diffs are handed out (the first list's ADDED,
    a relist's DELETED/ADDED/MODIFIED, whose old and new may be versions apart) and False for every watch
    event, and after."""
    lists: list[tuple[list[dict[str, Any]], str] | BaseException] = [
        ([obj("a", "5"), obj("b", "7")], "10"),
        ([obj("a", "20"), obj("c", "13"), obj("d", "21")], "22"),  # b gone, a changed, d new, c as seen
    ]
    watches = [Watch([event(MODIFIED, "a", "12"), event(ADDED, "c", "13"), gone()]), Watch(hold=True)]
    async with rig(lists, watches) as r:
        during: list[tuple[str, str, str, bool]] = []

        def record(kind: str, old: Any, new: Any) -> None:
            current = new if new is not None else old
            meta = current["metadata"]
            during.append((kind, meta["name"], meta["resourceVersion"], r.informer.dispatching_list))

        r.informer.add_handler(record)
        assert r.informer.dispatching_list is False
        await until(lambda: r.clock.sleepers == 1)  # listed, watched, then backing off after the 410
        assert during == [
            (ADDED, "a", "5", True), (ADDED, "b", "7", True),
            (MODIFIED, "a", "12", False), (ADDED, "c", "13", False),
        ]  # fmt: skip
        assert r.informer.dispatching_list is False
        await r.clock.advance(FIRST)
        await until(lambda: len(r.client.watches) == 2)
        assert during[4:] == [
            (DELETED, "b", "7", True),
            (ADDED, "d", "21", True),
            (MODIFIED, "a", "20", True),
        ]
        assert r.informer.dispatching_list is False
        assert [s[0] for s in r.seen] == [s[0] for s in during]  # every handler saw the same events


async def test_a_handler_that_raises_neither_stops_the_others_nor_the_informer() -> None:
    """One handler raising is logged and the event still reaches every other handler, for a list's diffs
    and for watch events alike; the informer goes on watching (no relist). The log line once named its
    field ``event``, which structlog's first argument already is: the log call itself raised, and the
    event was lost for the handlers after it (a relist's diffs for good)."""
    lists: list[tuple[list[dict[str, Any]], str] | BaseException] = [([obj("a", "5")], "10")]
    watches = [Watch([event(MODIFIED, "a", "12"), event(ADDED, "b", "13")], hold=True)]
    async with rig(lists, watches) as r:
        after: list[tuple[str, str]] = []

        def broken(_kind: str, _old: Any, _new: Any) -> None:
            raise RuntimeError("a bad handler")

        def record(kind: str, old: Any, new: Any) -> None:
            after.append((kind, (new if new is not None else old)["metadata"]["resourceVersion"]))

        r.informer.add_handler(broken)
        r.informer.add_handler(record)
        await until(lambda: len(after) == 3)
        assert after == [(ADDED, "5"), (MODIFIED, "12"), (ADDED, "13")]
        assert r.informer.relists == 1 and len(r.client.watches) == 1
