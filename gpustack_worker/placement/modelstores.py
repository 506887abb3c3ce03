"""Preferred node-affinity terms toward the nodes that hold a model's weights (pure).

When the controller creates a Pod whose hub weights the node delivers, it adds one *preferred*
node-affinity term per digest, naming by ``kubernetes.io/hostname`` the nodes that hold the digest. A node
counts while all three hold:

- its ``NodeModelStore`` (named after the node) lists the digest with ``state: Ready``;
- the store's ``Ready`` condition is ``True``;
- its ``CSINode`` lists the driver ``model.csi.gpustack.ai`` now (a store the plugin left behind keeps a
  stale ``Ready``, so the CSINode is the liveness signal).

A term names at most :data:`MAX_NODES_PER_TERM` nodes: those mounting the digest now (``referenced``),
then the most recently used (``lastUsedTime``, newest first), then by name. No term for a digest no node
holds; none at all for a Pod carrying ``kueue.x-k8s.io/podset-preferred-topology`` (with
TASBalancedPlacement such a PodSet loses its affinity score), for Engine delivery, or for claim artifacts.

The terms are computed when a replica's Pods are created and never re-rendered (they are not part of the
render hash), so a download finishing later changes no existing Pod.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

__all__ = (
    "ENGINE",
    "MAX_NODES_PER_TERM",
    "NODE",
    "TERM_WEIGHT",
    "csi_ready_nodes",
    "delivered_digests",
    "holders",
    "store_terms",
)

#: Nodes named per term (GPUStack's bound: enough to spread a replica, small enough for the PodSet).
MAX_NODES_PER_TERM: Final = 16
#: Weight of each term (the largest a preferred term may have): the preference ranks first among the
#: nodes with room, whatever weights the template's own preferred terms carry.
TERM_WEIGHT: Final = 100
NODE: Final = "Node"
ENGINE: Final = "Engine"
_READY: Final = "Ready"
_HUB: Final = "Hub"


def delivered_digests(model: Mapping[str, Any] | None, default_mode: str) -> tuple[str, ...]:
    """The digests of a deployment whose weights the node delivers: the hub artifacts of ``spec.model``
    when its ``delivery`` (or, unset, the ``model-artifact-delivery-mode`` setting) is ``Node``; in
    declaration order, without repeats. Claim artifacts and Engine delivery give none."""
    if not model:
        return ()
    mode = model.get("delivery") or default_mode
    if mode != NODE:
        return ()
    out: list[str] = []
    for artifact in model.get("artifacts") or ():
        digest = str(artifact.get("digest") or "")
        if digest and (artifact.get("source") or _HUB) == _HUB and digest not in out:
            out.append(digest)
    return tuple(out)


def csi_ready_nodes(csinodes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Names of the nodes whose CSINode lists the model-store driver."""
    ready: set[str] = set()
    for csinode in csinodes:
        drivers = (csinode.get("spec") or {}).get("drivers") or ()
        if any(d.get("name") == keys.MODEL_CSI_DRIVER for d in drivers):
            name = (csinode.get("metadata") or {}).get("name")
            if name:
                ready.add(str(name))
    return frozenset(ready)


def _store_ready(store: Mapping[str, Any]) -> bool:
    for cond in (store.get("status") or {}).get("conditions") or ():
        if cond.get("type") == _READY:
            return bool(cond.get("status") == "True")
    return False


def _timestamp(value: Any) -> float:
    """``lastUsedTime`` as seconds (unparseable or missing: oldest)."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return float("-inf")
    return float("-inf")


def holders(
    digest: str,
    stores: Iterable[Mapping[str, Any]],
    csi_nodes: frozenset[str],
    *,
    limit: int = MAX_NODES_PER_TERM,
) -> list[str]:
    """Node names holding ``digest`` Ready on a live store, in preference order, at most ``limit``."""
    ranked: list[tuple[bool, float, str]] = []
    for store in stores:
        node = str((store.get("metadata") or {}).get("name") or "")
        if not node or node not in csi_nodes or not _store_ready(store):
            continue
        for model in (store.get("status") or {}).get("models") or ():
            if model.get("digest") == digest and model.get("state") == _READY:
                ranked.append((not model.get("referenced"), -_timestamp(model.get("lastUsedTime")), node))
                break
    ranked.sort()
    return [node for _, _, node in ranked[:limit]]


def store_terms(
    digests: Sequence[str],
    stores: Iterable[Mapping[str, Any]],
    csinodes: Iterable[Mapping[str, Any]],
    *,
    pod_annotations: Mapping[str, str] | None = None,
    hostnames: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One preferred node-affinity term per digest somebody holds (see the module docstring).

    ``hostnames`` maps a node name to its ``kubernetes.io/hostname`` label value (the node name when a
    node is not in it, which is the usual value)."""
    if not digests or keys.PODSET_PREFERRED_TOPOLOGY in (pod_annotations or {}):
        return []
    live = csi_ready_nodes(csinodes)
    store_list = list(stores)
    names = hostnames or {}
    terms: list[dict[str, Any]] = []
    for digest in digests:
        nodes = holders(digest, store_list, live)
        if not nodes:
            continue
        values = [names.get(node, node) for node in nodes]
        terms.append(
            {
                "weight": TERM_WEIGHT,
                "preference": {
                    "matchExpressions": [{"key": keys.HOSTNAME, "operator": "In", "values": values}]
                },
            }
        )
    return terms
