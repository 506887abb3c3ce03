"""Capacity flavors: golden names and bodies for the four-node mixed cluster, under both mixing values; one
flavor per identity when products or CPU names differ only by ``_``, ``-``, ``.`` or case (issue 27)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import keys
from gpustack_worker.api.normalize import fnv64a_hex
from gpustack_worker.chain import catalog, flavors, pools, queues
from gpustack_worker.chain.nodes import NodeHardware, node_hardware
from tests.chain.builders import HOSTNAME_PROFILE, mixed_cluster, node
from tests.kit.properties import examples

P = HOSTNAME_PROFILE
INTEL = "intel-xeon-platinum-8259cl"


def _hardware(objs):  # type: ignore[no-untyped-def]
    return [h for h in (node_hardware(o) for o in objs) if h is not None]


def test_hostname_only_profile_is_the_spec_value() -> None:
    assert P == "fnv64-87bf574bea2a4f23"


@pytest.mark.parametrize(
    ("mixed", "want"),
    [
        (
            True,
            {
                f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{P}": (("t4-b",), 4),
                f"gpustack--amd-epyc-7r13-linux-amd64-48c-{P}": (("t4-b",), 48),
                f"gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d-{P}": (("a10g-a",), 1),
                f"gpustack--amd-epyc-7r32-linux-amd64-8c-{P}": (("a10g-a",), 8),
                f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64-1d-{P}": (("t4-a",), 1),
                f"gpustack--{INTEL}-linux-amd64-4c-{P}": (("cpu-a", "t4-a"), 8),
            },
        ),
        (
            False,
            {
                f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{P}": (("t4-b",), 4),
                f"gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d-{P}": (("a10g-a",), 1),
                f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64-1d-{P}": (("t4-a",), 1),
                f"gpustack--{INTEL}-linux-amd64-4c-{P}": (("cpu-a",), 4),
            },
        ),
    ],
    ids=["mixed-on-node", "cpu-only"],
)
def test_mixed_cluster_flavors(mixed: bool, want: dict[str, tuple[tuple[str, ...], int]]) -> None:
    plans = flavors.plan_flavors(_hardware(mixed_cluster()), mixed_on_node=mixed)
    assert {p.name: (p.nodes, p.capacity) for p in plans} == want


def test_device_flavor_body() -> None:
    hw = _hardware(mixed_cluster())
    bodies = flavors.desired_flavors(hw, mixed_on_node=True, aware=False)
    body = bodies[f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{P}"]
    key = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"
    assert body["metadata"]["labels"] == {
        "resource.gpustack.ai/type": "nodes",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "feature.gpustack.ai/acceleratable": "true",
        "general.feature.gpustack.ai/amd-epyc-7r13": "true",
        key: "true",
        f"{key}.count": "4",
        f"{key}.capacity": "4",
        "topology.gpustack.ai/profile": P,
    }
    assert body["metadata"]["annotations"] == {
        "note.gpustack.ai/acceleratable": "true",
        "note.gpustack.ai/generalGroup": "amd-epyc-7r13",
        "note.gpustack.ai/acceleratorGroup": "nvidia-tesla-t4",
        "note.gpustack.ai/manufacturer": "nvidia",
        "note.gpustack.ai/product": "Tesla-T4",
        "note.gpustack.ai/memory": "15Gi",
        "note.gpustack.ai/topologyProfile": P,
    }
    assert body["spec"] == {
        "nodeLabels": {
            "gpustack.ai/managed": "true",
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "general.feature.gpustack.ai/amd-epyc-7r13": "true",
            key: "true",
            f"{key}.count": "4",
            "topology.gpustack.ai/profile": P,
        },
        "tolerations": [{"operator": "Exists"}],
        "topologyName": f"gpustack-{P}",
    }


def test_cpu_detail_note_always_on_cpu_flavors_and_on_accelerated_only_when_aware() -> None:
    hw = _hardware(mixed_cluster())
    cpu_name = f"gpustack--{INTEL}-linux-amd64-4c-{P}"
    dev_name = f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64-1d-{P}"
    detail = "note.gpustack.ai/cpuDetail"
    for aware in (False, True):
        bodies = flavors.desired_flavors(hw, mixed_on_node=True, aware=aware)
        assert json.loads(bodies[cpu_name]["metadata"]["annotations"][detail]) == {"physicalCores": "4"}
        notes = bodies[dev_name]["metadata"]["annotations"]
        if aware:
            assert json.loads(notes[detail]) == {
                "physicalCores": "4",
                "manufacturer": "intel",
                "product": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
            }
        else:
            assert detail not in notes


def test_cpu_only_selector_when_mixing_is_off() -> None:
    hw = _hardware(mixed_cluster())
    on = flavors.desired_flavors(hw, mixed_on_node=True, aware=False)[f"gpustack--{INTEL}-linux-amd64-4c-{P}"]
    off = flavors.desired_flavors(hw, mixed_on_node=False, aware=False)[
        f"gpustack--{INTEL}-linux-amd64-4c-{P}"
    ]
    assert "feature.gpustack.ai/cpu-only" not in on["spec"]["nodeLabels"]
    assert off["spec"]["nodeLabels"]["feature.gpustack.ai/cpu-only"] == "true"


@pytest.mark.parametrize(
    "obj",
    [
        node("x", vendor="Intel", cpu_name="Intel Xeon", cores=4, managed=None),
        node("x", vendor="Intel", cpu_name="Intel Xeon", cores=4, managed="True"),
        node("x", vendor="Intel", cpu_name="Intel Xeon", cores=4, managed="false"),
        node("x", vendor="Intel", cpu_name="Intel Xeon", cores=4, profile=None),
    ],
    ids=["unmanaged", "managed-True-is-not-true", "managed-false", "no-profile"],
)
def test_nodes_outside_the_chain(obj: dict[str, object]) -> None:
    assert node_hardware(obj) is None


def test_no_node_in_two_flavors_of_one_kind() -> None:
    hw = _hardware(mixed_cluster())
    plans = flavors.plan_flavors(hw, mixed_on_node=True)
    cpu = [n for p in plans if not p.accelerated for n in p.nodes]
    assert len(cpu) == len(set(cpu))
    for plan in plans:
        body = flavors.flavor_body(plan, mixed_on_node=True, aware=False)
        assert flavors.flavor_nodes(body, hw) == list(plan.nodes)


def test_a_node_without_cards_or_cores_contributes_nothing() -> None:
    obj = node(
        "odd", vendor="Intel", cpu_name="Intel Xeon", cores=0, devices=(("nvidia", "Tesla T4", 0, 15360),)
    )
    assert flavors.plan_flavors(_hardware([obj]), mixed_on_node=True) == []


def test_object_names_spell_a_key_with_underscores_apart_labels_keep_it() -> None:
    # Hygon's K100_AI has the aKey hygon-k100_ai (reference §3.3): valid in a label, not in an object name,
    # which spells it ``hygon-k100-ai`` plus the key's tag (keys.name_part) so ``hygon-k100-ai`` stays free.
    obj = node(
        "dcu",
        vendor="Hygon",
        cpu_name="Hygon C86 7285 32-core Processor",
        cores=64,
        devices=(("hygon", "K100_AI", 4, 65536),),
    )
    (plan,) = [p for p in flavors.plan_flavors(_hardware([obj]), mixed_on_node=True) if p.accelerated]
    tag = fnv64a_hex("hygon-k100_ai")[:8]
    assert plan.name == f"gpustack--hygon-c86-7285--hygon-k100-ai-{tag}-linux-amd64-4d-{P}"
    body = flavors.flavor_body(plan, mixed_on_node=True, aware=False)
    assert body["spec"]["nodeLabels"]["acceleratable.feature.gpustack.ai/hygon-k100_ai"] == "true"
    assert body["metadata"]["annotations"]["note.gpustack.ai/acceleratorGroup"] == "hygon-k100_ai"


# --- identities that differ only by "_", "-", "." or case (issue 27 class 3) ------------------------
HYGON_CPU = "Hygon C86 7285 32-core Processor"
TOPOLOGIES = frozenset({keys.topology_name(P)})


def _dcu(name: str, product: str, cards: int = 4, cpu_name: str = HYGON_CPU) -> dict[str, Any]:
    return node(
        name, vendor="Hygon", cpu_name=cpu_name, cores=64, devices=(("hygon", product, cards, 65536),)
    )


def _cpu(name: str, cpu_name: str) -> dict[str, Any]:
    return node(name, vendor="Hygon", cpu_name=cpu_name, cores=32)


def _queues(
    objs: list[dict[str, Any]], *, aware: bool, mixed: bool = True
) -> dict[str, queues.QueueDecision]:
    """Every derived pool's queue decision over the flavors the chain would write for ``objs``."""
    hw = _hardware(objs)
    plans = flavors.plan_flavors(hw, mixed_on_node=mixed)
    bodies = [flavors.flavor_body(p, mixed_on_node=mixed, aware=aware) for p in plans]
    types = {}
    for plan in plans:
        it = pools.derived_instance_type(plan, aware=aware)
        types[it["metadata"]["name"]] = it
    return {
        name: queues.decide(
            queues.QueueInputs(
                instance_type=it,
                queue=None,
                flavors=bodies,
                nodes=hw,
                topologies=TOPOLOGIES,
                active_checks=frozenset(),
                aware=aware,
                mixed_on_node=mixed,
            )
        )
        for name, it in types.items()
    }


