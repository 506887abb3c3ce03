"""``is_own_change``: is every difference between an event's old and new object one our apply makes?

The fields the write sets may change however the server stores them; a field our entry owned and the body
released may only disappear; the version, the generation and our own managedFields entry may move.
Anything else is someone else's change. Table-driven, one row per kind of difference, plus the Applier's
side: an uncached object's ADDED event is ours only when the answer proves our request created it, and an
event that is not our change is never held while our write is on its way.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from echo_objects import MANAGER, THING, Cache, StubClient, body

from gpustack_worker.runtime.apply import Applier, desired_fields, is_own_change
from gpustack_worker.runtime.frozen import freeze
from gpustack_worker.runtime.resources import FieldHints, Resource

HINTS = FieldHints(keyed={"spec.items": ("name",)}, sets=("spec.tags",))
KIND = Resource("example.com", "v1", "Thing", "things", namespaced=True, hints=HINTS)


def entry(fields: dict[str, Any], manager: str = MANAGER, subresource: str | None = None) -> dict[str, Any]:
    out = {"manager": manager, "operation": "Apply", "fieldsV1": fields}
    if subresource:
        out["subresource"] = subresource
    return out


OURS = entry({"f:data": {"f:v": {}, "f:g": {}}})
BASE: dict[str, Any] = {
    "apiVersion": "example.com/v1",
    "kind": "Thing",
    "metadata": {
        "name": "x",
        "namespace": "ns",
        "uid": "u1",
        "resourceVersion": "10",
        "generation": 1,
        "labels": {"team": "a"},
        "managedFields": [OURS, entry({"f:spec": {"f:other": {}}}, manager="our-other-controller")],
    },
    "data": {"v": "0", "g": "old", "h": "theirs"},
    "spec": {
        "items": [{"name": "a", "size": 1}, {"name": "b", "size": 2}],
        "tags": ["x", "y"],
        "other": "o",
    },
}
#: The body releases data.g and sets data.v and spec.items[a].size (a keyed item) and spec.tags[z].
BODY: dict[str, Any] = {
    "apiVersion": "example.com/v1",
    "kind": "Thing",
    "metadata": {"name": "x", "namespace": "ns"},
    "data": {"v": "1"},
    "spec": {"items": [{"name": "a", "size": 5}], "tags": ["z"]},
}
WRITTEN = desired_fields(BODY, HINTS)


def changed(edit: Any) -> dict[str, Any]:
    new = copy.deepcopy(BASE)
    new["metadata"]["resourceVersion"] = "11"
    edit(new)
    return new


def _set(path: tuple[str, ...], value: Any) -> Any:
    def edit(obj: dict[str, Any]) -> None:
        node = obj
        for key in path[:-1]:
            node = node[key]
        if value is None:
            del node[path[-1]]
        else:
            node[path[-1]] = value

    return edit


OWN = {
    "nothing but the version": lambda o: None,
    "a written value": _set(("data", "v"), "1"),
    "a written value, the generation and our entry": lambda o: (
        o["data"].update(v="1"),
        o["metadata"].update(generation=2),
        o["metadata"]["managedFields"].__setitem__(0, entry({"f:data": {"f:v": {}}})),
    ),
    "the released field removed": _set(("data", "g"), None),
    "a written keyed item's field": lambda o: o["spec"]["items"][0].update(size=5),
    "a written set value added": lambda o: o["spec"]["tags"].append("z"),
    "everything our write does at once": lambda o: (
        o["data"].update(v="1"),
        o["data"].pop("g"),
        o["spec"]["items"][0].update(size=5),
        o["spec"]["tags"].append("z"),
    ),
}
FOREIGN = {
    "another field's value": _set(("data", "h"), "changed"),
    "the released field given another value": _set(("data", "g"), "new"),
    "a label": lambda o: o["metadata"]["labels"].update(team="b"),
    "a new annotation": lambda o: o["metadata"].update(annotations={"a": "b"}),
    "a finalizer": lambda o: o["metadata"].update(finalizers=["f"]),
    "deletion started": lambda o: o["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"),
    "another keyed item": lambda o: o["spec"]["items"][1].update(size=9),
    "a keyed item added": lambda o: o["spec"]["items"].append({"name": "c", "size": 1}),
    "a set value removed": lambda o: o["spec"]["tags"].remove("y"),
    "a field outside": lambda o: o["spec"].update(other="p"),
    "a new top-level field": lambda o: o.update(status={"ready": True}),
    "another kept manager's entry": lambda o: o["metadata"]["managedFields"].__setitem__(
        1, entry({"f:spec": {"f:other": {}, "f:more": {}}}, manager="our-other-controller")
    ),
    "our entry for another subresource": lambda o: o["metadata"]["managedFields"].append(
        entry({"f:status": {"f:ready": {}}}, subresource="status")
    ),
    "a written value with a foreign one": lambda o: o["data"].update(v="1", h="changed"),
}


@pytest.mark.parametrize("case", list(OWN))
@pytest.mark.parametrize("frozen", [False, True], ids=["plain", "cached"])
def test_what_our_write_makes_is_our_change(case: str, frozen: bool) -> None:
    old, new = BASE, changed(OWN[case])
    if frozen:
        old, new = freeze(copy.deepcopy(old)), freeze(new)
    assert is_own_change(old, new, WRITTEN, MANAGER, hints=HINTS) is True


@pytest.mark.parametrize("case", list(FOREIGN))
@pytest.mark.parametrize("frozen", [False, True], ids=["plain", "cached"])
def test_anything_else_is_not(case: str, frozen: bool) -> None:
    old, new = BASE, changed(FOREIGN[case])
    if frozen:
        old, new = freeze(copy.deepcopy(old)), freeze(new)
    assert is_own_change(old, new, WRITTEN, MANAGER, hints=HINTS) is False


def test_a_released_field_another_manager_still_owns_may_stay() -> None:
    """Released but co-owned: the server keeps it, unchanged — no difference at all there."""
    assert is_own_change(BASE, changed(lambda o: None), WRITTEN, MANAGER, hints=HINTS) is True


def test_the_entry_of_another_subresource_decides_nothing_for_the_main_resource() -> None:
    """A /status write owns status fields in its own entry: the main resource's released set is empty."""
    status_body = {
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "metadata": {"name": "x"},
        "status": {"a": 1},
    }
    written = desired_fields(status_body, HINTS)
    old = changed(
        lambda o: o["metadata"]["managedFields"].append(
            entry({"f:status": {"f:a": {}}}, subresource="status")
        )
    )
    old["status"] = {"a": 0}
    new = copy.deepcopy(old)
    new["status"] = {"a": 1}
    assert is_own_change(old, new, written, MANAGER, "status", hints=HINTS) is True
    new["data"]["h"] = "changed"
    assert is_own_change(old, new, written, MANAGER, "status", hints=HINTS) is False


