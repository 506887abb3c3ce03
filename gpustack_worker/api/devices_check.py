"""``Devices`` checked against the physical world before anything is computed from it.

Every value a reader takes from a ``Devices`` object is checked here (pure: no I/O, no clock) — by the
node agent before it publishes counting keys and fit labels, and by the chain's stage-4 and Gate-3
controllers, which read the same ledger. :func:`check_devices` returns a :class:`CheckedDevices`: the
*sanitized* view (entries that would create outputs that must not exist are dropped) and the
:class:`Finding` list. A finding names the field (a path with list-map keys, e.g.
``status.groups[manufacturer=nvidia,id=a100].accelerators[id=GPU-1].remaining``), the value, the
rule, and the outputs it affects:

- ``holds`` — output selectors whose value cannot be computed now: a reader keeps the value it last
  published (or publishes nothing when it has none). A selector is an exact key, or a prefix ending in
  ``*`` (``nvidia.com/gpu.sliced.*``: every ``.sliced`` counting key of the manufacturer).
- ``withholds`` — outputs that must not be published at all (a key that would not be a valid label
  name, a partition profile the card does not offer).

The rules (bounds from :mod:`gpustack_worker.api.bounds`):

========================================  =====================================================
spec                                      rule
========================================  =====================================================
group ``manufacturer``                    one of the manufacturer table (``api/manufacturers.py``)
group ``id``                              ``<manufacturer>-<id>`` is a valid label name part
group ``memory``                          ``0..MAX_CARD_MEMORY_MIB``
group ``accelerators``                    at most ``MAX_ACCELERATORS_PER_GROUP`` cards
card ``id``                               unique across the node's spec groups
card ``logicalSliced.count``              ``0..MAX_SLICES_PER_CARD``
profile ``name``                          the published counting key is a valid resource name
profile ``count``                         ``0..MAX_PROFILE_INSTANCES``
========================================  =====================================================

========================================  =====================================================
ledger (``status.groups``)                rule
========================================  =====================================================
group ``manufacturer`` / ``id``           the spec group holding its cards has the same ones
card ``id``                               unique across the ledger; under the group holding it
card ``mode``                             ``0..5``
card ``remaining`` / ``allocated``        ``0..M`` (1,600,000)
card ``allocatedSlices``                  ``0..logicalSliced.count``
profile names                             offered by the card's ``physicalSliced.profiles``
profile counts                            each ``0..MAX_PROFILE_INSTANCES``; allocated + remaining
                                          ≤ the profile's ceiling ``count``
========================================  =====================================================

A ledger entry whose card is in no spec group is ignored without a finding: the Device Manager writes
``spec`` and ``status`` in separate requests, so that is the normal state between the two.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from gpustack_worker.api import bounds, keys, manufacturers
from gpustack_worker.api.crds.devices import AllocationMode
from gpustack_worker.api.validation import qualified_name

if TYPE_CHECKING:
    from collections.abc import Iterable

    from gpustack_worker.api.devices_view import Card, CardLedger, DevicesFacts, Group, LedgerGroup

__all__ = (
    "REASON_INVALID_NAME",
    "REASON_MISMATCH",
    "REASON_OUT_OF_RANGE",
    "CheckedDevices",
    "Finding",
    "check_devices",
    "counting_selectors",
    "fit_keys",
    "matches",
    "profile_suffix",
    "render",
)

#: Event reasons, one per class of finding.
REASON_OUT_OF_RANGE: Final = "ValueOutOfRange"
REASON_MISMATCH: Final = "LedgerMismatch"
REASON_INVALID_NAME: Final = "InvalidLabelName"
#: Values longer than this are cut in findings (an Event note holds 1 KiB).
_VALUE_MAX: Final = 96
_MODES: Final = frozenset(int(m) for m in AllocationMode)


@functools.lru_cache(maxsize=4096)
def _name_problems(key: str) -> tuple[str, ...]:
    """``qualified_name`` of a key built from device data (the same few keys recur on every node)."""
    return tuple(qualified_name(key))


def render(value: object) -> str:
    """A value as a finding shows it (strings quoted, long ones cut)."""
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= _VALUE_MAX else text[: _VALUE_MAX - 3] + "..."


@dataclass(frozen=True, slots=True)
class Finding:
    """One value that breaks a rule, where it was read and what it affects."""

    #: Kind of the object the value was read from (the Event goes there): ``Devices`` or ``Node``.
    kind: str
    #: Field path, list items by their keys.
    path: str
    #: The value as read (rendered).
    value: str
    #: The rule it breaks, in words.
    rule: str
    #: Event reason.
    reason: str
    #: Output selectors kept at their last published value.
    holds: tuple[str, ...] = ()
    #: Outputs not published because of this value.
    withholds: tuple[str, ...] = ()

    @property
    def outputs(self) -> tuple[str, ...]:
        """Every output this finding affects."""
        return self.holds + self.withholds

    @property
    def identity(self) -> tuple[str, str, str, str]:
        """What makes two findings the same (for de-duplication)."""
        return (self.kind, self.path, self.value, self.rule)

    def effect(self) -> str:
        """What a publisher does about it, in words."""
        parts: list[str] = []
        if self.holds:
            parts.append("keeping the last published value of " + ", ".join(self.holds))
        if self.withholds:
            parts.append("not publishing " + ", ".join(self.withholds))
        return "; ".join(parts) or "ignored (no output depends on it)"

    def note(self) -> str:
        """One line for an Event note or a log: field, value, rule, effect."""
        return f"{self.path}={self.value}: {self.rule}; {self.effect()}"


@dataclass(frozen=True, slots=True)
class CheckedDevices:
    """A ``Devices`` view safe to compute from, and what was wrong with the object."""

    devices: DevicesFacts
    findings: tuple[Finding, ...] = ()

    def holds(self) -> tuple[str, ...]:
        """Every held output selector."""
        return tuple(s for f in self.findings for s in f.holds)


def matches(selector: str, key: str) -> bool:
    """Whether ``key`` is selected: exact, or by prefix when the selector ends in ``*``."""
    return key.startswith(selector[:-1]) if selector.endswith("*") else key == selector


def profile_suffix(mfr: manufacturers.Manufacturer, profile: str) -> str:
    """``<kind>-<published profile>``; just the published profile for a manufacturer without a kind."""
    published = manufacturers.publish_profile_name(mfr, profile)
    return f"{mfr.partition_kind}-{published}" if mfr.partition_kind else published


def _profile_key(mfr: manufacturers.Manufacturer, profile: str) -> str:
    return keys.partitioned_resource(mfr.resource, profile_suffix(mfr, profile))


def counting_selectors(base: str) -> tuple[str, str]:
    """Every ``.sliced`` and every ``.partitioned`` counting key of one base resource."""
    return (keys.sliced_resource(base) + ".*", keys.partitioned_resource(base) + ".*")


def fit_keys(manufacturer: str, group_id: str) -> tuple[str, str]:
    """The two fit labels of one model (``aKey = <manufacturer>-<group id>``)."""
    a_key = f"{manufacturer}-{group_id}"
    return (keys.sliced_max_free_units_key(a_key), keys.shared_free_cards_key(a_key))


def _group_path(side: str, group: Group | LedgerGroup) -> str:
    return f"{side}.groups[manufacturer={group.manufacturer},id={group.id}]"


def _unique(*selectors: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(selectors))


def _range(low: int, high: int) -> str:
    return f"must be within {low:,}..{high:,}"


class _Checker:
    """Collects findings over one ``Devices``."""

    def __init__(self, devices: DevicesFacts) -> None:
        self.devices = devices
        self.findings: list[Finding] = []
        #: Spec card id → (group, card) in spec order.
        self.spec_cards: dict[str, list[tuple[Group, Card]]] = defaultdict(list)

    def add(
        self,
        path: str,
        value: object,
        rule: str,
        reason: str,
        *,
        holds: Iterable[str] = (),
        withholds: Iterable[str] = (),
    ) -> None:
        self.findings.append(
            Finding("Devices", path, render(value), rule, reason, tuple(holds), tuple(withholds))
        )

    # --- spec ---------------------------------------------------------------------------------------
    def spec(self) -> None:
        for group in self.devices.groups:
            path = _group_path("spec", group)
            mfr = manufacturers.get(group.manufacturer)
            if mfr is None:
                self.add(
                    f"{path}.manufacturer",
                    group.manufacturer,
                    f"must be one of {', '.join(sorted(manufacturers.MANUFACTURERS))}",
                    REASON_OUT_OF_RANGE,
                    withholds=("every output of this group",),
                )
                continue
            group_fit = fit_keys(mfr.name, group.id)
            a_key_problems = _name_problems(group_fit[0])
            if a_key_problems:
                self.add(
                    f"{path}.id",
                    group.id,
                    f"<manufacturer>-<id> becomes the fit label name {group_fit[0]!r}, which "
                    + "; ".join(a_key_problems),
                    REASON_INVALID_NAME,
                    withholds=group_fit,
                )
            family = counting_selectors(mfr.resource)
            if len(group.cards) > bounds.MAX_ACCELERATORS_PER_GROUP:
                self.add(
                    f"{path}.accelerators",
                    len(group.cards),
                    f"cards of one model on a node {_range(0, bounds.MAX_ACCELERATORS_PER_GROUP)}",
                    REASON_OUT_OF_RANGE,
                    holds=(*family, *group_fit),
                )
            if not 0 <= group.memory_mib <= bounds.MAX_CARD_MEMORY_MIB:
                self.add(
                    f"{path}.memory",
                    group.memory_mib,
                    f"per-card VRAM in MiB {_range(0, bounds.MAX_CARD_MEMORY_MIB)} (4 TiB)",
                    REASON_OUT_OF_RANGE,
                    holds=(keys.sliced_resource(mfr.resource, "memory-mib"),),
                )
            for card in group.cards:
                self.spec_cards[card.id].append((group, card))
                self.card(path, mfr, group, card, (*family, *group_fit))
        self.unique_spec_cards()

    def card(
        self,
        group_path: str,
        mfr: manufacturers.Manufacturer,
        group: Group,
        card: Card,
        family_and_fit: tuple[str, ...],
    ) -> None:
        path = f"{group_path}.accelerators[id={card.id}].status"
        if not 0 <= card.logical_count <= bounds.MAX_SLICES_PER_CARD:
            self.add(
                f"{path}.logicalSliced.count",
                card.logical_count,
                f"soft slices per card {_range(0, bounds.MAX_SLICES_PER_CARD)} (SlicedResourceMaxSize)",
                REASON_OUT_OF_RANGE,
                holds=family_and_fit,
            )
        for profile in card.profiles:
            ppath = f"{path}.physicalSliced.profiles[name={profile.name}]"
            key = keys.partitioned_resource(mfr.resource, profile_suffix(mfr, profile.name))
            problems = _name_problems(key)
            if problems:
                self.add(
                    f"{ppath}.name",
                    profile.name,
                    f"the profile becomes the resource name {key!r}, which " + "; ".join(problems),
                    REASON_INVALID_NAME,
                    withholds=(key,),
                )
            if not 0 <= profile.count <= bounds.MAX_PROFILE_INSTANCES:
                self.add(
                    f"{ppath}.count",
                    profile.count,
                    f"instances of one profile per card {_range(0, bounds.MAX_PROFILE_INSTANCES)}",
                    REASON_OUT_OF_RANGE,
                    holds=(key,),
                )

    def unique_spec_cards(self) -> None:
        for card_id, places in self.spec_cards.items():
            if len(places) < 2:
                continue
            first = _group_path("spec", places[0][0])
            held: list[str] = []
            for group, _card in places:
                mfr = manufacturers.get(group.manufacturer)
                if mfr is not None:
                    held += [*counting_selectors(mfr.resource), *fit_keys(mfr.name, group.id)]
            for group, _card in places[1:]:
                self.add(
                    f"{_group_path('spec', group)}.accelerators[id={card_id}].id",
                    card_id,
                    f"card ids are unique on a node; {first} has it too",
                    REASON_MISMATCH,
                    holds=tuple(dict.fromkeys(held)),
                )

    # --- ledger -------------------------------------------------------------------------------------
    def ledger(self) -> tuple[LedgerGroup, ...] | None:
        """Check the ledger; returns the sanitized ledger."""
        if self.devices.ledger is None:
            return None
        spec_groups = {(g.manufacturer, g.id): g for g in self.devices.groups}
        seen: dict[str, LedgerGroup] = {}
        out: list[LedgerGroup] = []
        for group in self.devices.ledger:
            path = _group_path("status", group)
            spec = spec_groups.get((group.manufacturer, group.id))
            homes = self.homes(group)
            if spec is None:
                if homes:
                    self.mismatch(path, group, homes)
                continue  # a ledger group of no spec group: nothing to compute from it
            mfr = manufacturers.get(spec.manufacturer)
            if mfr is None:
                continue  # reported on the spec side
            group_fit = fit_keys(mfr.name, spec.id)
            cards: list[CardLedger] = []
            for entry in group.cards:
                epath = f"{path}.accelerators[id={entry.id}]"
                if entry.id in seen:
                    other = seen[entry.id]
                    self.add(
                        f"{epath}.id",
                        entry.id,
                        f"card ids are unique in a ledger; {_group_path('status', other)} has it too",
                        REASON_MISMATCH,
                        holds=_unique(
                            *group_fit, *fit_keys(other.manufacturer, other.id), *self.fed_by_entry(entry.id)
                        ),
                    )
                    continue
                seen[entry.id] = group
                place = self.spec_cards.get(entry.id)
                if not place:
                    continue  # the normal window between the Device Manager's spec and status writes
                home, card = place[0]
                if home is not spec:
                    self.add(
                        f"{epath}.id",
                        entry.id,
                        f"a ledger entry sits under the group holding its card, {_group_path('spec', home)}",
                        REASON_MISMATCH,
                        holds=_unique(*group_fit, *self.fed_by_entry(entry.id)),
                    )
                    continue
                cards.append(self.entry(epath, mfr, card, entry, group_fit))
            same = len(cards) == len(group.cards) and all(
                a is b for a, b in zip(cards, group.cards, strict=True)
            )
            out.append(group if same else dataclasses.replace(group, cards=tuple(cards)))
        return tuple(out)

    def homes(self, group: LedgerGroup) -> list[Group]:
        """The spec groups holding this ledger group's cards."""
        found: dict[tuple[str, str], Group] = {}
        for entry in group.cards:
            for home, _card in self.spec_cards.get(entry.id, ())[:1]:
                found.setdefault((home.manufacturer, home.id), home)
        return list(found.values())

    def fed_by_entry(self, card_id: str) -> tuple[str, ...]:
        """What a card's ledger entry feeds: its model's fit labels, and the per-profile counting keys of
        its manufacturer when the card is partitioned."""
        out: list[str] = []
        for home, card in self.spec_cards.get(card_id, ())[:1]:
            out += fit_keys(home.manufacturer, home.id)
            mfr = manufacturers.get(home.manufacturer)
            if mfr is not None and card.partitioned:
                out.append(keys.partitioned_resource(mfr.resource) + ".*")
        return tuple(out)

    def mismatch(self, path: str, group: LedgerGroup, homes: list[Group]) -> None:
        held = tuple(dict.fromkeys(k for entry in group.cards for k in self.fed_by_entry(entry.id)))
        for home in homes:
            field, value, want = (
                ("manufacturer", group.manufacturer, home.manufacturer)
                if home.manufacturer != group.manufacturer
                else ("id", group.id, home.id)
            )
            self.add(
                f"{path}.{field}",
                value,
                f"a ledger group has the {field} of the spec group holding its cards "
                f"({_group_path('spec', home)}: {want!r})",
                REASON_MISMATCH,
                holds=held,
            )

    def entry(
        self,
        path: str,
        mfr: manufacturers.Manufacturer,
        card: Card,
        entry: CardLedger,
        group_fit: tuple[str, str],
    ) -> CardLedger:
        """Check one ledger entry against its card; returns it without profiles the card lacks."""
        sliced_fit = (group_fit[0],)
        if entry.mode not in _MODES:
            self.add(
                f"{path}.mode",
                entry.mode,
                "must be an allocation mode 0..5 (None, Exclusive, Shared, Sliced, Partitioned, Visibility)",
                REASON_OUT_OF_RANGE,
                holds=group_fit,
            )
        if not 0 <= entry.remaining <= bounds.MAX_UNITS:
            self.add(
                f"{path}.remaining",
                entry.remaining,
                f"free units of one card {_range(0, bounds.MAX_UNITS)} (a whole card)",
                REASON_OUT_OF_RANGE,
                holds=group_fit,
            )
        if not 0 <= entry.allocated <= bounds.MAX_UNITS:
            self.add(
                f"{path}.allocated",
                entry.allocated,
                f"allocated units of one card {_range(0, bounds.MAX_UNITS)} (a whole card)",
                REASON_OUT_OF_RANGE,
            )
        ceiling = min(card.logical_count, bounds.MAX_SLICES_PER_CARD)
        if not 0 <= entry.allocated_slices <= max(ceiling, 0):
            self.add(
                f"{path}.allocatedSlices",
                entry.allocated_slices,
                f"slices on one card {_range(0, max(ceiling, 0))} (its logicalSliced.count)",
                REASON_OUT_OF_RANGE if entry.allocated_slices < 0 else REASON_MISMATCH,
                holds=sliced_fit,
            )
        offered = {p.name: p for p in card.profiles}
        kept: dict[str, dict[str, int]] = {"allocatedProfiles": {}, "remainingProfiles": {}}
        out_of_range: set[str] = set()
        for field, counts in (
            ("allocatedProfiles", entry.allocated_profiles),
            ("remainingProfiles", entry.remaining_profiles),
        ):
            for name, count in counts.items():
                ppath = f"{path}.{field}[name={name}]"
                if name not in offered:
                    self.add(
                        f"{ppath}.name",
                        name,
                        "a ledger names only profiles the card offers (spec physicalSliced.profiles: "
                        + (", ".join(sorted(offered)) or "none")
                        + ")",
                        REASON_MISMATCH,
                        withholds=(_profile_key(mfr, name),),
                    )
                    continue
                if not 0 <= count <= bounds.MAX_PROFILE_INSTANCES:
                    self.add(
                        f"{ppath}.count",
                        count,
                        f"instances of one profile per card {_range(0, bounds.MAX_PROFILE_INSTANCES)}",
                        REASON_OUT_OF_RANGE,
                        holds=(_profile_key(mfr, name),),
                    )
                    out_of_range.add(name)
                kept[field][name] = count
        for name, profile in offered.items():
            total = kept["allocatedProfiles"].get(name, 0) + kept["remainingProfiles"].get(name, 0)
            in_range = name not in out_of_range and 0 <= profile.count <= bounds.MAX_PROFILE_INSTANCES
            if in_range and total > profile.count:
                self.add(
                    f"{path}.remainingProfiles[name={name}].count",
                    kept["remainingProfiles"].get(name, 0),
                    f"allocated + remaining instances ({total}) must not exceed the card's ceiling "
                    f"for the profile ({profile.count})",
                    REASON_MISMATCH,
                    holds=(_profile_key(mfr, name),),
                )
        if (
            kept["allocatedProfiles"] == entry.allocated_profiles
            and kept["remainingProfiles"] == entry.remaining_profiles
        ):
            return entry
        return dataclasses.replace(
            entry,
            allocated_profiles=kept["allocatedProfiles"],
            remaining_profiles=kept["remainingProfiles"],
        )


def check_devices(devices: DevicesFacts) -> CheckedDevices:
    """Every rule of the module docstring over one ``Devices``."""
    checker = _Checker(devices)
    checker.spec()
    ledger = checker.ledger()
    if (
        ledger is not None
        and devices.ledger is not None
        and all(a is b for a, b in zip(ledger, devices.ledger, strict=False))
        and len(ledger) == len(devices.ledger)
    ):
        return CheckedDevices(devices, tuple(checker.findings))
    return CheckedDevices(dataclasses.replace(devices, ledger=ledger), tuple(checker.findings))
