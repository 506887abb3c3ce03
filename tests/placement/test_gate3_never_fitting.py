"""``gate3_parking.never_fitting_state``: the label of ``gpustack_workloads_never_fitting`` for a Workload
(Gate 3's shortfall record; parked when also inactive), and the count the controller's cache exports."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from gpustack_worker.api.crds.devices import AllocationMode
from gpustack_worker.placement import gate3_parking
from gpustack_worker.runtime.metrics import NEVER_FITTING, CacheCount
from tests.placement.test_node_devices import pending
from tests.placement.test_node_devices import setup as gate3_setup

RECORD = orjson.dumps({"message": "role main: 8 cards, the largest fit is 4 on node-a", "flavors": {}})
RECORD_TEXT = RECORD.decode()


def _wl(annotations: dict[str, str] | None = None, active: bool | None = None) -> dict[str, Any]:
    wl: dict[str, Any] = {"metadata": {"name": "w", "namespace": "ns", "annotations": annotations or {}}}
    if active is not None:
        wl["spec"] = {"active": active}
    return wl


@pytest.mark.parametrize(
    ("workload", "state"),
    [
        (_wl(), None),
        (_wl(active=False), None),  # inactive for another reason (the joint check, an admin)
        (_wl({gate3_parking.RECORD: RECORD_TEXT}), ("retrying",)),
        (_wl({gate3_parking.RECORD: RECORD_TEXT}, active=True), ("retrying",)),
        (_wl({gate3_parking.RECORD: RECORD_TEXT}, active=False), ("parked",)),
        (_wl({gate3_parking.RECORD: "not json"}, active=False), None),  # unreadable: not Gate 3's record
        (_wl({gate3_parking.RECORD: '{"flavors": {}}'}), None),
    ],
    ids=["none", "inactive-no-record", "record", "record-active", "parked", "unreadable", "no-message"],
)
def test_never_fitting_state(workload: dict[str, Any], state: tuple[str] | None) -> None:
    assert gate3_parking.never_fitting_state(workload) == state


class _Store:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects

    def list(self) -> list[dict[str, Any]]:
        return self.objects


def test_the_count_exports_both_states_at_zero_and_counts_the_cache() -> None:
    count = CacheCount(NEVER_FITTING.name, NEVER_FITTING.documentation, NEVER_FITTING.label_names)
    store = _Store([_wl()])
    count.watch(store, gate3_parking.never_fitting_state, gate3_parking.NEVER_FITTING_STATES)
    assert count.counts() == {("retrying",): 0, ("parked",): 0}
    record = {gate3_parking.RECORD: RECORD_TEXT}
    store.objects += [_wl(record), _wl(record, active=False)] * 2
    assert count.counts() == {("retrying",): 2, ("parked",): 2}


def test_gate3s_workload_cache_is_what_the_metric_counts() -> None:
    """The node-devices controller hands its Workload cache to ``gpustack_workloads_never_fitting``: a
    Workload carrying the record in that cache shows in the exported sample."""

    def sample(state: str) -> float | None:
        return REGISTRY.get_sample_value(NEVER_FITTING.name, {"state": state})

    check, _client = gate3_setup([int(AllocationMode.EXCLUSIVE), 0])
    before = NEVER_FITTING.counts()
    assert sample("retrying") is not None and sample("parked") is not None
    wl = pending("wl", 2)
    wl["metadata"].setdefault("annotations", {})[gate3_parking.RECORD] = RECORD_TEXT
    check.workloads.store.upsert(wl)
    assert NEVER_FITTING.counts()[("retrying",)] >= max(1, before.get(("retrying",), 0))
    assert check.workloads.store in [ref() for ref, *_ in NEVER_FITTING._sources]
