"""Table tests for the ``Devices`` checks (``api/devices_check.py``): each rule, the finding's field,
value, rule text and the outputs it holds or withholds, and the sanitized view."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_worker.api import bounds
from gpustack_worker.api.devices_check import (
    REASON_INVALID_NAME,
    REASON_MISMATCH,
    REASON_OUT_OF_RANGE,
    Finding,
    check_devices,
    counting_selectors,
    fit_keys,
    matches,
    render,
)
from gpustack_worker.api.devices_view import devices_facts

M = bounds.MAX_UNITS
NV = "nvidia.com/gpu"
DCU = "hygon.com/dcu"
NV_FIT = fit_keys("nvidia", "a100")
DCU_FIT = fit_keys("hygon", "k100_ai")


def _card(card_id: str, logical: int = 0, profiles: dict[str, int] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"logicalSliced": {"count": logical}}
    if profiles:
        status["physicalSliced"] = {"profiles": [{"name": n, "count": c} for n, c in profiles.items()]}
    return {"id": card_id, "index": 0, "status": status}


MIG = {"1g.10gb": 7, "3g.40gb": 2, "7g.80gb": 1}


def _good() -> dict[str, Any]:
    return {
        "metadata": {"name": "n1"},
        "spec": {
            "groups": [
                {
                    "id": "a100",
                    "manufacturer": "nvidia",
                    "name": "NVIDIA A100",
                    "memory": 81920,
                    "accelerators": [_card("c0", 128), _card("c1", profiles=MIG)],
                },
                {
                    "id": "k100_ai",
                    "manufacturer": "hygon",
                    "name": "K100_AI",
                    "memory": 65536,
                    "accelerators": [_card("h0", 4)],
                },
            ]
        },
        "status": {
            "groups": [
                {
                    "id": "a100",
                    "manufacturer": "nvidia",
                    "accelerators": [
                        {
                            "id": "c0",
                            "mode": 3,
                            "allocated": 16000,
                            "remaining": M - 16000,
                            "allocatedSlices": 1,
                        },
                        {
                            "id": "c1",
                            "mode": 4,
                            "allocatedProfiles": [{"name": "3g.40gb", "count": 1}],
                            "remainingProfiles": [
                                {"name": "3g.40gb", "count": 1},
                                {"name": "1g.10gb", "count": 3},
                            ],
                        },
                    ],
                },
                {"id": "k100_ai", "manufacturer": "hygon", "accelerators": [{"id": "h0", "remaining": M}]},
            ]
        },
    }


def _spec_group(obj: dict[str, Any], index: int) -> dict[str, Any]:
    group: dict[str, Any] = obj["spec"]["groups"][index]
    return group


def _ledger(obj: dict[str, Any], group: int, card: int) -> dict[str, Any]:
    entry: dict[str, Any] = obj["status"]["groups"][group]["accelerators"][card]
    return entry


def test_good_devices_have_no_findings_and_pass_unchanged() -> None:
    facts = devices_facts(_good())
    checked = check_devices(facts)
    assert checked.findings == ()
    assert checked.devices == facts


def _set(path: list[Any], value: Any) -> Any:
    def change(obj: dict[str, Any]) -> None:
        node: Any = obj
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return change


SG0 = ["spec", "groups", 0]
C0 = [*SG0, "accelerators", 0, "status"]
C1 = [*SG0, "accelerators", 1, "status"]
L0 = ["status", "groups", 0, "accelerators", 0]
L1 = ["status", "groups", 0, "accelerators", 1]
SPEC_NV = "spec.groups[manufacturer=nvidia,id=a100]"
STATUS_NV = "status.groups[manufacturer=nvidia,id=a100]"


def _dup_group(obj: dict[str, Any]) -> None:
    obj["spec"]["groups"].append(
        {
            "id": "a100-copy",
            "manufacturer": "nvidia",
            "name": "x",
            "memory": 1,
            "accelerators": [_card("c1", 0, MIG)],
        }
    )


def _ledger_amd(obj: dict[str, Any]) -> None:
    obj["status"]["groups"][0]["manufacturer"] = "amd"


def _ledger_other_id(obj: dict[str, Any]) -> None:
    obj["status"]["groups"][0]["id"] = "a100-80gb"


def _ledger_card_moved(obj: dict[str, Any]) -> None:
    entry = obj["status"]["groups"][0]["accelerators"].pop(0)
    obj["status"]["groups"][1]["accelerators"].append(entry)


def _ledger_card_twice(obj: dict[str, Any]) -> None:
    obj["status"]["groups"][1]["accelerators"].append(copy.deepcopy(_ledger(obj, 0, 0)))


def _bad_group_id(obj: dict[str, Any]) -> None:
    _spec_group(obj, 1)["id"] = "k100/ai"
    obj["status"]["groups"][1]["id"] = "k100/ai"


def _many_cards(obj: dict[str, Any]) -> None:
    _spec_group(obj, 1)["accelerators"] = [
        _card(f"h{i}", 4) for i in range(bounds.MAX_ACCELERATORS_PER_GROUP + 1)
    ]


def _add_profile(name: str) -> Any:
    def change(obj: dict[str, Any]) -> None:
        _spec_group(obj, 0)["accelerators"][1]["status"]["physicalSliced"]["profiles"].append(
            {"name": name, "count": 1}
        )

    return change


CASES = [
    # (id, change, reason, path, value, holds, withholds)
    ("memory-1e16", _set([*SG0, "memory"], 10**16), REASON_OUT_OF_RANGE, f"{SPEC_NV}.memory",
     "10000000000000000", (f"{NV}.sliced.memory-mib",), ()),
    ("logical-9e18", _set([*C0, "logicalSliced", "count"], 9 * 10**18), REASON_OUT_OF_RANGE,
     f"{SPEC_NV}.accelerators[id=c0].status.logicalSliced.count", "9000000000000000000",
     (*counting_selectors(NV), *NV_FIT), ()),
    ("logical-513", _set([*C0, "logicalSliced", "count"], 513), REASON_OUT_OF_RANGE,
     f"{SPEC_NV}.accelerators[id=c0].status.logicalSliced.count", "513",
     (*counting_selectors(NV), *NV_FIT), ()),
    ("profile-name-space", _add_profile("3g 40gb"), REASON_INVALID_NAME,
     f"{SPEC_NV}.accelerators[id=c1].status.physicalSliced.profiles[name=3g 40gb].name", "'3g 40gb'", (),
     (f"{NV}.partitioned.mig-3g 40gb",)),
    ("profile-count-9", _set([*C1, "physicalSliced", "profiles", 0, "count"], 9), REASON_OUT_OF_RANGE,
     f"{SPEC_NV}.accelerators[id=c1].status.physicalSliced.profiles[name=1g.10gb].count", "9",
     (f"{NV}.partitioned.mig-1g.10gb",), ()),
    ("duplicate-spec-card", _dup_group, REASON_MISMATCH,
     "spec.groups[manufacturer=nvidia,id=a100-copy].accelerators[id=c1].id", "'c1'",
     (*counting_selectors(NV), *NV_FIT, *fit_keys("nvidia", "a100-copy")), ()),
    ("group-id-slash", _bad_group_id, REASON_INVALID_NAME, "spec.groups[manufacturer=hygon,id=k100/ai].id",
     "'k100/ai'", (), fit_keys("hygon", "k100/ai")),
    ("too-many-cards", _many_cards, REASON_OUT_OF_RANGE,
     "spec.groups[manufacturer=hygon,id=k100_ai].accelerators", "257",
     (*counting_selectors(DCU), *DCU_FIT), ()),
    ("remaining-1e11", _set([*L0, "remaining"], 99_999_999_999), REASON_OUT_OF_RANGE,
     f"{STATUS_NV}.accelerators[id=c0].remaining", "99999999999", NV_FIT, ()),
    ("remaining-negative", _set([*L0, "remaining"], -1), REASON_OUT_OF_RANGE,
     f"{STATUS_NV}.accelerators[id=c0].remaining", "-1", NV_FIT, ()),
    ("allocated-above-m", _set([*L0, "allocated"], M + 1), REASON_OUT_OF_RANGE,
     f"{STATUS_NV}.accelerators[id=c0].allocated", "1600001", (), ()),
    ("mode-9", _set([*L0, "mode"], 9), REASON_OUT_OF_RANGE, f"{STATUS_NV}.accelerators[id=c0].mode", "9",
     NV_FIT, ()),
    ("slices-above-count", _set([*L0, "allocatedSlices"], 129), REASON_MISMATCH,
     f"{STATUS_NV}.accelerators[id=c0].allocatedSlices", "129", (NV_FIT[0],), ()),
    ("ledger-manufacturer-amd", _ledger_amd, REASON_MISMATCH,
     "status.groups[manufacturer=amd,id=a100].manufacturer", "'amd'", (*NV_FIT, f"{NV}.partitioned.*"), ()),
    ("ledger-other-group-id", _ledger_other_id, REASON_MISMATCH,
     "status.groups[manufacturer=nvidia,id=a100-80gb].id", "'a100-80gb'",
     (*NV_FIT, f"{NV}.partitioned.*"), ()),
    ("ledger-card-under-other-group", _ledger_card_moved, REASON_MISMATCH,
     "status.groups[manufacturer=hygon,id=k100_ai].accelerators[id=c0].id", "'c0'", (*DCU_FIT, *NV_FIT), ()),
    ("ledger-card-twice", _ledger_card_twice, REASON_MISMATCH,
     "status.groups[manufacturer=hygon,id=k100_ai].accelerators[id=c0].id", "'c0'", (*DCU_FIT, *NV_FIT), ()),
    ("profile-not-offered", _set([*L1, "remainingProfiles", 1, "name"], "9g.999gb"), REASON_MISMATCH,
     f"{STATUS_NV}.accelerators[id=c1].remainingProfiles[name=9g.999gb].name", "'9g.999gb'", (),
     (f"{NV}.partitioned.mig-9g.999gb",)),
    ("profile-count-above-8", _set([*L1, "remainingProfiles", 1, "count"], 9), REASON_OUT_OF_RANGE,
     f"{STATUS_NV}.accelerators[id=c1].remainingProfiles[name=1g.10gb].count", "9",
     (f"{NV}.partitioned.mig-1g.10gb",), ()),
    ("profile-above-ceiling", _set([*L1, "remainingProfiles", 0, "count"], 2), REASON_MISMATCH,
     f"{STATUS_NV}.accelerators[id=c1].remainingProfiles[name=3g.40gb].count", "2",
     (f"{NV}.partitioned.mig-3g.40gb",), ()),
]  # fmt: skip


@pytest.mark.parametrize(
    ("change", "reason", "path", "value", "holds", "withholds"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_one_rule_one_finding(
    change: Any, reason: str, path: str, value: str, holds: tuple[str, ...], withholds: tuple[str, ...]
) -> None:
    obj = _good()
    change(obj)
    checked = check_devices(devices_facts(obj))
    assert len(checked.findings) == 1, [f.note() for f in checked.findings]
    (finding,) = checked.findings
    assert (finding.kind, finding.reason, finding.path, finding.value) == ("Devices", reason, path, value)
    assert set(finding.holds) == set(holds)
    assert set(finding.withholds) == set(withholds)
    assert (
        finding.path in finding.note() and finding.value in finding.note() and finding.rule in finding.note()
    )


def test_sanitized_view_drops_what_must_not_produce_outputs() -> None:
    obj = _good()
    _ledger_amd(obj)
    _set([*L1, "remainingProfiles", 1, "name"], "9g.999gb")(obj)
    checked = check_devices(devices_facts(obj))
    # The amd ledger group matches no spec group: gone from the view, so no amd-a100 fit label.
    assert [(g.manufacturer, g.id) for g in checked.devices.ledger or ()] == [("hygon", "k100_ai")]

    obj = _good()
    _set([*L1, "remainingProfiles", 1, "name"], "9g.999gb")(obj)
    entry = check_devices(devices_facts(obj)).devices.card_ledgers()["c1"]
    assert entry.remaining_profiles == {"3g.40gb": 1}  # the unoffered profile is dropped, the rest kept
    assert entry.allocated_profiles == {"3g.40gb": 1}


def test_ledger_card_without_spec_card_is_the_normal_window() -> None:
    obj = _good()
    obj["status"]["groups"][0]["accelerators"].append({"id": "new-card", "remaining": M})
    checked = check_devices(devices_facts(obj))
    assert checked.findings == ()


def test_two_bad_values_two_findings() -> None:
    obj = _good()
    _set([*SG0, "memory"], 10**16)(obj)
    _set([*L0, "remaining"], 99_999_999_999)(obj)
    checked = check_devices(devices_facts(obj))
    assert {f.path for f in checked.findings} == {
        f"{SPEC_NV}.memory",
        f"{STATUS_NV}.accelerators[id=c0].remaining",
    }
    assert set(checked.holds()) == {f"{NV}.sliced.memory-mib", *NV_FIT}


def test_unknown_manufacturer_is_reported_and_ignored() -> None:
    obj = _good()
    obj["spec"]["groups"].append({"id": "x1", "manufacturer": "acme", "name": "X1", "memory": 1})
    (finding,) = check_devices(devices_facts(obj)).findings
    assert finding.path == "spec.groups[manufacturer=acme,id=x1].manufacturer"
    assert "nvidia" in finding.rule and finding.holds == ()


@pytest.mark.parametrize(
    ("selector", "key", "hit"),
    [
        ("nvidia.com/gpu.sliced.*", "nvidia.com/gpu.sliced.units", True),
        ("nvidia.com/gpu.sliced.*", "nvidia.com/gpu.sliced", False),
        ("nvidia.com/gpu.sliced.*", "nvidia.com/gpu.partitioned.units", False),
        ("a/b", "a/b", True),
        ("a/b", "a/bc", False),
    ],
)
def test_selectors(selector: str, key: str, hit: bool) -> None:
    assert matches(selector, key) is hit


def test_render_cuts_long_values() -> None:
    assert render("x" * 500).endswith("...") and len(render("x" * 500)) <= 96
    assert render(5) == "5" and render("5") == "'5'"


def test_finding_effect_words() -> None:
    held = Finding("Devices", "p", "1", "r", REASON_OUT_OF_RANGE, holds=("k",))
    assert held.effect() == "keeping the last published value of k"
    assert Finding("Devices", "p", "1", "r", REASON_OUT_OF_RANGE).effect().startswith("ignored")
