"""Gate 3's feasibility table: each family fit and unfit, slice packing, partitions, inflight accounting,
pool judging without a hostname assignment, a vanished node, and the starved role in the message."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
import pytest

from gpustack_worker.api import keys
from gpustack_worker.api.crds.devices import AllocationMode
from gpustack_worker.api.devices_view import (
    Card,
    CardLedger,
    DevicesFacts,
    Group,
    LedgerGroup,
    Profile,
)
from gpustack_worker.placement.gate3 import (
    READY,
    RETRY,
    RETRY_AFTER_S,
    Cluster,
    Domain,
    Verdict,
    assigned_nodes,
    counts_inflight,
    decode_topology_assignment,
    entry_for_apply,
    is_held,
    judge,
    needs_verdict,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

M = keys.UNITS_PER_ACCELERATOR
SHARE = keys.UNITS_PER_SHARE
PCT = keys.UNITS_PER_PERCENT
NS = "team"
A100 = "nvidia-a100"
L4 = "nvidia-l4"


def flavor_of(a_key: str) -> str:
    """The test flavor pinning model ``a_key`` (the cluster builder makes one per model it sees)."""
    return f"flavor-{a_key}"


FLAVOR = flavor_of(A100)
L4_FLAVOR = flavor_of(L4)
A100_PROFILES = (
    Profile("1g.10gb", 7, 9856),
    Profile("2g.20gb", 3, 19968),
    Profile("3g.40gb", 2, 40192),
    Profile("7g.80gb", 1, 80896),
)


# --- builders ---------------------------------------------------------------------------------------
def card(i: int, *, slices: int = 128, profiles: tuple[Profile, ...] = (), unhealthy: bool = False) -> Card:
    return Card(
        f"GPU-{i}", i, logical_count=0 if profiles else slices, profiles=profiles, unhealthy=unhealthy
    )


def free() -> dict[str, Any]:
    return {"mode": AllocationMode.NONE, "remaining": M}


def exclusive() -> dict[str, Any]:
    return {"mode": AllocationMode.EXCLUSIVE, "allocated": M, "remaining": 0}


def shared(shares: int) -> dict[str, Any]:
    return {"mode": AllocationMode.SHARED, "allocated": shares * SHARE, "remaining": M - shares * SHARE}


def sliced(percent_used: int, slices: int) -> dict[str, Any]:
    used = percent_used * PCT
    return {
        "mode": AllocationMode.SLICED,
        "allocated": used,
        "remaining": M - used,
        "allocated_slices": slices,
    }


def parted(
    remaining: dict[str, int], allocated: dict[str, int] | None = None, used: int = 0
) -> dict[str, Any]:
    return {
        "mode": AllocationMode.PARTITIONED if allocated else AllocationMode.NONE,
        "allocated": used,
        "remaining": M - used,
        "allocated_profiles": allocated or {},
        "remaining_profiles": remaining,
    }


def devices(
    node: str,
    ledgers: Sequence[dict[str, Any] | None],
    *,
    model: str = "a100",
    manufacturer: str = "nvidia",
    memory_mib: int = 81920,
    cards: Sequence[Card] | None = None,
    extra: Sequence[tuple[Group, Sequence[dict[str, Any] | None]]] = (),
) -> DevicesFacts:
    """One node's Devices: a group of ``len(ledgers)`` cards; a None ledger entry is not published."""
    own = tuple(cards) if cards is not None else tuple(card(i) for i in range(len(ledgers)))
    groups = [(Group(model, manufacturer, memory_mib=memory_mib, cards=own), ledgers), *extra]
    return DevicesFacts(
        name=node,
        groups=tuple(g for g, _ in groups),
        ledger=tuple(
            LedgerGroup(
                g.id,
                g.manufacturer,
                tuple(
                    CardLedger(c.id, c.index, **entry)
                    for c, entry in zip(g.cards, entries, strict=True)
                    if entry is not None
                ),
            )
            for g, entries in groups
        ),
    )


def node_labels(name: str, **extra: str) -> dict[str, str]:
    return {keys.HOSTNAME: name, keys.accelerator_key(A100): "true", **extra}


