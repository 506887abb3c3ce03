"""Tier normalisation, populated prefix and profile hashing (reference §2.1.2, Appendix A.1/A.7)."""

from __future__ import annotations

import pytest

from gpustack_worker.api import keys
from gpustack_worker.topology import levels as lv

T = keys.TOPOGRAPH_TIER_PREFIX
REGION, ZONE = keys.STANDARD_REGION, keys.STANDARD_ZONE
P_REGION, P_ZONE, P_RACK = keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.PRIVATE_RACK


def reference_fnv1a64(data: bytes) -> str:
    """Appendix A.1 written out independently of the package."""
    h = 0xCBF29CE484222325
    for byte in data:
        h ^= byte
        h = (h * 0x100000001B3) % (1 << 64)
    return f"{h:016x}"


def test_hostname_only_profile_is_the_documented_default() -> None:
    assert lv.HOSTNAME_ONLY_LEVELS == ("kubernetes.io/hostname",)
    assert lv.HOSTNAME_ONLY_PROFILE == "fnv64-87bf574bea2a4f23"
    assert lv.profile_of(lv.HOSTNAME_ONLY_LEVELS) == "fnv64-87bf574bea2a4f23"


@pytest.mark.parametrize(
    "levels",
    [
        pytest.param((P_REGION, P_ZONE, P_RACK, keys.HOSTNAME), id="private-region-zone-rack"),
        pytest.param((REGION, ZONE, keys.HOSTNAME), id="standard-region-zone"),
        pytest.param((REGION, ZONE, f"{T}2", f"{T}1", keys.HOSTNAME), id="topograph-example"),
    ],
)
def test_profile_is_fnv1a64_of_nul_joined_levels(levels: tuple[str, ...]) -> None:
    expected = "fnv64-" + reference_fnv1a64(b"\x00".join(k.encode() for k in levels))
    assert lv.profile_of(levels) == expected
    assert lv.profile_of(list(levels)) == expected
    assert lv.profile_of(tuple(reversed(levels))) != expected  # order is part of the shape


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        pytest.param((), (), id="empty"),
        pytest.param((f"{T}1", f"{T}2"), (f"{T}2", f"{T}1"), id="ascending-pair-reversed"),
        pytest.param((f"{T}3", f"{T}2", f"{T}1"), (f"{T}3", f"{T}2", f"{T}1"), id="descending-unchanged"),
        pytest.param((f"{T}1", f"{T}2", f"{T}3"), (f"{T}3", f"{T}2", f"{T}1"), id="ascending-triple"),
        pytest.param((f"{T}1",), (f"{T}1",), id="single-tier"),
        pytest.param((f"{T}2", f"{T}2"), (f"{T}2", f"{T}2"), id="equal-ends-unchanged"),
        pytest.param(
            (REGION, f"{T}1", f"{T}2", ZONE, f"{T}1", f"{T}3"),
            (REGION, f"{T}2", f"{T}1", ZONE, f"{T}3", f"{T}1"),
            id="two-runs-independent",
        ),
        pytest.param(
            (REGION, f"{T}3", f"{T}2", ZONE, f"{T}1", f"{T}2"),
            (REGION, f"{T}3", f"{T}2", ZONE, f"{T}2", f"{T}1"),
            id="only-the-ascending-run",
        ),
        pytest.param(
            (REGION, ZONE, f"{T}2", f"{T}1"), (REGION, ZONE, f"{T}2", f"{T}1"), id="topograph-example-6.2"
        ),
        pytest.param(
            (REGION, ZONE, f"{T}1", f"{T}2"),
            (REGION, ZONE, f"{T}2", f"{T}1"),
            id="topograph-example-inverted",
        ),
        pytest.param(
            (f"{T}1", f"{T}x", f"{T}2"), (f"{T}1", f"{T}x", f"{T}2"), id="non-numeric-tier-breaks-run"
        ),
        pytest.param((f"{T}9", f"{T}10"), (f"{T}10", f"{T}9"), id="numeric-not-lexicographic"),
        pytest.param(
            ("accelerator.topograph.run/nvlink", f"{T}1", f"{T}2"),
            ("accelerator.topograph.run/nvlink", f"{T}2", f"{T}1"),
            id="accelerator-key-is-not-a-tier",
        ),
    ],
)
def test_normalize_tiers(levels: tuple[str, ...], expected: tuple[str, ...]) -> None:
    assert lv.normalize_tiers(levels) == expected
    assert lv.normalize_tiers(list(levels)) == expected
    assert lv.normalize_tiers(expected) == expected  # idempotent on its own output


@pytest.mark.parametrize(
    ("levels", "labels", "expected"),
    [
        pytest.param((P_REGION, P_ZONE, P_RACK), {}, (), id="nothing-populated"),
        pytest.param(
            (P_REGION, P_ZONE, P_RACK),
            {P_REGION: "r", P_ZONE: "z", P_RACK: "k"},
            (P_REGION, P_ZONE, P_RACK),
            id="all-populated",
        ),
        pytest.param(
            (P_REGION, P_ZONE, P_RACK), {P_REGION: "r", P_ZONE: "z"}, (P_REGION, P_ZONE), id="missing-suffix"
        ),
        pytest.param((P_REGION, P_ZONE, P_RACK), {P_REGION: "r", P_RACK: "k"}, (P_REGION,), id="gap-cuts"),
        pytest.param(
            (P_REGION, P_ZONE, P_RACK), {P_ZONE: "z", P_RACK: "k"}, (), id="child-without-parent-cuts-at-0"
        ),
        pytest.param((P_REGION, P_ZONE), {P_REGION: "", P_ZONE: "z"}, (), id="empty-value-is-missing"),
    ],
)
def test_populated_prefix(levels: tuple[str, ...], labels: dict[str, str], expected: tuple[str, ...]) -> None:
    assert lv.populated_prefix(levels, labels) == expected


@pytest.mark.parametrize(
    ("levels", "labels", "expected"),
    [
        pytest.param(None, {P_REGION: "r"}, (keys.HOSTNAME,), id="no-source"),
        pytest.param((), {P_REGION: "r"}, (keys.HOSTNAME,), id="empty-levels"),
        pytest.param((P_REGION, P_ZONE), {}, (keys.HOSTNAME,), id="source-but-unlabelled"),
        pytest.param(
            (P_REGION, P_ZONE, P_RACK),
            {P_REGION: "r", P_ZONE: "z"},
            (P_REGION, P_ZONE, keys.HOSTNAME),
            id="partial-suffix",
        ),
        pytest.param(
            (REGION, ZONE, f"{T}1", f"{T}2"),
            {REGION: "r", ZONE: "z", f"{T}2": "spine", keys.HOSTNAME: "n"},
            (REGION, ZONE, f"{T}2", keys.HOSTNAME),
            id="normalised-before-prefix",
        ),
        pytest.param(
            (REGION, ZONE, f"{T}2", f"{T}1"),
            {REGION: "r", ZONE: "z", f"{T}2": "spine", f"{T}1": "leaf"},
            (REGION, ZONE, f"{T}2", f"{T}1", keys.HOSTNAME),
            id="topograph-example-6.2",
        ),
    ],
)
def test_profile_levels(
    levels: tuple[str, ...] | None, labels: dict[str, str], expected: tuple[str, ...]
) -> None:
    assert lv.profile_levels(levels, labels) == expected


def test_no_source_profile_is_hostname_only() -> None:
    assert lv.profile_of(lv.profile_levels(None, {})) == lv.HOSTNAME_ONLY_PROFILE
