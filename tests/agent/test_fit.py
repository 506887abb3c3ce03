from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.agent import fit
from gpustack_worker.api import keys

from .builders import card, devices, group, ledger, ledger_group, node, profile

if TYPE_CHECKING:
    from gpustack_worker.agent.facts import DevicesFacts

M = 1_600_000
SHARE = 160_000
HY = "hygon-k100_ai"
NV = "nvidia-a100-sxm4-80gb"


def hygon(*entries: dict[str, object]) -> DevicesFacts:
    cards = [card(str(e["id"]), logical=4) for e in entries]
    return devices(
        [group("k100_ai", "hygon", 65520, cards)], [ledger_group("k100_ai", "hygon", list(entries))]
    )


def unhealthy(spec_card: dict[str, Any]) -> dict[str, Any]:
    spec_card["status"]["unhealthy"] = True
    return spec_card


def sliced(a_key: str) -> str:
    return keys.sliced_max_free_units_key(a_key)


def shared(a_key: str) -> str:
    return keys.shared_free_cards_key(a_key)


MIG = [profile("1g.10gb", 7), profile("7g.80gb", 1)]
MIXED = devices(
    [
        group(
            "a100-sxm4-80gb",
            "nvidia",
            81920,
            [card("P", profiles=MIG), card("S0", logical=128), card("S1", logical=128)],
        )
    ],
    [
        ledger_group(
            "a100-sxm4-80gb",
            "nvidia",
            [
                ledger("P", mode=4, allocated=M, remaining=0),
                ledger("S0", mode=3, allocated=400_000, remaining=1_200_000, slices=1),
                ledger("S1", mode=2, allocated=3 * SHARE, remaining=M - 3 * SHARE),
            ],
        )
    ],
)


@pytest.mark.parametrize(
    ("devs", "expected"),
    [
        pytest.param(
            hygon(ledger("D0", mode=3, allocated=800_000, remaining=800_000, slices=4)),
            {sliced(HY): "0", shared(HY): "0"},
            id="hygon-four-slices-full-despite-memory",
        ),
        pytest.param(
            hygon(ledger("D0", mode=3, allocated=600_000, remaining=1_000_000, slices=3)),
            {sliced(HY): "1000000", shared(HY): "0"},
            id="hygon-three-slices-has-a-slot",
        ),
        pytest.param(
            hygon(
                ledger("D0", mode=3, allocated=1_200_000, remaining=400_000, slices=2),
                ledger("D1", mode=0, allocated=0, remaining=M),
                ledger("D2", mode=1, allocated=M, remaining=0),
            ),
            {sliced(HY): str(M), shared(HY): "1"},
            id="max-over-cards-free-card-counts",
        ),
        pytest.param(
            hygon(
                ledger("D0", mode=2, allocated=9 * SHARE, remaining=SHARE),
                ledger("D1", mode=2, allocated=10 * SHARE, remaining=0),
                ledger("D2", mode=2, allocated=9 * SHARE + 10_000, remaining=SHARE - 10_000),
            ),
            {sliced(HY): "0", shared(HY): "1"},
            id="shared-needs-one-whole-share",
        ),
        pytest.param(
            hygon(
                ledger("D0", mode=1, allocated=M, remaining=0), ledger("D1", mode=1, allocated=M, remaining=0)
            ),
            {sliced(HY): "0", shared(HY): "0"},
            id="all-exclusive-reads-zero",
        ),
        pytest.param(
            MIXED,
            {sliced(NV): "1200000", shared(NV): "1"},
            id="partitioned-card-serves-neither",
        ),
        pytest.param(
            devices(
                [group("a100-sxm4-80gb", "nvidia", 81920, [card("P", profiles=MIG)])],
                [ledger_group("a100-sxm4-80gb", "nvidia", [ledger("P", mode=4, remaining=0)])],
            ),
            {},
            id="partitioned-only-no-labels",
        ),
        pytest.param(
            devices(
                [group("mr-v100", "iluvatar", 32768, [card("I0"), card("I1")])],
                [ledger_group("mr-v100", "iluvatar", [ledger("I0"), ledger("I1", mode=1, remaining=0)])],
            ),
            {shared("iluvatar-mr-v100"): "1"},
            id="no-logical-slicing-shared-only",
        ),
        pytest.param(
            devices(
                [group("k100_ai", "hygon", 65520, [card("D0", logical=4)])],
                [ledger_group("k100_ai", "hygon", [ledger("D0"), ledger("GHOST")])],
            ),
            {sliced(HY): str(M), shared(HY): "1"},
            id="ledger-entry-without-spec-card-ignored",
        ),
        pytest.param(
            devices([group("k100_ai", "hygon", 65520, [card("D0", logical=4)])]),
            {sliced(HY): str(M), shared(HY): "1"},
            id="no-ledger-yet-reads-free-as-gate3",
        ),
        pytest.param(
            devices(
                [group("k100_ai", "hygon", 65520, [card("D0", logical=4), card("D1", logical=4)])],
                [ledger_group("k100_ai", "hygon", [ledger("D0", mode=1, allocated=M, remaining=0)])],
            ),
            {sliced(HY): str(M), shared(HY): "1"},
            id="card-without-ledger-entry-reads-free-as-gate3",
        ),
        pytest.param(
            devices(
                [
                    group("k100_ai", "hygon", 65520, [card("D0", logical=4)]),
                    group("mr-v100", "iluvatar", 32768, [card("I0")]),
                ],
                [ledger_group("k100_ai", "hygon", [ledger("D0")])],
            ),
            {sliced(HY): str(M), shared(HY): "1", shared("iluvatar-mr-v100"): "1"},
            id="model-without-status-group-reads-free-as-gate3",
        ),
        pytest.param(
            devices(
                [group("k100_ai", "hygon", 65520, [unhealthy(card("D0", logical=4))])],
                [ledger_group("k100_ai", "hygon", [ledger("D0")])],
            ),
            {sliced(HY): "0", shared(HY): "0"},
            id="only-free-card-unhealthy-advertises-no-room",
        ),
        pytest.param(
            devices(
                [
                    group(
                        "k100_ai",
                        "hygon",
                        65520,
                        [unhealthy(card("D0", logical=4)), card("D1", logical=4)],
                    )
                ],
                [
                    ledger_group(
                        "k100_ai",
                        "hygon",
                        [
                            ledger("D0"),
                            ledger("D1", mode=3, allocated=1_200_000, remaining=400_000, slices=1),
                        ],
                    )
                ],
            ),
            {sliced(HY): "400000", shared(HY): "0"},
            id="unhealthy-card-not-counted-beside-a-healthy-one",
        ),
        pytest.param(
            devices([group("k100_ai", "hygon", 65520, [unhealthy(card("D0", logical=4))])]),
            {sliced(HY): "0", shared(HY): "0"},
            id="unhealthy-card-without-ledger-entry-gives-nothing",
        ),
        pytest.param(
            devices(
                [group("x1", "unknownco", 1024, [card("U0", logical=4)])],
                [ledger_group("x1", "unknownco", [ledger("U0")])],
            ),
            {},
            id="manufacturer-outside-the-table-not-read",
        ),
    ],
)
def test_fit_labels(devs: DevicesFacts, expected: dict[str, str]) -> None:
    assert fit.desired(node(), devs, manual=False) == expected


