"""RDMA feature labels from the node's network inventory (``Devices.spec.interfaces[]``).

``feature.gpustack.ai/rdma.capable=true`` is the key a workload's own nodeSelector uses; withholding
it is how a node with no usable link stops being selected. The two informational keys summarise the
usable links. GPUStack's documentation names the keys but not the link-state and informational rules;
the project's reading (documented in ``docs/agent.md``) is:

- a link is *usable* when it is RDMA-capable and its state is ``Active``;
- ``rdma.numa`` = the sorted, de-duplicated NUMA ids of usable links joined with ``_``, when any known;
- ``rdma.distance`` = the closest class among usable links (``PIX < PXB < PHB < NODE < SYS``), when
  any known.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpustack_worker.agent.labels import is_label_value
from gpustack_worker.api import keys

if TYPE_CHECKING:
    from collections.abc import Iterable

    from gpustack_worker.agent.facts import Interface

__all__ = ("DISTANCE_ORDER", "desired_labels", "join_numa", "usable")

#: PCIe/NUMA distance classes from closest to farthest (``nvidia-smi topo`` vocabulary).
DISTANCE_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")


def usable(link: Interface) -> bool:
    """An RDMA link a workload can use now."""
    return link.rdma and link.state == "Active"


def _numa_order(value: str) -> tuple[int, int, str]:
    # ASCII digits only, and short: int() of a 5,000-digit string raises.
    numeric = value.isascii() and value.isdigit() and len(value) <= 18
    return (0, int(value), "") if numeric else (1, 0, value)


def join_numa(numa: Iterable[str]) -> str:
    """The ``rdma.numa`` value: distinct NUMA ids sorted (numerically when numeric), joined with ``_``."""
    return "_".join(sorted(set(numa), key=_numa_order))


def desired_labels(interfaces: Iterable[Interface]) -> dict[str, str]:
    """The RDMA labels for a node with these links (empty when no link is usable). A NUMA value that
    cannot be a label value is left out (``agent/validate.py`` reports it and holds the key)."""
    links = [i for i in interfaces if usable(i)]
    if not links:
        return {}
    labels = {keys.RDMA_CAPABLE: "true"}
    joined = join_numa(i.numa for i in links if i.numa and is_label_value(i.numa))
    if joined and is_label_value(joined):
        labels[keys.RDMA_NUMA] = joined
    distances = [d for d in (i.distance.upper() for i in links) if d in DISTANCE_ORDER]
    if distances:
        labels[keys.RDMA_DISTANCE] = min(distances, key=DISTANCE_ORDER.index)
    return labels
