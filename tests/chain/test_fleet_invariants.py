"""Invariants of the whole chain over random fleets (issue 16, "What to show").

Each fleet (:mod:`tests.chain.fleets`) is planned with ``gpustack-worker plan``'s
:func:`~gpustack_worker.cli.plan.planning.plan_chain` — the controllers' own pure functions, composed as the
cluster composes them (stages 1-2 rendered by the simulator, the agent, nfd-master's projection, topology
profiles, the chain) — and the plan is held to what the specification promises for every fleet:

- every managed Node's capacity is counted in exactly one flavor per key (its CPU ``gKey`` under the mixing
  rule, each accelerator ``aKey``), with the per-node count the Node has, and an unmanaged Node in none —
  the expectation is read from the scenario and the settings, not from the chain;
- every flavor is in exactly one ClusterQueue, and every derived InstanceType has its queue;
- a flavor's ``spec.nodeLabels``, evaluated against every Node's labels, selects exactly the Nodes the
  chain counted in it, and its capacity label is their count;
- a queue's nominal quota is its flavors' capacity (× M for accelerator credits);
- every object the plan writes or implies passes the API server's rules
  (:mod:`gpustack_worker.api.validation`): object names, label keys and values, annotations, resource
  names, each kind's CRD schema (``object_problems``), and plan refused none; the worker NodeFeature's
  labels pass nfd-master's rule;
- the fit labels admit a Node for a single Pod asking one accelerator exactly when Gate 3 would;
- the plan is deterministic: the same fleet, or the same fleet with its nodes in another order, gives the
  same plan;
- a derived InstanceType's display name is its source (product, CPU name, ``CPU-only``) cut at 64 runes;
- whatever other InstanceTypes exist — authored by an admin under either grouping, derived under the other
  grouping before a flip — no flavor is promised by two queues, and every flavor by one;
- a node leaving, while Kueue reports reservations on some flavors of its queues, drops its own flavor in
  place and holds no queue that still has a live flavor ``HoldAndDrain``.

Half of the fleets carry one of the rare families of :data:`tests.chain.fleets.FAMILIES` (``_``/``-``/case
twins, a bare-vendor CPU node next to a named sibling, a one-card sliceable node, a CPU name past the
display limit), drawn by ``sampled_from`` so each is reached in every run; each family is also an explicit
``@example``.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Final

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpustack_worker.agent import capacity, nodefeature, validate
from gpustack_worker.agent.facts import node_facts
from gpustack_worker.api import identity, keys, manufacturers, node_class, validation
from gpustack_worker.api.devices_check import check_devices
from gpustack_worker.api.devices_view import DevicesFacts, devices_facts
from gpustack_worker.chain import flavors as chain_flavors
from gpustack_worker.chain import pools
from gpustack_worker.chain import queues as chain_queues
from gpustack_worker.chain.nodes import node_hardware
from gpustack_worker.cli.plan.planning import PlannedChain, plan_chain
from gpustack_worker.placement.demand import demand_of_podset
from gpustack_worker.placement.fitpin import fit_requirements
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.simulate import render
from gpustack_worker.simulate.checks import check_scenario
from gpustack_worker.simulate.scenario import Scenario
from tests.chain import fleets as fleets_mod
from tests.chain.fleets import (
    Damage,
    DamagedFleet,
    Fleet,
    Grouping,
    damaged_fleets,
    existing_queues,
    extra_types,
    fleets,
    rendering_damaged,
)
from tests.kit.properties import examples
from tests.placement.test_fit_agreement import gate3_ready, gt_admits, share_request, slice_request
from tests.placement.test_gate3 import pod_template

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpustack_worker.simulate.scenario import NodeSpec

M: Final = keys.UNITS_PER_ACCELERATOR
_EPOCH: Final = "1970-01-01T00:00:00Z"


# --- reading a plan -----------------------------------------------------------------------------------
def plan_of(fleet: Fleet) -> PlannedChain:
    if fleet.racks is None:
        return plan_chain(fleet.scenario, fleet.grouping.settings())
    return plan_chain(
        fleet.scenario,
        fleet.grouping.settings(),
        topology_source=fleet.racks.source(),
        snapshot=fleet.racks.snapshot(),
    )


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Kueue's reading of a flavor's ``nodeLabels``: every key present with exactly that value."""
    return all(labels.get(k) == v for k, v in selector.items())


def _selector(flavor: Mapping[str, Any]) -> dict[str, str]:
    return dict((flavor.get("spec") or {}).get("nodeLabels") or {})


def _notes(flavor: Mapping[str, Any]) -> dict[str, str]:
    return dict((flavor.get("metadata") or {}).get("annotations") or {})