def cluster(
    devs: Sequence[DevicesFacts],
    *,
    labels: Mapping[str, Mapping[str, str]] | None = None,
    pods: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]] | None = None,
) -> Cluster:
    """Nodes labelled with the models of their Devices (``labels`` replaces a node's labels), and one
    flavor per model."""
    a_keys = {A100, L4} | {f"{g.manufacturer}-{g.id}" for d in devs for g in d.groups}
    nodes: dict[str, Mapping[str, str]] = {
        d.name: {
            keys.HOSTNAME: d.name,
            **{keys.accelerator_key(f"{g.manufacturer}-{g.id}"): "true" for g in d.groups},
        }
        for d in devs
    }
    nodes.update(labels or {})
    return Cluster(
        nodes=nodes,
        devices={d.name: d for d in devs},
        flavors={flavor_of(a): {keys.accelerator_key(a): "true"} for a in a_keys},
        pods=pods or {},
    )


def hosts(assigned: Mapping[str, int]) -> dict[str, Any]:
    """A hostname-level topologyAssignment placing ``n`` Pods on each node (one individual slice)."""
    names = list(assigned)
    return {
        "levels": [keys.HOSTNAME],
        "slices": [
            {
                "domainCount": len(names),
                "valuesPerLevel": [{"individual": {"roots": names}}],
                "podCounts": {"individual": [assigned[n] for n in names]},
            }
        ],
    }


def pod_template(*containers: tuple[str, dict[str, str]]) -> dict[str, Any]:
    return {
        "spec": {
            "containers": [
                {"name": name, "image": "x", "resources": {"requests": req, "limits": req}}
                for name, req in containers
            ]
        }
    }


