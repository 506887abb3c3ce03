"""The bad-input suite: one malformed value per case in a node's ``Devices`` (spec, ledger, interfaces) or
Node (status, labels), made together with a good change of the same node.

Each case asserts the clear signal — one Warning Event on the object the value was read from, whose
note names the field, the value and the rule — and that nothing good was lost: the keys the bad value
feeds keep their last published value (or are withheld when that is the rule), every other key of the
node converges to the good change, the other node sees no write and no Event, each reconcile ends
(no retry), and reconciling again posts nothing new.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import keys

from .badinput import BASELINE, CPU_NAME, DCU, G_KEY, GOOD_AFTER, NV, expected, world
from .builders import card, ledger, profile

if TYPE_CHECKING:
    from collections.abc import Callable

M = keys.UNITS_PER_ACCELERATOR
NV_FIT = (
    f"fit:{keys.sliced_max_free_units_key('nvidia-a100')}",
    f"fit:{keys.shared_free_cards_key('nvidia-a100')}",
)
DCU_FIT = (
    f"fit:{keys.sliced_max_free_units_key('hygon-k100_ai')}",
    f"fit:{keys.shared_free_cards_key('hygon-k100_ai')}",
)
NV_SLICED = f"cap:{NV}.sliced.*"
NV_PART = f"cap:{NV}.partitioned.*"
DCU_SLICED = f"cap:{DCU}.sliced.*"
COUNT_KEY = f"nf:{keys.count_key(keys.general_key(G_KEY))}"
NUMA = f"nf:{keys.RDMA_NUMA}"
S_NV = "spec.groups[manufacturer=nvidia,id=a100]"
L_NV = "status.groups[manufacturer=nvidia,id=a100]"
UNMANAGED = ("cap:*", "fit:*", f"nf:{keys.MANAGED}")

Change = "Callable[[dict[str, Any]], None]"


@dataclass(frozen=True)
class Case:
    id: str
    #: Edits the Node (``node``) or its ``Devices`` (``devices``).
    node: Callable[[dict[str, Any]], None] | None = None
    devices: Callable[[dict[str, Any]], None] | None = None
    #: Expected Events on n1: (kind, reason, text the note must contain), one per finding.
    events: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    #: Flattened output selectors kept at their baseline value / removed.
    holds: tuple[str, ...] = ()
    drops: tuple[str, ...] = ()
    extra: tuple[tuple[str, str], ...] = ()


def at(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    """Set one field by path."""

    def change(obj: dict[str, Any]) -> None:
        node: Any = obj
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return change


def spec_card(group: int, index: int) -> list[Any]:
    return ["spec", "groups", group, "accelerators", index, "status"]


def entry(group: int, index: int) -> list[Any]:
    return ["status", "groups", group, "accelerators", index]


def capacity(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    return at(["status", "capacity", key], value)


def label(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    return at(["metadata", "labels", key], value)


def both(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        for one in changes:
            one(obj)

    return change


def add_group(
    group_id: str, manufacturer: str, cards: list[dict[str, Any]]
) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        obj["spec"]["groups"].append(
            {
                "id": group_id,
                "manufacturer": manufacturer,
                "name": group_id,
                "memory": 1024,
                "accelerators": cards,
            }
        )

    return change


def add_spec_profile(name: str, count: int = 1) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        obj["spec"]["groups"][0]["accelerators"][2]["status"]["physicalSliced"]["profiles"].append(
            profile(name, count)
        )

    return change


def add_remaining(name: str, count: int) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        obj["status"]["groups"][0]["accelerators"][2]["remainingProfiles"].append(
            {"name": name, "count": count}
        )

    return change


def move_ledger_card(obj: dict[str, Any]) -> None:
    moved = obj["status"]["groups"][0]["accelerators"].pop(0)
    obj["status"]["groups"][1]["accelerators"].append(moved)


def copy_ledger_card(obj: dict[str, Any]) -> None:
    obj["status"]["groups"][1]["accelerators"].append(ledger("c0"))


def rename_hygon(group_id: str) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        obj["spec"]["groups"][1]["id"] = group_id
        obj["status"]["groups"][1]["id"] = group_id

    return change


def add_link(name: str, numa: str, state: str = "Active") -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        obj["spec"]["interfaces"].append(
            {"name": name, "rdma": True, "state": state, "linkLayer": "InfiniBand", "numaAffinity": numa}
        )

    return change


def many_links(obj: dict[str, Any]) -> None:
    for i in range(40):
        add_link(f"mlx{i}", str(100 + i))(obj)


def too_many_cards(obj: dict[str, Any]) -> None:
    obj["spec"]["groups"][0]["accelerators"] += [card(f"x{i}", logical=128) for i in range(255)]


LONG_CPU = "Intel(R) Xeon(R) " + "Z9" * 40
LONG_G_KEY = "intel-xeon-" + ("z9" * 40)[: 63 - len("intel-xeon-")]

D, N = "Devices", "Node"
OUT, MIS, NAME = "ValueOutOfRange", "LedgerMismatch", "InvalidLabelName"

CASES = [
    # --- Devices spec -----------------------------------------------------------------------------
    Case("memory-1e16", devices=at(["spec", "groups", 0, "memory"], 10**16),
         events=((D, OUT, (f"{S_NV}.memory", "10000000000000000", "4,194,304")),),
         holds=(f"cap:{NV}.sliced.memory-mib",)),
    Case("memory-negative", devices=at(["spec", "groups", 0, "memory"], -1),
         events=((D, OUT, (f"{S_NV}.memory", "=-1")),), holds=(f"cap:{NV}.sliced.memory-mib",)),
    Case("logical-count-9e18", devices=at([*spec_card(0, 0), "logicalSliced", "count"], 9 * 10**18),
         events=((D, OUT, ("accelerators[id=c0].status.logicalSliced.count", "9000000000000000000",
                           "0..512")),),
         holds=(NV_SLICED, NV_PART, *NV_FIT)),
    Case("logical-count-513", devices=at([*spec_card(0, 1), "logicalSliced", "count"], 513),
         events=((D, OUT, ("accelerators[id=c1].status.logicalSliced.count", "513")),),
         holds=(NV_SLICED, NV_PART, *NV_FIT)),
    Case("logical-count-negative", devices=at([*spec_card(0, 0), "logicalSliced", "count"], -3),
         events=((D, OUT, ("logicalSliced.count", "-3")),), holds=(NV_SLICED, NV_PART, *NV_FIT)),
    Case("card-id-reused-by-second-group",
         devices=add_group("a100-ghost", "nvidia", [card("c2", profiles=[])]),
         events=((D, MIS, ("spec.groups[manufacturer=nvidia,id=a100-ghost].accelerators[id=c2].id",
                           "unique", S_NV)),),
         holds=(NV_SLICED, NV_PART, *NV_FIT)),
    Case("card-id-reused-across-manufacturers", devices=add_group("ghost", "hygon", [card("c0", logical=4)]),
         events=((D, MIS, ("accelerators[id=c0].id", "unique")),),
         holds=(NV_SLICED, NV_PART, *NV_FIT, DCU_SLICED)),
    Case("profile-name-with-space", devices=add_spec_profile("3g 40gb"),
         events=((D, NAME, ("profiles[name=3g 40gb].name", "'3g 40gb'", "name part")),)),
    Case("profile-ceiling-9", devices=at([*spec_card(0, 3), "physicalSliced", "profiles", 0, "count"], 9),
         events=((D, OUT, ("accelerators[id=c3].status.physicalSliced.profiles[name=1g.10gb].count", "=9")),),
         holds=(f"cap:{NV}.partitioned.mig-1g.10gb",)),
    Case("profile-ceiling-negative",
         devices=at([*spec_card(0, 3), "physicalSliced", "profiles", 2, "count"], -1),
         events=((D, OUT, ("profiles[name=7g.80gb].count", "=-1")),),
         holds=(f"cap:{NV}.partitioned.mig-7g.80gb",)),
    Case("group-id-with-slash", devices=rename_hygon("k100/ai"),
         events=((D, NAME, ("spec.groups[manufacturer=hygon,id=k100/ai].id", "'k100/ai'")),),
         drops=DCU_FIT),
    Case("unknown-manufacturer", devices=add_group("x1", "acme", [card("z0", logical=8)]),
         events=((D, OUT, ("spec.groups[manufacturer=acme,id=x1].manufacturer", "'acme'")),)),
    Case("too-many-cards-in-a-model", devices=too_many_cards,
         events=((D, OUT, (f"{S_NV}.accelerators=259", "0..256")),), holds=(NV_SLICED, NV_PART, *NV_FIT)),
    # --- Devices ledger ---------------------------------------------------------------------------
    Case("remaining-99999999999", devices=at([*entry(0, 0), "remaining"], 99_999_999_999),
         events=((D, OUT, (f"{L_NV}.accelerators[id=c0].remaining", "99999999999", "1,600,000")),),
         holds=NV_FIT),
    Case("remaining-negative", devices=at([*entry(0, 1), "remaining"], -16_000),
         events=((D, OUT, ("accelerators[id=c1].remaining", "-16000")),), holds=NV_FIT),
    Case("remaining-m-plus-one", devices=at([*entry(0, 0), "remaining"], M + 1),
         events=((D, OUT, ("remaining", "1600001")),), holds=NV_FIT),
    Case("allocated-above-a-card", devices=at([*entry(0, 1), "allocated"], 2 * M),
         events=((D, OUT, ("accelerators[id=c1].allocated", "3200000", "ignored")),)),
    Case("mode-9", devices=at([*entry(0, 0), "mode"], 9),
         events=((D, OUT, ("accelerators[id=c0].mode", "=9", "0..5")),), holds=NV_FIT),
    Case("mode-negative", devices=at([*entry(0, 1), "mode"], -1),
         events=((D, OUT, ("accelerators[id=c1].mode", "=-1")),), holds=NV_FIT),
    Case("slices-above-logical-count", devices=at([*entry(0, 1), "allocatedSlices"], 129),
         events=((D, MIS, ("accelerators[id=c1].allocatedSlices", "129", "logicalSliced.count")),),
         holds=(NV_FIT[0],)),
    Case("hygon-fifth-slice", devices=at([*entry(1, 0), "allocatedSlices"], 5),
         events=((D, MIS, ("accelerators[id=h0].allocatedSlices", "=5", "0..4")),), holds=(DCU_FIT[0],)),
    Case("slices-negative", devices=at([*entry(0, 1), "allocatedSlices"], -2),
         events=((D, OUT, ("allocatedSlices", "-2")),), holds=(NV_FIT[0],)),
    Case("ledger-manufacturer-amd-on-nvidia-cards",
         devices=at(["status", "groups", 0, "manufacturer"], "amd"),
         events=((D, MIS, ("status.groups[manufacturer=amd,id=a100].manufacturer", "'amd'", "'nvidia'")),),
         holds=(*NV_FIT, NV_PART)),
    Case("ledger-group-id-not-the-spec-one", devices=at(["status", "groups", 0, "id"], "a100-80gb"),
         events=((D, MIS, ("status.groups[manufacturer=nvidia,id=a100-80gb].id", "'a100'")),),
         holds=(*NV_FIT, NV_PART)),
    Case("ledger-card-under-another-group", devices=move_ledger_card,
         events=((D, MIS, ("status.groups[manufacturer=hygon,id=k100_ai].accelerators[id=c0].id",
                           "group holding its card")),),
         holds=(*NV_FIT, *DCU_FIT)),
    Case("ledger-card-twice", devices=copy_ledger_card,
         events=((D, MIS, ("accelerators[id=c0].id", "unique in a ledger")),), holds=(*NV_FIT, *DCU_FIT)),
    Case("remaining-profile-not-offered", devices=add_remaining("9g.999gb", 1),
         events=((D, MIS, ("remainingProfiles[name=9g.999gb].name", "'9g.999gb'", "1g.10gb, 3g.40gb, 7g.80gb",
                           f"not publishing {NV}.partitioned.mig-9g.999gb")),)),
    Case("remaining-profile-with-space", devices=add_remaining("3g 40gb", 1),
         events=((D, MIS, ("remainingProfiles[name=3g 40gb].name", "'3g 40gb'")),)),
    Case("remaining-profile-count-9", devices=at([*entry(0, 2), "remainingProfiles", 1, "count"], 9),
         events=((D, OUT, ("accelerators[id=c2].remainingProfiles[name=1g.10gb].count", "=9", "0..8")),),
         holds=(f"cap:{NV}.partitioned.mig-1g.10gb",)),
    Case("profiles-above-ceiling", devices=at([*entry(0, 2), "remainingProfiles", 0, "count"], 2),
         events=((D, MIS, ("accelerators[id=c2].remainingProfiles[name=3g.40gb].count", "ceiling")),),
         holds=(f"cap:{NV}.partitioned.mig-3g.40gb",)),
    Case("allocated-profile-negative", devices=at([*entry(0, 2), "allocatedProfiles", 0, "count"], -1),
         events=((D, OUT, ("allocatedProfiles[name=3g.40gb].count", "=-1")),),
         holds=(f"cap:{NV}.partitioned.mig-3g.40gb",)),
    # --- Devices interfaces -----------------------------------------------------------------------
    Case("numa-with-spaces-on-usable-link", devices=at(["spec", "interfaces", 0, "numaAffinity"], "0 1"),
         events=((D, NAME, ("spec.interfaces[name=ib0].numaAffinity", "'0 1'", keys.RDMA_NUMA)),),
         holds=(NUMA,)),
    Case("numa-with-spaces-on-down-link", devices=add_link("ib9", "0 1", state="Down"),
         events=((D, NAME, ("spec.interfaces[name=ib9].numaAffinity", "ignored")),)),
    Case("numa-ids-too-many-for-a-label", devices=many_links,
         events=((D, NAME, ("spec.interfaces[*].numaAffinity", "at most 63")),), holds=(NUMA,)),
    # --- Node status and labels -------------------------------------------------------------------
    Case("cpu-1e1000000", node=capacity("cpu", "1e1000000"),
         events=((N, OUT, ("status.capacity[cpu]", "'1e1000000'", "1,048,576")),), holds=(COUNT_KEY,)),
    Case("cpu-as-stored-10e999999", node=capacity("cpu", "10e999999"),
         events=((N, OUT, ("status.capacity[cpu]", "'10e999999'")),), holds=(COUNT_KEY,)),
    Case("cpu-two-million", node=capacity("cpu", "2e6"),
         events=((N, OUT, ("status.capacity[cpu]", "'2e6'")),), holds=(COUNT_KEY,)),
    Case("cpu-negative", node=capacity("cpu", "-4"),
         events=((N, OUT, ("status.capacity[cpu]", "'-4'")),), holds=(COUNT_KEY,)),
    Case("cpu-not-a-quantity", node=capacity("cpu", "lots"),
         events=((N, OUT, ("status.capacity[cpu]", "'lots'")),), holds=(COUNT_KEY,)),
    Case("sliced-pool-1e1000000", node=capacity(f"{NV}.sliced", "1e1000000"),
         events=((N, OUT, (f"status.capacity[{NV}.sliced]", "'1e1000000'", "whole number")),),
         holds=(NV_SLICED,)),
    Case("partitioned-pool-fraction", node=capacity(f"{NV}.partitioned", "2500m"),
         events=((N, OUT, (f"status.capacity[{NV}.partitioned]", "'2500m'")),), holds=(NV_PART,)),
    Case("pool-above-int32", node=capacity(f"{DCU}.sliced", "3000000000"),
         events=((N, OUT, (f"status.capacity[{DCU}.sliced]", "2,147,483,647")),), holds=(DCU_SLICED,)),
    Case("managed-True", node=label(keys.MANAGED, "True"),
         events=((N, "ManagedLabelIgnored", (f"metadata.labels[{keys.MANAGED}]", "'True'", "'true'")),),
         drops=UNMANAGED),
    Case("managed-empty", node=label(keys.MANAGED, ""),
         events=((N, "ManagedLabelIgnored", ("=''", "only the exact value 'true'")),), drops=UNMANAGED),
    Case("managed-yes", node=label(keys.MANAGED, "yes"),
         events=((N, "ManagedLabelIgnored", ("'yes'",)),), drops=UNMANAGED),
    # Not bad input since issue 16 defect 4: "<63-char gKey>.count" is shortened (api/keys.shortened),
    # the same key the chain pins, and published with no finding.
    Case("cpu-name-makes-a-63-char-gkey",
         node=at(["metadata", "annotations", keys.CPU_NAME_ANNOTATION], LONG_CPU),
         drops=(f"nf:{keys.general_key(G_KEY)}", COUNT_KEY),
         extra=((f"nf:{keys.general_key(LONG_G_KEY)}", "true"),
                (f"nf:{keys.count_key(keys.general_key(LONG_G_KEY))}", "96"))),
    # --- several at once --------------------------------------------------------------------------
    Case("memory-and-remaining-in-one-edit",
         devices=both(at(["spec", "groups", 0, "memory"], 10**16),
                      at([*entry(0, 0), "remaining"], 99_999_999_999)),
         events=((D, OUT, (f"{S_NV}.memory",)), (D, OUT, ("accelerators[id=c0].remaining",))),
         holds=(f"cap:{NV}.sliced.memory-mib", *NV_FIT)),
    Case("cpu-and-pool-in-one-edit",
         node=both(capacity("cpu", "1e1000000"), capacity(f"{NV}.partitioned", "1e1000000")),
         events=((N, OUT, ("status.capacity[cpu]",)), (N, OUT, (f"status.capacity[{NV}.partitioned]",))),
         holds=(COUNT_KEY, NV_PART)),
]  # fmt: skip


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
async def test_bad_input(case: Case) -> None:
    w = world(case.node, case.devices)
    await w.reconcile("n1")
    await w.reconcile("n2")

    # The clear signal: one Warning per finding, on the object the value came from, naming it.
    posted = w.events_for("n1")
    assert len(posted) == len(case.events), [e["note"] for e in posted]
    for kind, reason, texts in case.events:
        matching = [
            e
            for e in posted
            if e["kind"] == kind and e["reason"] == reason and all(t in e["note"] for t in texts)
        ]
        assert matching, (kind, reason, texts, [e["note"] for e in posted])
    assert all(e["action"] == "Validate" for e in posted)

    # Nothing good lost: held keys at their last published value, the rest converged.
    assert w.outputs("n1") == expected(case.holds, case.drops, dict(case.extra))
    # The other node: no write, no Event, its outputs as published.
    assert w.writes_for("n2") == []
    assert w.events_for("n2") == []
    assert w.outputs("n2") == BASELINE

    # Stuck: reconciling again posts nothing new.
    await w.reconcile("n1")
    assert len(w.events_for("n1")) == len(case.events)


def test_suite_size() -> None:
    """The issue asks for at least 35 cases over Devices (ledger and spec) and Node status/labels."""
    assert len(CASES) >= 35
    assert {c.id for c in CASES if c.node} and {c.id for c in CASES if c.devices}


async def test_companion_change_alone_converges_without_events() -> None:
    w = world()
    await w.reconcile("n1")
    assert w.events_for("n1") == []
    assert w.outputs("n1") == GOOD_AFTER
    assert GOOD_AFTER != BASELINE  # the companion change is visible in the outputs


async def test_managed_false_is_an_opt_out_not_a_mistake() -> None:
    w = world(label(keys.MANAGED, "false"))
    await w.reconcile("n1")
    assert w.events_for("n1") == []
    assert w.outputs("n1") == expected(drops=UNMANAGED)


async def test_managed_true_in_manual_mode_counts() -> None:
    w = world(label(keys.MANAGED, "true"), manual=True)
    await w.reconcile("n1")
    assert w.events_for("n1") == []
    out = w.outputs("n1")
    assert out == expected(drops=(f"nf:{keys.MANAGED}",))


async def test_fixed_value_converges_and_a_new_mistake_is_reported_again() -> None:
    """A held key follows the good value once the bad one is fixed; the same mistake made again later
    is a new occurrence and gets a new Event."""
    w = world(devices_change=at([*entry(0, 0), "remaining"], 99_999_999_999))
    await w.reconcile("n1")
    assert len(w.events_for("n1")) == 1
    fixed = world()
    fixed.steps.reporter = w.steps.reporter  # the same agent process: its memory and its Event sink
    await fixed.reconcile("n1")
    assert len(w.events_for("n1")) == 1
    assert fixed.outputs("n1") == GOOD_AFTER
    again = world(devices_change=at([*entry(0, 0), "remaining"], 99_999_999_999))
    again.steps.reporter = w.steps.reporter
    await again.reconcile("n1")
    assert len(w.events_for("n1")) == 2


async def test_held_key_without_a_published_value_is_withheld() -> None:
    """A bad value on a node that never published the key: nothing is published for it."""
    w = world(devices_change=at(["spec", "groups", 0, "memory"], 10**16))
    w.nodes["n1"]["status"]["capacity"].pop(f"{NV}.sliced.memory-mib")
    w = type(w)(w.nodes, w.devices, w.features)
    await w.reconcile("n1")
    assert f"cap:{NV}.sliced.memory-mib" not in w.outputs("n1")
    assert w.outputs("n1")[f"cap:{NV}.sliced.units"] == BASELINE[f"cap:{NV}.sliced.units"]


async def test_garbage_published_value_is_not_kept_as_last_good() -> None:
    """The last good value must itself be good: a published fit label above a card's units is dropped."""
    w = world(devices_change=at([*entry(0, 0), "remaining"], 99_999_999_999))
    key = keys.sliced_max_free_units_key("nvidia-a100")
    w.nodes["n1"]["metadata"]["labels"][key] = "99999999999"
    w = type(w)(w.nodes, w.devices, w.features)
    await w.reconcile("n1")
    assert f"fit:{key}" not in w.outputs("n1")


