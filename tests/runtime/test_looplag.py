"""The event-loop lag monitor: what it records for a late wake-up, and the window of the max gauge.
Driven by a fake clock: "late" is fake time that passed while the monitor was asleep."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.looplag import MAX_WINDOW_S, LagWindow, LoopLagMonitor
from tests.kit.properties import examples
from tests.kit.waiting import eventually


def lag_count() -> float:
    return REGISTRY.get_sample_value("gpustack_event_loop_lag_seconds_count") or 0.0


def lag_max() -> float | None:
    return REGISTRY.get_sample_value("gpustack_event_loop_lag_max_seconds")


async def test_a_late_wake_up_is_recorded_as_its_lateness() -> None:
    clock = FakeClock()
    monitor = LoopLagMonitor(0.1, clock=clock)
    task = asyncio.ensure_future(monitor.run())
    try:
        await eventually(lambda: clock.sleepers == 1, within=5.0, every=0)  # asleep for its first interval
        before = lag_count()
        await clock.advance(0.1)  # on time
        await eventually(lambda: lag_count() == before + 1, within=5.0, every=0)  # it woke and recorded
        assert monitor.worst == 0.0
        await clock.advance(2.6)  # the loop was held: the wake-up comes 2.5 s late
        await eventually(lambda: lag_count() == before + 2, within=5.0, every=0)
        assert monitor.worst == pytest.approx(2.5)
        assert lag_max() == pytest.approx(2.5)
        assert lag_count() == before + 2
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        LoopLagMonitor(0.0)


def test_the_max_keeps_a_stall_for_one_window_then_forgets_it() -> None:
    window = LagWindow(MAX_WINDOW_S, now=0.0)
    assert window.observe(3.0, now=10.0) == 3.0
    assert window.observe(0.001, now=10.0 + MAX_WINDOW_S) == 3.0  # still within a window of the stall
    assert window.observe(0.001, now=10.0 + 2 * MAX_WINDOW_S) == 0.001  # two windows on: forgotten


@settings(max_examples=examples(200))
@given(st.lists(st.tuples(st.floats(0, 1000), st.floats(0, 30)), min_size=1, max_size=40))
def test_the_max_covers_at_least_the_last_window_and_never_more_than_two(
    steps: list[tuple[float, float]],
) -> None:
    window = LagWindow(10.0, now=0.0)
    now = 0.0
    seen: list[tuple[float, float]] = []
    for gap, lag in steps:
        now += gap
        seen.append((now, lag))
        got = window.observe(lag, now)
        recent = max(lag for at, lag in seen if now - at < 10.0)
        oldest_counted = max(lag for at, lag in seen if now - at < 20.0)
        assert recent <= got <= oldest_counted
