"""Every value the agent reads, checked before anything is published from it (pure: no I/O, no clock).

:func:`check` runs the ``Devices`` rules of :mod:`gpustack_worker.api.devices_check` (shared with the
chain's controllers) and the agent's own rules on the Node and on ``spec.interfaces``, and returns a
:class:`Checked`: the node, the sanitized ``Devices`` view and every :class:`Finding`. The three
``desired(...)`` functions compute from the sanitized view and take the findings' *holds*: an output a
bad value feeds keeps the value currently published on the Node / NodeFeature (the "last good"; the
informer cache already holds it), or is not published when there is none or when the published value
itself breaks the output's bounds. Everything else converges as usual, and the reconcile ends — a
value that is wrong now is wrong on every retry, so retrying is pointless; the next change of the
object reconciles again.

Agent rules (the ``Devices`` rules are listed in ``api/devices_check.py``):

===============================================  ==============================================
input                                            rule
===============================================  ==============================================
Node label ``gpustack.ai/managed`` (whoever       ``true`` or ``false``; anything else leaves the
wrote it)                                        node unmanaged for every stage (only ``true``
                                                 counts) and is said; ``false`` over a value
                                                 nfd-master projected is said too (nfd-master
                                                 rewrites it at its next update of the Node)
Node ``status.capacity.cpu``                     a quantity, ``0..MAX_CPU_CORES`` cores
Node ``status.capacity[<base>.sliced]`` and      a whole number ``0..MAX_POOL_TOKENS``
``[<base>.partitioned]`` (presence gates)
the CPU keys built from labels/annotations       valid label names
``spec.interfaces[].numaAffinity``               a label-value token (it becomes ``rdma.numa``)
the joined ``rdma.numa`` value                   at most 63 characters
===============================================  ==============================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar

from gpustack_worker.agent import rdma
from gpustack_worker.agent.managed import managed_label
from gpustack_worker.api import bounds, identity, keys, manufacturers, node_class
from gpustack_worker.api.devices_check import (
    REASON_INVALID_NAME,
    REASON_OUT_OF_RANGE,
    Finding,
    check_devices,
    matches,
    render,
)
from gpustack_worker.api.validation import label_value, qualified_name
from gpustack_worker.runtime.quantity import parse

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from gpustack_worker.agent.facts import DevicesFacts, Interface, NodeFacts

__all__ = (
    "REASON_MANAGED_IGNORED",
    "REASON_MANAGED_OVERWRITTEN",
    "Checked",
    "DevicesChecked",
    "Finding",
    "apply_holds",
    "check",
    "check_devices_inputs",
    "check_interfaces",
    "check_node",
    "combine",
    "pool_state",
    "read_count",
    "read_label",
)

#: Event reason of a ``gpustack.ai/managed`` value that is neither ``true`` nor ``false``.
REASON_MANAGED_IGNORED: Final = "ManagedLabelIgnored"
#: Event reason of ``gpustack.ai/managed=false`` written over a value nfd-master projected.
REASON_MANAGED_OVERWRITTEN: Final = "ManagedLabelOverwritten"
#: What an unmanaged node does not get (the note of both managed findings).
MANAGED_WITHHOLDS: Final = (
    "the node's capacity in every flavor",
    "its counting keys",
    "its fit labels",
)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Checked:
    """The agent's inputs after the checks: safe to compute from, plus what was wrong."""

    node: NodeFacts
    #: The sanitized ``Devices`` view (None when the node has none).
    devices: DevicesFacts | None
    findings: tuple[Finding, ...] = ()

    def holds(self) -> tuple[str, ...]:
        """Every held output selector."""
        return tuple(s for f in self.findings for s in f.holds)


def _node_finding(
    path: str,
    value: object,
    rule: str,
    reason: str,
    *,
    holds: tuple[str, ...] = (),
    withholds: tuple[str, ...] = (),
) -> Finding:
    return Finding("Node", path, render(value), rule, reason, holds, withholds)