def podset(
    name: str,
    requests: dict[str, str],
    *,
    count: int | None = None,
    assignment: dict[str, Any] | None = None,
    flavor: str = FLAVOR,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A PodSet and its assignment (count derived from the assignment when not given)."""
    if count is None:
        count = sum(d.pods for d in decode_topology_assignment(assignment)[1]) if assignment else 1
    spec = {"name": name, "count": count, "template": pod_template(("main", requests))}
    psa: dict[str, Any] = {
        "name": name,
        "flavors": {"credits.gpustack.ai/nvidia": flavor},
        "count": count,
    }
    if assignment is not None:
        psa["topologyAssignment"] = assignment
    return spec, psa


def workload(
    name: str,
    *podsets: tuple[dict[str, Any], dict[str, Any]],
    admitted: bool = False,
    ready: bool = False,
    evicted: bool = False,
) -> dict[str, Any]:
    conditions = [{"type": "QuotaReserved", "status": "True"}]
    if admitted:
        conditions.append({"type": "Admitted", "status": "True"})
    if evicted:
        conditions.append({"type": "Evicted", "status": "True"})
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {"queueName": "q", "podSets": [s for s, _ in podsets]},
        "status": {
            "conditions": conditions,
            "admission": {"clusterQueue": "cq", "podSetAssignments": [a for _, a in podsets]},
            "admissionChecks": [
                {"name": keys.NODE_DEVICES_CHECK, "state": READY if ready else "Pending", "message": ""}
            ],
        },
    }


def gpu(n: int) -> dict[str, str]:
    return {"nvidia.com/gpu": str(n)}


def share(n: int) -> dict[str, str]:
    return {"nvidia.com/gpu.shared": str(n)}


def slice_pct(pct: int) -> dict[str, str]:
    return {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": str(pct * PCT)}


def partition(profile: str) -> dict[str, str]:
    return {"nvidia.com/gpu.partitioned": "1", f"nvidia.com/gpu.partitioned.mig-{profile}": "1"}


def verdict_on(
    node_ledgers: Sequence[dict[str, Any] | None], requests: dict[str, str], pods: int = 1, **kw: Any
) -> Verdict:
    """One PodSet ``role`` with ``pods`` Pods on node ``n1`` whose cards carry ``node_ledgers``."""
    dev = devices("n1", node_ledgers, **kw)
    a_key = f"{dev.groups[0].manufacturer}-{dev.groups[0].id}"
    wl = workload("wl", podset("role", requests, assignment=hosts({"n1": pods}), flavor=flavor_of(a_key)))
    return judge(wl, cluster([dev]))


# --- each family ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ledgers", "requests", "pods", "state"),
    [
        pytest.param([free(), free()], gpu(2), 1, READY, id="exclusive-fit"),
        pytest.param([free(), exclusive()], gpu(2), 1, RETRY, id="exclusive-one-held"),
        pytest.param([free(), shared(1)], gpu(2), 1, RETRY, id="exclusive-not-on-a-shared-card"),
        pytest.param([free(), free()], gpu(1), 2, READY, id="exclusive-two-pods-two-cards"),
        pytest.param([free(), free()], gpu(1), 3, RETRY, id="exclusive-three-pods-two-cards"),
        pytest.param([shared(10), shared(5), free()], share(2), 1, READY, id="shared-fit"),
        pytest.param([shared(10), shared(5), exclusive()], share(2), 1, RETRY, id="shared-one-card-grants"),
        pytest.param([shared(9)], share(1), 2, RETRY, id="shared-last-share-taken-by-first-pod"),
        pytest.param([sliced(30, 1)], slice_pct(70), 1, READY, id="sliced-fills-a-card"),
        pytest.param([sliced(31, 1)], slice_pct(70), 1, RETRY, id="sliced-one-unit-short"),
        pytest.param(
            [exclusive(), shared(1)], slice_pct(10), 1, RETRY, id="sliced-only-free-or-sliced-cards"
        ),
        pytest.param([None], gpu(1), 1, READY, id="unpublished-ledger-reads-free"),
    ],
)
def test_whole_card_families(
    ledgers: list[dict[str, Any] | None], requests: dict[str, str], pods: int, state: str
) -> None:
    verdict = verdict_on(ledgers, requests, pods)
    assert verdict.state == state, verdict.message
    if state == RETRY:
        assert "role role" in verdict.message and "node n1" in verdict.message


def test_exclusive_message_counts_the_free_cards() -> None:
    verdict = verdict_on([free(), exclusive(), exclusive()], gpu(2))
    assert verdict.state == RETRY
    assert "role role: node n1: pod 1 of 1 needs 2 whole nvidia card(s)" in verdict.message
    assert "1 free whole card(s)" in verdict.message


def test_unhealthy_cards_serve_nothing() -> None:
    dev_cards = [card(0), card(1, unhealthy=True)]
    assert verdict_on([free(), free()], gpu(2), cards=dev_cards).state == RETRY
    assert verdict_on([free(), free()], gpu(1), cards=dev_cards).state == READY


@pytest.mark.parametrize(
    "requests",
    [gpu(1), share(1), slice_pct(10)],
    ids=["exclusive", "shared", "sliced"],
)
@pytest.mark.parametrize("entry", [free(), None], ids=["published-free", "entry-not-published"])
def test_an_unhealthy_card_serves_no_family(requests: dict[str, str], entry: dict[str, Any] | None) -> None:
    """Free in the ledger, or not in it at all (which reads free): unhealthy still gives nothing."""
    verdict = verdict_on([entry], requests, cards=[card(0, unhealthy=True)])
    assert verdict.state == RETRY, verdict.message
    assert verdict_on([entry], requests, cards=[card(0)]).state == READY


def test_an_unhealthy_partitioned_card_offers_no_placement() -> None:
    broken = [Card("GPU-0", 0, profiles=A100_PROFILES, unhealthy=True)]
    assert verdict_on([parted({"1g.10gb": 7})], partition("1g.10gb"), cards=broken).state == RETRY


def test_a_node_whose_ledger_is_not_published_reads_free() -> None:
    dev = devices("n1", [free()])
    unpublished = DevicesFacts(dev.name, groups=dev.groups, ledger=None)
    wl = workload("wl", podset("role", slice_pct(100), assignment=hosts({"n1": 1})))
    assert judge(wl, cluster([unpublished])).state == READY


# --- slices -----------------------------------------------------------------------------------------
def test_two_30_percent_slices_fit_one_free_card() -> None:
    assert verdict_on([free()], slice_pct(30), pods=2).state == READY


def test_two_60_percent_slices_do_not() -> None:
    verdict = verdict_on([free()], slice_pct(60), pods=2)
    assert verdict.state == RETRY
    assert "pod 2 of 2" in verdict.message
    assert "no free or sliced card with a free slot and enough units" in verdict.message


def test_a_full_slot_count_refuses_a_slice_whatever_the_units() -> None:
    # Hygon: four slices per card; a card hosting four is full with 60 % of its memory free.
    hygon = [Card("DCU-0", 0, logical_count=4)]
    ledger = [sliced(40, 4)]
    verdict = verdict_on(
        ledger,
        {"hygon.com/dcu.sliced": "1", "hygon.com/dcu.sliced.units": str(10 * PCT)},
        model="k100",
        manufacturer="hygon",
        cards=hygon,
    )
    assert verdict.state == RETRY
    assert (
        verdict_on(
            [sliced(40, 3)],
            {"hygon.com/dcu.sliced": "1", "hygon.com/dcu.sliced.units": str(10 * PCT)},
            model="k100",
            manufacturer="hygon",
            cards=hygon,
        ).state
        == READY
    )


def test_slices_pack_on_the_fullest_card_that_fits() -> None:
    # Card 0 has 40 % left, card 1 is free. A 40 % slice must go to card 0 so a 100 % slice still fits
    # card 1; packing on the freest card would leave neither card able to take the second slice.
    dev = devices("n1", [sliced(60, 1), free()])
    wl = workload(
        "wl",
        podset("small", slice_pct(40), assignment=hosts({"n1": 1})),
        podset("whole", slice_pct(100), assignment=hosts({"n1": 1})),
    )
    assert judge(wl, cluster([dev])).state == READY
    # The per-card budget is global to the Workload: a third role finds nothing left.
    wl3 = workload(
        "wl",
        podset("small", slice_pct(40), assignment=hosts({"n1": 1})),
        podset("whole", slice_pct(100), assignment=hosts({"n1": 1})),
        podset("late", slice_pct(1), assignment=hosts({"n1": 1})),
    )
    verdict = judge(wl3, cluster([dev]))
    assert verdict.state == RETRY
    assert "role late" in verdict.message
    assert "role small" not in verdict.message and "role whole" not in verdict.message


def test_a_mib_slice_folds_against_the_card_vram() -> None:
    req = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "40960"}
    # 40 GiB of an 80 GiB card is half the units: two fit one free card, three do not.
    assert verdict_on([free()], req, pods=2).state == READY
    assert verdict_on([free()], req, pods=3).state == RETRY


# --- partitions -------------------------------------------------------------------------------------
def a100_parted(n: int) -> list[Card]:
    return [card(i, profiles=A100_PROFILES) for i in range(n)]


FULL_A100 = {"1g.10gb": 7, "2g.20gb": 3, "3g.40gb": 2, "7g.80gb": 1}


def test_partition_fits_a_free_placement() -> None:
    assert verdict_on([parted(FULL_A100)], partition("3g.40gb"), cards=a100_parted(1)).state == READY


def test_partition_unfit_when_the_profile_has_no_placement_left() -> None:
    # One 3g.40gb carved: another 3g fits, the 7g no longer does.
    left = {"1g.10gb": 3, "2g.20gb": 1, "3g.40gb": 1, "7g.80gb": 0}
    ledger = [parted(left, {"3g.40gb": 1}, used=M // 2)]
    assert verdict_on(ledger, partition("3g.40gb"), cards=a100_parted(1)).state == READY
    verdict = verdict_on(ledger, partition("7g.80gb"), cards=a100_parted(1))
    assert verdict.state == RETRY
    assert "no partitioned card has a free placement of 7g.80gb" in verdict.message


def test_partitions_consume_overlapping_profiles() -> None:
    # Two 3g.40gb Pods fill the card's two 3g placements; a third does not fit, and neither would a 7g.
    assert verdict_on([parted(FULL_A100)], partition("3g.40gb"), pods=2, cards=a100_parted(1)).state == READY
    assert verdict_on([parted(FULL_A100)], partition("3g.40gb"), pods=3, cards=a100_parted(1)).state == RETRY
    dev = devices("n1", [parted(FULL_A100)], cards=a100_parted(1))
    wl = workload(
        "wl",
        podset("small", partition("1g.10gb"), assignment=hosts({"n1": 1})),
        podset("big", partition("7g.80gb"), assignment=hosts({"n1": 1})),
    )
    verdict = judge(wl, cluster([dev]))
    assert verdict.state == RETRY and "role big" in verdict.message


def test_partitioned_cards_never_serve_whole_card_families() -> None:
    for req in (gpu(1), share(1), slice_pct(10)):
        assert verdict_on([parted(FULL_A100)], req, cards=a100_parted(1)).state == RETRY
    # ... and unpartitioned cards never serve partitions.
    assert verdict_on([free()], partition("1g.10gb")).state == RETRY


def test_published_profile_names_match_the_manufacturer_spelling() -> None:
    # T-Head prints 4g48gb; the request names the published 4g.48gb.
    ppu = [Card("PPU-0", 0, profiles=(Profile("4g48gb", 2, 49152),))]
    req = {"alibabacloud.com/ppu.partitioned": "1", "alibabacloud.com/ppu.partitioned.mig-4g.48gb": "1"}
    ledger = [parted({"4g48gb": 2})]
    assert verdict_on(ledger, req, model="ppu", manufacturer="thead", cards=ppu).state == READY
    assert verdict_on(ledger, req, pods=3, model="ppu", manufacturer="thead", cards=ppu).state == RETRY


# --- eligibility by flavor --------------------------------------------------------------------------
def test_only_cards_of_the_flavor_model_are_eligible() -> None:
    l4 = Group("l4", "nvidia", memory_mib=23034, cards=(Card("L4-0", 0, logical_count=128),))
    dev = devices("n1", [exclusive()], extra=[(l4, [free()])])
    a100_wl = workload("wl", podset("role", gpu(1), assignment=hosts({"n1": 1})))
    verdict = judge(a100_wl, cluster([dev]))
    assert verdict.state == RETRY  # the free L4 is not an A100
    l4_wl = workload("wl", podset("role", gpu(1), assignment=hosts({"n1": 1}), flavor=L4_FLAVOR))
    assert judge(l4_wl, cluster([dev])).state == READY


def test_a_node_without_devices_has_no_cards() -> None:
    c = cluster([])
    c = Cluster(nodes={"n1": node_labels("n1")}, devices={}, flavors=c.flavors)
    verdict = judge(workload("wl", podset("role", gpu(1), assignment=hosts({"n1": 1}))), c)
    assert verdict.state == RETRY and "no nvidia card" in verdict.message


# --- inflight ---------------------------------------------------------------------------------------
def other_pod(node: str, *, held: bool, phase: str = "Running", podset_name: str = "role") -> dict[str, Any]:
    annotations = {keys.KUEUE_WORKLOAD_ANNOTATION: "other"}
    if held:
        annotations[keys.ACCELERATOR_ALLOCATED] = orjson.dumps({"main": {"cards": ["GPU-0"]}}).decode()
    return {
        "metadata": {
            "name": f"other-{node}",
            "namespace": NS,
            "annotations": annotations,
            "labels": {keys.KUEUE_PODSET_LABEL: podset_name},
        },
        "spec": {"nodeName": node, **pod_template(("main", gpu(1)))["spec"]},
        "status": {"phase": phase},
    }


def inflight_case(
    ledgers: list[dict[str, Any]], pods: list[dict[str, Any]], *, need: int, **other: Any
) -> Verdict:
    dev = devices("n1", ledgers)
    remembered = other.pop("remembered", frozenset())
    other_wl = workload("other", podset("role", gpu(1), assignment=hosts({"n1": 1})), **other)
    mine = workload("wl", podset("role", gpu(need), assignment=hosts({"n1": 1})))
    return judge(
        mine, cluster([dev], pods={(NS, "other"): pods}), [other_wl, mine], remembered_ready=remembered
    )


def test_an_admitted_workloads_unheld_pod_counts_against_the_node() -> None:
    # The ledger shows both cards free, but an admitted Workload's Pod placed on n1 is not held yet.
    assert (
        inflight_case([free(), free()], [other_pod("n1", held=False)], need=2, admitted=True).state == RETRY
    )
    assert (
        inflight_case([free(), free()], [other_pod("n1", held=False)], need=1, admitted=True).state == READY
    )
    # Not created yet at all: the assignment still promises it the card.
    assert inflight_case([free(), free()], [], need=2, admitted=True).state == RETRY


def test_a_held_pod_is_already_in_the_ledger() -> None:
    # The ledger holds the other Pod's card: it is not charged twice.
    assert (
        inflight_case([exclusive(), free()], [other_pod("n1", held=True)], need=1, admitted=True).state
        == READY
    )
    finished = other_pod("n1", held=False, phase="Succeeded")
    assert inflight_case([exclusive(), free()], [finished], need=1, admitted=True).state == READY


def test_a_pod_of_another_podset_or_node_is_not_held_for_this_one() -> None:
    elsewhere = [other_pod("n2", held=True), other_pod("n1", held=True, podset_name="x")]
    assert inflight_case([exclusive(), free()], elsewhere, need=1, admitted=True).state == RETRY


def test_which_workloads_count_inflight() -> None:
    pods = [other_pod("n1", held=False)]
    assert inflight_case([free(), free()], pods, need=2, ready=True).state == RETRY
    assert inflight_case([free(), free()], pods, need=2).state == READY  # only reserved: not counted
    assert inflight_case([free(), free()], pods, need=2, admitted=True, evicted=True).state == READY
    remembered = frozenset({f"{NS}/other"})
    assert inflight_case([free(), free()], pods, need=2, remembered=remembered).state == RETRY


def test_workloads_without_a_hostname_assignment_are_not_counted() -> None:
    dev = devices("n1", [free(), free()])
    other_wl = workload("other", podset("role", gpu(1)), admitted=True)  # no topologyAssignment
    mine = workload("wl", podset("role", gpu(2), assignment=hosts({"n1": 1})))
    assert judge(mine, cluster([dev]), [other_wl]).state == READY


def test_counts_inflight_reads_the_state() -> None:
    admitted = workload("a", podset("r", gpu(1)), admitted=True)
    assert counts_inflight(admitted)
    pending = workload("p", podset("r", gpu(1)))
    assert not counts_inflight(pending)
    assert counts_inflight(pending, frozenset({f"{NS}/p"}))
    no_admission = {"metadata": {"name": "x", "namespace": NS}, "status": {}}
    assert not counts_inflight(no_admission, frozenset({f"{NS}/x"}))


def test_is_held() -> None:
    assert not is_held(other_pod("n1", held=False))
    assert is_held(other_pod("n1", held=True))
    assert is_held(other_pod("n1", held=False, phase="Failed"))
    broken = other_pod("n1", held=False)
    broken["metadata"]["annotations"][keys.ACCELERATOR_ALLOCATED] = "{not json"
    assert not is_held(broken)
    partial = other_pod("n1", held=False)
    partial["spec"]["containers"].append({"name": "side", "image": "x", "resources": {"requests": gpu(1)}})
    partial["metadata"]["annotations"][keys.ACCELERATOR_ALLOCATED] = '{"main": {}}'
    assert not is_held(partial)  # the record must name every claiming container
    cpu_only = {"metadata": {}, "spec": {"containers": [{"name": "c", "resources": {}}]}, "status": {}}
    assert is_held(cpu_only)


# --- where the pods go ------------------------------------------------------------------------------
def test_a_podset_without_hostname_assignment_is_judged_across_the_pool() -> None:
    full = devices("n1", [exclusive(), exclusive()])
    roomy = devices("n2", [free(), free()])
    wl = workload("wl", podset("role", gpu(2), count=1))
    assert judge(wl, cluster([full, roomy])).state == READY
    verdict = judge(workload("wl", podset("role", gpu(2), count=2)), cluster([full, roomy]))
    assert verdict.state == RETRY
    assert "role role: pod 2 of 2 fits none of the pool's nodes" in verdict.message
    # A node outside the flavor's pool does not count.
    outsider = {"n2": {keys.HOSTNAME: "n2"}}
    assert judge(wl, cluster([full, roomy], labels=outsider)).state == RETRY


def test_a_higher_level_assignment_is_judged_across_the_domain() -> None:
    rack = keys.PRIVATE_RACK
    full = devices("n1", [exclusive()])
    roomy = devices("n2", [free()])
    labels = {"n1": node_labels("n1", **{rack: "rack-1"}), "n2": node_labels("n2", **{rack: "rack-2"})}
    ta: dict[str, Any] = {
        "levels": [rack],
        "slices": [
            {"domainCount": 1, "valuesPerLevel": [{"universal": "rack-1"}], "podCounts": {"universal": 1}}
        ],
    }
    verdict = judge(
        workload("wl", podset("role", gpu(1), assignment=ta)), cluster([full, roomy], labels=labels)
    )
    assert verdict.state == RETRY and f"{rack}=rack-1" in verdict.message
    ta["slices"][0]["valuesPerLevel"] = [{"universal": "rack-2"}]
    assert judge(
        workload("wl", podset("role", gpu(1), assignment=ta)), cluster([full, roomy], labels=labels)
    ).ready


def test_a_node_gone_holds() -> None:
    dev = devices("n1", [free()])
    wl = workload("wl", podset("role", gpu(1), assignment=hosts({"n1": 1, "gone": 1})))
    verdict = judge(wl, cluster([dev]))
    assert verdict.state == RETRY
    assert "role role: assigned node gone is gone" in verdict.message


def test_hostnames_map_to_node_names_by_label() -> None:
    dev = devices("node-object-name", [free()])
    labels = {"node-object-name": node_labels("host-label")}
    wl = workload("wl", podset("role", gpu(1), assignment=hosts({"host-label": 1})))
    assert judge(wl, cluster([dev], labels=labels)).ready


def test_each_assigned_node_hosts_its_own_share() -> None:
    a, b = devices("a", [free()]), devices("b", [exclusive()])
    wl = workload("wl", podset("decode", gpu(1), assignment=hosts({"a": 1, "b": 1})))
    verdict = judge(wl, cluster([a, b]))
    assert verdict.state == RETRY
    assert "role decode: node b: pod 2 of 2" in verdict.message


def test_the_message_names_only_the_starved_role() -> None:
    a, b = devices("a", [free(), free()]), devices("b", [sliced(90, 1)])
    wl = workload(
        "wl",
        podset("prefill", gpu(2), assignment=hosts({"a": 1})),
        podset("decode", slice_pct(20), assignment=hosts({"b": 1})),
    )
    verdict = judge(wl, cluster([a, b]))
    assert verdict.state == RETRY
    assert verdict.message.startswith("role decode: node b: pod 1 of 1 needs a nvidia slice of 320,000 units")
    assert "prefill" not in verdict.message


def test_ready_message_and_no_demand() -> None:
    verdict = verdict_on([free()], gpu(1))
    assert verdict.ready and "role" in verdict.message
    cpu = judge(workload("wl", podset("cpu", {"cpu": "1"}, assignment=hosts({"n1": 1}))), cluster([]))
    assert cpu.ready


def test_bad_input_is_retry_with_a_reason() -> None:
    verdict = verdict_on([free()], {"nvidia.com/gpu": "half"})
    assert verdict.state == RETRY and "unreadable accelerator request" in verdict.message
    bad = workload(
        "wl",
        podset(
            "role",
            gpu(1),
            count=2,
            assignment={
                "levels": [keys.HOSTNAME],
                "slices": [
                    {
                        "domainCount": 2,
                        "valuesPerLevel": [{"individual": {"roots": ["a"]}}],
                        "podCounts": {"universal": 1},
                    }
                ],
            },
        ),
    )
    verdict = judge(bad, cluster([]))
    assert verdict.state == RETRY and "1 roots for domainCount 2" in verdict.message


# --- topologyAssignment decoding --------------------------------------------------------------------
def test_decode_topology_assignment() -> None:
    ta = {
        "levels": ["block", keys.HOSTNAME],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [
                    {"universal": "b1"},
                    {"individual": {"prefix": "node-", "suffix": "-x", "roots": ["1", "2"]}},
                ],
                "podCounts": {"individual": [3, 1]},
            },
            {
                "domainCount": 1,
                "valuesPerLevel": [{"universal": "b2"}, {"individual": {"roots": ["n9"]}}],
                "podCounts": {"universal": 2},
            },
        ],
    }
    levels, domains = decode_topology_assignment(ta)
    assert levels == ("block", keys.HOSTNAME)
    assert domains == [
        Domain(("b1", "node-1-x"), 3),
        Domain(("b1", "node-2-x"), 1),
        Domain(("b2", "n9"), 2),
    ]


@pytest.mark.parametrize(
    ("slices", "fragment"),
    [
        ([{"domainCount": 0, "valuesPerLevel": [], "podCounts": {}}], "domainCount 0"),
        ([{"domainCount": 1, "valuesPerLevel": [{}], "podCounts": {"universal": 1}}], "neither universal"),
        (
            [{"domainCount": 2, "valuesPerLevel": [{"universal": "a"}], "podCounts": {"individual": [1]}}],
            "podCounts do not cover",
        ),
    ],
)
def test_decode_rejects_malformed(slices: list[dict[str, Any]], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        decode_topology_assignment({"levels": [keys.HOSTNAME], "slices": slices})


# --- who is judged, and the entry written -----------------------------------------------------------
def test_needs_verdict() -> None:
    pending = workload("wl", podset("role", gpu(1)))
    assert needs_verdict(pending)
    assert not needs_verdict(workload("wl", podset("role", gpu(1)), ready=True))
    assert not needs_verdict(workload("wl", podset("role", gpu(1)), admitted=True))
    assert not needs_verdict(workload("wl", podset("role", gpu(1)), evicted=True))
    no_reservation = workload("wl", podset("role", gpu(1)))
    no_reservation["status"]["conditions"] = []
    assert not needs_verdict(no_reservation)
    no_admission = workload("wl", podset("role", gpu(1)))
    del no_admission["status"]["admission"]
    assert not needs_verdict(no_admission)
    inactive = workload("wl", podset("role", gpu(1)))
    inactive["spec"]["active"] = False
    assert not needs_verdict(inactive)
    not_ours = workload("wl", podset("role", gpu(1)))
    not_ours["status"]["admissionChecks"] = [{"name": "other", "state": "Pending"}]
    assert not needs_verdict(not_ours)


def test_entry_for_apply() -> None:
    wl = workload("wl", podset("role", gpu(1)))
    wl["status"]["admissionChecks"][0]["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    retry = entry_for_apply(wl, Verdict(RETRY, "role role: starved"), "2026-01-02T00:00:00Z")
    assert retry == {
        "name": keys.NODE_DEVICES_CHECK,
        "state": RETRY,
        "message": "role role: starved",
        "lastTransitionTime": "2026-01-02T00:00:00Z",
        "requeueAfterSeconds": RETRY_AFTER_S,
    }
    assert RETRY_AFTER_S == 30
    wl["status"]["admissionChecks"][0]["state"] = READY
    ready = entry_for_apply(wl, Verdict(READY, "fits"), "2026-01-03T00:00:00Z")
    assert ready["lastTransitionTime"] == "2026-01-01T00:00:00Z"  # same state: the transition time stays
    assert "requeueAfterSeconds" not in ready


def test_assigned_nodes() -> None:
    nodes = {"n1": node_labels("n1"), "obj": node_labels("host-2")}
    wl = workload(
        "wl",
        podset("a", gpu(1), assignment=hosts({"n1": 1, "host-2": 1, "gone": 1})),
        podset("b", gpu(1)),  # no assignment: not read
    )
    assert assigned_nodes(wl, nodes) == ["n1", "obj"]
    rack = {
        "levels": [keys.PRIVATE_RACK],
        "slices": [
            {"domainCount": 1, "valuesPerLevel": [{"universal": "r1"}], "podCounts": {"universal": 1}}
        ],
    }
    assert assigned_nodes(workload("wl", podset("a", gpu(1), assignment=rack)), nodes) == []
