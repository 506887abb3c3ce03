"""The node agent's settings: its own tunables, plus the runtime's and the chain's that it reads.

:class:`AgentSettings` is the type the agent's code reads (``settings.current.fit_label_coalesce_seconds``,
``.node_management_manual``, ``.controller_workers`` …). The process validates the ConfigMap against
the command line's composed model, a subclass of this one, so the agent accepts exactly the keys the
controller accepts.
"""

from __future__ import annotations

from pydantic import Field

from gpustack_worker.api.settings import ChainSettings
from gpustack_worker.runtime.settings import RuntimeSettings, SettingsModel

__all__ = ("AgentSettings", "AgentTunables")


class AgentTunables(SettingsModel):
    """Tunables only the node agent reads. All live."""

    fit_label_coalesce_seconds: float = Field(default=3.0, ge=0, le=300)
    """The node agent batches fit-label changes this long, so a burst of device events is one write.
    Live: read per event."""


class AgentSettings(RuntimeSettings, ChainSettings, AgentTunables):
    """Everything the node agent reads."""
