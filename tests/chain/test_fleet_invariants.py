"""Invariants of the whole chain over random fleets (issue 16, "What to show").

Each fleet (:mod:`tests.chain.fleets`) is planned with ``gpustack-worker plan``'s
:func:`~gpustack_worker.cli.planning.plan_chain` — the controllers' own pure functions, composed as the
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
  same plan.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Final

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpustack_worker.agent import capacity, nodefeature, validate
from gpustack_worker.agent.facts import node_facts
from gpustack_worker.api import identity, keys, manufacturers, node_class, validation
from gpustack_worker.api.devices_check import check_devices
from gpustack_worker.api.devices_view import DevicesFacts, devices_facts
from gpustack_worker.chain import flavors as chain_flavors
from gpustack_worker.chain.nodes import node_hardware
from gpustack_worker.cli.planning import PlannedChain, plan_chain
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
    fleets,
    rendering_damaged,
)
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
    return {"manufacturer": manufacturer, "product": product, "memoryMiB": 81920, "count": 2, **extra}


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


# --- the invariants -----------------------------------------------------------------------------------
@settings(max_examples=400)
@given(fleet=fleets())
@example(fleet=LONG_KEYS)
@example(fleet=GENERIC_AWARE)
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


@settings(max_examples=300)
@given(fleet=fleets())
@example(fleet=GENERIC_AWARE)
def test_every_flavor_is_in_exactly_one_queue(fleet: Fleet) -> None:
    assert_one_queue_per_flavor(plan_of(fleet))


@settings(max_examples=300)
@given(fleet=fleets())
def test_a_flavor_selects_exactly_its_contributors(fleet: Fleet) -> None:
    assert_selectors_select_contributors(fleet, plan_of(fleet))


@settings(max_examples=300)
@given(fleet=fleets())
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


@settings(max_examples=300)
@given(fleet=fleets())
@example(fleet=LONG_KEYS)
def test_every_object_passes_the_api_servers_rules(fleet: Fleet) -> None:
    plan = plan_of(fleet)
    assert plan_problems(fleet, plan) == []


@settings(max_examples=200)
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


@settings(max_examples=200)
@given(fleet=fleets())
@example(fleet=_same_product_two_manufacturers())
def test_the_simulated_devices_pass_the_agents_checks(fleet: Fleet) -> None:
    """Card ids are unique on a node, whichever manufacturers' models share a product name."""
    for spec in fleet.scenario.nodes:
        devices = devices_of(spec)
        if devices is not None:
            assert [f.note() for f in check_devices(devices).findings] == [], spec.name


@settings(max_examples=300)
@given(fleet=fleets(max_nodes=4))
@example(fleet=UNPUBLISHED)
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


@settings(max_examples=200)
@given(fleet=fleets(), order=st.randoms(use_true_random=False))
def test_the_plan_is_deterministic_in_the_fleet_and_its_node_order(fleet: Fleet, order: Any) -> None:
    first = plan_of(fleet).as_dict()
    assert plan_of(fleet).as_dict() == first
    shuffled = list(fleet.scenario.nodes)
    order.shuffle(shuffled)
    again = Fleet(Scenario(nodes=shuffled), fleet.grouping, fleet.racks)
    assert plan_of(again).as_dict() == first


@settings(max_examples=300)
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
