"""The composed settings model, and how every long-running command opens its settings.

:class:`WorkerSettings` is every stage's settings model in one: the model every process validates the
settings ConfigMap and its ``GPUSTACK_*`` environment against, so the agent and the controller accept
exactly the same keys (a key valid for one is never "unknown" to the other). A stage that adds a
settings model adds it here as a base.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from gpustack_worker.agent.settings import AgentSettings
from gpustack_worker.chain.settings import ControllerSettings
from gpustack_worker.runtime.defaults import DEFAULT_CONFIGMAP
from gpustack_worker.runtime.settings import SettingsError, SettingsSource, settings_from
from gpustack_worker.runtime.telemetry import set_log_level

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpustack_worker.runtime.client import Client

__all__ = ("WorkerSettings", "boot_settings", "environment_problem", "open_settings")


class WorkerSettings(AgentSettings, ControllerSettings):
    """Every setting of every stage (runtime, chain, agent)."""


def boot_settings(env: Mapping[str, str] | None = None) -> WorkerSettings:
    """The settings from the environment alone (start-up); raises :class:`SettingsError`."""
    return settings_from(WorkerSettings, None, os.environ if env is None else env)


def environment_problem(env: Mapping[str, str] | None = None) -> str | None:
    """One line saying what is wrong with the ``GPUSTACK_*`` settings environment, or None."""
    try:
        boot_settings(env)
    except SettingsError as exc:
        return f"invalid settings in the environment: {exc}"
    return None


def open_settings(
    client: Client,
    *,
    name: str | None,
    namespace: str,
    reporting_instance: str,
    post_events: bool = True,
) -> SettingsSource[WorkerSettings]:
    """The live settings source of a process; a change of ``log-level`` is applied at once."""
    source = SettingsSource(
        client,
        model=WorkerSettings,
        name=name or DEFAULT_CONFIGMAP,
        namespace=namespace,
        reporting_instance=reporting_instance,
        post_events=post_events,
    )
    source.subscribe(lambda settings: set_log_level(settings.log_level))
    return source