@pytest.mark.parametrize(
    ("extra", "ours"),
    [
        ({}, True),
        ({"metadata": {"managedFields": [{**entry({"f:data": {"f:v": {}}}), "operation": "Update"}]}}, True),
        ({"data": {"v": "1", "h": "theirs"}}, False),
        ({"metadata": {"labels": {"a": "b"}}}, False),
        (
            {"metadata": {"managedFields": [entry({"f:data": {"f:h": {}}}, manager="our-other-controller")]}},
            False,
        ),
    ],
    ids=[
        "exactly our fields",
        "our create's update entry",
        "a field of someone else",
        "a label of someone else",
        "another kept manager's entry",
    ],
)
def test_an_added_object_holds_our_fields_only(extra: dict[str, Any], ours: bool) -> None:
    created = {
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "metadata": {
            "name": "x",
            "namespace": "ns",
            "uid": "u9",
            "resourceVersion": "5",
            "creationTimestamp": "t",
        },
        "data": {"v": "1"},
        "spec": {"items": [{"name": "a", "size": 5}], "tags": ["z"]},
    }
    for key, value in extra.items():
        created[key] = {**created.get(key, {}), **value}
    assert is_own_change(None, created, WRITTEN, MANAGER, hints=HINTS) is ours


# -- the Applier's side ---------------------------------------------------------------------------


