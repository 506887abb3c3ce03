"""The worker NodeFeature ``<node>-gpustack-worker``: managed stamp, CPU keys, cpu-only, RDMA.

The agent never writes these labels on the Node itself. It publishes an NFD ``NodeFeature`` and
nfd-master merges it with the Device Manager's and projects the union onto the Node; nfd-master also
removes a key once no NodeFeature carries it, so dropping a key from ``spec.labels`` is the removal.

Keys, as GPUStack's worker publishes them (built by :mod:`gpustack_worker.api.identity` with GPUStack's name
normaliser, so they are byte-identical to other components'):

- ``gpustack.ai/managed=true`` — see :mod:`gpustack_worker.agent.managed`;
- ``general.feature.gpustack.ai/<cpuMfr>``, ``…/<gKey>`` and ``…/<gKey>.count`` (CPU capacity cores
  rounded up, only when known);
- ``feature.gpustack.ai/cpu-only=true`` — only when ``instance-type-mixed-on-node=false`` and the node
  has no detected accelerator (neither a Device Manager label nor a card in ``Devices`` says so):
  :func:`gpustack_worker.api.node_class.cpu_only`. The chain counts a node in a CPU flavor exactly when
  it carries this label (``node_class.in_cpu_flavors``), the label the CPU flavor's selector pins;
- the RDMA labels of :mod:`gpustack_worker.agent.rdma`.

A key that is not a valid qualified label name (a 63-character gKey plus ``.count``) is skipped, since
one bad key would make nfd-master reject the whole object (``agent/validate.py`` reports it). A label a
bad input feeds (``holds``: a CPU capacity of ``1e1000000``, a NUMA id with spaces) keeps the value the
NodeFeature carries now (``published``) or is left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpustack_worker.agent import rdma
from gpustack_worker.agent.labels import is_label_value, is_qualified_name
from gpustack_worker.agent.managed import stamps_managed
from gpustack_worker.agent.validate import apply_holds, read_count, read_label
from gpustack_worker.api import bounds, identity, keys, kinds, node_class
from gpustack_worker.runtime.quantity import ceil_quantity

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from gpustack_worker.agent.facts import DevicesFacts, NodeFacts

__all__ = ("FIELD_MANAGER", "desired", "desired_labels", "is_published_label")

#: Server-side apply field manager of the worker NodeFeature.
FIELD_MANAGER = "gpustack-worker-nodefeature"


#: The label keys only the worker NodeFeature publishes (besides ``gpustack.ai/managed``, which is also an
#: admin's switch): the CPU keys, ``cpu-only`` and the RDMA labels.
_PUBLISHED_KEYS: frozenset[str] = frozenset(
    {keys.CPU_ONLY, keys.RDMA_CAPABLE, keys.RDMA_DISTANCE, keys.RDMA_NUMA}
)


def is_published_label(key: str) -> bool:
    """A key of the worker NodeFeature's own (nfd-master projects it onto the Node), other than
    ``gpustack.ai/managed``: no reconciler of the agent reads it back from the Node."""
    return key in _PUBLISHED_KEYS or key.startswith(keys.GENERAL_PREFIX)


def _read_published(key: str, raw: str) -> str | None:
    if key.endswith(".count"):
        cores = read_count(raw, bounds.MAX_CPU_CORES) if raw.isascii() and raw.isdigit() else None
        return None if cores is None else str(cores)
    return read_label(raw)


def desired_labels(
    node: NodeFacts,
    devices: DevicesFacts | None,
    *,
    manual: bool,
    mixed_on_node: bool,
    holds: Iterable[str] = (),
    published: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``spec.labels`` of the worker NodeFeature for ``node`` (``devices`` is the checked view; labels
    matching ``holds`` keep their ``published`` value when still valid, else are left out)."""
    labels: dict[str, str] = {}
    if stamps_managed(node, manual=manual):
        labels[keys.MANAGED] = "true"
    cpu_mfr = identity.cpu_manufacturer(node.labels)
    g_key = identity.general_key(node.labels, node.annotations)
    labels[keys.general_key(cpu_mfr)] = "true"
    labels[keys.general_key(g_key)] = "true"
    labels[keys.cpu_key_label(g_key, cpu_mfr)] = "true"  # the ``.bare`` label of a bare-manufacturer gKey
    cores = ceil_quantity(node.capacity.get("cpu"))
    if cores > 0:
        labels[keys.count_key(keys.general_key(g_key))] = str(cores)
    if node_class.cpu_only(node.labels, devices, mixed_on_node=mixed_on_node):
        labels[keys.CPU_ONLY] = "true"
    if devices is not None:
        labels.update(rdma.desired_labels(devices.interfaces))
    valid = {k: v for k, v in labels.items() if is_qualified_name(k) and is_label_value(v)}
    return apply_holds(valid, holds, published, read=_read_published, scope=lambda k: k != keys.MANAGED)


def desired(
    node: NodeFacts,
    devices: DevicesFacts | None,
    *,
    manual: bool,
    mixed_on_node: bool,
    namespace: str = kinds.SYSTEM_NAMESPACE,
    holds: Iterable[str] = (),
    published: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The whole NodeFeature as applied (server-side apply body), owned by the Node for GC."""
    return {
        "apiVersion": kinds.NODE_FEATURE.api_version,
        "kind": kinds.NODE_FEATURE.kind,
        "metadata": {
            "name": keys.worker_nodefeature_name(node.name),
            "namespace": namespace,
            "labels": {keys.NFD_NODE_NAME: node.name, keys.PART_OF: keys.WORKER_PART_OF},
            "ownerReferences": [
                {
                    "apiVersion": kinds.NODE.api_version,
                    "kind": kinds.NODE.kind,
                    "name": node.name,
                    "uid": node.uid,
                }
            ],
        },
        "spec": {
            "labels": desired_labels(
                node, devices, manual=manual, mixed_on_node=mixed_on_node, holds=holds, published=published
            ),
        },
    }
