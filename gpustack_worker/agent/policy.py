"""The three settings the agent reads, resolved per reconcile from the settings ConfigMap.

The chain settings are read per reconcile (reference §4.1), so flipping ``node-management-manual`` or
``instance-type-mixed-on-node`` takes effect at the next event without a restart. Precedence per key:
the ConfigMap's data value, else the env seed ``GPUSTACK_<UPPER_SNAKE_NAME>``, else the default.
This is a small local reader kept until the runtime's settings source can be used here; it resolves
the same names and env seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("DEFAULT", "SETTING_NAMES", "AgentPolicy", "resolve")

MANUAL: Final = "node-management-manual"
MIXED_ON_NODE: Final = "instance-type-mixed-on-node"
COALESCE: Final = "fit-label-coalesce-seconds"
SETTING_NAMES: Final = (MANUAL, MIXED_ON_NODE, COALESCE)


@dataclass(frozen=True, slots=True)
class AgentPolicy:
    """The agent's view of the settings."""

    #: Only an admin-set ``gpustack.ai/managed`` counts; the worker NodeFeature stamps nothing.
    node_management_manual: bool = False
    #: Accelerated nodes also count as CPU nodes; ``False`` publishes ``cpu-only`` on CPU nodes.
    instance_type_mixed_on_node: bool = True
    #: The window that coalesces ledger bursts into one fit-label patch.
    fit_label_coalesce_seconds: float = 3.0


DEFAULT: Final = AgentPolicy()


def _env_name(setting: str) -> str:
    return "GPUSTACK_" + setting.upper().replace("-", "_")


def _bool(raw: str | None, default: bool) -> bool:
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    return default


def _seconds(raw: str | None, default: float) -> float:
    try:
        value = float(raw) if raw is not None else default
    except ValueError:
        return default
    return value if value >= 0 else default


def resolve(data: Mapping[str, str] | None, env: Mapping[str, str]) -> AgentPolicy:
    """The policy from a settings ConfigMap's ``data`` (may be None) and the process environment."""
    values = dict(data or {})

    def raw(name: str) -> str | None:
        return values.get(name, env.get(_env_name(name)))

    return AgentPolicy(
        node_management_manual=_bool(raw(MANUAL), DEFAULT.node_management_manual),
        instance_type_mixed_on_node=_bool(raw(MIXED_ON_NODE), DEFAULT.instance_type_mixed_on_node),
        fit_label_coalesce_seconds=_seconds(raw(COALESCE), DEFAULT.fit_label_coalesce_seconds),
    )
