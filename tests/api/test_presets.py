"""Unit spec presets (reference §7): the walkthrough's confirmed values and the matching rules."""

from __future__ import annotations

import itertools

import pytest

from gpustack_worker.api import presets
from gpustack_worker.api.presets import UnitSpec


@pytest.mark.parametrize(
    ("manufacturer", "product", "want"),
    [
        # Confirmed by the walkthrough.
        ("nvidia", "NVIDIA A10G", ("8", "64Gi")),
        ("nvidia", "Tesla T4", ("8", "32Gi")),
        # Label-sanitised product names give the same key as raw ones.
        ("nvidia", "NVIDIA-A10G", ("8", "64Gi")),
        ("nvidia", "Tesla-T4", ("8", "32Gi")),
        # Capacity tokens refine a family; a family without one keeps its own tier.
        ("nvidia", "NVIDIA A100-SXM4-80GB", ("12", "128Gi")),
        ("nvidia", "NVIDIA A100-PCIE-40GB", ("8", "64Gi")),
        ("nvidia", "NVIDIA A100", ("8", "64Gi")),
        ("nvidia", "NVIDIA A800 80GB PCIe", ("12", "128Gi")),
        # Whole tokens only: a10 never matches a100, v100 never matches v100s, l40 never l40s.
        ("nvidia", "NVIDIA A10", ("8", "64Gi")),
        ("nvidia", "Tesla V100-SXM2-32GB", ("8", "64Gi")),
        ("nvidia", "Tesla V100-SXM2-16GB", ("8", "32Gi")),
        ("nvidia", "Tesla V100S-PCIE-32GB", ("8", "32Gi")),
        ("nvidia", "NVIDIA L40", ("8", "64Gi")),
        ("nvidia", "NVIDIA L40S", ("12", "128Gi")),
        ("nvidia", "NVIDIA H100 80GB HBM3", ("12", "192Gi")),
        ("nvidia", "NVIDIA GH200 480GB", ("12", "192Gi")),
        ("nvidia", "NVIDIA GB10", ("8", "32Gi")),
        ("nvidia", "Quadro RTX 6000", ("8", "32Gi")),
        ("nvidia", "NVIDIA GeForce RTX 4090", ("8", "64Gi")),
        ("nvidia", "NVIDIA GeForce RTX 4090 D", ("8", "64Gi")),
        ("nvidia", "NVIDIA GeForce RTX 4090D", ("8", "64Gi")),
        ("nvidia", "NVIDIA RTX A6000", ("8", "32Gi")),
        # Other manufacturers.
        ("ascend", "910B2", ("8", "64Gi")),
        ("ascend", "910B4-1", ("8", "64Gi")),
        ("ascend", "Ascend910-9392", ("12", "192Gi")),
        ("ascend", "310P3", ("8", "64Gi")),
        ("amd", "AMD Instinct MI300X", ("12", "192Gi")),
        ("amd", "AMD Instinct MI210", ("12", "128Gi")),
        ("amd", "AMD Radeon RX 7800 XT", ("4", "16Gi")),
        ("cambricon", "MLU370-X8", ("8", "64Gi")),
        ("cambricon", "MLU", ("4", "16Gi")),
        ("hygon", "K100_AI", ("12", "128Gi")),
        ("hygon", "Z100L", ("8", "32Gi")),
        ("hygon", "BW1000", ("12", "192Gi")),
        ("metax", "MXC500", ("8", "64Gi")),
        ("metax", "MXC550", ("12", "128Gi")),
        ("mthreads", "MTT S4000", ("8", "64Gi")),
        ("iluvatar", "BI-V150", ("8", "64Gi")),
        ("thead", "PPU ZW810E", ("8", "64Gi")),
        # Unknown product or manufacturer: the fallback.
        ("nvidia", "NVIDIA Future 9000", ("4", "16Gi")),
        ("kunlun", "P800", ("4", "16Gi")),
        ("", "", ("4", "16Gi")),
    ],
)
def test_accelerated_presets(manufacturer: str, product: str, want: tuple[str, str]) -> None:
    spec = presets.unit_spec(acceleratable=True, manufacturer=manufacturer, product=product)
    assert (spec.cpu, spec.ram, spec.local_storage) == (*want, "100Gi")


def test_cpu_only_pool_is_one_cpu_two_gi() -> None:
    assert presets.unit_spec(acceleratable=False, manufacturer="nvidia", product="NVIDIA H100") == UnitSpec(
        "1", "2Gi", "100Gi"
    )


def test_marketing_tokens_are_stripped_repeatedly_but_never_to_nothing() -> None:
    assert presets.preset_key("nvidia", "NVIDIA Tesla T4") == ("t4",)
    assert presets.preset_key("mthreads", "Moore Threads MTT S4000") == ("mtt", "s4000")
    assert presets.preset_key("nvidia", "Tesla") == ("tesla",)


def test_no_product_key_can_match_two_entries() -> None:
    # Matching takes the first entry whose prefix is a token prefix of the key; the table must never
    # hold two entries where one prefix is a token prefix of the other, or the order would decide.
    for entries in presets._TABLE.values():
        for a, b in itertools.permutations(entries, 2):
            assert b.prefix[: len(a.prefix)] != a.prefix, (a.prefix, b.prefix)
