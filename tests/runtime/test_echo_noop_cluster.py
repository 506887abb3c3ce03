"""On the real API server: a server-side apply that changes nothing is not written — the answer carries the
current resourceVersion and our managedFields entry keeps its time — so its "echo" is someone else's event,
and the Applier does not take it for ours (issue 28, problem 2, on the real control plane).

At B our entry owns ``data.g`` and ``data.k``; our next body releases ``g``. Another manager's update
changes ``g`` (the server takes it out of our entry) and ``h``; our apply, computed from B, is then a
no-op: answered at their version X. The event B → X reaches the informer (through the runtime's real
ingest transform) and must not be our echo; our next real write's event still is.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.runtime.apply import Applier
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.informer import Informer
from gpustack_worker.runtime.resources import CONFIG_MAP
from gpustack_worker.runtime.transform import make_transform

if TYPE_CHECKING:
    from tests.conftest import Poll

pytestmark = pytest.mark.cluster
MANAGER = "gpustack-worker/echo-noop-test"
NS = "default"
RUN_LABEL = "test.gpustack.ai/run"


def _entry(obj: dict[str, Any], manager: str) -> dict[str, Any]:
    (entry,) = [e for e in obj["metadata"]["managedFields"] if e["manager"] == manager]
    return entry


def _rv(obj: Any) -> str:
    return str(obj["metadata"]["resourceVersion"])


async def test_a_noop_apply_keeps_the_version_and_the_time_and_its_answer_is_not_our_echo(
    devcluster: Any, eventually: Poll
) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    run = uuid.uuid4().hex[:8]
    name = f"echo-noop-{run}"

    def body(values: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS, "labels": {RUN_LABEL: run}},
            "data": values,
        }

    await client.create(CONFIG_MAP, body({"h": "1"}), field_manager="creator")
    informer = Informer(
        client,
        CONFIG_MAP,
        namespace=NS,
        label_selector=f"{RUN_LABEL}={run}",
        transform=make_transform([MANAGER]),
    )
    applier = Applier(client, MANAGER, cache=informer)
    events: list[tuple[Any, Any]] = []
    informer.add_handler(lambda _event, old, new: events.append((old, new)))
    running = asyncio.ensure_future(informer.run())
    key = f"{NS}/{name}"
    try:
        await asyncio.wait_for(informer.wait_synced(), 60)

        # Ours: g and k. The cache reaches B, our entry owning both.
        first = await applier.apply(CONFIG_MAP, body({"g": "a", "k": "b"}), informer.store.get(key))
        assert first is not None
        await eventually(
            lambda: (informer.store.get(key) or {}).get("metadata", {}).get("resourceVersion") == _rv(first)
        )
        base = informer.store.get(key)
        assert base is not None

        # What the server does with an apply that changes nothing: no write, same version, same time.
        again = await client.apply(CONFIG_MAP, body({"g": "a", "k": "b"}), field_manager=MANAGER)
        assert _rv(again) == _rv(first)
        assert _entry(again, MANAGER)["time"] == _entry(first, MANAGER)["time"]

        # Another manager's update of g and h: g leaves our entry.
        theirs = await client.patch(
            CONFIG_MAP, name, {"data": {"g": "x", "h": "2"}}, namespace=NS, field_manager="kubectl-edit"
        )
        assert "f:g" not in _entry(theirs, MANAGER)["fieldsV1"]["f:data"]

        # Our next reconcile, computed from B, releases g: sent (not a no-op at B), a no-op at theirs.
        answer = await applier.apply(CONFIG_MAP, body({"k": "b"}), base)
        assert answer is not None, "sent: at B our entry still owns g"
        assert _rv(answer) == _rv(theirs), "answered with their version: nothing was written"
        assert _entry(answer, MANAGER)["time"] == _entry(first, MANAGER)["time"], (
            "our entry's time did not move"
        )

        await eventually(lambda: any(_rv(new) == _rv(theirs) for _old, new in events))
        (old, new) = next((o, n) for o, n in events if _rv(n) == _rv(theirs))
        assert _rv(old) == _rv(base), "the event is B → X: exactly the versions of our write"
        assert applier.is_own_echo(CONFIG_MAP, old, new) is False, "their change is not our echo"
        assert applier.hold_own_echo(CONFIG_MAP, old, new, None, lambda: None) is False

        # Our next real write's event is still our echo.
        ours = await applier.apply(CONFIG_MAP, body({"k": "c"}), new)
        assert ours is not None and _rv(ours) != _rv(theirs)
        await eventually(lambda: any(_rv(n) == _rv(ours) for _o, n in events))
        (old, new) = next((o, n) for o, n in events if _rv(n) == _rv(ours))
        assert applier.is_own_echo(CONFIG_MAP, old, new) is True
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await running
        with contextlib.suppress(Exception):
            await client.delete(CONFIG_MAP, name, NS)
        await client.close()
