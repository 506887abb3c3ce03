from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpustack_worker.agent import capacity
from gpustack_worker.api import keys, manufacturers
from tests.kit.properties import examples

from .builders import card, devices, group, ledger, ledger_group, node, node_of, profile

if TYPE_CHECKING:
    from gpustack_worker.agent.facts import DevicesFacts

M = 1_600_000
NV = "nvidia.com/gpu"

# A100 80GB MIG profiles (static per-card ceilings).
A100_PROFILES = [
    profile("1g.10gb", 7, 9856),
    profile("2g.20gb", 3, 19968),
    profile("3g.40gb", 2, 40192),
    profile("4g.40gb", 1, 40192),
    profile("7g.80gb", 1, 80384),
]
A100_MEM = 81920


def mig_card(card_id: str) -> dict[str, dict[str, str]]:
    return card(card_id, logical=0, profiles=A100_PROFILES)


def nv_node(
    *, sliced: str | None = None, partitioned: str | None = None, extra: dict[str, str] | None = None
) -> dict[str, dict[str, str]]:
    cap: dict[str, str] = {"cpu": "64", NV: "8"}
    if sliced is not None:
        cap[f"{NV}.sliced"] = sliced
    if partitioned is not None:
        cap[f"{NV}.partitioned"] = partitioned
    cap.update(extra or {})
    return {"capacity": cap}


# The spec example: one 3g.40gb carved at placement 0 of an 80 GB card (8 memory slices). What still
# fits: the other 3g.40gb half, two 2g.20gb, three 1g.10gb; neither 4g.40gb nor 7g.80gb.
CARVED = devices(
    [group("a100-sxm4-80gb", "nvidia", A100_MEM, [mig_card("GPU-0")])],
    [
        ledger_group(
            "a100-sxm4-80gb",
            "nvidia",
            [
                ledger(
                    "GPU-0",
                    mode=4,
                    allocated_profiles={"3g.40gb": 1},
                    remaining_profiles={"1g.10gb": 3, "2g.20gb": 2, "3g.40gb": 1, "4g.40gb": 0, "7g.80gb": 0},
                )
            ],
        )
    ],
)

HYGON = devices(
    [
        group(
            "k100_ai",
            "hygon",
            65520,
            [card("DCU-0", logical=4), card("DCU-1", logical=4)],
            name="K100_AI",
        )
    ]
)
HYGON_NODE = {"capacity": {"hygon.com/dcu": "2", "hygon.com/dcu.sliced": "8"}}

# Mixed node: 8 cards of one model, 3 in MIG mode (no ledger yet -> static ceilings), 5 sliceable.
MIXED = devices(
    [
        group(
            "a100-sxm4-80gb",
            "nvidia",
            A100_MEM,
            [mig_card(f"GPU-{i}") for i in range(3)]
            + [card(f"GPU-{i}", logical=128, overcommit=True) for i in range(3, 8)],
        )
    ]
)

# Mixed-VRAM models of one manufacturer: 2x A10G (23028 MiB) + 1x Tesla T4 (15360 MiB).
MIXED_VRAM = devices(
    [
        group(
            "a10g",
            "nvidia",
            23028,
            [card("A-0", logical=128, overcommit=True), card("A-1", logical=128, overcommit=True)],
        ),
        group("tesla-t4", "nvidia", 15360, [card("T-0", logical=128, overcommit=True)]),
    ]
)

THEAD = devices(
    [
        group(
            "ppu-zw810e",
            "thead",
            98304,
            [card("PPU-0", profiles=[profile("4g48gb", 2), profile("8g96gb", 1)])],
        )
    ]
)
THEAD_NODE = {"capacity": {"alibabacloud.com/ppu.partitioned": "3"}}
NV_JOINED = devices([group("x", "nvidia", 98304, [card("X-0", profiles=[profile("4g48gb", 2)])])])

# Fallback: GPU-0 has a ledger (one 7g.80gb live), GPU-1 has none yet.
FALLBACK = devices(
    [group("a100-sxm4-80gb", "nvidia", A100_MEM, [mig_card("GPU-0"), mig_card("GPU-1")])],
    [
        ledger_group(
            "a100-sxm4-80gb",
            "nvidia",
            [
                ledger(
                    "GPU-0",
                    mode=4,
                    allocated_profiles={"7g.80gb": 1},
                    remaining_profiles={"1g.10gb": 0, "2g.20gb": 0, "3g.40gb": 0, "4g.40gb": 0, "7g.80gb": 0},
                )
            ],
        )
    ],
)
# A ledger entry with no profile data at all is "not published yet" for partitions: ceilings apply.
EMPTY_LEDGER = devices(
    [group("a100-sxm4-80gb", "nvidia", A100_MEM, [mig_card("GPU-0")])],
    [ledger_group("a100-sxm4-80gb", "nvidia", [ledger("GPU-0")])],
)