@pytest.mark.parametrize(
    ("labels", "manual", "labelled"),
    [
        pytest.param({}, False, True, id="auto-managed"),
        pytest.param({}, True, False, id="manual-unmanaged"),
        pytest.param({keys.MANAGED: "true"}, True, True, id="manual-admin-managed"),
        pytest.param({keys.MANAGED: "false"}, False, False, id="admin-opted-out"),
    ],
)
def test_fit_labels_only_on_managed_nodes(labels: dict[str, str], manual: bool, labelled: bool) -> None:
    devs = hygon(ledger("D0"))
    assert bool(fit.desired(node(labels=labels), devs, manual=manual)) is labelled


def test_a_long_model_key_is_shortened_not_skipped() -> None:
    # "hygon-" + 60 chars > 63: the fit keys are built by api/keys, which shortens the name part the same
    # way for the pin (issue 16 defect 4), so the label is published under a valid key.
    long_id = "x" * 60
    devs = devices(
        [group(long_id, "hygon", 1, [card("D0", logical=4)])],
        [ledger_group(long_id, "hygon", [ledger("D0")])],
    )
    out = fit.desired(node(), devs, manual=False)
    a_key = f"hygon-{long_id}"
    assert set(out) == {keys.sliced_max_free_units_key(a_key), keys.shared_free_cards_key(a_key)}
    assert all(len(k.split("/")[1]) == 63 for k in out)


@pytest.mark.parametrize(
    ("key", "ours"),
    [
        pytest.param(keys.sliced_max_free_units_key("nvidia-a10g"), True, id="sliced"),
        pytest.param(keys.shared_free_cards_key("nvidia-a10g"), True, id="shared"),
        pytest.param(keys.MANAGED, False, id="managed"),
    ],
)
def test_is_fit_label(key: str, ours: bool) -> None:
    assert fit.is_fit_label(key) is ours