class EntryClient(StubClient):
    """Answers with the managedFields the test chooses (a real server always sends some)."""

    def __init__(self, version: int, managers: list[str]) -> None:
        super().__init__(version)
        self.managers = managers

    def _answer(self, verb: str, sent: dict[str, Any]) -> dict[str, Any]:
        out = super()._answer(verb, sent)
        out["metadata"]["managedFields"] = [
            {"manager": m, "operation": "Apply" if m == MANAGER else "Update", "fieldsV1": {}}
            for m in self.managers
        ]
        return out


def added(version: int, value: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "ns", "uid": "u1", "resourceVersion": str(version)},
        "data": {"v": value},
    }


@pytest.mark.parametrize(
    ("managers", "ours"),
    [([MANAGER], True), ([MANAGER, "kubectl-create"], False), (["kubectl-create"], False)],
    ids=["created by our apply", "created by someone else, ours added", "someone else's only"],
)
async def test_an_apply_to_an_uncached_object_proves_its_create_by_the_answers_managed_fields(
    managers: list[str], ours: bool
) -> None:
    a = Applier(EntryClient(5, managers), MANAGER, cache=Cache())  # type: ignore[arg-type]
    await a.apply(THING, body(), None)
    assert a.is_own_echo(THING, None, added(5)) is ours


async def test_a_create_is_always_ours() -> None:
    a = Applier(EntryClient(5, [MANAGER, "admission-mutator"]), MANAGER, cache=Cache())  # type: ignore[arg-type]
    await a.create(THING, body())
    assert a.is_own_echo(THING, None, added(5)) is True
    more = added(5)
    more["data"]["h"] = "theirs"
    assert a.is_own_echo(THING, None, more) is False, "a field our create did not send"


@pytest.mark.parametrize("proof", [True, False], ids=["created by us", "not proven"])
async def test_a_held_added_event_is_dropped_only_with_the_proof(proof: bool) -> None:
    client = EntryClient(5, [MANAGER] if proof else [MANAGER, "kubectl-create"])
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    original = client.apply

    async def gated(*args: Any, **kwargs: Any) -> dict[str, Any]:
        await gate
        return await original(*args, **kwargs)

    client.apply = gated  # type: ignore[method-assign]
    a = Applier(client, MANAGER, cache=Cache())  # type: ignore[arg-type]
    released: list[str] = []
    task = asyncio.ensure_future(a.apply(THING, body(), None))
    for _ in range(3):
        await asyncio.sleep(0)
    assert a.hold_own_echo(THING, None, added(5), None, lambda: released.append("added")) is True
    gate.set_result(None)
    await task
    assert released == ([] if proof else ["added"])


async def test_an_event_that_is_not_our_change_is_not_held_while_our_write_is_on_its_way() -> None:
    client = StubClient(11)
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    original = client.apply

    async def gated(*args: Any, **kwargs: Any) -> dict[str, Any]:
        await gate
        return await original(*args, **kwargs)

    client.apply = gated  # type: ignore[method-assign]
    a = Applier(client, MANAGER, cache=Cache())  # type: ignore[arg-type]
    base = added(10, "0")
    task = asyncio.ensure_future(a.apply(THING, body("1"), base))
    for _ in range(3):
        await asyncio.sleep(0)
    theirs = added(11, "0")
    theirs["metadata"]["labels"] = {"edited": "yes"}
    released: list[str] = []
    assert a.hold_own_echo(THING, base, theirs, None, lambda: released.append("theirs")) is False
    ours = added(11, "1")
    assert a.hold_own_echo(THING, base, ours, None, lambda: released.append("ours")) is True
    gate.set_result(None)
    await task
    assert released == []
    assert a.is_own_echo(THING, base, theirs) is False, "after the answer, the same verdict"
