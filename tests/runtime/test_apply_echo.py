"""``Applier.is_own_echo``: the watch event of exactly this manager's last accepted write of an object.

A write computed from the cached object at resourceVersion B and answered at W is recorded as (B, W); the
watch event (B → W) is that write's echo — nothing but the write happened in between — and asking again
gives the same answer until a later version of the object is seen. Every other event is not: someone
else's write folded in before ours (old later than B), a later version, another object or subresource.
Driven against a stub client that answers each write at a version the test chooses.
"""

from __future__ import annotations

import pytest
from echo_objects import MANAGER, OTHER_KIND, THING, Cache, StubClient, body, obj

from gpustack_worker.runtime.apply import RECENT_WRITES_MAX, Applier
from gpustack_worker.runtime.client import Conflict


def applier(client: StubClient) -> Applier:
    return Applier(client, MANAGER, cache=Cache())  # type: ignore[arg-type]


def echo(a: Applier, old: int | None, new: int, *, name: str = "x", sub: str | None = None) -> bool:
    return a.is_own_echo(THING, obj(old, name=name) if old is not None else None, obj(new, name=name), sub)


async def test_the_event_of_our_write_is_its_echo_until_a_later_version_is_seen() -> None:
    a = applier(StubClient(11))
    assert echo(a, 10, 11) is False, "nothing written yet"
    written = await a.apply(THING, body(), obj(10))
    assert written is not None and written["metadata"]["resourceVersion"] == "11"
    # Asked by every handler of the event, in turn: the same answer each time.
    assert [echo(a, 10, 11) for _ in range(4)] == [True] * 4
    # An event older than the write (someone else's, still on its way) keeps the record.
    assert echo(a, 9, 10) is False
    assert echo(a, 10, 11) is True
    # A later version: not an echo, and the record is gone — the write's event is behind us.
    assert echo(a, 11, 13) is False
    assert echo(a, 10, 11) is False


async def test_an_event_to_another_version_than_the_answer_is_not_an_echo() -> None:
    a = applier(StubClient(11))
    await a.apply(THING, body(), obj(10))
    assert echo(a, 10, 12) is False  # the write was answered at 11: (10 → 12) folds more in
    assert echo(a, 10, 11) is False, "12 is later than our write: the record was dropped"


async def test_someone_elses_write_between_the_read_and_ours_is_not_an_echo() -> None:
    """Computed from 10, answered 12: another client wrote 11 in between, so the event (11 → 12) holds
    our write on top of a change the reconcile never read — it must be woken."""
    a = applier(StubClient(12))
    await a.apply(THING, body(), obj(10))
    assert echo(a, 10, 11) is False  # their write (before ours): not ours, and the record is kept
    assert echo(a, 11, 12) is False  # ours, with theirs folded into the base
    assert echo(a, 10, 12) is True  # only had nothing come between would it be the echo


@pytest.mark.parametrize("verb", ["create", "apply"])
async def test_the_added_event_of_our_create_is_its_echo(verb: str) -> None:
    a = applier(StubClient(5))
    if verb == "create":
        written = await a.create(THING, body())
    else:
        written = await a.apply(THING, body(), None)  # an apply with nothing cached creates it
    assert written is not None
    assert echo(a, None, 5) is True
    assert echo(a, 4, 5) is False, "an update to 5 is not our create"
    assert echo(a, None, 6) is False, "another ADDED (deleted and recreated since) is not ours"


async def test_only_the_written_object_and_subresource_echo() -> None:
    a = applier(StubClient(11, 21))
    await a.apply(THING, body(), obj(10), subresource="status")
    assert echo(a, 10, 11, sub="status") is True
    assert echo(a, 10, 11) is False, "the main resource was not written"
    assert echo(a, 10, 11, name="y", sub="status") is False, "another object"
    assert a.is_own_echo(OTHER_KIND, obj(10), obj(11), "status") is False, "another kind"
    other_ns = obj(11)
    other_ns["metadata"]["namespace"] = "elsewhere"
    assert a.is_own_echo(THING, obj(10), other_ns, "status") is False, "another namespace"
    # A write of another object is recorded beside it.
    await a.apply(THING, body(name="y"), obj(20, name="y"))
    assert echo(a, 20, 21, name="y") is True
    assert echo(a, 10, 11, sub="status") is True


async def test_an_apply_skipped_as_a_noop_records_nothing() -> None:
    client = StubClient(11)
    a = applier(client)
    await a.apply(THING, body("1"), obj(10))
    # Against the stale cache (our write's event not in yet), the same body: not sent again.
    assert await a.apply(THING, body("1"), obj(10)) is None
    # Against the cache holding our write: nothing to send either.
    assert await a.apply(THING, body("1"), obj(11, "1", ours=True)) is None
    assert len(client.sent) == 1
    assert echo(a, 10, 11) is True, "the accepted write is still the one on record"
    assert echo(a, 11, 12) is False, "no write from 11 was sent"


async def test_a_refused_write_records_nothing() -> None:
    client = StubClient(11)
    a = applier(client)
    await a.apply(THING, body("1"), obj(10))
    client.refuse = Conflict(409, "Conflict", {"message": "conflict"})
    with pytest.raises(Conflict):
        await a.apply(THING, body("2"), obj(11, "1", ours=True))
    assert len(client.sent) == 2
    assert echo(a, 10, 11) is True
    assert echo(a, 11, 12) is False


async def test_a_write_whose_versions_cannot_be_compared_leaves_no_record() -> None:
    a = applier(StubClient(11, 12, None))
    await a.apply(THING, body("1"), obj(10))
    # Computed from an object without a resourceVersion: the base cannot be matched.
    await a.apply(THING, body("2"), obj(None))
    assert echo(a, 10, 11) is False
    assert a.is_own_echo(THING, obj(None), obj(12)) is False
    # Answered without a resourceVersion: nothing to match the event with.
    await a.apply(THING, body("3"), obj(12, "2", ours=True))
    assert echo(a, 12, 13) is False
    assert a.is_own_echo(THING, obj(12), obj(None)) is False


async def test_an_event_without_a_number_for_a_version_drops_the_record() -> None:
    a = applier(StubClient(11))
    await a.apply(THING, body(), obj(10))
    odd = obj(11)
    odd["metadata"]["resourceVersion"] = "not-a-number"
    assert a.is_own_echo(THING, obj(10), odd) is False
    assert echo(a, 10, 11) is False


async def test_at_most_recent_writes_max_records_are_kept_the_oldest_written_dropped() -> None:
    count = RECENT_WRITES_MAX + 1
    answers = [1000 + i for i in range(count)]
    a = applier(StubClient(*answers[:RECENT_WRITES_MAX], 5000, answers[-1]))
    names = [f"o{i}" for i in range(count)]
    for name, version in zip(names[:RECENT_WRITES_MAX], answers, strict=False):
        await a.apply(THING, body(name=name), obj(version - 1, name=name))
    assert echo(a, 999, 1000, name="o0") is True
    assert echo(a, 1000, 1001, name="o1") is True
    # o0 written again: now the most recent record; o1 is the oldest.
    await a.apply(THING, body("2", name="o0"), obj(4999, name="o0"))
    await a.apply(THING, body(name=names[-1]), obj(answers[-1] - 1, name=names[-1]))
    assert echo(a, 1000, 1001, name="o1") is False, "the oldest record was dropped"
    assert echo(a, 4999, 5000, name="o0") is True
    assert echo(a, 1001, 1002, name="o2") is True
    assert echo(a, answers[-1] - 1, answers[-1], name=names[-1]) is True