def mig(profile_name: str) -> str:
    return f"{NV}.partitioned.mig-{profile_name}"


@pytest.mark.parametrize(
    ("node_kwargs", "devs", "expected"),
    [
        pytest.param(
            nv_node(partitioned="7"),
            CARVED,
            {
                f"{NV}.partitioned.units": M,
                mig("1g.10gb"): 3,
                mig("2g.20gb"): 2,
                mig("3g.40gb"): 2,
                mig("4g.40gb"): 0,
                mig("7g.80gb"): 0,
            },
            id="3g.40gb-carved-on-80gb",
        ),
        pytest.param(
            HYGON_NODE,
            HYGON,
            {
                "hygon.com/dcu.sliced.units": 2 * M,
                "hygon.com/dcu.sliced.cores-percentage": 200,
                "hygon.com/dcu.sliced.memory-percentage": 200,
                "hygon.com/dcu.sliced.memory-mib": 2 * 65520,
            },
            id="hygon-four-slices-not-overcommittable",
        ),
        pytest.param(
            nv_node(sliced="640", partitioned="21"),
            MIXED,
            {
                f"{NV}.sliced.units": 5 * M,
                f"{NV}.sliced.cores-percentage": 5 * 128 * 100,
                f"{NV}.sliced.memory-percentage": 500,
                f"{NV}.sliced.memory-mib": 5 * A100_MEM,
                f"{NV}.partitioned.units": 3 * M,
                mig("1g.10gb"): 21,
                mig("2g.20gb"): 9,
                mig("3g.40gb"): 6,
                mig("4g.40gb"): 3,
                mig("7g.80gb"): 3,
            },
            id="mixed-node-disjoint-families",
        ),
        pytest.param(
            nv_node(sliced="384"),
            MIXED_VRAM,
            {
                f"{NV}.sliced.units": 3 * M,
                f"{NV}.sliced.cores-percentage": 3 * 128 * 100,
                f"{NV}.sliced.memory-percentage": 300,
                f"{NV}.sliced.memory-mib": 2 * 23028 + 15360,
            },
            id="mixed-vram-models-weighted",
        ),
        pytest.param(
            THEAD_NODE,
            THEAD,
            {
                "alibabacloud.com/ppu.partitioned.units": M,
                "alibabacloud.com/ppu.partitioned.mig-4g.48gb": 2,
                "alibabacloud.com/ppu.partitioned.mig-8g.96gb": 1,
            },
            id="thead-geometry-gets-separator",
        ),
        pytest.param(
            nv_node(partitioned="2"),
            NV_JOINED,
            {f"{NV}.partitioned.units": M, mig("4g48gb"): 2},
            id="same-string-from-nvidia-untouched",
        ),
        pytest.param(
            nv_node(partitioned="8"),
            FALLBACK,
            {
                f"{NV}.partitioned.units": 2 * M,
                mig("1g.10gb"): 0 + 7,
                mig("2g.20gb"): 0 + 3,
                mig("3g.40gb"): 0 + 2,
                mig("4g.40gb"): 0 + 1,
                mig("7g.80gb"): 1 + 1,
            },
            id="ledger-card-plus-static-ceiling-card",
        ),
        pytest.param(
            nv_node(partitioned="7"),
            EMPTY_LEDGER,
            {
                f"{NV}.partitioned.units": M,
                mig("1g.10gb"): 7,
                mig("2g.20gb"): 3,
                mig("3g.40gb"): 2,
                mig("4g.40gb"): 1,
                mig("7g.80gb"): 1,
            },
            id="ledger-without-profiles-falls-back",
        ),
    ],
)
def test_counting_keys(
    node_kwargs: dict[str, dict[str, str]], devs: DevicesFacts, expected: dict[str, int]
) -> None:
    assert capacity.desired(node_of(node_kwargs), devs, manual=False) == expected


def test_carved_card_reads_one_free_3g_instance() -> None:
    # The scheduler subtracts the live Pod's request from capacity: 2 - 1 = one free 3g.40gb, no 7g.80gb.
    got = capacity.desired(node_of(nv_node(partitioned="7")), CARVED, manual=False)
    assert got[mig("3g.40gb")] - 1 == 1
    assert got[mig("7g.80gb")] == 0


SLICED_KEYS = {f"{NV}.sliced.{s}" for s in keys.SLICED_COUNTING_SUFFIXES}
PARTITIONED_KEYS = {f"{NV}.partitioned.units"} | {mig(p["name"]) for p in A100_PROFILES}


