"""A corrected settings revision is confirmed (issue 29 item 8): after a rejected revision (Warning
``InvalidSettings``), the next accepted one posts a Normal ``SettingsApplied`` Event naming its revision and
the rejected one, and ``gpustack_settings_rejected`` is back at 0 — the Warning is not the last word. An
accepted revision after an accepted one posts nothing (no Event per edit); a deleted ConfigMap resets the
state without an Event; per-node processes log it and post nothing."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, cast

import pytest
from prometheus_client import REGISTRY

from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime import settings as settings_module
from gpustack_worker.runtime.settings import SettingsSource
from tests.runtime.test_settings_bad_input import NS, _configmap, _EventSink, _LogRecorder

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> _LogRecorder:
    recorder = _LogRecorder()
    monkeypatch.setattr(settings_module, "_log", recorder)
    return recorder


def _rejected(name: str) -> float | None:
    return REGISTRY.get_sample_value("gpustack_settings_rejected", {"configmap": f"{NS}/{name}"})


def _source(sink: _EventSink, *, post_events: bool = True) -> tuple[str, SettingsSource[WorkerSettings]]:
    name = f"confirm-{uuid.uuid4().hex[:8]}"
    client = cast("Client", sink)
    return name, SettingsSource(
        client, model=WorkerSettings, name=name, namespace=NS, env={}, post_events=post_events
    )


def _summary(sink: _EventSink) -> list[tuple[str, str, str, str]]:
    return [(e["type"], e["reason"], e["regarding"]["resourceVersion"], e["note"]) for e in sink.events]


APPLIED = "revision {} applied, the settings in force are its own; it replaces the rejected revision {}"


async def test_a_fix_after_a_rejection_is_confirmed_once(log: _LogRecorder) -> None:
    sink = _EventSink()
    name, source = _source(sink)
    assert source.load(_configmap({"log-level": "ERROR"}, rv="10")) is True  # accepted after accepted: quiet
    assert source.load(_configmap({"log-level": "loud"}, rv="11")) is False
    assert _rejected(name) == 1
    assert source.load(_configmap({"log-level": "loud"}, rv="12")) is False  # the same content: no report
    assert source.load(_configmap({"log-level": "WARNING"}, rv="13")) is True
    assert _rejected(name) == 0
    assert source.load(_configmap({"log-level": "INFO"}, rv="14")) is True  # an ordinary edit: no Event
    await source.settle()
    summary = _summary(sink)
    assert [s[:3] for s in summary] == [
        ("Warning", "InvalidSettings", "11"),
        ("Normal", "SettingsApplied", "13"),
    ]
    assert summary[1][3] == APPLIED.format("13", "11")
    assert sink.events[1]["action"] == "LoadSettings" and sink.events[1]["regarding"]["name"] == name
    assert source.current.log_level == "INFO"


async def test_reverting_to_the_settings_in_force_is_confirmed_too(log: _LogRecorder) -> None:
    """The fix may restore exactly the settings that stayed in force (nothing changes): still confirmed."""
    sink = _EventSink()
    _, source = _source(sink)
    assert source.load(_configmap({"log-level": "ERROR"}, rv="1")) is True
    good = source.current
    assert source.load(_configmap({"log-level": "ERROR", "typo-key": "x"}, rv="2")) is False
    assert source.load(_configmap({"log-level": "ERROR"}, rv="3")) is True
    await source.settle()
    assert source.current == good
    assert [(e["type"], e["note"]) for e in sink.events][1:] == [("Normal", APPLIED.format("3", "2"))]


async def test_a_deleted_configmap_resets_without_an_event(log: _LogRecorder) -> None:
    sink = _EventSink()
    name, source = _source(sink)
    assert source.load(_configmap({"log-level": "loud"}, rv="5")) is False
    assert source.load(None) is True
    assert _rejected(name) == 0
    assert source.load(_configmap({"log-level": "ERROR"}, rv="7")) is True  # a new ConfigMap, no rejection
    await source.settle()
    assert [e["type"] for e in sink.events] == ["Warning"]


async def test_per_node_processes_log_the_confirmation_and_post_nothing(log: _LogRecorder) -> None:
    sink = _EventSink()
    name, source = _source(sink, post_events=False)
    assert source.load(_configmap({"log-level": "loud"}, rv="2")) is False
    assert source.load(_configmap({"log-level": "ERROR"}, rv="3")) is True
    await source.settle()
    assert sink.events == [] and _rejected(name) == 0
    confirmed = [f for level, event, f in log.lines if event == "settings accepted after a rejected revision"]
    assert [(f["configmap"], f["note"]) for f in confirmed] == [(f"{NS}/{name}", APPLIED.format("3", "2"))]