def own_key(flavor: Mapping[str, Any]) -> str:
    """The feature key the flavor counts, from its identity notes: ``acceleratable.…/<aKey>`` or
    ``general.…/<gKey>`` (its ``.count`` and ``.capacity`` keys are built from it by api/keys)."""
    notes = _notes(flavor)
    a_key = notes.get(f"{keys.NOTE_PREFIX}acceleratorGroup")
    if a_key:
        return keys.accelerator_key(a_key)
    return keys.general_key(notes[f"{keys.NOTE_PREFIX}generalGroup"])


def capacity_of(flavor: Mapping[str, Any]) -> int:
    return int(_labels(flavor)[keys.capacity_key(own_key(flavor))])


def per_node_count(flavor: Mapping[str, Any]) -> int:
    return int(_selector(flavor)[keys.count_key(own_key(flavor))])


def nodes_of(fleet: Fleet, plan: PlannedChain) -> dict[str, dict[str, Any]]:
    """Every Node as the chain reads it once the plan has converged: the rendered Node (status, CPU
    annotations) with the plan's labels."""
    out = {}
    for spec in fleet.scenario.nodes:
        node = render.render_node(spec, _EPOCH)
        node["metadata"]["uid"] = f"plan-{spec.name}"
        node["metadata"]["labels"] = dict(plan.node_labels[spec.name])
        out[spec.name] = node
    return out


def devices_of(spec: NodeSpec) -> DevicesFacts | None:
    """The node's ``Devices`` with its ledger, parsed as the agent reads it (None without accelerators)."""
    devices = render.render_devices(spec, f"plan-{spec.name}")
    if devices is None:
        return None
    ledger = render.render_devices_status(spec)
    if ledger is not None:
        devices = {**devices, "status": ledger["status"]}
    return devices_facts(devices)


# --- what the specification expects, from the scenario alone ---------------------------------------
def managed_expected(spec: NodeSpec, *, manual: bool) -> bool:
    """Reference §3.2 / §4.2: an admin's ``true`` manages a node; with the key absent the agent stamps
    ``true`` unless management is manual; ``false`` and any value not exactly ``true`` do not."""
    value = spec.labels.get(keys.MANAGED)
    return value == "true" or (value is None and not manual)


def contributions(spec: NodeSpec, node: Mapping[str, Any], fleet: Fleet) -> dict[str, int]:
    """Feature key → per-node count the node must be counted with (empty when not managed): each
    accelerator model's cards, and its CPU cores when the mixing rule lets it in a CPU flavor."""
    g = fleet.grouping
    if not managed_expected(spec, manual=g.manual):
        return {}
    out = {keys.accelerator_key(render.a_key(acc)): acc.count for acc in spec.accelerators}
    if g.mixed or not spec.accelerators:
        meta = node["metadata"]
        out[keys.general_key(identity.general_key(meta["labels"], meta.get("annotations") or {}))] = (
            spec.cpu.cores
        )
    return out


