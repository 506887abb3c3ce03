"""A node with exactly one sliceable card (issue 27: no test had one, so a rule asking for two passed
every test): its counting keys (reference §8.2), its fit labels (scheduling-chain "Per-card fit labels")
and how they move as the one card fills, for each manufacturer that slices."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.agent import capacity, fit
from gpustack_worker.api import keys, manufacturers

from .builders import card, devices, group, ledger, ledger_group, node

M = keys.UNITS_PER_ACCELERATOR
SLICING = sorted(n for n, m in manufacturers.MANUFACTURERS.items() if m.logical_slices)
MEMORY = 65536


def one_card(mfr: str, entry: dict[str, Any] | None) -> Any:
    row = manufacturers.MANUFACTURERS[mfr]
    spec = card("C0", logical=row.logical_slices, overcommit=row.overcommittable)
    return devices(
        [group("m1", mfr, MEMORY, [spec])],
        None if entry is None else [ledger_group("m1", mfr, [{**entry, "id": "C0"}])],
    )


def pools_present(mfr: str) -> Any:
    base = manufacturers.MANUFACTURERS[mfr].resource
    return node(
        capacity={base: "1", keys.sliced_resource(base): str(manufacturers.MANUFACTURERS[mfr].logical_slices)}
    )


@pytest.mark.parametrize("mfr", SLICING)
@pytest.mark.parametrize("published", [True, False], ids=["ledger", "no-ledger-yet"])
def test_one_sliceable_card_is_counted(mfr: str, published: bool) -> None:
    row = manufacturers.MANUFACTURERS[mfr]
    devs = one_card(mfr, ledger("C0") if published else None)
    got = capacity.desired(pools_present(mfr), devs, manual=False)
    assert got == {
        keys.sliced_resource(row.resource, "units"): M,
        keys.sliced_resource(row.resource, "cores-percentage"): (
            row.logical_slices * 100 if row.overcommittable else 100
        ),
        keys.sliced_resource(row.resource, "memory-percentage"): 100,
        keys.sliced_resource(row.resource, "memory-mib"): MEMORY,
    }


@pytest.mark.parametrize("mfr", SLICING)
def test_one_sliceable_cards_fit_labels_follow_it_filling(mfr: str) -> None:
    slots = manufacturers.MANUFACTURERS[mfr].logical_slices
    a_key = f"{mfr}-m1"
    sliced, shared = keys.sliced_max_free_units_key(a_key), keys.shared_free_cards_key(a_key)

    def labels(entry: dict[str, Any] | None) -> dict[str, str]:
        return fit.desired(node(), one_card(mfr, entry), manual=False)

    assert labels(None) == {sliced: str(M), shared: "1"}
    assert labels(ledger("C0")) == {sliced: str(M), shared: "1"}
    # One slot left: the card still takes a slice of what remains, and (sliced) grants no share.
    one_left = ledger("C0", mode=3, allocated=M // 4, remaining=M - M // 4, slices=slots - 1)
    assert labels(one_left) == {sliced: str(M - M // 4), shared: "0"}
    # Every slot taken: full for slices however much memory is left.
    full = ledger("C0", mode=3, allocated=M // 4, remaining=M - M // 4, slices=slots)
    assert labels(full) == {sliced: "0", shared: "0"}
    # Shared by one owner: no slice, nine more shares.
    owned = ledger("C0", mode=2, allocated=M // 10, remaining=M - M // 10)
    assert labels(owned) == {sliced: "0", shared: "1"}
