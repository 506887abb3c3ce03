"""The settings ``plan --from-cluster`` plans with: the live settings ConfigMap judged exactly as the
controllers judge it (:func:`~gpustack_worker.runtime.settings.check_revision`, what
``SettingsSource.load`` calls), with ``--set`` over it.

A revision the controllers reject does not stop them: they keep the settings in force — the last good
revision, held in memory only (nothing on the cluster records its content: the ``InvalidSettings``
Warning Event names the rejected revision, ``gpustack_settings_last_good_timestamp_seconds`` is a time).
What the cluster does show is what a controller starting now runs on: its start-up settings (the
defaults and its ``GPUSTACK_*`` seeds, which a plan does not read), the rejected revision never taking
effect. So the plan does the same — it plans with the defaults and ``--set`` — and says so in one warning
line naming the bad keys and every problem, instead of refusing to plan. A bad ``--set`` stays bad input
(exit 2): it is the plan's own argument, not the cluster's state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.settings import SettingsError, check_revision, settings_from

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ("PlanSettings", "bad_keys", "plan_settings", "set_error")


@dataclass(frozen=True, slots=True)
class PlanSettings:
    """The settings to plan with, what they came from (the report's ``settings`` line) and, when the live
    revision is rejected, the one warning line saying so."""

    settings: WorkerSettings
    source: str
    warning: str | None = None


def bad_keys(keys: Sequence[str], problems: Sequence[str]) -> list[str]:
    """The keys of ``keys`` that ``problems`` (:func:`settings_from`'s ``key='value': problem`` lines, an
    order's ``low='1' ≤ high='2': why``, ``key: in binaryData``) name."""

    def names(key: str, problem: str) -> bool:
        return problem.startswith((f"{key}=", f"{key}:")) or f" {key}=" in problem

    return [k for k in sorted(keys) if any(names(k, p) for p in problems)]


def plan_settings(
    configmap: Mapping[str, Any] | None, where: str, overrides: Mapping[str, str]
) -> PlanSettings:
    """The settings ``plan --from-cluster`` plans with (pure): the live revision with ``--set`` over it;
    when the controllers reject that revision (bad without the ``--set``), the defaults with ``--set``
    and the warning. Raises :class:`SettingsError` when the ``--set`` is what is bad."""
    with_set = f" with --set {', '.join(sorted(overrides))}" if overrides else ""
    if configmap is None:
        alone = settings_from(WorkerSettings, dict(overrides), {})
        return PlanSettings(alone, f"defaults (no ConfigMap {where}){with_set}")
    data = {str(k): str(v) for k, v in (configmap.get("data") or {}).items()}
    settings, problems = check_revision(WorkerSettings, {**configmap, "data": {**data, **overrides}}, {})
    if settings is not None:
        return PlanSettings(settings, f"ConfigMap {where} ({len(data)} keys){with_set}")
    live, rejected = check_revision(WorkerSettings, configmap, {})
    if live is not None:  # the live revision is good: the --set broke it
        raise SettingsError(problems)
    alone = settings_from(WorkerSettings, dict(overrides), {})
    named = bad_keys([*data, *(configmap.get("binaryData") or {})], rejected)
    warning = (
        f"settings ConfigMap {where} is rejected as the controllers reject it (bad key(s): "
        f"{', '.join(named) or '-'}); they keep their last good settings, which the cluster does not "
        f"show, and a controller starting now runs on its defaults: planned with the defaults{with_set}. "
        f"{len(rejected)} problem(s): {'; '.join(rejected)}"
    )
    return PlanSettings(alone, f"defaults (ConfigMap {where} rejected){with_set}", warning)


def set_error(exc: SettingsError) -> str:
    """The one line a bad ``--set`` exits 2 with."""
    return "invalid --set: " + "; ".join(exc.errors)
