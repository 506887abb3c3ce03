"""``Applier.hold_own_echo``: the watch event of our write that arrives before the write's answer.

The server sends a write's watch event and its response at once, so a controller often reads the event
first: ``is_own_echo`` cannot know yet what the write was answered with. The event is then held when it
may be that write's echo (its old version is the version the write was computed from) and decided on
the answer: dropped when it is exactly the write (the new version is the answered one), released
otherwise — also when the write fails or is cancelled. Everything else passes at once. Driven against a
client whose answer the test releases by hand, so events can be delivered while the write is on its way.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
from echo_objects import MANAGER, NS, OTHER_KIND, THING, Cache, body, obj

from gpustack_worker.runtime.apply import Applier
from gpustack_worker.runtime.client import Conflict

if TYPE_CHECKING:
    from gpustack_worker.runtime.resources import Resource


class GatedClient:
    """Each apply/create waits until the test answers it (:meth:`answer`) or refuses it (:meth:`refuse`)."""

    def __init__(self) -> None:
        self.pending: asyncio.Queue[asyncio.Future[int | None]] = asyncio.Queue()

    async def _wait(self, body: dict[str, Any]) -> dict[str, Any]:
        gate: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        await self.pending.put(gate)
        version = await gate
        out = {**body, "metadata": {**body["metadata"], "uid": "u1"}}
        if version is not None:
            out["metadata"]["resourceVersion"] = str(version)
        return out

    async def apply(self, resource: Resource, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return await self._wait(body)

    async def create(self, resource: Resource, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return await self._wait(body)

    async def answer(self, version: int | None) -> None:
        (await self.pending.get()).set_result(version)

    async def refuse(self, exc: BaseException) -> None:
        (await self.pending.get()).set_exception(exc)


class Released:
    """Counts the releases of held events, by label."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, label: str) -> Any:
        return lambda: self.calls.append(label)


def applier() -> tuple[Applier, GatedClient]:
    client = GatedClient()
    return Applier(client, MANAGER, cache=Cache()), client  # type: ignore[arg-type]


def hold(
    a: Applier, old: int | None, new: int, release: Any, *, name: str = "x", sub: str | None = None
) -> bool:
    before = obj(old, name=name) if old is not None else None
    return a.hold_own_echo(THING, before, obj(new, name=name), sub, release)


async def _on_its_way(write: Any) -> asyncio.Task[Any]:
    """Start ``write`` and let it reach the client (sent, not answered)."""
    task = asyncio.ensure_future(write)
    for _ in range(3):
        await asyncio.sleep(0)
    return task


async def test_the_echo_arriving_before_the_answer_is_held_and_dropped_on_the_answer() -> None:
    a, client = applier()
    released = Released()
    task = await _on_its_way(a.apply(THING, body(), obj(10)))
    assert hold(a, 10, 11, released("echo")) is True
    await client.answer(11)
    await task
    assert released.calls == [], "it was exactly our write: nobody is woken"
    # The record of the answered write stands as for an echo arriving after the answer.
    assert a.is_own_echo(THING, obj(10), obj(11)) is True


async def test_a_held_event_that_is_not_the_answered_write_is_released_once() -> None:
    """Someone else wrote 11 on top of 10 while ours was on its way; ours was answered at 12."""
    a, client = applier()
    released = Released()
    task = await _on_its_way(a.apply(THING, body(), obj(10)))
    assert hold(a, 10, 11, released("theirs")) is True
    # The next event (11 → 12) was computed from their version: not held, it passes at once.
    assert hold(a, 11, 12, released("ours on theirs")) is False
    await client.answer(12)
    await task
    assert released.calls == ["theirs"]


async def test_an_event_from_another_base_passes_at_once() -> None:
    a, client = applier()
    released = Released()
    task = await _on_its_way(a.apply(THING, body(), obj(10)))
    assert hold(a, 9, 10, released("older")) is False
    assert hold(a, 12, 13, released("later")) is False
    await client.answer(11)
    await task
    assert released.calls == []


