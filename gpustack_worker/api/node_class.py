"""What class of Node a Node is, read from its labels alone: managed or not, accelerated or not.

Stage 3 (the node agent), stage 4 (the chain's flavors and queues) and ``plan`` all ask these two
questions about a Node. Each has exactly one answer, computed here from the Node's labels (and, for who
wrote ``gpustack.ai/managed``, nfd-master's annotation), because the chain sees nothing else: a flavor's
``spec.nodeLabels`` select Nodes by their labels, so a Node the chain counts in a flavor's capacity must
be one those labels select, and the label the agent publishes to make that so (``cpu-only``) must be
decided by the same predicate over the same inputs.

**Managed** (only a managed Node feeds a flavor; ``node-management-manual`` decides whether the agent
stamps it; docs/agent.md, "Managed"): the value of
``gpustack.ai/managed`` on the Node is the one meaning, whoever wrote it — the admin, or nfd-master
projecting the worker NodeFeature's stamp (or an admin's own NodeFeature / NodeFeatureRule):

- exactly ``true``: managed — the flavors' ``managed: "true"`` selector selects it;
- exactly ``false``: not managed;
- anything else (``yes``, ``True``, ``TRUE``, ``1``, ``""``): not valid, hence not managed — the
  flavors' selector does not select it, so no stage may count it. The agent says so with a Warning
  Event;
- absent: not managed yet. Unless ``node-management-manual`` is on, the agent stamps ``true`` in its
  NodeFeature (:func:`stamps_managed`) and already publishes the node's counting keys and fit labels
  (:func:`agent_counts_managed`), so a fresh node is complete the moment nfd-master projects the stamp.

**Accelerated, and cpu-only** (the setting ``instance-type-mixed-on-node``; docs/agent.md, "Accelerated,
and ``cpu-only``"): with mixing off, ``feature.gpustack.ai/cpu-only=true`` is decided once,
by the agent (:func:`cpu_only`), and the chain counts a Node in a CPU flavor exactly when the Node
carries it (:func:`in_cpu_flavors`). That label is what the CPU flavor's selector pins, so a flavor
counts exactly the Nodes it selects — at every instant, whatever the Device Manager's labels say
meanwhile — and a Node between two readings can never get a CPU pool refused. The agent publishes it
only on a Node with no detected accelerator (GPUStack's own wording of the rule): no Device Manager
label says one was detected (:func:`accelerated`: ``feature.gpustack.ai/acceleratable=true`` or any
``acceleratable.feature.gpustack.ai/<mfr>`` / ``…/<aKey>`` set to ``true``) and its ``Devices`` lists no
card. A Node whose Device Manager labels are lost while its ``Devices`` keeps its cards, or that has
``acceleratable=true`` but no model a device flavor can be built from, therefore contributes to no
flavor while that lasts — a CPU workload never lands on a GPU Node that mixing off keeps for
accelerators — instead of being counted in a CPU flavor that cannot select it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from gpustack_worker.api import keys, manufacturers

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpustack_worker.api.devices_view import DevicesFacts

__all__ = (
    "DEVICE_DESCRIPTOR_SUFFIXES",
    "MANAGED_VALUES",
    "DeviceLabels",
    "ManagedLabel",
    "accelerated",
    "agent_counts_managed",
    "cpu_only",
    "device_labels",
    "in_cpu_flavors",
    "is_managed",
    "label_count",
    "managed_label",
    "nfd_projected",
    "stamps_managed",
)

#: The only values of ``gpustack.ai/managed`` that mean anything.
MANAGED_VALUES: Final = ("true", "false")
#: Label suffixes the Device Manager publishes next to ``acceleratable.feature.gpustack.ai/<aKey>`` (and
#: next to the bare manufacturer key): descriptors, not accelerators.
DEVICE_DESCRIPTOR_SUFFIXES: Final = (
    ".product",
    ".memory",
    ".cores",
    ".count",
    ".family",
    ".comcap",
    ".driver-version",
    ".runtime-version",
)
#: nfd-master strips this default namespace from the names it lists in the feature-labels annotation.
NFD_DEFAULT_NS: Final = "feature.node.kubernetes.io/"


# --- managed ----------------------------------------------------------------------------------------
def nfd_projected(annotations: Mapping[str, str]) -> frozenset[str]:
    """The label keys nfd-master projected onto the Node (its ``feature-labels`` annotation)."""
    raw = annotations.get(keys.NFD_FEATURE_LABELS_ANNOTATION, "")
    names = (n.strip() for n in raw.split(","))
    return frozenset(n if "/" in n else NFD_DEFAULT_NS + n for n in names if n)


@dataclass(frozen=True, slots=True)
class ManagedLabel:
    """``gpustack.ai/managed`` as found on a Node."""

    #: The value on the Node (None: absent).
    value: str | None
    #: nfd-master lists the key as one it projected (from some NodeFeature); an admin may have edited the
    #: value on the Node since, and nfd-master sets it back at its next update of the Node.
    projected: bool = False

    @property
    def valid(self) -> bool:
        """Absent, or exactly ``true`` or ``false``."""
        return self.value is None or self.value in MANAGED_VALUES

    @property
    def managed(self) -> bool:
        """The Node is managed now: exactly ``true`` (what every flavor's selector pins)."""
        return self.value == "true"


def managed_label(labels: Mapping[str, str], annotations: Mapping[str, str]) -> ManagedLabel:
    """Read ``gpustack.ai/managed`` and who wrote it."""
    return ManagedLabel(labels.get(keys.MANAGED), keys.MANAGED in nfd_projected(annotations))


def is_managed(labels: Mapping[str, str]) -> bool:
    """Whether the chain (and ``plan``) count the Node: ``gpustack.ai/managed`` is exactly ``true``."""
    return ManagedLabel(labels.get(keys.MANAGED)).managed


def stamps_managed(label: ManagedLabel, *, manual: bool) -> bool:
    """Whether the worker NodeFeature carries ``gpustack.ai/managed=true``.

    Not under ``node-management-manual``. Otherwise when the key is absent, or when nfd-master owns it
    (it projected it): were the agent to stop stamping then, nfd-master would remove the key it owns —
    whatever value an admin wrote over it — and the next reconcile would stamp it again. A value an admin
    wrote on a Node nfd-master never projected it to is the admin's, and is left alone.
    """
    return not manual and (label.value is None or label.projected)


def agent_counts_managed(label: ManagedLabel, *, manual: bool) -> bool:
    """Whether the agent publishes the node's counting keys and fit labels: the node is managed, or the
    key is absent and the agent is stamping it (the chain counts the node as soon as it is projected)."""
    return label.managed or (label.value is None and stamps_managed(label, manual=manual))


# --- accelerated ------------------------------------------------------------------------------------
def label_count(value: str | None) -> int:
    """A ``.count`` label value as the flavors pin it: a canonical decimal (``str(n)``), else 0 — a
    ``04`` or ``+4`` would be counted as 4 by ``int()`` but never selected by a ``"4"`` selector."""
    if not value or not value.isascii() or not value.isdigit() or (value != "0" and value.startswith("0")):
        return 0
    return int(value)


@dataclass(frozen=True, slots=True)
class DeviceLabels:
    """One accelerator model a device flavor is built from: ``acceleratable.…/<aKey>=true`` with a
    known manufacturer and a positive canonical ``.count``."""

    #: ``acceleratable.feature.gpustack.ai/<aKey>``.
    key: str
    a_key: str
    manufacturer: str
    cards: int


def _descriptor(key: str) -> bool:
    return key.endswith(DEVICE_DESCRIPTOR_SUFFIXES)


def device_labels(labels: Mapping[str, str]) -> tuple[DeviceLabels, ...]:
    """The accelerator models on a Node, sorted by ``aKey``."""
    found: list[DeviceLabels] = []
    for key, value in labels.items():
        if value != "true" or not key.startswith(keys.ACCELERATABLE_PREFIX) or _descriptor(key):
            continue
        a_key = key[len(keys.ACCELERATABLE_PREFIX) :]
        mfr, sep, ident = a_key.partition("-")
        if not sep or not ident or manufacturers.get(mfr) is None:
            continue  # the bare manufacturer key, or an unknown manufacturer
        cards = label_count(labels.get(keys.count_key(key)))
        if cards > 0:
            found.append(DeviceLabels(key, a_key, mfr, cards))
    return tuple(sorted(found, key=lambda d: d.a_key))


def accelerated(labels: Mapping[str, str]) -> bool:
    """The Device Manager detected an accelerator on the Node (any of its ``true`` labels)."""
    if labels.get(keys.ACCELERATABLE) == "true":
        return True
    return any(
        value == "true" and key.startswith(keys.ACCELERATABLE_PREFIX) and not _descriptor(key)
        for key, value in labels.items()
    )


def cpu_only(labels: Mapping[str, str], devices: DevicesFacts | None, *, mixed_on_node: bool) -> bool:
    """Whether the agent publishes ``feature.gpustack.ai/cpu-only=true``: mixing is off and no
    accelerator was detected — by the Device Manager's labels or by a card in the node's ``Devices``."""
    if mixed_on_node or accelerated(labels):
        return False
    return devices is None or not devices.has_accelerators()


def in_cpu_flavors(labels: Mapping[str, str], *, mixed_on_node: bool) -> bool:
    """Whether the chain counts the Node in a CPU flavor (the mixing rule): always with mixing on; with
    mixing off, exactly when it carries the ``cpu-only=true`` the CPU flavors' selector pins, which the
    agent decides with :func:`cpu_only` — one decision, read by the chain's count and by Kueue's
    selector alike."""
    return mixed_on_node or labels.get(keys.CPU_ONLY) == "true"
