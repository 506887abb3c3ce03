"""An InstanceType's ``status`` as the InstanceType controller writes it (pure).

One function composes it, called by the controller's thin step (``Steps.instance_type``) and by both
plans (``plan SCENARIO``, ``plan --from-cluster``), so a plan shows exactly the status the controller
would write from the same inputs:

- ``entrance``: the pool's LocalQueue name; ``phase`` / ``phaseMessage``: the InstanceType decision's
  (:func:`gpustack_worker.chain.instancetypes.decide_type`, from the backing queue as cached);
- the capacity views (:func:`gpustack_worker.chain.views.pool_status`) over the pool's flavors **as the
  flavor cache holds them**: the flavors whose labels carry the pool's selector, less every finalizing one
  (a ``deletionTimestamp``: Kueue is letting it go, its nodes no longer count), and the Nodes those
  flavors select; CPU in use is what Kueue reports on the queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpustack_worker.api import keys
from gpustack_worker.chain import flavors as chain_flavors
from gpustack_worker.chain import pools
from gpustack_worker.chain.views import cpu_used, pool_status

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from gpustack_worker.api.devices_view import DevicesFacts
    from gpustack_worker.chain.nodes import NodeHardware

__all__ = ("capacity_status", "instance_type_status", "pool_flavors")


def _finalizing(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def pool_flavors(
    instance_type: Mapping[str, Any], flavors: Iterable[Mapping[str, Any]], *, aware: bool
) -> list[Mapping[str, Any]]:
    """The flavors among ``flavors`` (the flavor cache, finalizing ones included) that feed the
    InstanceType's pool, by name, without the finalizing ones."""
    pool = pools.identity_of(instance_type)
    selector = pools.flavor_selector(pools.schedule_labels(pool, aware=aware))
    return [f for f in pools.flavors_of(selector, flavors) if not _finalizing(f)]


def capacity_status(
    instance_type: Mapping[str, Any],
    queue: Mapping[str, Any] | None,
    flavors: Iterable[Mapping[str, Any]],
    nodes: Sequence[NodeHardware],
    facts: Callable[[str], DevicesFacts | None],
    *,
    aware: bool,
) -> dict[str, Any]:
    """The capacity part of the status: the four-view (accelerated pool) or the CPU view, and the
    descriptors of the pool's first flavor.

    ``flavors``: the flavor cache; ``nodes``: the chain's view of the Nodes (any set holding every Node
    the pool's flavors select); ``facts``: a Node's parsed ``Devices`` by name (None without one);
    ``queue``: the cached ClusterQueue (its ``flavorsUsage`` is the CPU in use)."""
    pool = pools.identity_of(instance_type)
    chosen = pool_flavors(instance_type, flavors, aware=aware)
    members: set[str] = set()
    for flavor in chosen:
        members.update(chain_flavors.flavor_nodes(flavor, nodes))
    ledgers: list[DevicesFacts] = []
    if pool.acceleratable:
        ledgers = [f for n in sorted(members) if (f := facts(n)) is not None]
    cores = {n.name: n.cpu.cores for n in nodes if n.name in members}
    group = pool.accelerator_group if pool.acceleratable else None
    return pool_status(group, chosen, ledgers, cores, cpu_used(queue))


def instance_type_status(
    instance_type: Mapping[str, Any],
    queue: Mapping[str, Any] | None,
    flavors: Iterable[Mapping[str, Any]],
    nodes: Sequence[NodeHardware],
    facts: Callable[[str], DevicesFacts | None],
    *,
    aware: bool,
    phase: str,
    phase_message: str,
) -> dict[str, Any]:
    """The whole ``status`` the InstanceType controller applies: entrance, phase (and its message when
    there is one) and :func:`capacity_status`."""
    name = str((instance_type.get("metadata") or {}).get("name", ""))
    return {
        "entrance": keys.local_queue_name(name),
        "phase": phase,
        **({"phaseMessage": phase_message} if phase_message else {}),
        **capacity_status(instance_type, queue, flavors, nodes, facts, aware=aware),
    }