def pool_state(node: NodeFacts, resource: str) -> str:
    """``absent`` (missing, or ≤ 0), ``present`` (a whole number > 0 in bounds) or ``unknown`` (anything
    else: the presence gate cannot be decided, so the family's keys are held)."""
    raw = node.capacity.get(resource)
    if raw is None:
        return "absent"
    value = parse(raw)
    if value is None or value != value.to_integral_value() or value > bounds.MAX_POOL_TOKENS:
        return "unknown"
    if value < 0:
        return "unknown"
    return "present" if value > 0 else "absent"


def _cpu_path(node: NodeFacts) -> str:
    name = node.annotations.get(keys.CPU_NAME_ANNOTATION, "")
    if name and not name.startswith("@"):
        return f"metadata.annotations[{keys.CPU_NAME_ANNOTATION}]"
    return f"metadata.labels[{keys.NFD_CPU_VENDOR}, {keys.NFD_CPU_FAMILY}, {keys.NFD_CPU_ID}]"


def check_managed(label: node_class.ManagedLabel) -> list[Finding]:
    """``gpustack.ai/managed``: a value the agent, the chain and ``plan`` all read as unmanaged although
    someone probably meant otherwise — whoever wrote it."""
    path = f"metadata.labels[{keys.MANAGED}]"
    projected = (
        f"; nfd-master projected this key (it is listed in {keys.NFD_FEATURE_LABELS_ANNOTATION}) and "
        "rewrites it to what the NodeFeatures say at its next update of the Node"
    )
    if not label.valid:
        return [
            _node_finding(
                path,
                label.value,
                "only the exact value 'true' makes a node managed ('false' opts it out); the agent, the "
                "chain's flavors and plan treat the node as unmanaged"
                + (projected if label.projected else ""),
                REASON_MANAGED_IGNORED,
                withholds=MANAGED_WITHHOLDS,
            )
        ]
    if label.projected and label.value == "false":
        return [
            _node_finding(
                path,
                label.value,
                "the node is unmanaged while this value stays" + projected + "; to keep a node out, "
                "set node-management-manual=true, or label it before the agent first stamps it",
                REASON_MANAGED_OVERWRITTEN,
                withholds=MANAGED_WITHHOLDS,
            )
        ]
    return []


def check_node(node: NodeFacts) -> list[Finding]:
    """The agent's rules on the Node itself."""
    findings = check_managed(managed_label(node))
    g_key = identity.general_key(node.labels, node.annotations)
    count_key = keys.count_key(keys.general_key(g_key))
    for key in (keys.general_key(identity.cpu_manufacturer(node.labels)), keys.general_key(g_key), count_key):
        problems = qualified_name(key)
        if problems:
            findings.append(
                _node_finding(
                    _cpu_path(node),
                    g_key,
                    f"the CPU key becomes the label name {key!r}, which " + "; ".join(problems),
                    REASON_INVALID_NAME,
                    withholds=(key,),
                )
            )
    raw_cpu = node.capacity.get("cpu")
    if raw_cpu is not None:
        cores = parse(raw_cpu)
        if cores is None or not 0 <= cores <= bounds.MAX_CPU_CORES:
            findings.append(
                _node_finding(
                    "status.capacity[cpu]",
                    raw_cpu,
                    f"CPU capacity must be a quantity of 0..{bounds.MAX_CPU_CORES:,} cores",
                    REASON_OUT_OF_RANGE,
                    holds=(count_key,),
                )
            )
    pools = (
        pool
        for mfr in manufacturers.MANUFACTURERS.values()
        for pool in (keys.sliced_resource(mfr.resource), keys.partitioned_resource(mfr.resource))
    )
    findings.extend(
        _node_finding(
            f"status.capacity[{pool}]",
            node.capacity.get(pool),
            f"a device-plugin pool is a whole number of tokens 0..{bounds.MAX_POOL_TOKENS:,}",
            REASON_OUT_OF_RANGE,
            holds=(pool + ".*",),
        )
        for pool in pools
        if pool_state(node, pool) == "unknown"
    )
    return findings


