"""Whether a Node is managed, and whether the agent stamps ``gpustack.ai/managed=true`` on it.

Two writers can put ``gpustack.ai/managed`` on a Node: an admin directly, and nfd-master projecting
the agent's NodeFeature. nfd-master records every key it projected in the Node annotation
``nfd.node.kubernetes.io/feature-labels``, so a value that is present on the Node but *not* listed
there is the admin's. A listed value stays nfd-master's even if an admin edits it afterwards: were the
agent to stop stamping, nfd-master would remove the key it owns (taking the admin's value with it) and
the next reconcile would stamp it again. To opt a node out, label it before the agent stamps it, or use
``node-management-manual``. The rules (reference §3.2, §4.2, scheduling-chain "Stage 3"):

- ``node-management-manual=false``: stamp ``true`` unless an admin value is already on the Node —
  the admin's value wins, so ``managed=false`` set by hand opts a node out.
- ``node-management-manual=true``: never stamp; only an admin-set ``true`` counts, so a stale value
  nfd-master projected before the switch stops counting as soon as the setting flips.

Capacity and fit labels use :func:`is_managed` (the effective decision) rather than waiting for
nfd-master to project the stamp, so a fresh node gets its keys in one reconcile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpustack_worker.api import keys

if TYPE_CHECKING:
    from gpustack_worker.agent.facts import NodeFacts

__all__ = ("admin_managed_value", "is_managed", "stamps_managed")

#: nfd-master strips this default namespace from the names it lists in the feature-labels annotation.
_NFD_DEFAULT_NS = "feature.node.kubernetes.io/"


def _nfd_projected(node: NodeFacts) -> frozenset[str]:
    raw = node.annotations.get(keys.NFD_FEATURE_LABELS_ANNOTATION, "")
    names = (n.strip() for n in raw.split(","))
    return frozenset(n if "/" in n else _NFD_DEFAULT_NS + n for n in names if n)


def admin_managed_value(node: NodeFacts) -> str | None:
    """The admin-set ``gpustack.ai/managed`` value, or None when absent or projected by nfd-master."""
    value = node.labels.get(keys.MANAGED)
    if value is None or keys.MANAGED in _nfd_projected(node):
        return None
    return value


def stamps_managed(node: NodeFacts, *, manual: bool) -> bool:
    """Whether the worker NodeFeature carries ``gpustack.ai/managed=true`` for this node."""
    return not manual and admin_managed_value(node) is None


def is_managed(node: NodeFacts, *, manual: bool) -> bool:
    """The effective decision: the chain treats this node as managed (now or once NFD projects it)."""
    admin = admin_managed_value(node)
    if admin is not None:
        return admin == "true"
    return not manual
