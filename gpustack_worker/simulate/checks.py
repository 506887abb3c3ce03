"""Cross-field rules of a scenario: everything the pydantic shape cannot say on its own.

Each rule returns ``<path>: <message>`` lines with the node named (``nodes[1] (name=gpu-a)``), so a
hand-written file can be fixed from the message alone. The rules reject what no real stage 1-2
could produce — a card index past ``count``, a sliced allocation on a partitioned card, a profile
that does not fit next to the ones already carved — because the worker's tests would otherwise
exercise states that cannot happen.

A node that passes these rules is then rendered and its objects checked as the API server and
nfd-master would check them (:mod:`~gpustack_worker.simulate.admission`): lengths and characters of
every name, label and annotation the simulator would write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpustack_worker.api import identity, keys, manufacturers, validation
from gpustack_worker.simulate import cards
from gpustack_worker.simulate.admission import check_rendered
from gpustack_worker.simulate.scenario import (
    Accelerator,
    NodeSpec,
    Partitioning,
    Scenario,
    cut,
    node_path,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = ("RESERVED_LABELS", "RESERVED_LABEL_PREFIXES", "check_scenario")

#: Node labels the simulator derives from the scenario's own fields.
RESERVED_LABELS = frozenset({keys.HOSTNAME, keys.OS, keys.ARCH, keys.ACCELERATABLE})
#: Label namespaces owned by NFD and the Device Manager.
RESERVED_LABEL_PREFIXES = ("feature.node.kubernetes.io/", keys.ACCELERATABLE_PREFIX)


def check_scenario(scenario: Scenario) -> list[str]:
    """Every cross-field problem of ``scenario`` (empty when it can be simulated)."""
    problems: list[str] = []
    seen: dict[str, int] = {}
    for i, node in enumerate(scenario.nodes):
        where = node_path(i, node.name)
        if node.name in seen:
            problems.append(f"{where}.name: duplicate of nodes[{seen[node.name]}]")
        seen.setdefault(node.name, i)
        lines = list(_node(node)) or check_rendered(node)
        problems.extend(f"{where}{line}" for line in lines)
    return problems


def _node(node: NodeSpec) -> Iterator[str]:
    for msg in validation.dns1123_subdomain(node.name):
        yield f".name: {cut(node.name)!r} is not a DNS subdomain (a Node name): {msg}"
    for field, value in (("os", node.os), ("arch", node.arch), ("cpu.vendor", node.cpu.vendor)):
        for msg in validation.label_value(value):
            yield f".{field}: {cut(value)!r} is not a valid label value: {msg}"
    for key, value in node.labels.items():
        key_problems = validation.qualified_name(key)
        for msg in key_problems:
            yield f".labels.{cut(key)}: not a valid label key: {msg}"
        if not key_problems and (key in RESERVED_LABELS or key.startswith(RESERVED_LABEL_PREFIXES)):
            yield f".labels.{key}: written by the simulator from the scenario's own fields"
        for msg in validation.label_value(value):
            yield f".labels.{cut(key)}: {cut(value)!r} is not a valid label value: {msg}"
    keys_seen: dict[str, int] = {}
    for k, acc in enumerate(node.accelerators):
        where = f".accelerators[{k}]"
        mfr = manufacturers.get(acc.manufacturer)
        if mfr is None:
            known = ", ".join(sorted(manufacturers.MANUFACTURERS))
            yield f"{where}.manufacturer: unknown manufacturer {acc.manufacturer!r} (known: {known})"
            continue
        if acc.manufacturer != mfr.name:
            yield f"{where}.manufacturer: must be lowercase {mfr.name!r}"
        a_key = identity.accelerator_key(mfr.name, acc.product)
        if a_key == f"{mfr.name}-":
            yield f"{where}.product: {acc.product!r} leaves an empty group id"
        elif a_key in keys_seen:
            yield f"{where}.product: same accelerator key {a_key} as accelerators[{keys_seen[a_key]}]"
        keys_seen.setdefault(a_key, k)
        yield from (f"{where}{line}" for line in _accelerator(acc, mfr))
    names = [nic.name for nic in node.rdma]
    for j, name in enumerate(names):
        if name in names[:j]:
            yield f".rdma[{j}].name: duplicate interface {name!r}"


def _positions(field: str, positions: Iterable[int], count: int) -> Iterator[str]:
    seen: set[int] = set()
    for j, pos in enumerate(positions):
        if pos >= count:
            yield f".{field}[{j}]: card {pos} does not exist (count is {count})"
        elif pos in seen:
            yield f".{field}[{j}]: card {pos} listed twice"
        seen.add(pos)


def _accelerator(acc: Accelerator, mfr: manufacturers.Manufacturer) -> Iterator[str]:
    yield from _positions("unhealthy", acc.unhealthy, acc.count)
    layout = list(_partitioning(acc.partitioning, acc, mfr)) if acc.partitioning is not None else []
    yield from layout
    if not acc.ledgerPublished and acc.allocations:
        yield ".allocations: an unpublished ledger (ledgerPublished: false) has no allocations"
    seen: set[int] = set()
    for j, alloc in enumerate(acc.allocations):
        where = f".allocations[{j}]"
        if alloc.card >= acc.count:
            yield f"{where}.card: card {alloc.card} does not exist (count is {acc.count})"
            continue
        if alloc.card in seen:
            yield f"{where}.card: card {alloc.card} already has an allocation entry"
            continue
        seen.add(alloc.card)
        if layout and alloc.mode == "partitioned":
            continue  # reported once, against the layout
        try:
            cards.allocation_ledger(acc, alloc)
        except cards.AllocationError as exc:
            yield f"{where}.{exc.field}: {exc}"


def _partitioning(p: Partitioning, acc: Accelerator, mfr: manufacturers.Manufacturer) -> Iterator[str]:
    where = ".partitioning"
    if not mfr.partition_kind:
        yield f"{where}: {mfr.name} has no hardware partitioning"
        return
    if p.kind != mfr.partition_kind:
        yield f"{where}.kind: must be {mfr.partition_kind!r} for {mfr.name}"
    if p.cards is not None:
        yield from (f"{where}{line}" for line in _positions("cards", p.cards, acc.count))
    names: list[str] = []
    for j, prof in enumerate(p.profiles):
        at = f"{where}.profiles[{j}]"
        if prof.name in names:
            yield f"{at}.name: duplicate profile {prof.name!r}"
        names.append(prof.name)
        if prof.memoryMiB > acc.memoryMiB:
            yield f"{at}.memoryMiB: must be ≤ the card's memoryMiB ({acc.memoryMiB})"
        if prof.computeSlices > p.computeSlices:
            yield f"{at}.computeSlices: must be ≤ partitioning.computeSlices ({p.computeSlices})"
        if prof.memorySlices > p.memorySlices:
            yield f"{at}.memorySlices: must be ≤ partitioning.memorySlices ({p.memorySlices})"
            continue
        for start in prof.placements or ():
            if start + prof.memorySlices > p.memorySlices:
                yield f"{at}.placements: start {start} runs past memory slice {p.memorySlices}"
        if prof.placements is not None and len(set(prof.placements)) != len(prof.placements):
            yield f"{at}.placements: duplicate start"
        if prof.placements == []:
            yield f"{at}.placements: must not be empty"
