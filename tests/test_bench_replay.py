"""bench/replay.py: what the recorder keeps of a writer's writes and the order the replay sends them in.

At the top of tests/ (not in a tests/bench package, which would shadow the repository's ``bench``
directory on the import path).
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bench import replay
from gpustack_worker.api import kinds
from tests.kit.properties import examples


class _Client:
    """Records what it is sent; answers an apply or create with its body."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str | None, str | None, bool | None]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def apply(self, resource: Any, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0)
        self.in_flight -= 1
        name = body["metadata"]["name"]
        self.sent.append(
            (resource.kind, name, kw.get("subresource"), kw.get("field_manager"), kw.get("force"))
        )
        return body

    async def create(self, resource: Any, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return body

    async def patch(self, resource: Any, *args: Any, **kw: Any) -> None:
        return None

    async def delete(self, resource: Any, *args: Any, **kw: Any) -> bool:
        return True

    requests_by_method = {"GET": 3}


def _node(name: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, **extra}


async def test_the_recorder_keeps_applies_and_creates_and_counts_the_other_writes() -> None:
    client = _Client()
    recorder = replay.WriteRecorder(client)
    await recorder.create(kinds.NODE, _node("a", status={"capacity": {"cpu": "1"}}))
    await recorder.apply(kinds.NODE, _node("a", status={"capacity": {"cpu": "1"}}), subresource="status")
    await recorder.apply(kinds.DEVICES, {"metadata": {"name": "a-dm"}}, field_manager="x")
    await recorder.patch(kinds.NODE, "a", {"metadata": {"labels": {"k": None}}})
    await recorder.delete(kinds.NODE_FEATURE, "a-f", "ns")
    assert recorder.by_kind() == {
        "Devices apply": 1,
        "Node apply": 1,
        "Node patch": 1,
        "Node/status apply": 1,
        "NodeFeature delete": 1,
    }
    assert recorder.requests_by_method == {"GET": 3}  # everything else passes through


def test_a_replayed_create_carries_no_server_fields_and_a_main_resource_apply_no_status() -> None:
    body = _node("a", status={"capacity": {"cpu": "1"}})
    body["metadata"] |= {"resourceVersion": "7", "uid": "u", "managedFields": [], "labels": {"k": "v"}}
    sent = replay._for_replay(replay.RecordedApply(kinds.NODE, body, None))
    assert sent == {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a", "labels": {"k": "v"}}}
    status = replay._for_replay(replay.RecordedApply(kinds.NODE, _node("a", status={"x": 1}), "status"))
    assert status["status"] == {"x": 1}


@settings(max_examples=examples(200))
@given(st.lists(st.tuples(st.sampled_from("abcde"), st.sampled_from([None, "status"])), max_size=30))
def test_groups_keep_each_objects_writes_in_order_and_objects_in_first_write_order(
    writes: list[tuple[str, str | None]],
) -> None:
    applies = [
        replay.RecordedApply(kinds.NODE, _node(name, spec={"i": i}), sub)
        for i, (name, sub) in enumerate(writes)
    ]
    groups = replay.replay_groups(applies)
    assert sorted(a.body["spec"]["i"] for g in groups for a in g) == list(range(len(writes)))
    firsts = [g[0].body["spec"]["i"] for g in groups]
    assert firsts == sorted(firsts)
    for group in groups:
        assert len({a.object_key for a in group}) == 1
        order = [a.body["spec"]["i"] for a in group]
        assert order == sorted(order)


async def test_the_replay_sends_every_apply_as_its_own_manager_with_force_in_flight_together() -> None:
    applies = [
        replay.RecordedApply(kinds.NODE, _node(f"n{i % 5}"), "status" if i >= 5 else None) for i in range(10)
    ]
    client = _Client()
    writes, seconds = await replay.replay_rate(client, applies, concurrency=4)  # type: ignore[arg-type]
    assert writes == 10 and seconds >= 0
    assert {(m, f) for *_, m, f in client.sent} == {(replay.REPLAY_MANAGER, True)}
    assert 1 < client.most_in_flight <= 4
    for i in range(5):  # each object's status after its own apply
        mine = [sub for _, name, sub, _, _ in client.sent if name == f"n{i}"]
        assert mine == [None, "status"]
