"""What the chain reads from a Node: only what a flavor's ``spec.nodeLabels`` can select (issue 16)."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.chain import flavors
from gpustack_worker.chain.nodes import node_hardware

from .builders import node

INTEL = "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz"
G_KEY = keys.general_key("intel-xeon-platinum-8259cl")
T4 = keys.accelerator_key("nvidia-tesla-t4")


def _t4_node(**changes: str | None) -> dict[str, Any]:
    obj = node("t4-a", vendor="Intel", cpu_name=INTEL, cores=4, devices=(("nvidia", "Tesla T4", 2, 15360),))
    labels = obj["metadata"]["labels"]
    for key, value in changes.items():
        label = {"managed": keys.MANAGED, "cpu_count": keys.count_key(G_KEY), "t4_count": T4 + ".count"}[key]
        if value is None:
            labels.pop(label, None)
        else:
            labels[label] = value
    return obj


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("true", True),
        ("false", False),
        # Any other value, whoever wrote it (an admin over nfd-master's projection too), is not managed:
        # the flavors' ``managed: "true"`` selector would not select the node, so it is not counted.
        ("yes", False),
        ("True", False),
        ("TRUE", False),
        ("1", False),
        ("", False),
        (None, False),
    ],
)
def test_only_exactly_true_is_managed(value: str | None, read: bool) -> None:
    assert (node_hardware(_t4_node(managed=value)) is not None) is read


@pytest.mark.parametrize(("raw", "cores"), [("4", 4), ("04", 0), ("+4", 0), ("4.0", 0), ("0", 0)])
def test_cpu_count_counts_only_in_the_form_the_selector_pins(raw: str, cores: int) -> None:
    hw = node_hardware(_t4_node(cpu_count=raw))
    assert hw is not None
    assert hw.cpu.cores == cores


@pytest.mark.parametrize(("raw", "cards"), [("2", 2), ("02", 0), ("+2", 0), ("0", 0), (None, 0)])
def test_card_count_counts_only_in_the_form_the_selector_pins(raw: str | None, cards: int) -> None:
    hw = node_hardware(_t4_node(t4_count=raw))
    assert hw is not None
    assert [d.cards for d in hw.devices] == ([cards] if cards else [])
    # Whatever the count, the Device Manager detected an accelerator: accelerated for every stage.
    assert hw.accelerated


def test_a_node_without_its_general_key_is_not_read() -> None:
    """Every flavor pins ``general.<gKey>=true``; a Node without it (the agent's NodeFeature not projected
    yet, or stale after the CPU name changed) could be selected by none, so it is not counted in any."""
    obj = _t4_node()
    del obj["metadata"]["labels"][G_KEY]
    assert node_hardware(obj) is None


def test_mixing_off_keeps_a_dm_flagged_node_out_of_cpu_flavors_even_without_a_model() -> None:
    obj = _t4_node(t4_count=None)
    hw = node_hardware(obj)
    assert hw is not None
    assert flavors.plan_flavors([hw], mixed_on_node=False) == []
    (cpu,) = flavors.plan_flavors([hw], mixed_on_node=True)
    assert cpu.device is None


@pytest.mark.parametrize("cpu_only", [True, False])
def test_a_cpu_flavor_counts_exactly_the_nodes_carrying_cpu_only(cpu_only: bool) -> None:
    """Issue 16 defect 5: with mixing off the chain counts a node in a CPU flavor exactly when it carries the
    ``cpu-only`` label the flavor's selector pins (the agent's decision) — here a node whose Device Manager
    labels are gone: with the label (no card in its Devices either) it is counted and selected, without
    (its Devices still lists a card) neither."""
    obj = node("gpu-x", vendor="Intel", cpu_name=INTEL, cores=4, cpu_only_label=cpu_only)
    hw = node_hardware(obj)
    assert hw is not None
    assert not hw.accelerated
    plans = flavors.plan_flavors([hw], mixed_on_node=False)
    assert [p.nodes for p in plans] == ([("gpu-x",)] if cpu_only else [])
    for plan in plans:
        body = flavors.flavor_body(plan, mixed_on_node=False, aware=False)
        assert flavors.flavor_nodes(body, [hw]) == list(plan.nodes)
