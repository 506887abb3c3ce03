"""Gate 3 (``gpustack-node-devices``): does a Workload's accelerator demand fit the cards of the nodes
Kueue assigned it? Pure: no I/O, no clock (the rules in prose: docs/admission.md, "Gate 3").

Kueue reserved quota on the pool aggregate (Gate 2) and topology-aware scheduling picked the nodes; it
cannot see how the free room is spread over each node's cards. :func:`judge` replays the Workload's
Pods on a working copy of each assigned node's ``Devices`` ledger:

- **per card** (:mod:`gpustack_worker.placement.demand` gives each container's claim; the predicates
  are :mod:`gpustack_worker.api.card_fit`'s, which the agent's fit labels count with too): exclusive
  needs a free whole card (mode None, remaining M); shared one owner share (M/10) on each of ``N``
  distinct free-or-shared cards; a slice its units on a free-or-sliced card with a free slot under
  ``logicalSliced.count``; a partition one free placement of its profile (``remainingProfiles``).
  Exclusive, shared and sliced claims are never judged against a partitioned card, partitions only
  against partitioned ones; unhealthy cards serve nothing; a card whose ledger entry is not published
  yet reads as free (as the pool views and the fit labels do).
- **packing**: slices and shares go to the fullest card that still fits (the allocator's order);
  exclusive cards by index; a partition to the fullest partitioned card offering the profile. Taking a
  partition lowers its own profile by one and every other profile of the card by the instances its
  memory overlaps (⌈own MiB / other MiB⌉), a conservative stand-in for the card's placement geometry
  the ledger does not publish.
- **eligible cards**: those of the claim's manufacturer whose model (``aKey``) is selected by one of
  the PodSet's assigned ResourceFlavors (all the manufacturer's cards when the flavors pin no model).
  The per-card budget is global to the Workload: every PodSet charges the same working copy.
- **where**: a hostname-level ``topologyAssignment`` places ``n`` Pods on each named node, and each
  node must host its own share from its own cards; a node whose Node object is gone holds the verdict.
  A PodSet assigned at a higher level is judged across the pool nodes of that domain, and one without
  any assignment across the flavors' whole node pool (each Pod on the first node, by name, where it
  fits).
- **inflight**: before judging, every other Workload that is admitted or already holds this check's
  ``Ready`` (or whose ``Ready`` the controller wrote and the cache does not show yet) and is not
  evicted charges its Pods the ledger does not hold yet: per hostname-level domain, the assigned count
  minus the Pods of that Workload and PodSet bound to the node that are *held* — finished, or carrying
  an allocation record naming every container that claims an accelerator. Workloads without a
  hostname-level assignment are not counted.

The verdict is ``Ready`` or ``Retry`` — never ``Rejected`` (the room may free up, and Kueue requeues a
``Retry``). A ``Retry`` message names every starved role (PodSet), the node, the Pod and the claim.

**Never fits as the fleet stands** (:func:`shortfalls`): apart from the verdict, a role (PodSet) one Pod
of which fits no node of its flavors' whole pool on the ledgers as they are — the same working ledgers,
with no Workload charged inflight and no topology domain, so room another Workload is still promised
counts as free — cannot be placed however often Kueue retries it. Each such role is reported with the
largest fit the pool offers for each claim (free whole cards on one node for exclusive claims, cards
that can still grant a share, free units of one sliceable card, free instances of the profile) and the
node offering it; :mod:`.gate3_parking` stops the retries on it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Literal

import orjson

from gpustack_worker.api import card_fit, keys, manufacturers
from gpustack_worker.api.crds.devices import AllocationMode
from gpustack_worker.placement.demand import Claim, Demand, Family, demand_of_podset

if TYPE_CHECKING:
    from collections.abc import Callable

if TYPE_CHECKING:
    from gpustack_worker.api.devices_view import Card, DevicesFacts

__all__ = (
    "READY",
    "RETRY",
    "RETRY_AFTER_S",
    "Cluster",
    "Domain",
    "Shortfall",
    "Verdict",
    "assigned_flavors",
    "assigned_nodes",
    "check_state",
    "counts_inflight",
    "decode_topology_assignment",
    "entry_for_apply",
    "is_held",
    "judge",
    "needs_verdict",
    "shortfalls",
)

READY: Final = "Ready"
RETRY: Final = "Retry"
M: Final = keys.UNITS_PER_ACCELERATOR
#: ``requeueAfterSeconds`` of a ``Retry``: Kueue evicts the Workload and requeues it no sooner than this
#: after the entry's ``lastTransitionTime`` (GPUStack's check backs off 30 s too). Fixed, not a setting:
#: a shorter one re-places an unpinned Workload on the same fragmented node more often.
RETRY_AFTER_S: Final = 30
_FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})
_MESSAGE_MAX: Final = 4096


@dataclass(frozen=True, slots=True)
class Verdict:
    """Gate 3's answer for one Workload."""

    state: Literal["Ready", "Retry"]
    message: str

    @property
    def ready(self) -> bool:
        return self.state == READY