# --- the filed cases (issue 16), pinned as explicit examples ---------------------------------------------
def _node(name: str, vendor: str, cpu_name: str, *accelerators: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = {"name": name, "cpu": {"vendor": vendor, "model": cpu_name, "cores": 8}}
    return {**node, "memory": "64Gi", "accelerators": list(accelerators)}


def _card(manufacturer: str, product: str, **extra: Any) -> dict[str, Any]:
    return {"manufacturer": manufacturer, "product": product, "memoryMiB": 81920, "count": 2} | extra


def _fleet(*nodes: dict[str, Any], aware: bool = False, mixed: bool = False) -> Fleet:
    scenario = Scenario.model_validate({"nodes": list(nodes)})
    return Fleet(scenario, Grouping(aware=aware, mixed=mixed, manual=False))


#: Defect 3: under aware grouping a node of unknown CPU (gKey ``generic``) next to an AMD node.
GENERIC_AWARE = _fleet(
    _node("n0", "AMD", "AMD EPYC 7763 64-Core Processor"), _node("n1", "VendorUnknown", "(R)"), aware=True
)
#: Defect 4: the 55-character product (its ``.capacity`` key is 64) and a CPU name past the budget.
LONG_KEYS = _fleet(
    _node("n0", "AMD", "AMD EPYC 7763 64-Core Processor", _card("nvidia", fleets_mod.RTX_PRO_6000)),
    _node("n1", *fleets_mod.LONG_CPU),
)
#: Defect 7: a model whose ledger is not published yet.
UNPUBLISHED = _fleet(
    _node("n0", "AMD", "AMD EPYC", _card("amd", "AMD Instinct MI300X", ledgerPublished=False))
)
#: Defect 5: mixing off, the Device Manager's labels missing while Devices lists the cards.
DM_LOST = DamagedFleet(
    _fleet(_node("n0", "AMD", "AMD EPYC 7763 64-Core Processor", _card("amd", "AMD Instinct MI300X"))),
    {"n0": Damage(no_device_manager=True)},
)


#: Issue 27, the rare families as explicit examples (each is also drawn by ``fleets(families=True)``).
#: A bare-AMD node next to a named AMD sibling with the same GPU and count, and a CPU-only pair.
BARE_SIBLINGS = _fleet(
    _node("n0", "AMD", "---", _card("nvidia", "Tesla T4")),
    _node("n1", "AMD", "AMD EPYC 7763 64-Core Processor", _card("nvidia", "Tesla T4")),
    {"name": "n2", "cpu": {"vendor": "AMD", "model": "---", "cores": 8}, "memory": "64Gi"},
    {
        "name": "n3",
        "cpu": {"vendor": "AMD", "model": "AMD EPYC 7763 64-Core Processor", "cores": 8},
        "memory": "64Gi",
    },
    aware=True,
)
#: Two products that differ only by ``_`` and ``-`` (issue 27 class 3).
PRODUCT_TWINS = _fleet(
    _node("n0", "AMD", "AMD EPYC 7763 64-Core Processor", _card("hygon", "DCU K100_AI")),
    _node("n1", "AMD", "AMD EPYC 7763 64-Core Processor", _card("hygon", "DCU K100-AI")),
)
#: Two CPU names that differ only by ``_`` and ``-``, under awareness (their gKeys would collide).
CPU_TWINS = _fleet(
    {
        "name": "n0",
        "cpu": {"vendor": "AMD", "model": "AMD EPYC 7763 64-Core Processor", "cores": 8},
        "memory": "64Gi",
    },
    {
        "name": "n1",
        "cpu": {"vendor": "AMD", "model": "AMD EPYC 7763 64_Core Processor", "cores": 8},
        "memory": "64Gi",
    },
    aware=True,
)
#: One node with exactly one sliceable card.
ONE_SLICEABLE_CARD = _fleet(_node("n0", "AMD", "AMD EPYC", {**_card("hygon", "DCU K100_AI"), "count": 1}))
#: A CPU pool whose CPU name is 65 runes, two of them two-byte (display name cut to 64).
LONG_DISPLAY = _fleet(
    {
        "name": "n0",
        "cpu": {"vendor": "AMD", "model": "AMD EPYC Ωmega " + "é" * 50, "cores": 8},
        "memory": "64Gi",
    },
    aware=True,
)
FAMILY_EXAMPLES = (BARE_SIBLINGS, PRODUCT_TWINS, CPU_TWINS, ONE_SLICEABLE_CARD, LONG_DISPLAY)
#: Half plain fleets, half with a rare family.
ANY_FLEET = st.one_of(fleets(), fleets(families=True))


def with_families(test: Any) -> Any:
    """``test`` with every rare family as an explicit example."""
    for fleet in FAMILY_EXAMPLES:
        test = example(fleet=fleet)(test)
    return test


# --- the invariants -----------------------------------------------------------------------------------
@settings(max_examples=examples(400))
@given(fleet=ANY_FLEET)
@example(fleet=LONG_KEYS)
@example(fleet=GENERIC_AWARE)
@with_families
def test_every_managed_node_is_counted_once_per_key(fleet: Fleet) -> None:
    plan = plan_of(fleet)
    nodes = nodes_of(fleet, plan)
    for spec in fleet.scenario.nodes:
        labels = plan.node_labels[spec.name]
        selecting = [f for f in plan.flavors.values() if _selects(_selector(f), labels)]
        counted = Counter(own_key(f) for f in selecting)
        assert all(n == 1 for n in counted.values()), (spec.name, counted)
        got = {own_key(f): per_node_count(f) for f in selecting}
        assert got == contributions(spec, nodes[spec.name], fleet), spec.name
        assert node_class.is_managed(labels) is managed_expected(spec, manual=fleet.grouping.manual)


def assert_one_queue_per_flavor(plan: PlannedChain) -> None:
    listed = Counter(
        f["name"]
        for q in plan.cluster_queues.values()
        for g in q["spec"].get("resourceGroups") or ()
        for f in g.get("flavors") or ()
    )
    assert {name: listed[name] for name in plan.flavors} == dict.fromkeys(plan.flavors, 1)
    assert set(listed) <= set(plan.flavors)
    # Derived from the Nodes: every pool a flavor makes has its InstanceType, its queue and its entrance.
    assert set(plan.cluster_queues) == set(plan.instance_types)
    assert sorted(plan.local_queues.values()) == sorted(plan.cluster_queues)


def assert_selectors_select_contributors(fleet: Fleet, plan: PlannedChain) -> None:
    nodes = nodes_of(fleet, plan)
    hardware = [h for n in nodes.values() if (h := node_hardware(n)) is not None]
    contributors = {
        p.name: p.nodes for p in chain_flavors.plan_flavors(hardware, mixed_on_node=fleet.grouping.mixed)
    }
    assert set(contributors) == set(plan.flavors)
    for name, flavor in plan.flavors.items():
        # Kueue selects among every Node of the cluster, managed or not.
        selected = tuple(sorted(n for n, node in nodes.items() if _selects(_selector(flavor), _labels(node))))
        assert selected == contributors[name], name
        assert capacity_of(flavor) == len(selected) * per_node_count(flavor), name


def assert_quota_is_capacity(plan: PlannedChain) -> None:
    for name, queue in plan.cluster_queues.items():
        for group in queue["spec"].get("resourceGroups") or ():
            covered = list(group["coveredResources"])
            for entry in group["flavors"]:
                flavor = plan.flavors[entry["name"]]
                accelerated = _labels(flavor).get(keys.ACCELERATABLE) == "true"
                manufacturer = _notes(flavor)[f"{keys.NOTE_PREFIX}manufacturer"]
                resource = keys.credits_resource(manufacturer) if accelerated else "cpu"
                assert [r["name"] for r in entry["resources"]] == covered == [resource], name
                (quota,) = (parse(r["nominalQuota"]) for r in entry["resources"])
                assert quota == capacity_of(flavor) * (M if accelerated else 1), (name, entry["name"])


@settings(max_examples=examples(300))
@given(fleet=ANY_FLEET)
@example(fleet=GENERIC_AWARE)
@with_families
def test_every_flavor_is_in_exactly_one_queue(fleet: Fleet) -> None:
    assert_one_queue_per_flavor(plan_of(fleet))


@settings(max_examples=examples(300))
@given(fleet=ANY_FLEET)
@with_families
def test_a_flavor_selects_exactly_its_contributors(fleet: Fleet) -> None:
    assert_selectors_select_contributors(fleet, plan_of(fleet))


@settings(max_examples=examples(300))
@given(fleet=ANY_FLEET)
@with_families
def test_queue_quota_is_the_flavors_capacity(fleet: Fleet) -> None:
    assert_quota_is_capacity(plan_of(fleet))


def _object_problems(obj: Mapping[str, Any]) -> list[str]:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    where = f"{obj.get('kind')}/{name}"
    out = [f"{where} name: {m}" for m in validation.dns1123_subdomain(name)]
    out += _label_problems(f"{where} label", _labels(obj))
    out += [f"{where} annotations: {m}" for m in validation.object_annotations(meta.get("annotations") or {})]
    return out


def _label_problems(where: str, labels: Mapping[str, str]) -> list[str]:
    out = []
    for key, value in labels.items():
        out += [f"{where} {key}: {m}" for m in validation.qualified_name(key)]
        out += [f"{where} {key}={value!r}: {m}" for m in validation.label_value(value)]
    return out


def plan_problems(fleet: Fleet, plan: PlannedChain) -> list[str]:
    """Everything the API server (or nfd-master) would refuse in what the plan writes."""
    # What plan itself refused (it leaves such an object out, as the API server would).
    problems = [f"refused {r['kind']}/{r['name']} {r['path']}: {r['rule']}" for r in plan.refused]
    bodies = [
        *plan.flavors.values(),
        *plan.cluster_queues.values(),
        *plan.instance_types.values(),
        *plan.topologies.values(),
    ]
    for body in bodies:
        where = f"{body.get('kind')}/{body['metadata']['name']}"
        problems += [f"{where} {path}: {rule}" for path, rule in validation.object_problems(body)]
    for it in plan.instance_types.values():
        for resource in (it.get("spec") or {}).get("unitResources") or {}:
            refused = validation.qualified_name(resource)
            problems += [f"InstanceType unit resource {resource}: {m}" for m in refused]
    for flavor in plan.flavors.values():
        problems += _object_problems(flavor)
        where = f"ResourceFlavor/{flavor['metadata']['name']} nodeLabels"
        problems += _label_problems(where, _selector(flavor))
    for queue in plan.cluster_queues.values():
        problems += _object_problems(queue)
        for group in queue["spec"].get("resourceGroups") or ():
            for resource in group["coveredResources"]:
                problems += [f"resource {resource}: {m}" for m in validation.qualified_name(resource)]
    for it in plan.instance_types.values():
        problems += _object_problems(it)
    for name, topology in plan.topologies.items():
        problems += _object_problems({**topology, "metadata": {"name": name}})
        for level in topology.get("levels") or ():
            label = str(level.get("nodeLabel", ""))
            problems += [f"Topology/{name} level {label}: {m}" for m in validation.qualified_name(label)]
    for name in plan.local_queues:
        problems += [f"LocalQueue/{name}: {m}" for m in validation.dns1123_subdomain(name)]
        problems += [f"LocalQueue/{name} (queue-name label): {m}" for m in validation.label_value(name)]
    g = fleet.grouping
    for spec, node in zip(fleet.scenario.nodes, nodes_of(fleet, plan).values(), strict=True):
        problems += _label_problems(f"Node/{spec.name} label", _labels(node))
        checked = validate.check(node_facts(node), devices_of(spec))
        worker = nodefeature.desired_labels(
            checked.node,
            checked.devices,
            manual=g.manual,
            mixed_on_node=g.mixed,
            holds=checked.holds(),
            published={},
        )
        for key, value in worker.items():
            refused = validation.nfd_feature_label(key, value)
            problems += [f"worker NodeFeature of {spec.name} {key}: {m}" for m in refused]
        counting = capacity.desired(checked.node, checked.devices, manual=g.manual)
        for resource, amount in counting.items():
            problems += [
                f"Node/{spec.name} capacity {resource}: {m}" for m in validation.qualified_name(resource)
            ]
            if amount < 0:
                problems.append(f"Node/{spec.name} capacity {resource}: negative ({amount})")
    return problems


@settings(max_examples=examples(300))
@given(fleet=ANY_FLEET)
@example(fleet=LONG_KEYS)
@with_families
def test_every_object_passes_the_api_servers_rules(fleet: Fleet) -> None:
    plan = plan_of(fleet)
    assert plan_problems(fleet, plan) == []


@settings(max_examples=examples(200))
@given(fleet=fleets())
@example(fleet=LONG_KEYS)
def test_stages_1_2_of_every_fleet_render_valid_objects(fleet: Fleet) -> None:
    """What the simulator (standing in for NFD and the Device Manager, with the worker's own ``aKey``)
    renders from any fleet is accepted by the API server and nfd-master: a product name of any length
    still yields keys within the budget."""
    assert check_scenario(fleet.scenario) == []


def _same_product_two_manufacturers() -> Fleet:
    """One node with an AMD and an Ascend model sharing one product name (found by the fit property)."""
    product = "Über-GPU ™ Ωmega (rev. a1)"
    return _fleet(_node("n0", "AMD", "AMD EPYC", _card("amd", product), _card("ascend", product)))


@settings(max_examples=examples(200))
@given(fleet=fleets())
@example(fleet=_same_product_two_manufacturers())
def test_the_simulated_devices_pass_the_agents_checks(fleet: Fleet) -> None:
    """Card ids are unique on a node, whichever manufacturers' models share a product name."""
    for spec in fleet.scenario.nodes:
        devices = devices_of(spec)
        if devices is not None:
            assert [f.note() for f in check_devices(devices).findings] == [], spec.name


@settings(max_examples=examples(300))
@given(fleet=st.one_of(fleets(max_nodes=4), fleets(max_nodes=4, families=True)))
@example(fleet=UNPUBLISHED)
@with_families
def test_fit_labels_admit_a_node_exactly_when_gate3_would(fleet: Fleet) -> None:
    plan = plan_of(fleet)
    for spec in fleet.scenario.nodes:
        labels = plan.node_labels[spec.name]
        raw = devices_of(spec)
        if raw is None or not node_class.is_managed(labels):
            continue
        result = check_devices(raw)
        if result.findings:
            # A Devices the checks refuse holds the labels at their last published value (docs/agent.md
            # "Bad input"): a different rule on purpose. That the simulator renders no such Devices is
            # test_stages_1_2_of_every_fleet_render_valid_objects'.
            continue
        devices = result.devices
        for group in devices.groups:
            mfr, a_key = group.manufacturer, f"{group.manufacturer}-{group.id}"
            assert manufacturers.get(mfr) is not None
            advertised = labels.get(keys.sliced_max_free_units_key(a_key), "0")
            for units in sorted({1, M // 2, M, int(advertised), int(advertised) + 1} - {0} - {M + 1}):
                requests = slice_request(mfr, units)
                pin = fit_requirements(a_key, demand_of_podset(pod_template(("main", requests))["spec"]))
                ready = gate3_ready(devices, a_key, requests)
                assert gt_admits(labels, pin) is ready, (spec.name, a_key, units)
            for cards in (1, 2, 3):
                label = [
                    {"key": keys.shared_free_cards_key(a_key), "operator": "Gt", "values": [str(cards - 1)]}
                ]
                ready = gate3_ready(devices, a_key, share_request(mfr, cards))
                assert gt_admits(labels, label) is ready, (spec.name, a_key, cards)


@settings(max_examples=examples(200))
@given(fleet=ANY_FLEET, order=st.randoms(use_true_random=False))
def test_the_plan_is_deterministic_in_the_fleet_and_its_node_order(fleet: Fleet, order: Any) -> None:
    first = plan_of(fleet).as_dict()
    assert plan_of(fleet).as_dict() == first
    shuffled = list(fleet.scenario.nodes)
    order.shuffle(shuffled)
    again = Fleet(Scenario(nodes=shuffled), fleet.grouping, fleet.racks)
    assert plan_of(again).as_dict() == first


@settings(max_examples=examples(300))
@given(damaged=damaged_fleets())
@example(damaged=DM_LOST)
def test_a_partially_labelled_fleet_keeps_the_chains_invariants(damaged: DamagedFleet) -> None:
    """Nodes without os/arch, hostname, CPU vendor, family/id or CPU name, or with the Device Manager's
    labels gone while ``Devices`` remains: the plan still counts each flavor's selected Nodes exactly,
    every flavor is in one queue with its capacity as quota, and every object is valid."""
    fleet = damaged.fleet
    with rendering_damaged(damaged.damage):
        plan = plan_of(fleet)
        assert_selectors_select_contributors(fleet, plan)
        assert_one_queue_per_flavor(plan)
        assert_quota_is_capacity(plan)
        assert plan_problems(fleet, plan) == []


# --- issue 27: display names, other InstanceTypes, a node leaving under reservations -------------------
def _display_sources(fleet: Fleet, plan: PlannedChain) -> set[str]:
    """Every source a derived display name may come from: the products the Nodes advertise, the CPU
    names, the collapsed pool's ``CPU-only``, and the keys a nameless product or CPU falls back to."""
    out = {"CPU-only"}
    out |= {s.cpu.model for s in fleet.scenario.nodes if not s.cpu.model.startswith("@")}
    for labels in plan.node_labels.values():
        out |= {
            v for k, v in labels.items() if k.startswith(keys.ACCELERATABLE_PREFIX) and k.endswith(".product")
        }
    for it in plan.instance_types.values():
        spec = it["spec"]
        out |= {str(spec.get("acceleratorGroup") or ""), str(spec.get("generalGroup") or "")}
    return out


@settings(max_examples=examples(300))
@given(fleet=ANY_FLEET)
@with_families
def test_a_derived_display_name_is_its_source_cut_at_64_runes(fleet: Fleet) -> None:
    """Reference Appendix A.3: ``displayName`` = the product (or ``CPU-only``), truncated to 64 runes."""
    plan = plan_of(fleet)
    allowed = {s[:64] for s in _display_sources(fleet, plan)}
    for name, it in plan.instance_types.items():
        shown = it["spec"]["displayName"]
        assert len(shown) <= 64, name
        assert shown in allowed, (name, shown)


def _decide(
    fleet: Fleet,
    it: Mapping[str, Any],
    flavors: list[Mapping[str, Any]],
    hardware: list[Any],
    topologies: frozenset[str],
    queue: Mapping[str, Any] | None = None,
) -> chain_queues.QueueDecision:
    return chain_queues.decide(
        chain_queues.QueueInputs(
            instance_type=it,
            queue=queue,
            flavors=flavors,
            nodes=hardware,
            topologies=topologies,
            active_checks=frozenset(),
            aware=fleet.grouping.aware,
            mixed_on_node=fleet.grouping.mixed,
        )
    )


def _queue_flavors(body: Mapping[str, Any] | None) -> list[str]:
    groups = ((body or {}).get("spec") or {}).get("resourceGroups") or ()
    return [str(f["name"]) for g in groups for f in g.get("flavors") or ()]


def _hardware(fleet: Fleet, plan: PlannedChain) -> list[Any]:
    return [h for n in nodes_of(fleet, plan).values() if (h := node_hardware(n)) is not None]


def assert_each_flavor_promised_once(fleet: Fleet, extra: list[dict[str, Any]]) -> None:
    """The derived InstanceTypes of the fleet plus ``extra`` (an authored type takes the name of a derived
    one it shares a name with: the derived one is create-only), each decided as a fresh queue: every flavor
    is in exactly one queue."""
    plan = plan_of(fleet)
    hardware = _hardware(fleet, plan)
    types = dict(plan.instance_types)
    for it in extra:
        name = it["metadata"]["name"]
        derived = (it["metadata"].get("labels") or {}).get(keys.DERIVED_FROM_NODE) == "true"
        if not derived or name not in types:
            types[name] = it
    flavors = list(plan.flavors.values())
    promised: Counter[str] = Counter()
    for it in types.values():
        promised.update(
            _queue_flavors(_decide(fleet, it, flavors, hardware, frozenset(plan.topologies)).body)
        )
    assert dict(promised) == dict.fromkeys(plan.flavors, 1), sorted(types)


def _all_extra_types(fleet: Fleet) -> list[dict[str, Any]]:
    """Every kind of extra InstanceType for every pool of the fleet."""
    plan = plan_of(fleet)
    plans = chain_flavors.plan_flavors(_hardware(fleet, plan), mixed_on_node=fleet.grouping.mixed)
    aware = fleet.grouping.aware
    out = []
    for p in plans:
        out.append(pools.derived_instance_type(p, aware=not aware))
        for authored_aware in (True, False):
            body = pools.derived_instance_type(p, aware=authored_aware)
            for key in (keys.DERIVED_FROM_NODE, keys.OTHER_GROUPING, keys.QUEUE_ENTRANCE):
                body["metadata"]["labels"].pop(key, None)
            out.append(body)
    return out


#: Issue 27 class 2: H100 nodes on AMD and on Intel CPUs.
H100_TWO_VENDORS = (
    _node("n0", "AMD", "AMD EPYC 7763 64-Core Processor", _card("nvidia", "NVIDIA H100 80GB HBM3", count=8)),
    _node(
        "n1", "Intel", "Intel(R) Xeon(R) Platinum 8480+", _card("nvidia", "NVIDIA H100 80GB HBM3", count=8)
    ),
)


@settings(max_examples=examples(300))
@given(fleet=ANY_FLEET, data=st.data())
def test_no_flavor_is_promised_twice_whatever_instance_types_exist(fleet: Fleet, data: st.DataObject) -> None:
    """Issue 27 class 2: admin-authored InstanceTypes of either grouping and derived ones of the other
    grouping next to the fleet's own — each is in or out of scope by one rule, so no flavor's capacity is
    promised to two queues."""
    plan = plan_of(fleet)
    plans = chain_flavors.plan_flavors(_hardware(fleet, plan), mixed_on_node=fleet.grouping.mixed)
    assert_each_flavor_promised_once(fleet, data.draw(extra_types(plans, aware=fleet.grouping.aware)))


@pytest.mark.parametrize("aware", [True, False])
@pytest.mark.parametrize(
    "nodes",
    [
        H100_TWO_VENDORS,
        *(f.scenario.model_dump(by_alias=True, exclude_unset=True)["nodes"] for f in FAMILY_EXAMPLES),
    ],
    ids=[
        "h100-two-vendors",
        "bare-siblings",
        "product-twins",
        "cpu-twins",
        "one-sliceable-card",
        "long-display",
    ],
)
def test_no_flavor_is_promised_twice_with_every_kind_of_instance_type(nodes: Any, aware: bool) -> None:
    fleet = _fleet(*nodes, aware=aware)
    assert_each_flavor_promised_once(fleet, _all_extra_types(fleet))


def _finalizing(flavor: Mapping[str, Any]) -> dict[str, Any]:
    meta = {
        **flavor["metadata"],
        "deletionTimestamp": _EPOCH,
        "finalizers": ["kueue.x-k8s.io/resource-in-use"],
    }
    return {**flavor, "metadata": meta}


def assert_a_leaving_node_drops_only_its_flavor(
    fleet: Fleet,
    leaving: str,
    queues_before: Mapping[str, Mapping[str, Any]],
) -> None:
    """``leaving`` leaves the fleet while Kueue reports ``queues_before`` (reservations on some flavors).
    Its flavors stay, finalizing, while a queue references them (Kueue's ``resource-in-use``). Each queue
    that still has a live flavor drops the flavors whose nodes left in place: no ``HoldAndDrain``, the
    groups are exactly the live plan (docs/chain.md "A leaving node drops its flavor in place")."""
    before = plan_of(fleet)
    racks = fleet.racks
    if racks is not None:  # the inventory no longer lists it either
        placement = {n: w for n, w in racks.placement.items() if n != leaving}
        racks = fleets_mod.Racks(placement) if placement else None
    after_fleet = Fleet(
        Scenario(nodes=[n for n in fleet.scenario.nodes if n.name != leaving]), fleet.grouping, racks
    )
    after = plan_of(after_fleet)
    hardware = _hardware(after_fleet, after)
    gone = [_finalizing(f) for name, f in before.flavors.items() if name not in after.flavors]
    flavors = [*after.flavors.values(), *gone]
    after_labels = list(after.node_labels.values())
    for name, it in after.instance_types.items():
        queue = queues_before.get(name)
        if queue is None:
            continue
        old = set(_queue_flavors(queue))
        dropped = old - set(after.flavors)
        # Only a node leaving: every dropped flavor selects no Node any more (not a rename or a new profile).
        if any(_selects(_selector(before.flavors[f]), labels) for f in dropped for labels in after_labels):
            continue
        decision = _decide(after_fleet, it, flavors, hardware, frozenset(after.topologies), queue)
        planned = _queue_flavors(after.cluster_queues.get(name))
        if not planned:
            continue  # nothing live is left: the no-live-flavor drain is the rule there
        body = decision.body or {}
        assert (body.get("spec") or {}).get("stopPolicy") != chain_queues.HOLD_AND_DRAIN, (name, decision)
        assert sorted(_queue_flavors(body)) == sorted(planned), (name, decision)


@settings(max_examples=examples(200))
@given(fleet=ANY_FLEET, data=st.data())
def test_a_leaving_node_drops_only_its_flavor(fleet: Fleet, data: st.DataObject) -> None:
    """Issue 27 class 1, over random fleets: any node leaves while Kueue reports reservations on any
    subset of its queues' flavors."""
    if len(fleet.scenario.nodes) < 2:
        return
    leaving = data.draw(st.sampled_from([n.name for n in fleet.scenario.nodes]))
    before = plan_of(fleet)
    assert_a_leaving_node_drops_only_its_flavor(
        fleet, leaving, data.draw(existing_queues(before.cluster_queues))
    )


def test_the_four_card_nodes_leave_while_the_one_card_flavor_holds_a_reservation() -> None:
    """The filed case: the T4 queue has a 1-card and a 4-card flavor; the 4-card nodes leave while a
    Workload runs on the 1-card flavor (and while one runs on each)."""
    t4 = "Tesla T4"
    fleet = _fleet(
        _node("n0", "AMD", "AMD EPYC", _card("nvidia", t4, count=1)),
        _node("n1", "AMD", "AMD EPYC", _card("nvidia", t4, count=4)),
    )
    before = plan_of(fleet)
    (queue,) = before.cluster_queues.values()
    one_card = next(f for f in _queue_flavors(queue) if "-1d-" in f)
    for reserved in ({one_card}, set(_queue_flavors(queue))):
        queues = {name: fleets_mod.queue_with_usage(q, reserved) for name, q in before.cluster_queues.items()}
        assert_a_leaving_node_drops_only_its_flavor(fleet, "n1", queues)


def test_a_node_leaving_its_rack_beside_the_same_cpu_elsewhere_drops_its_flavor_in_place() -> None:
    """Found by hypothesis: ``n1`` is placed in a rack (its own topology profile), ``n2`` and ``n3`` have the
    same CPU but no rack, so the CPU queue serves that CPU under two flavors. ``n1`` leaves: its rack flavor
    finalizes while the other profile still selects that hardware — served all along by a live flavor of
    the queue, whose quota the plan leaves as it is: nothing of ``n1``'s moved there, so the flavor is
    dropped in place (it used to be taken for the old flavor of a hierarchy change, and the whole CPU queue
    drained)."""
    epyc = "AMD EPYC 7763 64-Core Processor"
    fleet = Fleet(
        _fleet(
            _node("n1", "AMD", epyc, _card("nvidia", "NVIDIA A100-SXM4-80GB", count=1))
            | {"labels": {fleets_mod.RACK_LABEL: "r1"}},
            _node("n2", "AMD", epyc, _card("amd", "AMD Instinct MI300X", count=1)),
            _node("n3", "AMD", epyc, _card("amd", "AMD Instinct MI300X", count=1)),
        ).scenario,
        Grouping(aware=False, mixed=True, manual=False),
        fleets_mod.Racks({"n1": ("region-1", "zone-a", "zone-a-rack-1")}),
    )
    before = plan_of(fleet)
    reserving = {
        n: fleets_mod.queue_with_usage(q, set(_queue_flavors(q))) for n, q in before.cluster_queues.items()
    }
    assert_a_leaving_node_drops_only_its_flavor(fleet, "n1", reserving)


def test_a_node_moving_out_of_its_rack_beside_the_same_cpu_drains_the_queue_using_its_flavor() -> None:
    """The counterpart of the leaving above: ``n1`` stays but leaves the rack inventory, so its hardware moves
    into the profile ``n2`` and ``n3`` are under. Its rack flavor finalizes as in the leaving, but the plan
    gives the other profile's flavor of that CPU ``n1``'s capacity on top of what the queue holds: the
    capacity moved, a Workload still running on the old flavor would be counted twice, and the queue whose
    reservation is on the finalizing flavor drains (the hierarchy change's rule)."""
    epyc = "AMD EPYC 7763 64-Core Processor"
    scenario = _fleet(
        _node("n1", "AMD", epyc, _card("nvidia", "NVIDIA A100-SXM4-80GB", count=1))
        | {"labels": {fleets_mod.RACK_LABEL: "r1"}},
        _node("n2", "AMD", epyc, _card("amd", "AMD Instinct MI300X", count=1)),
        _node("n3", "AMD", epyc, _card("amd", "AMD Instinct MI300X", count=1)),
    ).scenario
    grouping = Grouping(aware=False, mixed=True, manual=False)
    racked = Fleet(scenario, grouping, fleets_mod.Racks({"n1": ("region-1", "zone-a", "zone-a-rack-1")}))
    moved = Fleet(scenario, grouping, None)
    before, after = plan_of(racked), plan_of(moved)
    gone = [_finalizing(f) for name, f in before.flavors.items() if name not in after.flavors]
    assert gone, "n1's rack flavor is no longer planned"
    hardware = _hardware(moved, after)
    drained = []
    for name, it in after.instance_types.items():
        queue = before.cluster_queues.get(name)
        dropped = set(_queue_flavors(queue)) - set(after.flavors)
        if queue is None or not dropped:
            continue
        reserving = fleets_mod.queue_with_usage(queue, dropped)
        flavors = [*after.flavors.values(), *gone]
        decision = _decide(moved, it, flavors, hardware, frozenset(after.topologies), reserving)
        body = decision.body or {}
        assert (body.get("spec") or {}).get("stopPolicy") == chain_queues.HOLD_AND_DRAIN, (name, decision)
        assert dropped <= set(_queue_flavors(body)), (name, decision)  # kept while it drains
        drained.append(name)
    assert len(drained) == 2, drained  # the accelerator's queue and the CPU queue both served n1's flavor
