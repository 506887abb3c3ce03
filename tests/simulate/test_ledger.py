"""Per-card ledger arithmetic and partition geometry (reference §2.2, scheduling-chain.md Stage 3)."""

from __future__ import annotations

import pytest

from gpustack_worker.api import keys
from gpustack_worker.api.crds.devices import AllocationMode
from gpustack_worker.simulate import ledger
from gpustack_worker.simulate.ledger import CardGeometry, ProfileGeometry


def _geometry(compute: int, memory: int, *profiles: tuple[str, int, int, int]) -> CardGeometry:
    return CardGeometry(
        compute,
        memory,
        tuple(
            ProfileGeometry(name, mib, c, m, ledger.default_placements(compute, memory, c, m))
            for name, mib, c, m in profiles
        ),
    )


# An 80 GB A100/H100 as NVIDIA documents it: 7 compute and 8 memory slices.
A100_80 = _geometry(
    7,
    8,
    ("1g.10gb", 9728, 1, 1),
    ("2g.20gb", 19968, 2, 2),
    ("3g.40gb", 40192, 3, 4),
    ("4g.40gb", 40192, 4, 4),
    ("7g.80gb", 80384, 7, 8),
)
# T-Head prints its geometry without a separator (4g48gb); the ledger keeps that spelling.
THEAD = _geometry(7, 8, ("2g24gb", 24576, 2, 2), ("4g48gb", 49152, 4, 4), ("7g96gb", 98304, 7, 8))


@pytest.mark.parametrize(
    ("compute", "memory", "profile_compute", "profile_memory", "expected"),
    [
        pytest.param(7, 8, 3, 4, (0, 4), id="3g.40gb-at-0-and-4"),
        pytest.param(7, 8, 2, 2, (0, 2, 4), id="2g.20gb-compute-capped-at-3"),
        pytest.param(7, 8, 1, 1, (0, 1, 2, 3, 4, 5, 6), id="1g.10gb-seven"),
        pytest.param(7, 8, 7, 8, (0,), id="7g.80gb-whole-card"),
        pytest.param(7, 8, 4, 4, (0,), id="4g.40gb-only-at-0"),
        pytest.param(7, 8, 7, 9, (), id="larger-than-card"),
    ],
)
def test_default_placements(
    compute: int, memory: int, profile_compute: int, profile_memory: int, expected: tuple[int, ...]
) -> None:
    assert ledger.default_placements(compute, memory, profile_compute, profile_memory) == expected


@pytest.mark.parametrize(
    ("card", "carved", "expected"),
    [
        pytest.param(
            A100_80,
            {},
            {"1g.10gb": 7, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
            id="empty-80gb-card",
        ),
        pytest.param(
            A100_80,
            {"3g.40gb": 1},
            {"1g.10gb": 3, "2g.20gb": 1, "3g.40gb": 1, "4g.40gb": 0, "7g.80gb": 0},
            id="spec-one-3g.40gb-on-80gb",
        ),
        pytest.param(
            A100_80,
            {"3g.40gb": 2},
            {"1g.10gb": 0, "2g.20gb": 0, "3g.40gb": 0, "4g.40gb": 0, "7g.80gb": 0},
            id="two-3g.40gb-use-all-memory-slices",
        ),
        pytest.param(
            A100_80,
            {"1g.10gb": 7},
            {"1g.10gb": 0, "2g.20gb": 0, "3g.40gb": 0, "4g.40gb": 0, "7g.80gb": 0},
            id="seven-1g.10gb-fill-the-card",
        ),
        pytest.param(THEAD, {"4g48gb": 1}, {"2g24gb": 1, "4g48gb": 0, "7g96gb": 0}, id="thead-4g48gb"),
    ],
)
def test_remaining_profiles_respect_geometry(
    card: CardGeometry, carved: dict[str, int], expected: dict[str, int]
) -> None:
    entry = ledger.partitioned_card(card, carved)
    assert entry.remaining_profiles == expected
    assert entry.allocated_profiles == {k: v for k, v in carved.items() if v}
    assert entry.mode == (AllocationMode.PARTITIONED if carved else AllocationMode.NONE)


def test_partition_units_follow_memory_slices() -> None:
    entry = ledger.partitioned_card(A100_80, {"3g.40gb": 1})
    assert (entry.allocated, entry.remaining) == (800_000, 800_000)


@pytest.mark.parametrize(
    "wanted",
    [
        pytest.param({"7g.80gb": 2}, id="two-whole-card-profiles"),
        pytest.param({"3g.40gb": 3}, id="three-halves"),
        pytest.param({"4g.40gb": 1, "3g.40gb": 2}, id="4g-blocks-both-3g"),
        pytest.param({"9g.90gb": 1}, id="unknown-profile"),
    ],
)
def test_carve_rejects_what_does_not_fit(wanted: dict[str, int]) -> None:
    with pytest.raises(ledger.CarveError):
        ledger.carve(A100_80, wanted)


@pytest.mark.parametrize(
    ("entry", "mode", "allocated", "slices"),
    [
        pytest.param(ledger.free_card(), AllocationMode.NONE, 0, 0, id="free"),
        pytest.param(
            ledger.exclusive_card(), AllocationMode.EXCLUSIVE, keys.UNITS_PER_ACCELERATOR, 0, id="exclusive"
        ),
        pytest.param(
            ledger.shared_card(3), AllocationMode.SHARED, 3 * keys.UNITS_PER_SHARE, 0, id="three-shares"
        ),
        pytest.param(
            ledger.sliced_card(480_000, 1, 128), AllocationMode.SLICED, 480_000, 1, id="nvidia-30pct-slice"
        ),
        pytest.param(
            ledger.sliced_card(1_600_000, 4, 4), AllocationMode.SLICED, 1_600_000, 4, id="hygon-four-slices"
        ),
    ],
)
def test_unit_accounting(entry: ledger.CardLedger, mode: AllocationMode, allocated: int, slices: int) -> None:
    assert entry.mode == mode
    assert entry.allocated == allocated
    assert entry.allocated + entry.remaining == keys.UNITS_PER_ACCELERATOR
    assert entry.allocated_slices == slices


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: ledger.shared_card(11), id="eleven-shares"),
        pytest.param(lambda: ledger.sliced_card(100, 5, 4), id="hygon-fifth-slice"),
        pytest.param(lambda: ledger.sliced_card(1_600_001, 1, 128), id="units-beyond-M"),
    ],
)
def test_impossible_ledgers_raise(build: object) -> None:
    assert callable(build)
    with pytest.raises(ValueError, match="must be within"):
        build()