def _conserved(plans: list[flavors.FlavorPlan], hw: list[NodeHardware], *, mixed: bool) -> None:
    """Each flavor selects exactly its contributors and declares their capacity; one identity each."""
    assert len({p.name for p in plans}) == len(plans)
    assert len({(*p.family, p.profile) for p in plans}) == len(plans)
    for plan in plans:
        body = flavors.flavor_body(plan, mixed_on_node=mixed, aware=False)
        assert flavors.flavor_nodes(body, hw) == list(plan.nodes), plan.name
        capacity = next(v for k, v in body["metadata"]["labels"].items() if k.endswith(".capacity"))
        assert int(capacity) == len(plan.nodes) * plan.count


@pytest.mark.parametrize("aware", [False, True], ids=["collapsed", "aware"])
def test_the_issue_k100_twins_are_two_flavors_two_pools_and_both_queues_ready(aware: bool) -> None:
    fleet = [_dcu("dcu-a", "DCU K100_AI"), _dcu("dcu-b", "DCU K100-AI")]
    hw = _hardware(fleet)
    plans = [p for p in flavors.plan_flavors(hw, mixed_on_node=True) if p.accelerated]
    assert sorted((p.device.a_key, p.nodes, p.capacity) for p in plans if p.device is not None) == [
        ("hygon-dcu-k100-ai", ("dcu-b",), 4),
        ("hygon-dcu-k100_ai", ("dcu-a",), 4),
    ]
    _conserved(flavors.plan_flavors(hw, mixed_on_node=True), hw, mixed=True)
    bodies = [flavors.flavor_body(p, mixed_on_node=True, aware=aware) for p in plans]
    entries = {e["name"]: e["spec"]["acceleratorGroup"] for e in catalog.catalog(bodies, aware=aware)}
    assert sorted(entries.values()) == ["hygon-dcu-k100-ai", "hygon-dcu-k100_ai"]  # one catalog entry each
    decided = _queues(fleet, aware=aware)
    dcu = {name: d for name, d in decided.items() if "k100" in name}
    assert len(dcu) == 2, sorted(decided)
    for name, decision in decided.items():
        assert decision.condition is not None and decision.condition.reason == "Ready", (name, decision)
        assert decision.body is not None
        (group,) = decision.body["spec"]["resourceGroups"]
        quota = [r["nominalQuota"] for f in group["flavors"] for r in f["resources"]]
        if name in dcu:  # one card model per pool: 4 cards of one node, never both nodes' 8
            assert quota == [str(4 * keys.UNITS_PER_ACCELERATOR // 1000) + "k"], (name, quota)


def test_cpu_name_twins_are_two_cpu_flavors_and_two_aware_pools() -> None:
    fleet = [
        _cpu("cpu-a", "Hygon C86_7285"),
        _cpu("cpu-b", "Hygon C86-7285"),
        _cpu("cpu-c", "Hygon C86.7285"),
    ]
    hw = _hardware(fleet)
    plans = flavors.plan_flavors(hw, mixed_on_node=True)
    assert sorted((p.cpu.g_key, p.nodes) for p in plans) == [
        ("hygon-c86-7285", ("cpu-b",)),
        ("hygon-c86.7285", ("cpu-c",)),
        ("hygon-c86_7285", ("cpu-a",)),
    ]
    _conserved(plans, hw, mixed=True)
    aware = _queues(fleet, aware=True)
    assert len(aware) == 3
    collapsed = _queues(fleet, aware=False)
    assert list(collapsed) == ["gpustack--generic-linux-amd64"]
    for decision in (*aware.values(), *collapsed.values()):
        assert decision.condition is not None and decision.condition.reason == "Ready", decision


def _old_device_flavor_name(g_key: str, a_key: str, os: str, arch: str, cards: int, profile: str) -> str:
    """The builder before issue 27: ``_`` turned into ``-`` after the name was built (not injective)."""
    return f"gpustack--{g_key}--{a_key}-{os}-{arch}-{cards}d-{profile}".replace("_", "-")


def test_a_name_two_identities_would_share_carries_neither(monkeypatch: pytest.MonkeyPatch) -> None:
    # Flavors are grouped by identity and then named: a builder that merges two identities' names can no
    # longer give one flavor both nodes' capacity under one node's selector; the name is refused.
    monkeypatch.setattr(keys, "device_flavor_name", _old_device_flavor_name)
    fleet = [_dcu("dcu-a", "DCU K100_AI"), _dcu("dcu-b", "DCU K100-AI"), _dcu("dcu-c", "DCU Z100L")]
    hw = _hardware(fleet)
    merged = f"gpustack--hygon-c86-7285--hygon-dcu-k100-ai-linux-amd64-4d-{P}"
    plans = flavors.plan_flavors(hw, mixed_on_node=True)
    assert merged not in {p.name for p in plans}
    assert [p.nodes for p in plans if p.accelerated] == [("dcu-c",)]  # the other model is untouched
    _conserved(plans, hw, mixed=True)
    assert flavors.name_collisions(hw, mixed_on_node=True) == {
        merged: [
            ("hygon-c86-7285", "hygon-dcu-k100-ai", "linux", "amd64", 4, P),
            ("hygon-c86-7285", "hygon-dcu-k100_ai", "linux", "amd64", 4, P),
        ]
    }


def test_no_collision_with_the_real_builders() -> None:
    fleet = [_dcu("dcu-a", "DCU K100_AI"), _dcu("dcu-b", "DCU K100-AI"), _dcu("dcu-c", "DCU K100.AI")]
    assert flavors.name_collisions(_hardware(fleet), mixed_on_node=True) == {}


# Products and CPU names in families of twins: the same words joined by "_", "-", ".", " " or cased
# differently. " " and "-" (and case) normalise to one key: those nodes share an identity and a flavor.
_PRODUCTS = ["DCU K100_AI", "DCU K100-AI", "DCU K100.AI", "dcu k100_ai", "DCU K100 AI", "DCU Z100L"]
_CPUS = ["Hygon C86_7285", "Hygon C86-7285", "HYGON C86.7285", "Hygon C86 7285"]


@settings(max_examples=examples(60), deadline=None)
@given(
    members=st.lists(
        st.tuples(st.sampled_from(_PRODUCTS), st.sampled_from(_CPUS), st.sampled_from([1, 4]), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    aware=st.booleans(),
    mixed=st.booleans(),
)
def test_twin_fleets_get_one_flavor_per_identity_and_every_queue_conserved(
    members: list[tuple[str, str, int, bool]], aware: bool, mixed: bool
) -> None:
    fleet = [
        _dcu(f"n{i}", product, cards, cpu) if accelerated else _cpu(f"n{i}", cpu)
        for i, (product, cpu, cards, accelerated) in enumerate(members)
    ]
    hw = _hardware(fleet)
    plans = flavors.plan_flavors(hw, mixed_on_node=mixed)
    assert flavors.name_collisions(hw, mixed_on_node=mixed) == {}
    identities = {fam for h in hw for fam in flavors.node_families(h, mixed_on_node=mixed)}
    assert {p.family for p in plans} == identities
    _conserved(plans, hw, mixed=mixed)
    for name, decision in _queues(fleet, aware=aware, mixed=mixed).items():
        assert decision.condition is not None and decision.condition.reason == "Ready", (name, decision)
