"""Pools: the aggregation layer (ClusterQueue / InstanceType / InstanceTypeFlavor) over the flavors.

Flavors are setting-independent; pools are grouped by ``instance-type-aware-cpu-manufacturer``
(scheduling-chain "Naming and grouping", reference §2.3, §2.4 and Appendix A.3-A.4):

- aware=false: ``gpustack--generic-<os>-<arch>`` (all CPUs collapse) and ``gpustack--<aKey>-<os>-<arch>``;
- aware=true: ``gpustack--<gKey>-<os>-<arch>`` and ``gpustack--<gKey>--<aKey>-<os>-<arch>``.

A pool's *schedule labels* come from the InstanceType spec identity; the queue's flavors are the operator
flavors whose labels contain the selector built from them, so an admin-authored InstanceType is served
exactly like a derived one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, kinds, presets

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from gpustack_worker.chain.flavors import FlavorPlan

__all__ = (
    "DISPLAY_NAME_MAX",
    "GENERIC",
    "PoolIdentity",
    "derived_instance_type",
    "flavor_selector",
    "flavors_of",
    "identity_of",
    "pool_of",
    "schedule_labels",
)

#: The CPU key of a collapsed (awareness off) pool.
GENERIC: Final = "generic"
#: ``spec.displayName`` is at most 64 characters (runes).
DISPLAY_NAME_MAX: Final = 64
#: Display name of the collapsed CPU pool.
CPU_ONLY_DISPLAY: Final = "CPU-only"


@dataclass(frozen=True, slots=True)
class PoolIdentity:
    """An InstanceType's spec identity (``generalGroup``/``acceleratorGroup``/``acceleratable``/os/arch)."""

    acceleratable: bool
    accelerator_group: str
    general_group: str
    os: str
    arch: str

    @property
    def name(self) -> str:
        """The InstanceType / ClusterQueue name of this identity."""
        return keys.pool_name(self.os, self.arch, self.accelerator_group, self.general_group or GENERIC)


def pool_of(plan: FlavorPlan, *, aware: bool) -> PoolIdentity:
    """The pool a flavor feeds under the current grouping setting."""
    return PoolIdentity(
        acceleratable=plan.accelerated,
        accelerator_group=plan.device.a_key if plan.device is not None else "",
        general_group=plan.cpu.g_key if aware else GENERIC,
        os=plan.os,
        arch=plan.arch,
    )


def identity_of(instance_type: Mapping[str, Any]) -> PoolIdentity:
    """The identity an InstanceType object declares (the webhook's ``generalGroup`` default applied)."""
    spec = instance_type.get("spec") or {}
    return PoolIdentity(
        acceleratable=bool(spec.get("acceleratable", False)),
        accelerator_group=str(spec.get("acceleratorGroup") or ""),
        general_group=str(spec.get("generalGroup") or GENERIC),
        os=str(spec.get("os") or ""),
        arch=str(spec.get("arch") or ""),
    )


def schedule_labels(pool: PoolIdentity, *, aware: bool) -> dict[str, str]:
    """The queue's schedule labels (reference Appendix A.4)."""
    labels = {
        keys.ACCELERATABLE: "true" if pool.acceleratable else "false",
        keys.OS: pool.os,
        keys.ARCH: pool.arch,
    }
    if pool.acceleratable and pool.accelerator_group:
        labels[keys.accelerator_key(pool.accelerator_group)] = "true"
    if aware and pool.general_group not in ("", GENERIC):
        labels[keys.general_key(pool.general_group)] = "true"
    return labels


def flavor_selector(labels: Mapping[str, str]) -> dict[str, str]:
    """The part of a queue's labels a flavor must carry: os/arch, the acceleratable discriminator and any
    feature key set to ``true``."""
    keep = {keys.OS, keys.ARCH, keys.ACCELERATABLE}
    return {
        k: v
        for k, v in labels.items()
        if k in keep
        or (v == "true" and (k.startswith(keys.GENERAL_PREFIX) or k.startswith(keys.ACCELERATABLE_PREFIX)))
    }


def flavors_of(selector: Mapping[str, str], flavors: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Operator flavors whose labels contain ``selector``, by name."""
    chosen = []
    for flavor in flavors:
        labels: Mapping[str, str] = (flavor.get("metadata") or {}).get("labels") or {}
        if labels.get(keys.RESOURCE_TYPE) != keys.TYPE_NODES:
            continue
        if all(labels.get(k) == v for k, v in selector.items()):
            chosen.append(flavor)
    return sorted(chosen, key=lambda f: str((f.get("metadata") or {}).get("name", "")))


def _display_name(plan: FlavorPlan, pool: PoolIdentity) -> str:
    if plan.device is not None:
        name = plan.device.product or plan.device.a_key
    elif pool.general_group == GENERIC:
        name = CPU_ONLY_DISPLAY
    else:
        name = plan.cpu.product or plan.cpu.g_key
    return name[:DISPLAY_NAME_MAX]


def derived_instance_type(plan: FlavorPlan, *, aware: bool) -> dict[str, Any]:
    """The InstanceType authored (create-only) for the pool ``plan`` feeds (reference Appendix A.3)."""
    pool = pool_of(plan, aware=aware)
    device = plan.device
    unit = presets.unit_spec(
        acceleratable=device is not None,
        manufacturer=device.manufacturer if device is not None else "",
        product=device.product if device is not None else "",
    )
    spec: dict[str, Any] = {
        "displayName": _display_name(plan, pool),
        "acceleratable": pool.acceleratable,
        "generalGroup": pool.general_group,
        "os": pool.os,
        "arch": pool.arch,
        "unitResources": {"cpu": unit.cpu, "ram": unit.ram},
        "localStorage": unit.local_storage,
    }
    if pool.accelerator_group:
        spec["acceleratorGroup"] = pool.accelerator_group
    labels = {
        **schedule_labels(pool, aware=aware),
        keys.DERIVED_FROM_NODE: "true",
        keys.QUEUE_ENTRANCE: keys.local_queue_name(pool.name),
    }
    return {
        "apiVersion": kinds.INSTANCE_TYPE.api_version,
        "kind": kinds.INSTANCE_TYPE.kind,
        "metadata": {"name": pool.name, "labels": labels},
        "spec": spec,
    }
