"""What the chain controllers read from the settings: :class:`ControllerSettings` (defined with the chain
settings in :mod:`gpustack_worker.api.settings`, so the other controller packages name the same model)."""

from __future__ import annotations

from gpustack_worker.api.settings import ControllerSettings

__all__ = ("ControllerSettings",)
