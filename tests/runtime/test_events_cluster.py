"""On the real API server: a warning repeated ten times is one Event; after the window the same Event's
series count is updated (read back from the API), for a namespaced and for a cluster-scoped object."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.events import EventRecorder

pytestmark = pytest.mark.cluster


async def _events_about(client: Client, namespace: str, uid: str) -> list[dict[str, Any]]:
    items, _ = await client.list(kinds.EVENT, namespace=namespace)
    return [e for e in items if (e.get("regarding") or {}).get("uid") == uid]


async def test_a_repeated_warning_is_one_event_whose_series_count_is_updated(devcluster: Any) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    run = uuid.uuid4().hex[:8]
    clock = FakeClock()
    recorder = EventRecorder(
        client, controller="gpustack.ai/events-test", instance=f"test-{run}", clock=clock, dedup_window_s=600
    )
    cm = await client.create(
        kinds.CONFIG_MAP,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"ev-{run}"}, "data": {"a": "1"}},
        namespace=kinds.SYSTEM_NAMESPACE,
    )
    ns = await client.create(
        kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ev-{run}"}}
    )
    for obj in (cm, ns):
        obj.setdefault("apiVersion", "v1")
    cm["kind"], ns["kind"] = "ConfigMap", "Namespace"
    try:
        for _ in range(10):
            recorder.warning(cm, reason="InvalidSpec", action="Reconcile", note="spec.x is not a number")
            recorder.normal(ns, reason="Labelled", action="Reconcile", note="namespace labelled")
            await recorder.flush()
            await clock.advance(10)
        assert (recorder.posted, recorder.failed, recorder.suppressed) == (2, 0, 18)

        on_cm = await _events_about(client, kinds.SYSTEM_NAMESPACE, cm["metadata"]["uid"])
        assert len(on_cm) == 1
        event = on_cm[0]
        assert (event["type"], event["reason"], event["note"]) == (
            "Warning",
            "InvalidSpec",
            "spec.x is not a number",
        )
        assert event["regarding"]["kind"] == "ConfigMap" and event["regarding"]["name"] == f"ev-{run}"
        assert event["reportingController"] == "gpustack.ai/events-test"
        assert "series" not in event
        on_ns = await _events_about(client, "default", ns["metadata"]["uid"])  # cluster-scoped → default
        assert len(on_ns) == 1 and on_ns[0]["type"] == "Normal"

        await clock.advance(600)  # the window has passed: the next repeat updates the series
        recorder.warning(cm, reason="InvalidSpec", action="Reconcile", note="spec.x is not a number")
        await recorder.flush()
        await recorder.close()  # the namespace series still held 9 unwritten repeats
        assert recorder.failed == 0
        on_cm = await _events_about(client, kinds.SYSTEM_NAMESPACE, cm["metadata"]["uid"])
        assert len(on_cm) == 1
        assert on_cm[0]["metadata"]["name"] == event["metadata"]["name"]
        assert on_cm[0]["series"]["count"] == 11
        on_ns = await _events_about(client, "default", ns["metadata"]["uid"])
        assert len(on_ns) == 1 and on_ns[0]["series"]["count"] == 10
        assert (recorder.created, recorder.updated) == (2, 2)
    finally:
        await client.delete(kinds.CONFIG_MAP, f"ev-{run}", kinds.SYSTEM_NAMESPACE)
        await client.delete(kinds.NAMESPACE, f"ev-{run}")
        await client.close()
