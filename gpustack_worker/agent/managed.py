"""Whether a Node is managed, and whether the agent stamps ``gpustack.ai/managed=true`` on it.

The meaning of the label is the one every stage uses, :mod:`gpustack_worker.api.node_class`: the value
on the Node counts, whoever wrote it — exactly ``true`` is managed, ``false`` is not, and any other value
is invalid and not managed (``agent/validate.py`` reports it). These are the agent's uses of it (the
whole rule, with who wrote the value and why it matters: docs/agent.md, "Managed"):

- :func:`stamps_managed` — the worker NodeFeature carries ``managed=true`` unless
  ``node-management-manual`` is on, or an admin value nfd-master never projected is on the Node (the
  admin's value wins, so ``managed=false`` set by hand before the first stamp opts a node out). A key
  nfd-master projected stays stamped even when an admin has edited its value: were the agent to stop,
  nfd-master would remove the key it owns and the next reconcile would stamp it again.
- :func:`is_managed` — counting keys and fit labels are published for a managed node, and for a node
  the agent is about to stamp (key absent), rather than waiting for nfd-master's projection round trip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpustack_worker.api import node_class

if TYPE_CHECKING:
    from gpustack_worker.agent.facts import NodeFacts

__all__ = ("is_managed", "managed_label", "stamps_managed")


def managed_label(node: NodeFacts) -> node_class.ManagedLabel:
    """``gpustack.ai/managed`` on the node, and whether nfd-master projected it."""
    return node_class.managed_label(node.labels, node.annotations)


def stamps_managed(node: NodeFacts, *, manual: bool) -> bool:
    """Whether the worker NodeFeature carries ``gpustack.ai/managed=true`` for this node."""
    return node_class.stamps_managed(managed_label(node), manual=manual)


def is_managed(node: NodeFacts, *, manual: bool) -> bool:
    """Whether the node gets counting keys and fit labels: managed now, or about to be stamped."""
    return node_class.agent_counts_managed(managed_label(node), manual=manual)
