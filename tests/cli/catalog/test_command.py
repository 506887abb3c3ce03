"""``gpustack-worker catalog`` (issue 29 item 8): the names it prints are the InstanceType names a
ModelDeployment names — the chain's own, checked against the InstanceTypes the chain derives from the
same flavors for every packaged scenario under both groupings — and memory reads as the spec writes it,
with its value in Gi beside it when that is not whole."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_worker.chain.catalog import catalog
from gpustack_worker.cli.catalog.command import memory_text, render_text
from gpustack_worker.cli.plan.planning import plan_chain
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.simulate.load import packaged_scenario, packaged_scenario_names


def _planned(scenario: str, aware: bool) -> tuple[list[dict[str, Any]], set[str]]:
    settings = WorkerSettings(instance_type_aware_cpu_manufacturer=aware)
    plan = plan_chain(packaged_scenario(scenario), settings)
    return catalog(plan.flavors.values(), aware=aware), set(plan.instance_types)


@pytest.mark.parametrize("aware", [False, True])
@pytest.mark.parametrize("scenario", packaged_scenario_names())
def test_catalog_instance_types_are_the_chains_instance_types(scenario: str, aware: bool) -> None:
    entries, derived = _planned(scenario, aware)
    listed = [name for e in entries for name in e["instanceTypes"]]
    assert sorted(listed) == sorted(derived)  # each once, under exactly one catalog entry


def test_the_demo_h100_entry_names_its_instance_type() -> None:
    entries, _ = _planned("demo", False)
    h100 = next(e for e in entries if e["name"] == "gpustack--nvidia-h100-80gb-hbm3")
    assert h100["instanceTypes"] == ["gpustack--nvidia-h100-80gb-hbm3-linux-amd64"]
    assert h100["spec"]["memory"] == "81559Mi"  # the spec's quantity stays exact in the entry
    generic = next(e for e in entries if e["name"] == "gpustack--generic")
    assert generic["instanceTypes"] == ["gpustack--generic-linux-amd64", "gpustack--generic-linux-arm64"]


def test_the_text_table_leads_with_the_instance_type_name() -> None:
    entries, _ = _planned("demo", False)
    lines = render_text(entries).splitlines()
    assert lines[0].split() == [
        "INSTANCETYPE", "ACCELERATABLE", "MANUFACTURER", "PRODUCT",
        "MEMORY", "SLICEABLE", "GENERALGROUP", "CATALOG",
    ]  # fmt: skip
    rows = {line.split()[0]: line for line in lines[1:]}
    h100 = rows["gpustack--nvidia-h100-80gb-hbm3-linux-amd64"]
    assert "81559Mi (79.6Gi)" in h100 and h100.rstrip().endswith("gpustack--nvidia-h100-80gb-hbm3")
    a100 = rows["gpustack--nvidia-a100-sxm4-80gb-linux-amd64"]
    assert " 80Gi " in a100 and "(" not in a100
    assert {"gpustack--generic-linux-amd64", "gpustack--generic-linux-arm64"} <= set(rows)


@pytest.mark.parametrize(
    ("quantity", "shown"),
    [
        ("81559Mi", "81559Mi (79.6Gi)"),  # NVIDIA H100 80GB HBM3 (the demo's, as the driver reports it)
        ("81920Mi", "81920Mi"),  # a whole number of Gi, not the spec's spelling (80Gi): shown as given
        ("80Gi", "80Gi"),
        ("23028Mi", "23028Mi (22.5Gi)"),  # A10G
        ("15Gi", "15Gi"),
        ("1Ti", "1Ti"),
        ("512Mi", "512Mi (0.5Gi)"),
        ("24G", "24G"),  # decimal units are left alone
        ("not-a-quantity", "not-a-quantity"),
    ],
)
def test_memory_text(quantity: str, shown: str) -> None:
    assert memory_text(quantity) == shown


@given(st.integers(min_value=1, max_value=4 * 1024 * 1024))
def test_memory_text_keeps_the_quantity_and_adds_gi_only_when_not_whole(mib: int) -> None:
    shown = memory_text(f"{mib}Mi")
    assert shown.startswith(f"{mib}Mi")
    if mib % 1024 == 0:
        assert shown == f"{mib}Mi"
    else:
        assert shown == f"{mib}Mi ({mib / 1024:.1f}Gi)"
