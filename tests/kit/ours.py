"""What of ours is left in a cluster: every object with our owner label, a field manager of ours or a
finalizer of ours (``gpustack-worker cleanup``'s and ``helm uninstall``'s tests)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpustack_worker.api import kinds
from gpustack_worker.cli.cleanup import cleaning
from gpustack_worker.runtime.prune import owner_of

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client

__all__ = ("ours_left",)


def _managers(obj: dict[str, Any]) -> set[str]:
    return {str(e.get("manager")) for e in (obj.get("metadata") or {}).get("managedFields") or ()}


async def ours_left(admin: Client) -> list[str]:
    """Every object still carrying our owner label or a field manager of ours (Nodes and Devices too)."""
    left = []
    for kind in (
        kinds.CLUSTER_QUEUE,
        kinds.RESOURCE_FLAVOR,
        kinds.TOPOLOGY,
        kinds.ADMISSION_CHECK,
        kinds.LOCAL_QUEUE,
        kinds.NODE_FEATURE,
        kinds.NODE,
        kinds.DEVICES,
        kinds.INSTANCE_TYPE,
    ):
        items, _ = await admin.list(kind)
        for obj in items:
            meta = obj.get("metadata") or {}
            ours = _managers(obj) & set(cleaning.OUR_MANAGERS)
            if owner_of(obj) in cleaning.OUR_OWNERS or ours:
                left.append(f"{kind.kind} {meta.get('namespace') or ''}/{meta.get('name')}: {sorted(ours)}")
            if set(meta.get("finalizers") or ()) & set(cleaning.OUR_FINALIZERS.values()):
                left.append(f"{kind.kind} {meta.get('name')}: finalizer {meta.get('finalizers')}")
    return left