@dataclass(frozen=True, slots=True)
class Cluster:
    """What Gate 3 reads besides the Workloads, as plain values."""

    #: Node name → its labels (the Nodes that exist).
    nodes: Mapping[str, Mapping[str, str]]
    #: Node name → its (checked) ``Devices`` view; a node without one has no cards.
    devices: Mapping[str, DevicesFacts]
    #: ResourceFlavor name → its ``spec.nodeLabels``.
    flavors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: (namespace, Workload name) → the Pods Kueue tied to it (annotation ``kueue.x-k8s.io/workload``).
    pods: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]] = field(default_factory=dict)


# --- Kueue's topologyAssignment -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Domain:
    """One assigned topology domain: its value at each level, and how many Pods go there."""

    values: tuple[str, ...]
    pods: int


def _level_values(entry: Mapping[str, Any], count: int, where: str) -> list[str]:
    if entry.get("universal") is not None:
        return [str(entry["universal"])] * count
    individual = entry.get("individual")
    if not isinstance(individual, Mapping):
        raise ValueError(f"{where}: neither universal nor individual")
    roots = [str(r) for r in individual.get("roots") or ()]
    if len(roots) != count:
        raise ValueError(f"{where}: {len(roots)} roots for domainCount {count}")
    prefix, suffix = str(individual.get("prefix") or ""), str(individual.get("suffix") or "")
    return [f"{prefix}{root}{suffix}" for root in roots]


def _pod_counts(counts: Mapping[str, Any], count: int, where: str) -> list[int]:
    if counts.get("universal") is not None:
        return [int(counts["universal"])] * count
    individual = counts.get("individual")
    if not isinstance(individual, list | tuple) or len(individual) != count:
        raise ValueError(f"{where}: podCounts do not cover domainCount {count}")
    return [int(c) for c in individual]


def decode_topology_assignment(assignment: Mapping[str, Any]) -> tuple[tuple[str, ...], list[Domain]]:
    """Kueue v1beta2 ``topologyAssignment`` → (levels, every domain with its Pod count).

    Each slice covers ``domainCount`` domains; a level's values are ``universal`` (one for the whole
    slice) or ``individual`` (``prefix`` + root + ``suffix`` per domain), Pod counts likewise; the
    assignment is the union of the slices. Raises ValueError on a malformed one."""
    levels = tuple(str(level) for level in assignment.get("levels") or ())
    domains: list[Domain] = []
    for i, piece in enumerate(assignment.get("slices") or ()):
        where = f"topologyAssignment.slices[{i}]"
        count = int(piece.get("domainCount") or 0)
        per_level = piece.get("valuesPerLevel") or ()
        if count < 1 or len(per_level) != len(levels):
            raise ValueError(f"{where}: domainCount {count}, {len(per_level)} levels for {len(levels)}")
        columns = [_level_values(e, count, f"{where}.valuesPerLevel[{j}]") for j, e in enumerate(per_level)]
        pods = _pod_counts(piece.get("podCounts") or {}, count, f"{where}.podCounts")
        domains.extend(Domain(tuple(col[d] for col in columns), pods[d]) for d in range(count))
    return levels, domains


