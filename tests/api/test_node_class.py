"""The one reading of "managed" and "accelerated" (issue 16, defects 5 and 11): the predicates' tables,
and a property over random fleets that stage 3 (the agent) and stage 4 (the chain's flavors and queues)
decide every Node alike, and that every flavor's selector selects exactly the Nodes counted in it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.agent import capacity, managed, nodefeature, validate
from gpustack_worker.agent.facts import DevicesFacts, node_facts
from gpustack_worker.api import keys, node_class
from gpustack_worker.chain import flavors, pools, queues
from gpustack_worker.chain.nodes import node_hardware
from tests.agent.builders import card, devices, group
from tests.kit.properties import examples

A10G = keys.accelerator_key("nvidia-a10g")
PROJECTED = {keys.NFD_FEATURE_LABELS_ANNOTATION: "cpu-model.vendor_id,gpustack.ai/managed"}


# --- managed ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "valid", "is_managed"),
    [
        (None, True, False),
        ("true", True, True),
        ("false", True, False),
        ("yes", False, False),
        ("True", False, False),
        ("TRUE", False, False),
        (" true", False, False),
        ("1", False, False),
        ("", False, False),
    ],
)
def test_managed_value(value: str | None, valid: bool, is_managed: bool) -> None:
    labels = {keys.MANAGED: value} if value is not None else {}
    label = node_class.managed_label(labels, {})
    assert (label.valid, label.managed) == (valid, is_managed)
    assert node_class.is_managed(labels) is is_managed


@pytest.mark.parametrize(
    ("annotation", "projected"),
    [
        ("", False),
        ("cpu-model.vendor_id", False),
        ("cpu-model.vendor_id,gpustack.ai/managed", True),
        (" gpustack.ai/managed ", True),
        # A bare name is nfd-master's default namespace, not ours.
        ("managed", False),
    ],
)
def test_projected_is_read_from_nfd_masters_annotation(annotation: str, projected: bool) -> None:
    annotations = {keys.NFD_FEATURE_LABELS_ANNOTATION: annotation}
    assert node_class.managed_label({keys.MANAGED: "true"}, annotations).projected is projected


@pytest.mark.parametrize(
    ("value", "projected", "manual", "stamps", "agent_counts"),
    [
        (None, False, False, True, True),  # fresh node: stamped, keys published at once
        (None, False, True, False, False),
        ("true", True, False, True, True),
        ("true", True, True, False, True),  # counts while on the Node, whoever projected it
        ("true", False, True, False, True),
        ("false", False, False, False, False),
        ("yes", True, False, True, False),  # an admin overwrote the projection: withheld, still stamped
        ("false", True, False, True, False),
        ("yes", False, False, False, False),
    ],
)
def test_stamp_and_agent_decision(
    value: str | None, projected: bool, manual: bool, stamps: bool, agent_counts: bool
) -> None:
    label = node_class.ManagedLabel(value, projected)
    assert node_class.stamps_managed(label, manual=manual) is stamps
    assert node_class.agent_counts_managed(label, manual=manual) is agent_counts


# --- accelerated ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "count"),
    [
        ("4", 4),
        ("0", 0),
        ("04", 0),
        ("+4", 0),
        ("-1", 0),
        ("4.0", 0),
        ("", 0),
        (None, 0),
        ("٤", 0),
        ("4_0", 0),
    ],
)
def test_label_count_is_the_canonical_decimal_a_selector_pins(value: str | None, count: int) -> None:
    assert node_class.label_count(value) == count
    if count:
        assert str(count) == value


@pytest.mark.parametrize(
    ("labels", "models", "accelerated"),
    [
        pytest.param({}, (), False, id="no-labels"),
        pytest.param({keys.ACCELERATABLE: "false"}, (), False, id="acceleratable-false"),
        pytest.param({keys.ACCELERATABLE: "true"}, (), True, id="dm-flag-only"),
        pytest.param({A10G: "true", A10G + ".count": "2"}, ("nvidia-a10g",), True, id="model"),
        pytest.param({A10G: "true", A10G + ".count": "02"}, (), True, id="model-with-odd-count"),
        pytest.param({A10G: "true"}, (), True, id="model-without-count"),
        pytest.param({keys.accelerator_key("nvidia"): "true"}, (), True, id="bare-manufacturer"),
        pytest.param(
            {keys.accelerator_key("acme-x1"): "true", keys.accelerator_key("acme-x1") + ".count": "1"},
            (),
            True,
            id="unknown-manufacturer",
        ),
        pytest.param({A10G + ".product": "true"}, (), False, id="descriptor-only"),
        pytest.param({A10G: "false", A10G + ".count": "2"}, (), False, id="model-false"),
    ],
)
def test_accelerated_and_device_models(
    labels: dict[str, str], models: tuple[str, ...], accelerated: bool
) -> None:
    assert tuple(d.a_key for d in node_class.device_labels(labels)) == models
    assert node_class.accelerated(labels) is accelerated
    # Every model a device flavor is built from makes the node accelerated.
    assert not models or accelerated
    assert node_class.cpu_only(labels, None, mixed_on_node=True) is False
    assert node_class.cpu_only(labels, None, mixed_on_node=False) is not accelerated
    # A card in Devices is a detected accelerator too.
    assert node_class.cpu_only(labels, _devices_with(1), mixed_on_node=False) is False
    assert node_class.cpu_only(labels, _devices_with(0), mixed_on_node=False) is not accelerated
    # The chain counts a node in a CPU flavor by the label the agent publishes from these labels.
    published = {**labels, keys.CPU_ONLY: "true"} if not accelerated else labels
    assert node_class.in_cpu_flavors(published, mixed_on_node=False) is not accelerated
    assert node_class.in_cpu_flavors(labels, mixed_on_node=True)


# --- the property: stage 3 and stage 4 agree --------------------------------------------------------
CPUS = (("Intel", "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"), ("AMD", "AMD EPYC 7R32"))
#: (manufacturer, model) pairs; ``acme`` is no known manufacturer.
MODELS = (("nvidia", "a10g"), ("nvidia", "tesla-t4"), ("acme", "x1"))
PROFILES = (keys.topology_profile([keys.HOSTNAME]), keys.topology_profile(["rack", keys.HOSTNAME]))
MANAGED_VALUES = (None, "true", "true", "true", "false", "yes", "True", "TRUE", "1", "")


@dataclass(frozen=True)
class Spec:
    """One generated Node, before the agent and nfd-master have run."""

    name: str
    cpu: tuple[str, str]
    cores: str | None
    arch: str | None
    profile: str | None
    managed: str | None
    projected: bool
    acceleratable: str | None
    models: tuple[tuple[str, str, str | None], ...]
    #: The Device Manager's labels are gone (its NodeFeature deleted); ``Devices`` may still list cards.
    dm_lost: bool
    ledger_cards: int
    #: The Device Manager's labels went (or came back) after the agent's NodeFeature was projected: the
    #: instant before the agent and nfd-master catch up.
    dm_flip: bool = False


@st.composite
def specs(draw: st.DrawFn, name: str) -> Spec:
    models = draw(
        st.lists(
            st.tuples(
                st.sampled_from(MODELS).map(lambda m: m[0]),
                st.sampled_from(MODELS).map(lambda m: m[1]),
                st.sampled_from(("1", "4", "04", "0", None)),
            ),
            max_size=2,
            unique_by=lambda t: (t[0], t[1]),
        )
    )
    value = draw(st.sampled_from(MANAGED_VALUES))
    return Spec(
        name=name,
        cpu=draw(st.sampled_from(CPUS)),
        cores=draw(st.sampled_from(("4", "8", "3500m", "0", None))),
        arch=draw(st.sampled_from(("amd64", "amd64", "arm64", None))),
        profile=draw(st.sampled_from((*PROFILES, PROFILES[0], None))),
        managed=value,
        projected=value is not None and draw(st.booleans()),
        acceleratable=draw(st.sampled_from(("true", "false", None))),
        models=tuple(models),
        dm_lost=draw(st.booleans()),
        ledger_cards=draw(st.sampled_from((0, 1, 2))),
        dm_flip=draw(st.booleans()),
    )


@st.composite
def fleets(draw: st.DrawFn) -> list[Spec]:
    size = draw(st.integers(min_value=1, max_value=6))
    return [draw(specs(f"n{i}")) for i in range(size)]


def _dm_labels(spec: Spec, *, lost: bool | None = None) -> dict[str, str]:
    if spec.dm_lost if lost is None else lost:
        return {}
    labels: dict[str, str] = {}
    if spec.acceleratable is not None:
        labels[keys.ACCELERATABLE] = spec.acceleratable
    for mfr, model, count in spec.models:
        key = keys.accelerator_key(f"{mfr}-{model}")
        labels[keys.accelerator_key(mfr)] = "true"
        labels[key] = "true"
        labels[f"{key}.product"] = model
        if count is not None:
            labels[f"{key}.count"] = count
    return labels


def _devices_with(cards: int, name: str = "n1") -> DevicesFacts:
    accelerators = [card(f"GPU-{i}", logical=8) for i in range(cards)]
    return devices([group("a10g", "nvidia", 23028, accelerators, name="NVIDIA A10G")], name=name)


def _devices(spec: Spec) -> DevicesFacts | None:
    return _devices_with(spec.ledger_cards, spec.name) if spec.ledger_cards else None


def _node(spec: Spec, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": spec.name,
            "uid": f"uid-{spec.name}",
            "labels": labels,
            "annotations": annotations,
        },
        "status": {"capacity": {"cpu": spec.cores} if spec.cores is not None else {}},
    }


def _base(spec: Spec) -> tuple[dict[str, str], dict[str, str]]:
    vendor, cpu_name = spec.cpu
    labels = {keys.HOSTNAME: spec.name, keys.OS: "linux", keys.NFD_CPU_VENDOR: vendor, **_dm_labels(spec)}
    if spec.arch is not None:
        labels[keys.ARCH] = spec.arch
    if spec.profile is not None:
        labels[keys.TOPOLOGY_PROFILE] = spec.profile
    if spec.managed is not None:
        labels[keys.MANAGED] = spec.managed
    annotations = {keys.CPU_NAME_ANNOTATION: cpu_name}
    if spec.projected:
        annotations.update(PROJECTED)
    return labels, annotations


def _agent(spec: Spec, node: dict[str, Any], *, manual: bool, mixed: bool) -> dict[str, str]:
    checked = validate.check(node_facts(node), _devices(spec))
    return nodefeature.desired_labels(
        checked.node,
        checked.devices,
        manual=manual,
        mixed_on_node=mixed,
        holds=checked.holds(),
        published={},
    )


def _project(spec: Spec, *, manual: bool, mixed: bool) -> dict[str, Any]:
    """The Node once nfd-master has projected the agent's NodeFeature onto it. A ``managed`` value already
    on the Node stays as found: it is the admin's, or an admin overwrote nfd-master's projection (which
    nfd-master sets back only at its next update of the Node — the state the agent must report)."""
    labels, annotations = _base(spec)
    published = _agent(spec, _node(spec, labels, annotations), manual=manual, mixed=mixed)
    for key, value in published.items():
        if key == keys.MANAGED and key in labels:
            continue
        labels[key] = value
    if keys.MANAGED in published and not spec.projected:
        annotations.update(PROJECTED)
    node = _node(spec, labels, annotations)
    # The agent's output is a fixed point of its own projection.
    assert _agent(spec, node, manual=manual, mixed=mixed) == published
    if spec.dm_flip:
        for key in _dm_labels(spec):
            del labels[key]
        labels.update(_dm_labels(spec, lost=not spec.dm_lost))
    return node


def _labels(node: dict[str, Any]) -> dict[str, str]:
    return dict(node["metadata"]["labels"])


@settings(max_examples=examples(300))
@given(fleet=fleets(), manual=st.booleans(), mixed=st.booleans(), aware=st.booleans())
def test_agent_and_chain_read_every_node_alike(
    fleet: list[Spec], manual: bool, mixed: bool, aware: bool
) -> None:
    nodes = {spec.name: _project(spec, manual=manual, mixed=mixed) for spec in fleet}
    hardware = {name: hw for name, node in nodes.items() if (hw := node_hardware(node)) is not None}

    for spec in fleet:
        node = nodes[spec.name]
        labels = _labels(node)
        facts = node_facts(node)
        agent_managed = managed.is_managed(facts, manual=manual)
        # Managed: one meaning, whoever wrote the value.
        assert agent_managed is node_class.is_managed(labels)
        if not agent_managed:
            assert spec.name not in hardware
            assert capacity.desired(facts, _devices(spec), manual=manual) == {}
        reasons = {f.reason for f in validate.check(facts, _devices(spec)).findings}
        assert (validate.REASON_MANAGED_IGNORED in reasons) is (spec.managed not in (None, "true", "false"))
        # cpu-only: decided once by the agent, and the chain's CPU-flavor rule reads exactly that label
        # (also at the instant the Device Manager's labels changed and the agent has not caught up).
        hw = hardware.get(spec.name)
        published_cpu_only = labels.get(keys.CPU_ONLY) == "true"
        if hw is not None:
            assert hw.cpu_member(mixed_on_node=mixed) is (hw.cpu.cores > 0 and (mixed or published_cpu_only))
        if spec.dm_flip:
            continue
        cards = spec.ledger_cards > 0
        assert published_cpu_only is node_class.cpu_only(labels, _devices(spec), mixed_on_node=mixed)
        if hw is not None:
            assert published_cpu_only is (not mixed and not hw.accelerated and not cards)

    plans = flavors.plan_flavors(hardware.values(), mixed_on_node=mixed)
    bodies = [flavors.flavor_body(p, mixed_on_node=mixed, aware=aware) for p in plans]
    for plan, body in zip(plans, bodies, strict=True):
        # Kueue selects among every Node of the cluster, not only those the chain reads.
        selector = body["spec"]["nodeLabels"]
        selected = sorted(
            n for n, node in nodes.items() if all(_labels(node).get(k) == v for k, v in selector.items())
        )
        assert selected == list(plan.nodes), (plan.name, selector)
        assert body["metadata"]["labels"][keys.capacity_key(plan.own_key)] == str(len(selected) * plan.count)
        if plan.device is None:
            for name in plan.nodes:
                assert node_class.in_cpu_flavors(_labels(nodes[name]), mixed_on_node=mixed)

    # Every pool's queue is planned, never refused: each pool node is selected by exactly one flavor.
    topologies = frozenset(keys.topology_name(p) for p in PROFILES)
    for pool in {pools.pool_of(p, aware=aware) for p in plans}:
        members = {n for p in plans if pools.pool_of(p, aware=aware) == pool for n in p.nodes}
        assert set(queues.pool_nodes(pool, hardware.values(), mixed_on_node=mixed)) == members
        selector = pools.flavor_selector(pools.schedule_labels(pool, aware=aware))
        result = queues.plan_queue(
            pool, selector, bodies, list(hardware.values()), topologies, mixed_on_node=mixed
        )
        assert isinstance(result, queues.Plan), result


def _cpu_pool(nodes: dict[str, dict[str, Any]]) -> tuple[list[flavors.FlavorPlan], object]:
    hardware = [hw for n in nodes.values() if (hw := node_hardware(n)) is not None]
    plans = [p for p in flavors.plan_flavors(hardware, mixed_on_node=False) if p.device is None]
    bodies = [flavors.flavor_body(p, mixed_on_node=False, aware=False) for p in plans]
    pool = pools.pool_of(plans[0], aware=False)
    selector = pools.flavor_selector(pools.schedule_labels(pool, aware=False))
    topologies = frozenset({keys.topology_name(PROFILES[0])})
    return plans, queues.plan_queue(pool, selector, bodies, hardware, topologies, mixed_on_node=False)


CPU_NODE = Spec("cpu-1", CPUS[1], "8", "amd64", PROFILES[0], None, False, None, (), False, 0)


def test_a_node_that_lost_its_dm_labels_keeps_the_cpu_pool_planned() -> None:
    """Issue 16 defect 5, as filed: mixing off, the Device Manager's labels gone, ``Devices`` still lists
    a card. The agent sees a detected accelerator and publishes no ``cpu-only``; the chain counts CPU
    flavors by that label, so the node is in no CPU flavor, the flavor selects exactly what it counts and
    the CPU pool is planned, not refused."""
    a10g = (("nvidia", "a10g", "1"),)
    lost = Spec("gpu-1", CPUS[1], "8", "amd64", PROFILES[0], None, False, "true", a10g, True, 2)
    nodes = {s.name: _project(s, manual=False, mixed=False) for s in (lost, CPU_NODE)}
    assert keys.CPU_ONLY not in _labels(nodes["gpu-1"])
    (plan,), result = _cpu_pool(nodes)
    assert plan.nodes == ("cpu-1",)
    assert isinstance(result, queues.Plan)


def test_the_instant_before_the_agent_catches_up_keeps_the_cpu_pool_planned() -> None:
    """The same node the instant its Device Manager labels come back (or go) while its ``cpu-only`` is
    still the old one: counted exactly when the label its flavor's selector pins is on it."""
    a10g = (("nvidia", "a10g", "1"),)
    gone = Spec("gpu-1", CPUS[1], "8", "amd64", PROFILES[0], None, False, "true", a10g, True, 0)
    for spec in (gone, dataclasses.replace(gone, dm_flip=True)):
        nodes = {s.name: _project(s, manual=False, mixed=False) for s in (spec, CPU_NODE)}
        (plan,), result = _cpu_pool(nodes)
        assert plan.nodes == ("cpu-1", "gpu-1")
        assert isinstance(result, queues.Plan)


def test_a_dm_flag_without_a_usable_model_leaves_the_node_out_of_both_families() -> None:
    """``acceleratable=true`` but no model a device flavor can be built from: an accelerator was detected,
    so no ``cpu-only``, no CPU flavor, no device flavor — and no refusal."""
    no_count = (("nvidia", "a10g", None),)
    flagged = Spec("gpu-1", CPUS[1], "8", "amd64", PROFILES[0], None, False, "true", no_count, False, 0)
    nodes = {s.name: _project(s, manual=False, mixed=False) for s in (flagged, CPU_NODE)}
    assert keys.CPU_ONLY not in _labels(nodes["gpu-1"])
    assert node_hardware(nodes["gpu-1"]) is not None
    (plan,), result = _cpu_pool(nodes)
    assert plan.nodes == ("cpu-1",)
    assert isinstance(result, queues.Plan)
