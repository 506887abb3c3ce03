"""The fit labels admit a node exactly when Gate 3 would (scheduling-chain "Per-card fit labels"; reference
§3.2, §5.2, §5.3, A.6; issue 16 defect 7).

The promise is for a single Pod asking for one accelerator, so that is the property: for every ``Devices``
(every manufacturer family and its slice limits — Hygon's 4 —, sliceable, whole-only and partitioned cards,
healthy and unhealthy, every allocation mode, ledger entries published or missing, whole status groups
missing, no ``status`` at all, ledger entries of cards the spec does not have) and for every demand of one
Pod of a model on that node —

- a logical slice of ``U`` units: the Workload pin ``Gt U-1`` on ``sliced-max-free-units.fit…/<aKey>``
  (:func:`gpustack_worker.placement.fitpin.fit_requirements`, evaluated as Kubernetes does: the label is
  present and its integer value is greater) admits the node ⇔ :func:`gate3.judge` answers ``Ready``;
- one ownership share on each of ``N`` distinct cards: ``Gt N-1`` on ``shared-free-cards.fit…/<aKey>``
  (the pin writes it for ``N ≥ 2``; ``N = 1`` is checked on the label itself) ⇔ ``Ready``.

Both sides get what production gives them: the raw object through ``devices_facts`` and
``check_devices``, the agent's real :func:`fit.desired`, Gate 3's real :func:`judge` on a Workload Kueue
assigned to that node.

Restricted, by the spec's own words or by other documented rules:

- one Pod, one claim: "several Pods/cards per node (label admits a node when one card fits one Pod)" is a
  documented residual retry (reference §5.3) — a label says what *one* card still gives;
- no other Workload in flight: "room promised to a still-starting Workload" is another documented residual
  (Gate 3 charges it, the labels follow the ledger);
- ledgers that pass the ``Devices`` checks: a value out of bounds *holds* a label at its last published
  value (docs/agent.md "Bad input"), a different rule on purpose;
- ``aKey``s that form valid label names: otherwise the webhook pins nothing (reference §5.3).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.agent import fit
from gpustack_worker.agent.facts import node_facts
from gpustack_worker.api import keys, manufacturers
from gpustack_worker.api.crds.devices import AllocationMode
from gpustack_worker.api.devices_check import check_devices
from gpustack_worker.api.devices_view import DevicesFacts, devices_facts
from gpustack_worker.placement.demand import demand_of_podset
from gpustack_worker.placement.fitpin import fit_requirements
from gpustack_worker.placement.gate3 import READY, Cluster, judge
from tests.kit.properties import examples

from .test_gate3 import flavor_of, hosts, pod_template, podset, workload

M = keys.UNITS_PER_ACCELERATOR
SHARE = keys.UNITS_PER_SHARE
NODE = "n1"
PROFILES = (
    {"name": "1g.10gb", "memoryMib": 9856, "count": 7},
    {"name": "3g.40gb", "memoryMib": 40192, "count": 2},
)
MODES = [int(m) for m in AllocationMode]


# --- one node's Devices, as the API serves it ---------------------------------------------------------
@st.composite
def card_status(draw: st.DrawFn, mfr: manufacturers.Manufacturer) -> dict[str, Any]:
    """A card's capability: sliceable (``logicalSliced.count`` the manufacturer's, or 1, 2, 4, 16),
    whole-only (count 0, no profiles), or — for a manufacturer that partitions — partitioned (count 0 with
    profiles) or pending-enable (a soft count *and* profiles: not partitioned yet, reference §2.2)."""
    kinds = ["sliceable", "whole"] + (["partitioned", "pending"] if mfr.partition_kind else [])
    kind = draw(st.sampled_from(kinds))
    logical = 0
    if kind in ("sliceable", "pending"):
        logical = draw(st.sampled_from([mfr.logical_slices or 4, 1, 2, 4, 16]))
    status: dict[str, Any] = {
        "unhealthy": draw(st.booleans()),
        "logicalSliced": {"count": logical, "coresPercentageOvercommit": mfr.overcommittable},
    }
    if kind in ("partitioned", "pending"):
        status["physicalSliced"] = {"profiles": list(PROFILES), "count": 7}
    return status


@st.composite
def remaining_units(draw: st.DrawFn) -> int:
    return draw(
        st.one_of(
            st.just(M),  # a whole card left, whatever the mode says (exclusive's edge)
            st.sampled_from([0, 1, SHARE - 1, SHARE, SHARE + 1, M - 1, M]),
            st.integers(0, 10).map(lambda n: n * SHARE),
            st.integers(0, M),
        )
    )


def slice_counts(count: int) -> st.SearchStrategy[int]:
    """``allocatedSlices`` at and around the card's ``logicalSliced.count`` (the edges a slot check can be
    off by one at), and anywhere in ``0..count``."""
    edges = sorted({0, 1, count - 1, count} & set(range(count + 1)))
    return st.one_of(st.sampled_from(edges), st.integers(0, count))


@st.composite
def ledger_entry(draw: st.DrawFn, card: dict[str, Any]) -> dict[str, Any]:
    status = card["status"]
    remaining = draw(remaining_units())
    entry: dict[str, Any] = {
        "id": card["id"],
        "index": card["index"],
        "mode": draw(st.sampled_from(MODES)),
        "remaining": remaining,
        "allocated": M - remaining,
        "allocatedSlices": draw(slice_counts(status["logicalSliced"]["count"])),
    }
    if "physicalSliced" in status and draw(st.integers(0, 9)) > 0:
        left = {p["name"]: draw(st.integers(0, p["count"])) for p in PROFILES}
        entry["remainingProfiles"] = [{"name": n, "count": c} for n, c in left.items()]
        entry["allocatedProfiles"] = [
            {"name": p["name"], "count": draw(st.integers(0, p["count"] - left[p["name"]]))} for p in PROFILES
        ]
    return entry


@st.composite
def devices_object(draw: st.DrawFn) -> dict[str, Any]:
    models = draw(
        st.lists(
            st.tuples(st.sampled_from(sorted(manufacturers.MANUFACTURERS)), st.sampled_from(["m1", "m2"])),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    groups = []
    for mfr_name, group_id in models:
        mfr = manufacturers.MANUFACTURERS[mfr_name]
        n = draw(st.sampled_from([1, 1, 2, 3, 4]))  # one-card models often: no second card to fall back on
        cards = [
            {"id": f"{mfr_name}-{group_id}-{i}", "index": i, "status": draw(card_status(mfr))}
            for i in range(n)
        ]
        groups.append(
            {
                "id": group_id,
                "manufacturer": mfr_name,
                "name": group_id,
                "memory": 65536,
                "accelerators": cards,
            }
        )
    obj: dict[str, Any] = {"metadata": {"name": NODE}, "spec": {"groups": groups}}
    if draw(st.integers(0, 9)) == 0:
        return obj  # the Device Manager has not published a ledger yet
    status_groups = []
    for g in groups:
        if draw(st.integers(0, 9)) == 0:
            continue  # no status group for this model yet
        entries = [draw(ledger_entry(c)) for c in g["accelerators"] if draw(st.integers(0, 4)) > 0]
        if draw(st.integers(0, 9)) == 0:
            ghost = f"ghost-{g['manufacturer']}-{g['id']}"
            entries.append({"id": ghost, "index": 9, "mode": 0, "remaining": M})
        status_groups.append({"id": g["id"], "manufacturer": g["manufacturer"], "accelerators": entries})
    obj["status"] = {"groups": status_groups}
    return obj


# --- the two sides ----------------------------------------------------------------------------------
def checked(obj: dict[str, Any]) -> DevicesFacts:
    result = check_devices(devices_facts(obj))
    assert result.findings == (), [f.note() for f in result.findings]  # the generator makes valid ledgers
    return result.devices


def labels_of(devices: DevicesFacts) -> dict[str, str]:
    node = node_facts({"metadata": {"name": NODE, "uid": "u1"}})
    return fit.desired(node, devices, manual=False)


def gate3_ready(devices: DevicesFacts, a_key: str, requests: dict[str, str]) -> bool:
    model_labels = {keys.accelerator_key(f"{g.manufacturer}-{g.id}"): "true" for g in devices.groups}
    a_keys = {f"{g.manufacturer}-{g.id}" for g in devices.groups} | {a_key}
    cluster = Cluster(
        nodes={NODE: {keys.HOSTNAME: NODE, **model_labels}},
        devices={NODE: devices},
        flavors={flavor_of(a): {keys.accelerator_key(a): "true"} for a in a_keys},
    )
    wl = workload("wl", podset("role", requests, assignment=hosts({NODE: 1}), flavor=flavor_of(a_key)))
    return judge(wl, cluster).state == READY


def gt_admits(labels: dict[str, str], requirements: list[dict[str, Any]]) -> bool:
    """Kubernetes' ``Gt``: the label is present, both sides parse as integers, the label's is greater."""
    for req in requirements:
        assert req["operator"] == "Gt"
        value = labels.get(req["key"])
        if value is None or not value.lstrip("-").isdigit() or int(value) <= int(req["values"][0]):
            return False
    return True


def slice_request(mfr: str, units: int) -> dict[str, str]:
    base = manufacturers.MANUFACTURERS[mfr].resource
    return {keys.sliced_resource(base): "1", keys.sliced_resource(base, "units"): str(units)}


def share_request(mfr: str, cards: int) -> dict[str, str]:
    return {f"{manufacturers.MANUFACTURERS[mfr].resource}.shared": str(cards)}


def model_keys(devices: DevicesFacts) -> list[tuple[str, str]]:
    """(manufacturer, aKey) of every model on the node, and one model it does not have."""
    present = [(g.manufacturer, f"{g.manufacturer}-{g.id}") for g in devices.groups]
    return [*present, ("hygon", "hygon-absent")]


# --- the property -----------------------------------------------------------------------------------
@settings(max_examples=examples(1500))
@given(obj=devices_object(), data=st.data())
def test_a_sliced_label_admits_a_node_exactly_when_gate3_would(
    obj: dict[str, Any], data: st.DataObject
) -> None:
    devices = checked(obj)
    labels = labels_of(devices)
    # Slice sizes at every card's edge (remaining - 1, remaining, remaining + 1), and anywhere.
    edges = {e.remaining + d for e in devices.card_ledgers().values() for d in (-1, 0, 1)}
    sizes = st.one_of(st.sampled_from(sorted(edges - {-1, 0}) or [1]), st.integers(1, M))
    for mfr, a_key in model_keys(devices):
        for units in data.draw(st.lists(sizes, min_size=1, max_size=4)):
            requests = slice_request(mfr, units)
            demand = demand_of_podset(pod_template(("main", requests))["spec"])
            pin = fit_requirements(a_key, demand)
            assert pin, "a folded slice is always pinned"
            ready = gate3_ready(devices, a_key, requests)
            assert gt_admits(labels, pin) is ready, (a_key, units, labels)


@settings(max_examples=examples(1500))
@given(obj=devices_object())
def test_a_shared_label_admits_a_node_exactly_when_gate3_would(obj: dict[str, Any]) -> None:
    devices = checked(obj)
    labels = labels_of(devices)
    for mfr, a_key in model_keys(devices):
        for cards in range(1, 6):
            requests = share_request(mfr, cards)
            demand = demand_of_podset(pod_template(("main", requests))["spec"])
            pin = fit_requirements(a_key, demand)
            key = keys.shared_free_cards_key(a_key)
            label = [{"key": key, "operator": "Gt", "values": [str(cards - 1)]}]
            assert pin == (label if cards >= 2 else [])
            ready = gate3_ready(devices, a_key, requests)
            assert gt_admits(labels, label) is ready, (a_key, cards, labels)


# --- the filed case ---------------------------------------------------------------------------------
def hygon_node(*, unhealthy: bool) -> DevicesFacts:
    """One Hygon card, free in the ledger (1,600,000 units)."""
    card = {"id": "D0", "index": 0, "status": {"unhealthy": unhealthy, "logicalSliced": {"count": 4}}}
    return checked(
        {
            "metadata": {"name": NODE},
            "spec": {"groups": [{"id": "k100_ai", "manufacturer": "hygon", "accelerators": [card]}]},
            "status": {
                "groups": [
                    {
                        "id": "k100_ai",
                        "manufacturer": "hygon",
                        "accelerators": [{"id": "D0", "index": 0, "mode": 0, "remaining": M}],
                    }
                ]
            },
        }
    )


def test_a_node_whose_only_free_card_is_unhealthy_advertises_no_room() -> None:
    a_key = "hygon-k100_ai"
    broken, healthy = hygon_node(unhealthy=True), hygon_node(unhealthy=False)
    sliced, shared = keys.sliced_max_free_units_key(a_key), keys.shared_free_cards_key(a_key)
    assert labels_of(broken) == {sliced: "0", shared: "0"}  # not the broken card's 1,600,000
    assert labels_of(healthy) == {sliced: str(M), shared: "1"}
    requests = slice_request("hygon", 30 * keys.UNITS_PER_PERCENT)
    pin = fit_requirements(a_key, demand_of_podset(pod_template(("main", requests))["spec"]))
    assert not gt_admits(labels_of(broken), pin) and not gate3_ready(broken, a_key, requests)
    assert gt_admits(labels_of(healthy), pin) and gate3_ready(healthy, a_key, requests)