# --- Workload reading -------------------------------------------------------------------------------
def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _key(wl: Mapping[str, Any]) -> str:
    meta = _meta(wl)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _condition_true(wl: Mapping[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (wl.get("status") or {}).get("conditions") or ()
    )


def check_state(wl: Mapping[str, Any], check: str = keys.NODE_DEVICES_CHECK) -> str | None:
    """The state of ``check`` in the Workload's ``status.admissionChecks`` (None when absent)."""
    for entry in (wl.get("status") or {}).get("admissionChecks") or ():
        if entry.get("name") == check:
            return str(entry.get("state") or "")
    return None


def needs_verdict(wl: Mapping[str, Any]) -> bool:
    """Whether Gate 3 judges this Workload now: it holds a quota reservation, is not evicted, finished,
    admitted, deactivated or being deleted, and this check's entry is ``Pending``."""
    if _meta(wl).get("deletionTimestamp") or (wl.get("spec") or {}).get("active") is False:
        return False
    if not (wl.get("status") or {}).get("admission") or not _condition_true(wl, "QuotaReserved"):
        return False
    if any(_condition_true(wl, c) for c in ("Evicted", "Finished", "Admitted")):
        return False
    return check_state(wl) == "Pending"


def entry_for_apply(wl: Mapping[str, Any], verdict: Verdict, now: str) -> dict[str, Any]:
    """This check's ``status.admissionChecks`` item: ``lastTransitionTime`` (``now``, RFC 3339) moves
    only when the state does; a ``Retry`` asks Kueue to wait :data:`RETRY_AFTER_S` before requeueing."""
    current: Mapping[str, Any] = next(
        (
            e
            for e in (wl.get("status") or {}).get("admissionChecks") or ()
            if e.get("name") == keys.NODE_DEVICES_CHECK
        ),
        {},
    )
    kept = current.get("lastTransitionTime") if current.get("state") == verdict.state else None
    entry: dict[str, Any] = {
        "name": keys.NODE_DEVICES_CHECK,
        "state": verdict.state,
        "message": verdict.message,
        "lastTransitionTime": kept if isinstance(kept, str) and kept else now,
    }
    if verdict.state == RETRY:
        entry["requeueAfterSeconds"] = RETRY_AFTER_S
    return entry


def counts_inflight(wl: Mapping[str, Any], remembered_ready: frozenset[str] = frozenset()) -> bool:
    """Whether another Workload's unheld Pods are charged before judging: admitted, or holding this
    check's ``Ready`` (also one the controller wrote and the cache does not show), and not evicted."""
    if not (wl.get("status") or {}).get("admission") or _condition_true(wl, "Evicted"):
        return False
    return _condition_true(wl, "Admitted") or check_state(wl) == READY or _key(wl) in remembered_ready


def is_held(pod: Mapping[str, Any]) -> bool:
    """Whether the ledger already holds this Pod: finished (``Succeeded``/``Failed`` Pods count as held),
    or its allocation record (``device.gpustack.ai/accelerator.allocated``, a JSON map keyed by
    container) names every container that claims an accelerator."""
    if (pod.get("status") or {}).get("phase") in _FINISHED_PHASES:
        return True
    claiming = {c.container for c in demand_of_podset(pod.get("spec") or {}).claims}
    if not claiming:
        return True
    raw = (_meta(pod).get("annotations") or {}).get(keys.ACCELERATOR_ALLOCATED)
    if not raw:
        return False
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return isinstance(record, dict) and claiming <= set(record)


# --- the working ledger -----------------------------------------------------------------------------
@dataclass(slots=True)
class _Slot:
    """One card's working state (read by :mod:`gpustack_worker.api.card_fit`'s predicates)."""

    a_key: str
    manufacturer: str
    card: Card
    vram_mib: int
    mode: int
    remaining: int
    allocated_slices: int
    #: Remaining instances by published profile name.
    profiles: dict[str, int]
    #: Profile memory by published profile name.
    profile_mib: dict[str, int]

    def copy(self) -> _Slot:
        return replace(self, profiles=dict(self.profiles))


def _slots(facts: DevicesFacts | None) -> list[_Slot]:
    out = []
    for nc in card_fit.node_cards(facts):
        mfr = manufacturers.get(nc.group.manufacturer)

        def published(name: str, mfr: manufacturers.Manufacturer | None = mfr) -> str:
            return manufacturers.publish_profile_name(mfr, name) if mfr is not None else name

        out.append(
            _Slot(
                a_key=nc.a_key,
                manufacturer=nc.group.manufacturer,
                card=nc.card,
                vram_mib=nc.group.memory_mib,
                mode=int(nc.ledger.mode),
                remaining=nc.ledger.remaining,
                allocated_slices=nc.ledger.allocated_slices,
                profiles={published(n): c for n, c in nc.ledger.remaining_profiles.items()},
                profile_mib={published(p.name): p.memory_mib for p in nc.card.profiles},
            )
        )
    return sorted(out, key=lambda s: (s.a_key, s.card.index, s.card.id))


def _fold(mib: int, vram_mib: int) -> int:
    return mib * M // vram_mib if vram_mib > 0 else 0


def _slice_units(claim: Claim, slot: _Slot) -> int | None:
    """The slice's units on this card (a MiB request folds against the card's VRAM); None if unknown."""
    if claim.units:
        return claim.units
    if claim.memory_mib:
        units = _fold(claim.memory_mib, slot.vram_mib)
        return units or None
    return 0


def _fullest(slots: Iterable[_Slot]) -> list[_Slot]:
    return sorted(slots, key=lambda s: (s.remaining, s.a_key, s.card.index))


def _take(claim: Claim, slots: list[_Slot]) -> str | None:
    """Charge one claim on the eligible ``slots`` (mutated on success); the reason when it does not fit."""
    if claim.family is Family.EXCLUSIVE:
        free = [s for s in slots if card_fit.takes_whole_card(s.card, s)]
        if len(free) < claim.cards:
            return f"{len(free)} free whole card(s)"
        for s in free[: claim.cards]:
            s.mode, s.remaining = AllocationMode.EXCLUSIVE, 0
        return None
    if claim.family is Family.SHARED:
        granting = _fullest(s for s in slots if card_fit.grants_share(s.card, s))
        if len(granting) < claim.cards:
            return f"{len(granting)} card(s) can still grant a share"
        for s in granting[: claim.cards]:
            s.mode, s.remaining = AllocationMode.SHARED, s.remaining - keys.UNITS_PER_SHARE
        return None
    if claim.family is Family.SLICED:
        fitting: list[tuple[_Slot, int]] = []
        for s in _fullest(slots):
            units = _slice_units(claim, s)
            if units is not None and card_fit.takes_slice(s.card, s, units):
                fitting.append((s, units))
        if not fitting:
            return "no free or sliced card with a free slot and enough units"
        s, units = fitting[0]
        s.mode, s.remaining = AllocationMode.SLICED, s.remaining - units
        s.allocated_slices += 1
        return None
    hosts = _fullest(
        s for s in slots if card_fit.offers_profile(s.card, s.profiles, claim.profile, claim.cards)
    )
    if not hosts:
        return f"no partitioned card has a free placement of {claim.profile}"
    s = hosts[0]
    own = s.profile_mib.get(claim.profile, 0)
    for name in list(s.profiles):
        if name == claim.profile:
            s.profiles[name] -= claim.cards
        elif own > 0 and s.profile_mib.get(name, 0) > 0:
            overlap = math.ceil(own / s.profile_mib[name]) * claim.cards
            s.profiles[name] = max(s.profiles[name] - overlap, 0)
    s.mode = AllocationMode.PARTITIONED
    s.remaining = max(s.remaining - (claim.units or _fold(own, s.vram_mib)), 0)
    return None


def _eligible(slots: list[_Slot], claim: Claim, a_keys: frozenset[str] | None) -> list[_Slot]:
    return [
        s for s in slots if s.manufacturer == claim.manufacturer and (a_keys is None or s.a_key in a_keys)
    ]


def _fit_pod(slots: list[_Slot], demand: Demand, a_keys: frozenset[str] | None) -> str | None:
    """Charge one Pod's claims on a node all or nothing; the first failing claim in words."""
    trial = [s.copy() for s in slots]
    for claim in demand.claims:
        eligible = _eligible(trial, claim, a_keys)
        if not eligible:
            scope = f" of model {', '.join(sorted(a_keys))}" if a_keys else ""
            return f"{claim.describe()} (container {claim.container!r}): no {claim.manufacturer} card{scope}"
        why = _take(claim, eligible)
        if why is not None:
            return f"{claim.describe()} (container {claim.container!r}): {why}"
    slots[:] = trial
    return None


# --- judging ----------------------------------------------------------------------------------------
class _Hold(Exception):
    """An assigned node that no longer exists: the verdict waits for Kueue to place again."""


@dataclass
class _State:
    cluster: Cluster
    ledgers: dict[str, list[_Slot]] = field(default_factory=dict)
    by_hostname: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, labels in self.cluster.nodes.items():
            self.by_hostname.setdefault(str(labels.get(keys.HOSTNAME) or name), name)

    def node(self, hostname: str) -> str | None:
        if hostname in self.by_hostname:
            return self.by_hostname[hostname]
        return hostname if hostname in self.cluster.nodes else None

    def slots(self, node: str) -> list[_Slot]:
        if node not in self.ledgers:
            self.ledgers[node] = _slots(self.cluster.devices.get(node))
        return self.ledgers[node]

    def flavor_scope(self, flavor_names: Iterable[str]) -> tuple[frozenset[str] | None, list[dict[str, str]]]:
        """The models the flavors pin (None when none), and their node selectors."""
        a_keys: set[str] = set()
        selectors: list[dict[str, str]] = []
        for name in sorted(set(flavor_names)):
            labels = self.cluster.flavors.get(name)
            if labels is None:
                continue
            selectors.append(dict(labels))
            for k, v in labels.items():
                if k.startswith(keys.ACCELERATABLE_PREFIX) and v == "true":
                    a_keys.add(k[len(keys.ACCELERATABLE_PREFIX) :])
        return (frozenset(a_keys) or None), selectors

    def pool(self, selectors: list[dict[str, str]], domain: Mapping[str, str]) -> list[str]:
        """Existing nodes matching one of the flavor selectors (every node when there is none) and the
        domain's level values."""
        out = []
        for name in sorted(self.cluster.nodes):
            labels = self.cluster.nodes[name]
            if selectors and not any(all(labels.get(k) == v for k, v in sel.items()) for sel in selectors):
                continue
            if all(labels.get(k) == v for k, v in domain.items()):
                out.append(name)
        return out


@dataclass(frozen=True, slots=True)
class _PodSet:
    name: str
    demand: Demand
    a_keys: frozenset[str] | None
    selectors: list[dict[str, str]]
    #: (levels, domains) of the topology assignment, or None; total Pods when there is none.
    levels: tuple[str, ...]
    domains: list[Domain]


def _podsets(wl: Mapping[str, Any], state: _State) -> list[_PodSet]:
    templates = {str(ps.get("name") or "main"): ps for ps in (wl.get("spec") or {}).get("podSets") or ()}
    admission = (wl.get("status") or {}).get("admission") or {}
    out = []
    for psa in admission.get("podSetAssignments") or ():
        name = str(psa.get("name") or "main")
        spec = templates.get(name) or {}
        demand = demand_of_podset(spec.get("template") or {})
        a_keys, selectors = state.flavor_scope((psa.get("flavors") or {}).values())
        ta = psa.get("topologyAssignment")
        if ta:
            levels, domains = decode_topology_assignment(ta)
        else:
            count = psa.get("count")
            total = int(count if count is not None else spec.get("count") or 0)
            levels, domains = (), [Domain((), total)]
        out.append(_PodSet(name, demand, a_keys, selectors, levels, domains))
    return out


def _hostname_level(levels: tuple[str, ...]) -> bool:
    return bool(levels) and levels[-1] == keys.HOSTNAME


def _charge_inflight(other: Mapping[str, Any], state: _State) -> None:
    meta = _meta(other)
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    pods = state.cluster.pods.get((namespace, name), ())
    try:
        podsets = _podsets(other, state)
    except (ValueError, TypeError):
        return  # an unreadable assignment of another Workload: nothing to charge from it
    for ps in podsets:
        if not ps.demand or not _hostname_level(ps.levels):
            continue
        for domain in ps.domains:
            node = state.node(domain.values[-1])
            if node is None:
                continue
            held = sum(
                1
                for p in pods
                if (p.get("spec") or {}).get("nodeName") == node
                and (_meta(p).get("labels") or {}).get(keys.KUEUE_PODSET_LABEL) == ps.name
                and is_held(p)
            )
            slots = state.slots(node)
            for _ in range(max(domain.pods - held, 0)):
                _fit_pod(slots, ps.demand, ps.a_keys)  # room promised to it; what does not fit is moot


def _judge_podset(ps: _PodSet, state: _State) -> list[str]:
    """Charge one PodSet; the reasons it does not fit (empty when it does)."""
    if ps.demand.problems:
        return [f"role {ps.name}: unreadable accelerator request: " + "; ".join(ps.demand.problems)]
    if not ps.demand:
        return []
    starved: list[str] = []
    total = sum(d.pods for d in ps.domains)
    placed = 0
    for domain in ps.domains:
        if _hostname_level(ps.levels):
            hostname = domain.values[-1]
            node = state.node(hostname)
            if node is None:
                raise _Hold(f"role {ps.name}: assigned node {hostname} is gone")
            slots = state.slots(node)
            for _ in range(domain.pods):
                placed += 1
                why = _fit_pod(slots, ps.demand, ps.a_keys)
                if why is not None:
                    starved.append(f"role {ps.name}: node {node}: pod {placed} of {total} needs {why}")
                    break
            continue
        pool = state.pool(ps.selectors, dict(zip(ps.levels, domain.values, strict=True)))
        for _ in range(domain.pods):
            placed += 1
            if not any(_fit_pod(state.slots(n), ps.demand, ps.a_keys) is None for n in pool):
                where = ", ".join(f"{k}={v}" for k, v in zip(ps.levels, domain.values, strict=True))
                scope = f"the pool nodes in {where}" if where else "the pool's nodes"
                first = (
                    _fit_pod([s.copy() for s in state.slots(pool[0])], ps.demand, ps.a_keys) if pool else None
                )
                detail = f" (first node {pool[0]}: {first})" if first else " (no node)" if not pool else ""
                starved.append(
                    f"role {ps.name}: pod {placed} of {total} fits none of {scope}: needs "
                    f"{'; '.join(c.describe() for c in ps.demand.claims)}{detail}"
                )
                break
    return starved


def assigned_nodes(wl: Mapping[str, Any], nodes: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The existing Nodes a hostname-level ``topologyAssignment`` of ``wl`` names (for a fresh read of
    their ledgers); unreadable assignments and vanished nodes are left out (:func:`judge` reports them)."""
    state = _State(Cluster(nodes=nodes, devices={}))
    out: set[str] = set()
    for psa in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or ():
        ta = psa.get("topologyAssignment")
        if not ta:
            continue
        try:
            levels, domains = decode_topology_assignment(ta)
        except (ValueError, TypeError):
            continue
        if _hostname_level(levels):
            out.update(n for d in domains if (n := state.node(d.values[-1])) is not None)
    return sorted(out)


def _cut(text: str) -> str:
    return text if len(text) <= _MESSAGE_MAX else text[: _MESSAGE_MAX - 3] + "..."


def judge(
    workload: Mapping[str, Any],
    cluster: Cluster,
    others: Iterable[Mapping[str, Any]] = (),
    *,
    remembered_ready: frozenset[str] = frozenset(),
) -> Verdict:
    """Gate 3's verdict on ``workload`` (which holds a quota reservation), with the Workloads in
    ``others`` charged first when :func:`counts_inflight` says so."""
    state = _State(cluster)
    own = _key(workload)
    for other in sorted(others, key=_key):
        if _key(other) != own and counts_inflight(other, remembered_ready):
            _charge_inflight(other, state)
    try:
        podsets = _podsets(workload, state)
    except (ValueError, TypeError) as exc:
        return Verdict(RETRY, _cut(f"cannot read the Workload's admission: {exc}"))
    starved: list[str] = []
    try:
        for ps in podsets:
            starved.extend(_judge_podset(ps, state))
    except _Hold as hold:
        return Verdict(RETRY, _cut(f"{hold}; holding until Kueue places it again"))
    if starved:
        return Verdict(RETRY, _cut("; ".join(starved)))
    roles = ", ".join(ps.name for ps in podsets if ps.demand) or "no accelerator demand"
    return Verdict(READY, f"fits the cards of its assigned nodes ({roles})")


# --- never fits as the fleet stands -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Shortfall:
    """A role one Pod of which fits no node of its pool on the ledgers as they stand."""

    role: str
    #: The Pod's claims in words.
    needs: str
    #: The largest fit the pool offers for each claim, with the node (``"no node in the pool"``).
    largest: str

    def describe(self) -> str:
        return (
            f"role {self.role}: a Pod needs {self.needs}, more than any node of its pool has free as the "
            f"fleet stands (largest fit: {self.largest})"
        )


def assigned_flavors(wl: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """PodSet name → the ResourceFlavors Kueue assigned it (``status.admission``; empty when none)."""
    out: dict[str, tuple[str, ...]] = {}
    for psa in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or ():
        names = sorted({str(f) for f in ((psa.get("flavors") or {}).values()) if f})
        if names:
            out[str(psa.get("name") or "main")] = tuple(names)
    return out


def _capacity(claim: Claim, slots: list[_Slot]) -> tuple[int, str]:
    """(how much of the claim's family one node offers, that amount in words)."""
    mfr = claim.manufacturer
    if claim.family is Family.EXCLUSIVE:
        n = sum(1 for s in slots if card_fit.takes_whole_card(s.card, s))
        return n, f"{n} free whole {mfr} card(s)"
    if claim.family is Family.SHARED:
        n = sum(1 for s in slots if card_fit.grants_share(s.card, s))
        return n, f"{n} {mfr} card(s) that can grant a share"
    if claim.family is Family.SLICED:
        n = max((card_fit.free_slice_units(s.card, s) for s in slots), default=0)
        return n, f"{n:,} free units on one {mfr} card with a free slot"
    n = max(
        (
            s.profiles.get(claim.profile, 0)
            for s in slots
            if card_fit.offers_profile(s.card, s.profiles, claim.profile, 1)
        ),
        default=0,
    )
    return n, f"{n} free {claim.profile} instance(s) on one card"


def _largest(
    demand: Demand, a_keys: frozenset[str] | None, pool: list[str], slots: Callable[[str], list[_Slot]]
) -> str:
    """Per claim, the most the pool's freest node offers (the first such node by name) and that node."""
    if not pool:
        return "no node in the pool"
    parts = []
    for claim in demand.claims:
        offers = [(_capacity(claim, _eligible(slots(node), claim, a_keys)), node) for node in pool]
        (_amount, words), node = max(offers, key=lambda offer: offer[0][0])  # the first of the freest
        parts.append(f"{words} on node {node}")
    return "; ".join(parts)


def shortfalls(
    wl: Mapping[str, Any], cluster: Cluster, flavors: Mapping[str, Sequence[str]] | None = None
) -> list[Shortfall]:
    """The roles of ``wl`` one Pod of which fits no node of its pool as the fleet stands (see the module
    doc). ``flavors``: PodSet name → the flavors it is placed on (default: :func:`assigned_flavors`); a
    PodSet none of whose flavors still exists, or with an unreadable or no accelerator request, is not
    judged (no claim is made about it). Pure."""
    state = _State(cluster)
    placed = assigned_flavors(wl) if flavors is None else flavors
    templates = {str(ps.get("name") or "main"): ps for ps in (wl.get("spec") or {}).get("podSets") or ()}
    out: list[Shortfall] = []
    for name, flavor_names in placed.items():
        demand = demand_of_podset((templates.get(name) or {}).get("template") or {})
        if demand.problems or not demand:
            continue
        a_keys, selectors = state.flavor_scope(flavor_names)
        if not selectors:
            continue  # the flavors are gone: the pool is unknown
        pool = state.pool(selectors, {})
        if any(_fit_pod([s.copy() for s in state.slots(n)], demand, a_keys) is None for n in pool):
            continue
        needs = "; ".join(c.describe() for c in demand.claims)
        out.append(Shortfall(name, needs, _largest(demand, a_keys, pool, state.slots)))
    return out
