"""The simulator's one tunable, read from the environment when ``simulate apply`` starts.

The simulator is a command-line tool, not a controller: it never reads the settings ConfigMap, so its
model is not part of the composed model the agent and the controller validate the ConfigMap against.
The environment seed follows the same rule (``GPUSTACK_<UPPER_SNAKE_NAME>``), and a malformed value is
a clear error before anything is read or written.
"""

from __future__ import annotations

from pydantic import Field

from gpustack_worker.runtime.settings import SettingsModel

__all__ = ("SimulateSettings",)


class SimulateSettings(SettingsModel):
    """Tunables of ``simulate apply``."""

    simulate_apply_concurrency: int = Field(default=8, ge=1, le=64)
    """Nodes written at once. Each node's writes are ordered (its NodeFeature and Devices need the
    Node's uid) and each is one round trip, so one node at a time leaves the API server idle between
    requests (measured: ~40 writes/s against ~130/s it accepts from 8 concurrent clients). 8 in flight
    is the concurrency the raw server-side-apply rate is measured at (``bench/simulate_bench.py``) and
    stays far below the API server's own limit (``--max-mutating-requests-inflight``, 200 by default)."""
