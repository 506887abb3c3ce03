"""What the chain controllers read from the settings: the runtime's tunables and the chain settings.

The chain has no tunable of its own; :class:`ControllerSettings` only names the composition its code is
typed against. The process validates the ConfigMap against the command line's composed model (a
subclass), so the controller accepts exactly the keys the agent accepts.
"""

from __future__ import annotations

from gpustack_worker.api.settings import ChainSettings
from gpustack_worker.runtime.settings import RuntimeSettings

__all__ = ("ControllerSettings",)


class ControllerSettings(RuntimeSettings, ChainSettings):
    """Everything the chain controllers read."""
