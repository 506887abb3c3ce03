"""The node agent's settings: its own tunables, plus the runtime's and the chain's that it reads.

:class:`AgentSettings` is the type the agent's code reads (``settings.current.fit_label_coalesce_seconds``,
``.node_management_manual``, ``.controller_workers`` …). The process validates the ConfigMap against
the command line's composed model, a subclass of this one, so the agent accepts exactly the keys the
controller accepts.
"""

from __future__ import annotations

from pydantic import Field

from gpustack_worker.api.settings import ChainSettings
from gpustack_worker.runtime.settings import STARTUP_ONLY, RuntimeSettings, SettingsModel

__all__ = ("AgentSettings", "AgentTunables")


class AgentTunables(SettingsModel):
    """Tunables only the node agent reads."""

    fit_label_coalesce_seconds: float = Field(default=3.0, ge=0, le=300)
    """The node agent batches fit-label changes this long, so a burst of device events is one write.
    Live: read per event."""
    all_nodes_workers: int = Field(default=8, ge=1, le=64, json_schema_extra=STARTUP_ONLY)
    """Concurrent reconciles per agent controller when one agent serves every node (``--all-nodes``); a
    per-node agent has one key and uses ``controller-workers``. Each reconcile is at most one apply, so
    on a cold fleet the workers are what keeps requests in flight: 8 per controller is the concurrency
    the API server's raw write rate is measured at (``bench/agent_bench.py`` prints the ratio).
    Start-up-only: the workers start with the controllers."""


class AgentSettings(RuntimeSettings, ChainSettings, AgentTunables):
    """Everything the node agent reads."""
