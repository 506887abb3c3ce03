"""Where the suite's time went, printed at the end of every run (a pytest plugin, ``tests/conftest.py``).

- **control-plane start-ups**: how many and their seconds (every ``DevCluster.start`` in the run);
- **resets**: the session's control plane put back to its baseline for a module (tests/kit/reset.py);
- **cluster tests** and **other tests**: the seconds of setup + call + teardown, by the ``cluster`` marker.

Each figure is carried on the test reports (``user_properties``), so it adds up the same whether the
tests ran in this process or in ``pytest-xdist`` workers. Never a pass/fail figure: the suite does not
assert on time.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.devcluster.cluster import DevCluster

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

__all__ = ("RESET", "Phases", "timed")

_STARTUP = "phase:startup"
RESET = "phase:reset"
_RESET = RESET


class _Pending:
    """What happened in this process since the last report was made (attached to the next one)."""

    items: list[tuple[str, float]] = []


def timed(kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Record the seconds of every call of the decorated function as a phase ``kind``."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                _Pending.items.append((kind, time.monotonic() - started))

        return run

    return wrap


class Phases:
    """The plugin: counts start-ups (``DevCluster.start`` wrapped while the run lasts) and sums phases."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {_STARTUP: 0, _RESET: 0}
        self.seconds: dict[str, float] = {_STARTUP: 0.0, _RESET: 0.0, "cluster": 0.0, "other": 0.0}
        self._original_start = DevCluster.start

    def pytest_configure(self, config: pytest.Config) -> None:
        DevCluster.start = timed(_STARTUP)(self._original_start)  # type: ignore[method-assign]

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        DevCluster.start = self._original_start  # type: ignore[method-assign]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None]:
        outcome = yield
        report = outcome.get_result()
        report.user_properties.append(("phase:cluster", item.get_closest_marker("cluster") is not None))
        report.user_properties.extend(_Pending.items)
        _Pending.items = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(p for p in report.user_properties if p[0] == "phase:cluster")
        self.seconds["cluster" if props.get("phase:cluster") else "other"] += report.duration
        for name, value in report.user_properties:
            if name in (_STARTUP, _RESET):
                self.count[name] += 1
                self.seconds[name] += float(value)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        s, n = self.seconds, self.count
        terminalreporter.write_sep("-", "where the time went")
        terminalreporter.write_line(
            f"control-plane start-ups: {n[_STARTUP]} ({s[_STARTUP]:.0f} s); "
            f"resets to the baseline: {n[_RESET]} ({s[_RESET]:.0f} s)"
        )
        terminalreporter.write_line(
            f"cluster tests: {s['cluster']:.0f} s (their start-ups and resets included); "
            f"other tests: {s['other']:.0f} s"
        )
