"""Pools: the aggregation layer (ClusterQueue / InstanceType / InstanceTypeFlavor) over the flavors.

Flavors are setting-independent (so regrouping never rewrites a flavor); pools are grouped by
``instance-type-aware-cpu-manufacturer`` (docs/chain.md, "Naming"):

- aware=false: ``gpustack--generic-<os>-<arch>`` (all CPUs collapse) and ``gpustack--<aKey>-<os>-<arch>``;
- aware=true: ``gpustack--<gKey>-<os>-<arch>`` and ``gpustack--<gKey>--<aKey>-<os>-<arch>``, whatever the
  gKey — ``generic`` (a CPU of unknown manufacturer) included.

The setting, never the gKey's value, decides a pool's name and selector: under awareness ``generic`` is
a CPU key like any other (selector ``general.…/generic=true``), not the collapsed sentinel.

**The name is the identity** (one rule for every InstanceType, authored or derived): a type serves a pool
only when its name is the name the current grouping gives its spec identity
(:meth:`PoolIdentity.name_under`; an InstanceType's name is its ClusterQueue's name). Any other type
— one of the other grouping, derived or authored, a custom name, or an identity that names no pool
(acceleratable without an ``acceleratorGroup``) — is :meth:`PoolIdentity.out_of_scope`: it stays (types
are create-only and never garbage-collected) but its queue gets ``schedule.gpustack.ai/other-grouping=true``,
which no flavor carries, so it selects no flavor, has no member Node and drains like any queue whose
flavors went away; :func:`scope_reason` says why on the InstanceType's status. Since a name is one object
and the selector of an in-scope type matches exactly the flavors whose pool carries its name, no flavor's
capacity is promised to two queues, whatever set of InstanceTypes exists.

A pool's *schedule labels* come from the InstanceType spec identity; the queue's flavors are the operator
flavors whose labels contain the selector built from them, so an admin-authored InstanceType of the
setting-correct name is served exactly like a derived one.
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
    "in_scope",
    "pool_of",
    "schedule_labels",
    "scope_reason",
)

#: The CPU key of a collapsed (awareness off) pool.
GENERIC: Final = keys.GENERIC_POOL
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
    #: The grouping this identity is named under (:meth:`name`); the setting at the time it is asked.
    aware: bool = False
    #: The InstanceType's own name and whether the chain derived it (``identity_of``); empty for a
    #: flavor's pool (``pool_of``).
    declared_name: str = ""
    derived: bool = False

    def name_under(self, *, aware: bool) -> str:
        """The InstanceType / ClusterQueue name the grouping ``aware`` gives this identity."""
        a_key = self.accelerator_group if self.acceleratable else ""
        return keys.pool_name(self.os, self.arch, a_key, self.general_group or GENERIC, aware=aware)

    @property
    def name(self) -> str:
        """The InstanceType / ClusterQueue name of this identity under its grouping."""
        return self.name_under(aware=self.aware)

    def out_of_scope(self, *, aware: bool) -> bool:
        """The grouping ``aware`` gives this InstanceType no pool: its name is not the name ``aware`` gives
        its spec identity (a type of the other grouping, derived or authored, or a custom name), or its
        identity names no pool (acceleratable without an ``acceleratorGroup``). Whoever authored it. A
        flavor's pool (:func:`pool_of`, no declared name) is always in scope."""
        named = self.declared_name
        if not named:
            return False
        if self.acceleratable and not self.accelerator_group:
            return True
        return named != self.name_under(aware=aware)


def pool_of(plan: FlavorPlan, *, aware: bool) -> PoolIdentity:
    """The pool a flavor feeds under the current grouping setting."""
    return PoolIdentity(
        acceleratable=plan.accelerated,
        accelerator_group=plan.device.a_key if plan.device is not None else "",
        general_group=plan.cpu.g_key if aware else GENERIC,
        os=plan.os,
        arch=plan.arch,
        aware=aware,
    )