async def test_rejected_apply_is_reported_once_and_not_resent() -> None:
    """A 422 on an apply: one Event on the Node, the reconcile ends, the same body is not sent again;
    a different body (an input changed) is tried."""
    from gpustack_worker.agent import capacity as capacity_mod

    w = world()
    w.client.reject = capacity_mod.FIELD_MANAGER
    await w.reconcile("n1")
    status_applies = [c for c in w.client.calls if c.verb == "apply" and c.subresource == "status"]
    assert len(status_applies) == 1
    rejected = [e for e in w.events_for("n1") if e["reason"] == "ApplyRejected"]
    assert len(rejected) == 1 and "must be an integer" in rejected[0]["note"]
    assert w.steps.rejected[capacity_mod.FIELD_MANAGER] == 1
    await w.reconcile("n1")
    await w.reconcile("n1")
    assert len([c for c in w.client.calls if c.verb == "apply" and c.subresource == "status"]) == 1
    # Other outputs were not blocked by it.
    assert w.outputs("n1")[DCU_FIT[1]] == GOOD_AFTER[DCU_FIT[1]]
    # An input changes: a new body is tried (and, still rejected, reported once more).
    w.steps.devices.upsert(_with_card(w.devices["n1"]))
    await w.reconcile("n1")
    assert len([c for c in w.client.calls if c.verb == "apply" and c.subresource == "status"]) == 2
    assert w.steps.rejected[capacity_mod.FIELD_MANAGER] == 2


def _with_card(devices: dict[str, Any]) -> Any:
    from gpustack_worker.runtime.frozen import freeze

    devices["spec"]["groups"][1]["accelerators"].append(card("h3", logical=4))
    return freeze(devices)


def test_baseline_is_what_the_scenario_says() -> None:
    """Anchors, so a broken builder cannot make every case pass vacuously."""
    assert BASELINE[f"cap:{NV}.sliced.units"] == str(2 * M)
    assert BASELINE[f"cap:{NV}.sliced.memory-mib"] == str(2 * 81920)
    assert BASELINE[f"cap:{NV}.partitioned.mig-3g.40gb"] == "4"
    assert BASELINE[f"cap:{DCU}.sliced.units"] == str(2 * M)
    assert GOOD_AFTER[f"cap:{DCU}.sliced.units"] == str(3 * M)
    assert BASELINE[NV_FIT[0]] == str(M) and BASELINE[DCU_FIT[1]] == "1" and GOOD_AFTER[DCU_FIT[1]] == "2"
    assert BASELINE[NUMA] == "0_1" and BASELINE[COUNT_KEY] == "96"
    assert CPU_NAME.startswith("Intel")
