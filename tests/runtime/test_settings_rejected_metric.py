"""``gpustack_settings_rejected{configmap}``: 1 exactly while the latest revision a process read was
rejected (an older one in force), 0 from the start and once a revision is accepted — what the chart's
``GPUStackSettingsRejected`` alert reads (tests/chart/alerts/settings_rejected.yaml)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, cast

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.settings import SettingsSource

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client

NS = "gpustack-system"
#: A revision's ``data``: valid or not.
GOOD = ({"log-level": "ERROR"}, {"log-level": "INFO"}, {})
BAD = ({"log-level": "loud"}, {"controller-workers": "8"}, {"no-such-key": "1"})


def _configmap(name: str, data: dict[str, str], rv: int) -> dict[str, Any]:
    meta = {"name": name, "namespace": NS, "uid": "u-1", "resourceVersion": str(rv)}
    return {"metadata": meta, "data": data}


def _rejected(name: str) -> float | None:
    return REGISTRY.get_sample_value("gpustack_settings_rejected", {"configmap": f"{NS}/{name}"})


def _source(name: str) -> SettingsSource[WorkerSettings]:
    return SettingsSource(
        cast("Client", object()), model=WorkerSettings, name=name, namespace=NS, env={}, post_events=False
    )


def test_zero_from_the_start_one_on_rejection_zero_after_the_fix() -> None:
    name = f"cm-{uuid.uuid4().hex[:8]}"
    source = _source(name)
    assert _rejected(name) == 0
    assert source.load(_configmap(name, {"log-level": "loud"}, 1)) is False
    assert _rejected(name) == 1
    assert source.load(_configmap(name, {"log-level": "loud"}, 2)) is False  # the same content again
    assert _rejected(name) == 1
    assert source.load(_configmap(name, {"log-level": "ERROR"}, 3)) is True
    assert _rejected(name) == 0
    assert source.load(None) is True  # ConfigMap deleted: the defaults, accepted
    assert _rejected(name) == 0


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 2)), min_size=1, max_size=8))
def test_the_gauge_says_whether_the_latest_revision_was_rejected(revisions: list[tuple[bool, int]]) -> None:
    name = f"cm-{uuid.uuid4().hex[:8]}"
    source = _source(name)
    for rv, (good, which) in enumerate(revisions, start=1):
        accepted = source.load(_configmap(name, (GOOD if good else BAD)[which], rv))
        assert accepted is good
        assert _rejected(name) == (0 if good else 1), revisions[:rv]
        assert (source.last_error is None) is good