@pytest.mark.parametrize(
    ("node_kwargs", "manual", "present"),
    [
        pytest.param(
            nv_node(sliced="640", partitioned="21"), False, SLICED_KEYS | PARTITIONED_KEYS, id="both-pools"
        ),
        pytest.param(nv_node(partitioned="21"), False, PARTITIONED_KEYS, id="sliced-pool-absent"),
        pytest.param(nv_node(sliced="0", partitioned="21"), False, PARTITIONED_KEYS, id="sliced-pool-zero"),
        pytest.param(nv_node(sliced="640"), False, SLICED_KEYS, id="partitioned-pool-absent"),
        pytest.param(nv_node(), False, set(), id="no-pools"),
        pytest.param(nv_node(sliced="640", partitioned="21"), True, set(), id="unmanaged-manual-mode"),
        pytest.param(
            nv_node(sliced="640", partitioned="21", extra={}) | {"labels": {keys.MANAGED: "true"}},
            True,
            SLICED_KEYS | PARTITIONED_KEYS,
            id="manual-mode-admin-managed",
        ),
        pytest.param(
            nv_node(sliced="640", partitioned="21") | {"labels": {keys.MANAGED: "false"}},
            False,
            set(),
            id="admin-opted-out",
        ),
    ],
)
def test_presence_gating(node_kwargs: dict[str, dict[str, str]], manual: bool, present: set[str]) -> None:
    assert set(capacity.desired(node_of(node_kwargs), MIXED, manual=manual)) == present


def test_gating_reads_capacity_not_allocatable() -> None:
    # A saturated pool is 0 in allocatable but still present in capacity: the keys must stay.
    n = node_of(nv_node(sliced="640"))
    saturated = type(n)(
        n.name, n.uid, n.labels, n.annotations, n.capacity, {**n.allocatable, f"{NV}.sliced": "0"}
    )
    assert set(capacity.desired(saturated, MIXED, manual=False)) == SLICED_KEYS


def test_no_devices_no_keys() -> None:
    assert capacity.desired(node_of(nv_node(sliced="640")), None, manual=False) == {}


def test_unknown_manufacturer_ignored() -> None:
    devs = devices([group("x1", "acme", 1024, [card("X", logical=8)])])
    assert capacity.desired(node(capacity={"acme.com/x.sliced": "8"}), devs, manual=False) == {}


def test_stale_covers_every_suffix_and_profile() -> None:
    observed = {
        "cpu": "64",
        NV: "8",
        f"{NV}.sliced": "640",
        f"{NV}.partitioned": "21",
        **dict.fromkeys(SLICED_KEYS | PARTITIONED_KEYS, "1"),
        "hygon.com/dcu.sliced.units": "1",
        "hygon.com/dcu.sliced.other": "1",
    }
    wanted = {f"{NV}.sliced.units": 5 * M}
    assert capacity.stale(observed, wanted) == (
        SLICED_KEYS | PARTITIONED_KEYS | {"hygon.com/dcu.sliced.units"}
    ) - set(wanted)


def _counting_by_definition(resource: str) -> bool:
    """A counting key as the module docstring defines it: ``<base>.sliced.<one of the four>`` or
    ``<base>.partitioned.<anything>``, for any manufacturer's base."""
    for m in manufacturers.MANUFACTURERS.values():
        if resource in {keys.sliced_resource(m.resource, s) for s in keys.SLICED_COUNTING_SUFFIXES}:
            return True
        if resource.startswith(keys.partitioned_resource(m.resource) + "."):
            return True
    return False


_BASES = sorted(m.resource for m in manufacturers.MANUFACTURERS.values())
_RESOURCE = st.one_of(
    st.text(max_size=40),
    st.builds(
        lambda base, family, suffix: f"{base}{family}{suffix}",
        st.sampled_from([*_BASES, "acme.com/x", "nvidia.com/gpux"]),
        st.sampled_from(["", ".sliced", ".partitioned", ".shared", ".sliced.", ".partitioned."]),
        st.one_of(
            st.sampled_from(["", ".", *(f".{s}" for s in keys.SLICED_COUNTING_SUFFIXES), ".units.x", ".1g"]),
            st.text(max_size=12),
        ),
    ),
)


@settings(max_examples=examples(400))
@example(resource="nvidia.com/gpu.sliced.units")
@example(resource="nvidia.com/gpu.sliced.other")
@example(resource="nvidia.com/gpu.partitioned.mig-1g.10gb")
@example(resource="nvidia.com/gpu.partitioned")
@given(resource=_RESOURCE)
def test_is_counting_key_matches_its_definition(resource: str) -> None:
    """The prefixes built once answer exactly as the per-base definition (issue 18: the stale scans ran
    it ~46,000 times at 1,000 nodes, each building twenty strings)."""
    assert capacity.is_counting_key(resource) == _counting_by_definition(resource)