def check_interfaces(interfaces: Iterable[Interface]) -> list[Finding]:
    """The RDMA rules on ``spec.interfaces`` (the NUMA ids become the ``rdma.numa`` label value)."""
    findings: list[Finding] = []
    usable_numa: set[str] = set()
    for link in interfaces:
        if not link.numa:
            continue
        problems = label_value(link.numa)
        if problems:
            findings.append(
                Finding(
                    "Devices",
                    f"spec.interfaces[name={link.name}].numaAffinity",
                    render(link.numa),
                    "a NUMA id becomes part of the label value of "
                    f"{keys.RDMA_NUMA}, so it " + "; ".join(problems),
                    REASON_INVALID_NAME,
                    holds=(keys.RDMA_NUMA,) if rdma.usable(link) else (),
                )
            )
        elif rdma.usable(link):
            usable_numa.add(link.numa)
    joined = rdma.join_numa(usable_numa)
    if len(joined) > bounds.MAX_LABEL_VALUE:
        findings.append(
            Finding(
                "Devices",
                "spec.interfaces[*].numaAffinity",
                render(joined),
                f"the NUMA ids of the usable links joined with '_' become {keys.RDMA_NUMA}, a label value "
                f"of at most {bounds.MAX_LABEL_VALUE} characters",
                REASON_INVALID_NAME,
                holds=(keys.RDMA_NUMA,),
            )
        )
    return findings


@dataclass(frozen=True, slots=True)
class DevicesChecked:
    """One ``Devices`` after its checks: the sanitized view and what was wrong with it."""

    devices: DevicesFacts
    findings: tuple[Finding, ...] = ()


def check_devices_inputs(devices: DevicesFacts) -> DevicesChecked:
    """Every rule over a ``Devices`` alone (the ledger, the interfaces): the costly part of :func:`check`
    (hundreds of microseconds for an eight-card node), which depends on the ``Devices`` only, so a
    caller may keep its result for as long as that object is unchanged."""
    checked = check_devices(devices)
    return DevicesChecked(checked.devices, (*checked.findings, *check_interfaces(devices.interfaces)))


def combine(node: NodeFacts, devices: DevicesChecked | None) -> Checked:
    """The node's own rules, joined with its checked ``Devices``: ``check(node, d)`` is
    ``combine(node, check_devices_inputs(d))``."""
    findings = tuple(check_node(node))
    if devices is None:
        return Checked(node, None, findings)
    return Checked(node, devices.devices, findings + devices.findings)


def check(node: NodeFacts, devices: DevicesFacts | None) -> Checked:
    """Every rule over one node's inputs. Each controller runs all of them (pure), so the set of
    findings for a node is the same whichever output is being reconciled."""
    return combine(node, check_devices_inputs(devices) if devices is not None else None)


# --- holding the last good value --------------------------------------------------------------------
def read_count(raw: str, limit: int = bounds.MAX_EXTENDED_RESOURCE) -> int | None:
    """A published counting value (a quantity) as a whole number in ``0..limit``, else None."""
    value = parse(raw)
    if value is None or value != value.to_integral_value() or not 0 <= value <= limit:
        return None
    return int(value)


def read_label(raw: str) -> str | None:
    """A published label value, when it is still a valid one."""
    return raw if not label_value(raw) else None


def apply_holds(
    out: Mapping[str, V],
    holds: Iterable[str],
    published: Mapping[str, str] | None,
    *,
    read: Callable[[str, str], V | None],
    scope: Callable[[str], bool],
) -> dict[str, V]:
    """``out`` with every held key replaced by its published value (``read`` accepts it), or dropped.

    ``scope`` says which published keys are this output's at all (and still wanted in principle: e.g. a
    counting family whose pool is gone is not held, it is removed).
    """
    selectors = tuple(holds)
    result = dict(out)
    if not selectors:
        return result

    def held(key: str) -> bool:
        return any(matches(s, key) for s in selectors)

    for key in [k for k in result if held(k)]:
        del result[key]
    for key, raw in (published or {}).items():
        if held(key) and scope(key):
            value = read(key, raw)
            if value is not None:
                result[key] = value
    return result