def identity_of(instance_type: Mapping[str, Any]) -> PoolIdentity:
    """The identity an InstanceType object declares (the webhook's ``generalGroup`` default applied)."""
    spec = instance_type.get("spec") or {}
    meta = instance_type.get("metadata") or {}
    return PoolIdentity(
        acceleratable=bool(spec.get("acceleratable", False)),
        accelerator_group=str(spec.get("acceleratorGroup") or ""),
        general_group=str(spec.get("generalGroup") or GENERIC),
        os=str(spec.get("os") or ""),
        arch=str(spec.get("arch") or ""),
        declared_name=str(meta.get("name") or ""),
        derived=((meta.get("labels") or {}).get(keys.DERIVED_FROM_NODE) == "true"),
    )


def schedule_labels(pool: PoolIdentity, *, aware: bool) -> dict[str, str]:
    """The queue's schedule labels: acceleratable, os and arch, the ``<aKey>`` key of an accelerated pool,
    and a CPU part the grouping decides.

    Aware: ``general.feature.gpustack.ai/<generalGroup>=true`` whatever the gKey (``generic`` too);
    collapsed: no CPU part. A type out of scope under ``aware`` (:meth:`PoolIdentity.out_of_scope`, derived
    or authored) also gets ``schedule.gpustack.ai/other-grouping=true``, which no flavor carries, so it
    selects none."""
    labels = {
        keys.ACCELERATABLE: "true" if pool.acceleratable else "false",
        keys.OS: pool.os,
        keys.ARCH: pool.arch,
    }
    if pool.acceleratable and pool.accelerator_group:
        labels[keys.accelerator_key(pool.accelerator_group)] = "true"
    if aware and pool.general_group:
        labels[keys.general_key(pool.general_group)] = "true"
    if pool.out_of_scope(aware=aware):
        labels[keys.OTHER_GROUPING] = "true"
    return labels


def scope_reason(pool: PoolIdentity) -> str:
    """Why the InstanceType ``pool`` (:func:`identity_of`) serves no pool when its queue is marked out of
    scope: the name each grouping gives its identity, so an operator sees which name would serve it."""
    name = pool.declared_name
    if pool.acceleratable and not pool.accelerator_group:
        return f"{name} is acceleratable without an acceleratorGroup: it names no pool and selects no flavor"
    collapsed, aware = pool.name_under(aware=False), pool.name_under(aware=True)
    served = (
        "it selects no flavor and has no member Node (an InstanceType serves a pool only under the name "
        "the grouping gives its spec identity)"
    )
    if name == aware:
        return (
            f"{name} is the name instance-type-aware-cpu-manufacturer=true gives this identity; under false "
            f"its pool is {collapsed}: {served}"
        )
    if name == collapsed:
        return (
            f"{name} is the name instance-type-aware-cpu-manufacturer=false gives this identity; under true "
            f"its pool is {aware}: {served}"
        )
    return (
        f"{name} is not a pool name: instance-type-aware-cpu-manufacturer=false calls this identity's pool "
        f"{collapsed} and true calls it {aware}; {served}"
    )


def in_scope(selector: Mapping[str, str], g_key: str) -> bool:
    """Whether a Node with CPU key ``g_key`` belongs to the pool whose flavor selector is ``selector``:
    the same CPU rule the selector applies to flavors (none for a type out of scope)."""
    if selector.get(keys.OTHER_GROUPING) == "true":
        return False
    wanted = keys.general_key(g_key)
    return all(k == wanted for k, v in selector.items() if v == "true" and k.startswith(keys.GENERAL_PREFIX))


def flavor_selector(labels: Mapping[str, str]) -> dict[str, str]:
    """The part of a queue's labels a flavor must carry: os/arch, the acceleratable discriminator, any
    feature key set to ``true`` and the out-of-scope mark (which no flavor carries)."""
    keep = {keys.OS, keys.ARCH, keys.ACCELERATABLE, keys.OTHER_GROUPING}
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
    elif not pool.aware:
        name = CPU_ONLY_DISPLAY
    else:
        name = plan.cpu.product or plan.cpu.g_key
    return name[:DISPLAY_NAME_MAX]


def derived_instance_type(plan: FlavorPlan, *, aware: bool) -> dict[str, Any]:
    """The InstanceType authored (create-only) for the pool ``plan`` feeds: the pool's name and identity,
    the unit preset, ``100Gi`` local storage and the ``derived-from-node`` provenance label."""
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
