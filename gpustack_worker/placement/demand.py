"""What one Pod of a PodSet asks of the accelerators: the per-container claims of each family.

Gate 3 (:mod:`gpustack_worker.placement.gate3`) judges these claims against the ``Devices`` ledger of
the assigned nodes, and the Workload fit pin reads ``U`` and ``N`` from the same parse, so the two can
never disagree on what a Pod asks. Pure: no I/O.

A container's requests (limits when a request is absent: the API server defaults extended-resource
requests to their limits) are read per manufacturer base resource ``<base>`` (``api/manufacturers.py``):

=======================================  ===========================================================
resource                                 claim
=======================================  ===========================================================
``<base>: n``                            **exclusive**: ``n`` whole cards
``<base>.shared: n``                     **shared**: one ownership share (M/10) on each of ``n``
                                         distinct cards
``<base>.sliced: 1``                     **sliced**: one logical slice of ``<base>.sliced.units`` on
                                         one card (units folded by Gate 1; else from
                                         ``.sliced.memory-percentage`` × 16,000; else
                                         ``.sliced.memory-mib``, folded per card by Gate 3)
``<base>.partitioned: 1``                **partitioned**: one instance of the profile named by the
                                         ``<base>.partitioned.<kind>-<profile>: 1`` key
``<base>.sliced.*``,                     counting keys: read for the claim above, never a claim alone
``<base>.partitioned.units``
``device.gpustack.ai/<mfr>.visibility``  outside the families (the SSH sidecar): ignored
=======================================  ===========================================================

Only ``spec.containers`` are read: a non-restartable init container's devices are handed on to the
app containers by kubelet, and Gate 1 refuses accelerators on restartable ones. A malformed request
(not an integer, not positive, a slice or partition count other than 1, a partition without a
profile or with two) is left out of the claims and reported in :attr:`Demand.problems`, naming the
container and resource.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from gpustack_worker.api import keys, manufacturers
from gpustack_worker.runtime.quantity import parse

__all__ = ("Claim", "Demand", "Family", "demand_of_podset")


class Family(StrEnum):
    """The four accelerator families a container can claim from."""

    EXCLUSIVE = "exclusive"
    SHARED = "shared"
    SLICED = "sliced"
    PARTITIONED = "partitioned"


_UNITS: Final = "units"
_MEMORY_PERCENTAGE: Final = "memory-percentage"
_MEMORY_MIB: Final = "memory-mib"


@dataclass(frozen=True, slots=True)
class Claim:
    """One container's claim on one family of one manufacturer's cards."""

    container: str
    family: Family
    #: Manufacturer id (``nvidia``), from the base resource.
    manufacturer: str
    #: Cards this claim needs (distinct cards for shared; 1 for a slice; instances for a partition).
    cards: int
    #: Per-card units: M (exclusive), M/10 (shared), the slice's folded units (0 when not folded),
    #: the partition's folded units (0 when not folded).
    units: int
    #: A slice whose units were not folded: its VRAM in MiB (Gate 3 folds it per card), else 0.
    memory_mib: int = 0
    #: Partition profile as published (``1g.5gb``, T-Head ``4g.48gb``); empty for other families.
    profile: str = ""

    def describe(self) -> str:
        """The claim in words, for verdict messages."""
        if self.family is Family.EXCLUSIVE:
            return f"{self.cards} whole {self.manufacturer} card(s)"
        if self.family is Family.SHARED:
            return f"a share on {self.cards} distinct {self.manufacturer} card(s)"
        if self.family is Family.SLICED:
            size = f"{self.units:,} units" if self.units else f"{self.memory_mib} MiB"
            return f"a {self.manufacturer} slice of {size}"
        return f"{self.cards} {self.manufacturer} partition(s) {self.profile}"


@dataclass(frozen=True, slots=True)
class Demand:
    """Every claim of one Pod of the PodSet, plus what could not be read."""

    claims: tuple[Claim, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def slice_units(self) -> int:
        """``U``: per-card units of a logical slice (0 if none or not folded)."""
        return max((c.units for c in self.claims if c.family is Family.SLICED), default=0)

    @property
    def shared_cards(self) -> int:
        """``N``: the largest distinct-card count any one container asks for via ``.shared``."""
        return max((c.cards for c in self.claims if c.family is Family.SHARED), default=0)

    @property
    def families(self) -> frozenset[Family]:
        """The families claimed."""
        return frozenset(c.family for c in self.claims)

    @property
    def manufacturers(self) -> frozenset[str]:
        """The manufacturers claimed from."""
        return frozenset(c.manufacturer for c in self.claims)

    def __bool__(self) -> bool:
        return bool(self.claims)


def _count(value: Any) -> int | None:
    """A positive integer quantity, else None."""
    number = parse(value)
    if number is None or number != number.to_integral_value() or number < 1:
        return None
    return int(number)


def _requests(container: Mapping[str, Any]) -> dict[str, Any]:
    resources = container.get("resources") or {}
    limits: Mapping[str, Any] = resources.get("limits") or {}
    requests: Mapping[str, Any] = resources.get("requests") or {}
    return {**limits, **requests}


@dataclass
class _Reading:
    """The resources of one manufacturer one container names."""

    exclusive: Any = None
    shared: Any = None
    sliced: Any = None
    partitioned: Any = None
    sliced_keys: dict[str, Any] = field(default_factory=dict)
    partition_units: Any = None
    profiles: dict[str, Any] = field(default_factory=dict)


def _split(requests: Mapping[str, Any]) -> dict[str, _Reading]:
    """Requests by manufacturer (only resources of a known base)."""
    out: dict[str, _Reading] = {}
    for name, value in requests.items():
        # The base resource itself carries a dot only in the domain part (``nvidia.com/gpu``): split on
        # the first dot after the slash.
        slash = name.find("/")
        if slash < 0:
            continue
        dot = name.find(".", slash)
        base, rest = (name, "") if dot < 0 else (name[:dot], name[dot + 1 :])
        mfr = manufacturers.by_resource(base)
        if mfr is None:
            continue
        reading = out.setdefault(mfr.name, _Reading())
        if rest == "":
            reading.exclusive = value
        elif rest == keys.SHARED_SUFFIX[1:]:
            reading.shared = value
        elif rest == keys.SLICED_SUFFIX[1:]:
            reading.sliced = value
        elif rest.startswith(keys.SLICED_SUFFIX[1:] + "."):
            reading.sliced_keys[rest.split(".", 1)[1]] = value
        elif rest == keys.PARTITIONED_SUFFIX[1:]:
            reading.partitioned = value
        elif rest == keys.PARTITIONED_SUFFIX[1:] + "." + _UNITS:
            reading.partition_units = value
        elif rest.startswith(keys.PARTITIONED_SUFFIX[1:] + "."):
            reading.profiles[rest.split(".", 1)[1]] = value
    return out


def _profile(mfr: manufacturers.Manufacturer, suffix: str) -> str:
    """``<kind>-<profile>`` → the published profile (just the suffix for a manufacturer without a kind)."""
    kind = mfr.partition_kind
    if kind and suffix.startswith(kind + "-"):
        return suffix[len(kind) + 1 :]
    return suffix


class _Parser:
    def __init__(self) -> None:
        self.claims: list[Claim] = []
        self.problems: list[str] = []

    def bad(self, container: str, resource: str, value: Any, rule: str) -> None:
        self.problems.append(f"container {container!r}: {resource}={value!r} {rule}")

    def container(self, name: str, requests: Mapping[str, Any]) -> None:
        for mfr_name, r in sorted(_split(requests).items()):
            mfr = manufacturers.MANUFACTURERS[mfr_name]
            base = mfr.resource
            if r.exclusive is not None:
                n = _count(r.exclusive)
                if n is None:
                    self.bad(name, base, r.exclusive, "is not a positive integer")
                else:
                    self.claims.append(Claim(name, Family.EXCLUSIVE, mfr_name, n, keys.UNITS_PER_ACCELERATOR))
            if r.shared is not None:
                n = _count(r.shared)
                if n is None:
                    self.bad(name, base + keys.SHARED_SUFFIX, r.shared, "is not a positive integer")
                else:
                    self.claims.append(Claim(name, Family.SHARED, mfr_name, n, keys.UNITS_PER_SHARE))
            if r.sliced is not None:
                self.slice(name, mfr, r)
            if r.partitioned is not None:
                self.partition(name, mfr, r)

    def slice(self, name: str, mfr: manufacturers.Manufacturer, r: _Reading) -> None:
        resource = keys.sliced_resource(mfr.resource)
        if _count(r.sliced) != 1:
            self.bad(name, resource, r.sliced, "must be 1 (one slice per container)")
            return
        extra = r.sliced_keys
        units = memory_mib = 0
        if _UNITS in extra:
            units = _count(extra[_UNITS]) or 0
            if not units:
                self.bad(name, keys.sliced_resource(mfr.resource, _UNITS), extra[_UNITS], "is not positive")
                return
        elif _MEMORY_PERCENTAGE in extra:
            pct = _count(extra[_MEMORY_PERCENTAGE])
            if pct is None or pct > 100:
                self.bad(
                    name,
                    keys.sliced_resource(mfr.resource, _MEMORY_PERCENTAGE),
                    extra[_MEMORY_PERCENTAGE],
                    "must be within 1..100",
                )
                return
            units = pct * keys.UNITS_PER_PERCENT
        elif _MEMORY_MIB in extra:
            mib = _count(extra[_MEMORY_MIB])
            if mib is None:
                resource_mib = keys.sliced_resource(mfr.resource, _MEMORY_MIB)
                self.bad(name, resource_mib, extra[_MEMORY_MIB], "is not positive")
                return
            memory_mib = mib
        self.claims.append(Claim(name, Family.SLICED, mfr.name, 1, units, memory_mib=memory_mib))

    def partition(self, name: str, mfr: manufacturers.Manufacturer, r: _Reading) -> None:
        resource = keys.partitioned_resource(mfr.resource)
        if _count(r.partitioned) != 1:
            self.bad(name, resource, r.partitioned, "must be 1 (one partition per container)")
            return
        profiles = r.profiles
        if len(profiles) != 1:
            found = ", ".join(sorted(profiles)) or "none"
            self.bad(name, resource, r.partitioned, f"must name exactly one profile key (found: {found})")
            return
        ((suffix, value),) = profiles.items()
        if _count(value) != 1:
            self.bad(name, keys.partitioned_resource(mfr.resource, suffix), value, "must be 1")
            return
        units = (_count(r.partition_units) or 0) if r.partition_units is not None else 0
        self.claims.append(Claim(name, Family.PARTITIONED, mfr.name, 1, units, profile=_profile(mfr, suffix)))


def demand_of_podset(template: Mapping[str, Any]) -> Demand:
    """The claims of one Pod of a PodSet, from its ``template`` (a PodTemplateSpec; a bare PodSpec —
    a mapping with ``containers`` — is read as well)."""
    spec = template if "containers" in template else (template.get("spec") or {})
    parser = _Parser()
    for container in spec.get("containers") or ():
        if isinstance(container, Mapping):
            parser.container(str(container.get("name", "")), _requests(container))
    return Demand(tuple(parser.claims), tuple(parser.problems))