@pytest.mark.parametrize("failure", ["refused", "cancelled", "no version"])
async def test_a_write_that_is_not_answered_with_a_version_releases_what_it_held(failure: str) -> None:
    a, client = applier()
    released = Released()
    task = await _on_its_way(a.apply(THING, body(), obj(10)))
    assert hold(a, 10, 11, released("first")) is True
    assert hold(a, 10, 11, released("asked again"), name="x") is True
    if failure == "refused":
        await client.refuse(Conflict(409, "Conflict", {"message": "conflict"}))
        with pytest.raises(Conflict):
            await task
    elif failure == "cancelled":
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        await client.answer(None)
        await task
    assert released.calls == ["first", "asked again"]
    # Nothing is held any more: the next event of the object is decided at once.
    assert hold(a, 10, 11, released("after")) is False


@pytest.mark.parametrize("verb", ["create", "apply"])
async def test_the_added_event_of_a_create_on_its_way_is_held(verb: str) -> None:
    a, client = applier()
    released = Released()
    write = a.create(THING, body()) if verb == "create" else a.apply(THING, body(), None)
    task = await _on_its_way(write)
    assert hold(a, 10, 11, released("an update")) is False, "a create's echo has no old object"
    assert hold(a, None, 5, released("added")) is True
    assert hold(a, None, 6, released("added again")) is True
    await client.answer(5)
    await task
    assert released.calls == ["added again"], "5 was our create; 6 is another object of that name"


async def test_only_the_object_and_subresource_on_their_way_are_held() -> None:
    a, client = applier()
    released = Released()
    task = await _on_its_way(a.apply(THING, body(), obj(10), subresource="status"))
    assert hold(a, 10, 11, released("main"), sub=None) is False
    assert hold(a, 10, 11, released("other"), name="y", sub="status") is False
    assert a.hold_own_echo(OTHER_KIND, obj(10), obj(11), "status", released("kind")) is False
    elsewhere = obj(11)
    elsewhere["metadata"]["namespace"] = NS + "-elsewhere"
    assert a.hold_own_echo(THING, obj(10), elsewhere, "status", released("ns")) is False
    assert hold(a, 10, 11, released("status"), sub="status") is True
    await client.answer(11)
    await task
    assert released.calls == []


async def test_a_deletion_or_an_unknown_base_is_never_held() -> None:
    a, client = applier()
    released = Released()
    task = await _on_its_way(a.apply(THING, body(), obj(10)))
    assert a.hold_own_echo(THING, obj(10), None, None, released("deleted")) is False
    await client.answer(11)
    await task
    # Computed from an object without a resourceVersion: the base cannot be matched, nothing is held.
    task = await _on_its_way(a.apply(THING, body("2"), obj(None)))
    assert hold(a, 11, 12, released("unknown base")) is False
    assert a.hold_own_echo(THING, obj(None), obj(12), None, released("no old version")) is False
    await client.answer(12)
    await task
    assert released.calls == []


async def test_an_echo_after_the_answer_is_still_dropped_at_once() -> None:
    """The common order: answer first, then the event — decided at once, never held."""
    a, client = applier()
    released = Released()
    task = await _on_its_way(a.apply(THING, body(), obj(10)))
    await client.answer(11)
    await task
    assert hold(a, 10, 11, released("echo")) is True
    assert hold(a, 11, 12, released("next")) is False
    assert released.calls == []


async def test_a_second_write_of_the_same_object_while_one_is_on_its_way_holds_against_the_first() -> None:
    """Two writers of one field manager on one key (not the agent's shape: its key is reconciled by one
    worker at a time) — events are decided against the first write only, never dropped wrongly."""
    a, client = applier()
    released = Released()
    first = await _on_its_way(a.apply(THING, body("1"), obj(10)))
    second = await _on_its_way(a.apply(THING, body("2"), obj(10)))
    assert hold(a, 10, 11, released("maybe first")) is True
    await client.answer(11)
    await first
    assert hold(a, 10, 12, released("second")) is False, "not held: the second write was not recorded"
    await client.answer(12)
    await second
    assert released.calls == []
