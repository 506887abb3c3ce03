"""Team queues and cohorts whose GPU limit the chain's transformations would stop enforcing (issue 29 item 5).

The numbers are the spec's: one whole card is ``M = 1,600,000`` credits, one ownership share 160,000
(reference §1.3, scheduling-chain stage 4), ``nvidia.com/gpu`` → ``credits.gpustack.ai/nvidia``."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.cli.preflight import queues as preflight_queues
from gpustack_worker.cli.preflight.preflighting import Outcome
from tests.kit.properties import examples

OK, WARN, FAIL = Outcome.OK, Outcome.WARN, Outcome.FAIL
NV = "credits.gpustack.ai/nvidia"
AMD = "credits.gpustack.ai/amd"


def _q(name: str, value: Any, **limits: Any) -> dict[str, Any]:
    return {"name": name, "nominalQuota": value, **limits}


def _cq(
    name: str, *groups: list[tuple[str, list[dict[str, Any]]]], kind: str = "ClusterQueue"
) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"name": name},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": [r["name"] for r in flavors[0][1]],
                    "flavors": [{"name": f, "resources": rs} for f, rs in flavors],
                }
                for flavors in groups
            ]
        },
    }


def _only(obj: dict[str, Any], *, configured: bool = False) -> preflight_queues.Finding:
    (found,) = preflight_queues.findings(obj, configured=configured)
    return found


def test_the_issues_team_queue_fails_with_the_credits_quota_that_keeps_its_limit() -> None:
    team = _cq("team-research", [("team-flavor", [_q("cpu", "64"), _q("nvidia.com/gpu", "8")])])
    (result,) = preflight_queues.queue_impact([team], configured=True)
    assert (result.check, result.outcome) == ("clusterqueue:team-research", FAIL)
    assert result.detail == (
        "flavor team-flavor: nvidia.com/gpu=8 no longer counts: Workloads ask credits.gpustack.ai/nvidia "
        "instead, which this queue does not declare, so it admits them without a GPU limit"
    )
    assert result.fix.startswith(
        "add {name: credits.gpustack.ai/nvidia, nominalQuota: 12800000} (8 cards) to flavor team-flavor "
        "(and to its resource group's coveredResources"
    )
    assert "would stop counting" in preflight_queues.queue_impact([team], configured=False)[0].detail


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            _cq("a", [("f", [_q("nvidia.com/gpu", "8")])]),
            [(FAIL, "f", NV, {"nominalQuota": "12800000"})],
            id="one-flavor",
        ),
        pytest.param(
            _cq("a", [("small", [_q("nvidia.com/gpu", "2")]), ("big", [_q("nvidia.com/gpu", "16")])]),
            [
                (FAIL, "small", NV, {"nominalQuota": "3200000"}),
                (FAIL, "big", NV, {"nominalQuota": "25600000"}),
            ],
            id="several-flavors",
        ),
        pytest.param(
            # whole cards and shares both become nvidia credits: one quota, the sum (8 x 1.6M + 4 x 160k)
            _cq("a", [("f", [_q("nvidia.com/gpu", "8"), _q("nvidia.com/gpu.shared", "4")])]),
            [(FAIL, "f", NV, {"nominalQuota": "13440000"})],
            id="several-resources-one-credit",
        ),
        pytest.param(
            _cq("a", [("f", [_q("nvidia.com/gpu", "8"), _q("amd.com/gpu", "2")])]),
            [(FAIL, "f", NV, {"nominalQuota": "12800000"}), (FAIL, "f", AMD, {"nominalQuota": "3200000"})],
            id="several-manufacturers",
        ),
        pytest.param(
            _cq("a", [("f", [_q("nvidia.com/gpu", "8", borrowingLimit="2", lendingLimit="1")])]),
            [
                (
                    FAIL,
                    "f",
                    NV,
                    {"nominalQuota": "12800000", "borrowingLimit": "3200000", "lendingLimit": "1600000"},
                )
            ],
            id="cohort-borrowing-and-lending-limits",
        ),
        pytest.param(
            # a resource without a borrowingLimit borrows without limit: so does their sum
            _cq(
                "a",
                [("f", [_q("nvidia.com/gpu", "8", borrowingLimit="2"), _q("nvidia.com/gpu.shared", "4")])],
            ),
            [(FAIL, "f", NV, {"nominalQuota": "13440000"})],
            id="a-limit-only-some-set-is-unlimited",
        ),
        pytest.param(
            _cq("a", [("f", [_q("nvidia.com/gpu", "500m")])]),
            [(FAIL, "f", NV, {"nominalQuota": "800000"})],
            id="fractional-quantity",
        ),
        pytest.param(
            _cq("a", [("f", [_q("nvidia.com/gpu", "8"), _q(NV, "12800000")])]),
            [(OK, "f", NV, {"nominalQuota": "12800000"})],
            id="already-has-the-credits-quota",
        ),
        pytest.param(
            # the credits quota sits in another resource group of the same flavor name (Kueue: one group per
            # resource): it is the flavor's quota all the same
            _cq("a", [("f", [_q("nvidia.com/gpu", "8")])], [("f", [_q(NV, "12800000")])]),
            [(OK, "f", NV, {"nominalQuota": "12800000"})],
            id="credits-in-another-group",
        ),
        pytest.param(
            _cq("a", [("f", [_q("nvidia.com/gpu", "8"), _q(NV, "6400000")])]),
            [(WARN, "f", NV, {"nominalQuota": "12800000"})],
            id="credits-quota-differs",
        ),
        pytest.param(
            _cq("a", [("f", [_q("nvidia.com/gpu", "8", borrowingLimit="2"), _q(NV, "12800000")])]),
            [(FAIL, "f", NV, {"nominalQuota": "12800000", "borrowingLimit": "3200000"})],
            id="credits-without-the-borrowing-limit",
        ),
        pytest.param(
            _cq("a", [("f", [_q("nvidia.com/gpu.sliced.units", "8")])]),
            [(FAIL, "f", NV, {})],
            id="sliced-units-no-fixed-equivalent",
        ),
        pytest.param(
            _cq("a", [("f", [_q("nvidia.com/gpu.sliced.units", "8"), _q(NV, "3200000")])]),
            [(OK, "f", NV, {})],
            id="sliced-units-with-credits",
        ),
        pytest.param(
            _cq("a", [("f", [_q("example.com/fpga", "8"), _q("cpu", "4")])]), [], id="not-rewritten"
        ),
        pytest.param(
            _cq("a", [("f", [_q("nvidia.com/gpu", "eight")])]),
            [(FAIL, "f", NV, {})],
            id="unreadable-quantity",
        ),
        pytest.param({"metadata": {"name": "empty"}}, [], id="no-resource-groups"),
    ],
)
def test_each_flavor_quota_in_a_rewritten_resource(
    obj: dict[str, Any], expected: list[tuple[Outcome, str, str, dict[str, str]]]
) -> None:
    found = preflight_queues.findings(obj, configured=False)
    assert [(f.outcome, f.flavor, f.credit, dict(f.quota)) for f in found] == expected
    for f in found:
        assert bool(f.add) is (f.outcome is not OK), f


def test_the_text_names_the_limit_and_the_quota_in_cards() -> None:
    differ = _only(_cq("a", [("f", [_q("nvidia.com/gpu", "8"), _q(NV, "6400000")])]))
    assert "nominalQuota 6400000 (4 cards) where nvidia.com/gpu=8 says 12800000 (8 cards)" in differ.text
    sliced = _only(_cq("a", [("f", [_q("nvidia.com/gpu.sliced.units", "8")])]))
    assert "no fixed equivalent" in sliced.text and "1600000 per card" in sliced.add
    borrowing = _only(_cq("a", [("f", [_q("nvidia.com/gpu", "8", borrowingLimit="2"), _q(NV, "12800000")])]))
    assert "lacks borrowingLimit" in borrowing.text
    assert borrowing.add == f"set borrowingLimit: 3200000 on {NV} in flavor f"
    bad = _only(_cq("a", [("f", [_q("nvidia.com/gpu", "8"), _q(NV, "lots")])]))
    assert bad.outcome is FAIL and "'lots' is not a quantity" in bad.text


def test_queues_and_cohorts_are_listed_by_name_and_many_findings_are_summarised() -> None:
    flavors = [(f"f{i}", [_q("nvidia.com/gpu", str(i + 1))]) for i in range(5)]
    queues = [
        _cq("zeta", [("f", [_q("nvidia.com/gpu", "8"), _q(NV, "12800000")])]),
        _cq("alpha", flavors),
        _cq("cpu-only", [("f", [_q("cpu", "8")])]),
    ]
    cohorts = [_cq("research", [("f", [_q("nvidia.com/gpu", "32")])], kind="Cohort")]
    results = preflight_queues.queue_impact(queues, cohorts, configured=False)
    assert [(r.check, r.outcome) for r in results] == [
        ("clusterqueue:alpha", FAIL),
        ("clusterqueue:zeta", OK),
        ("cohort:research", FAIL),
    ]
    alpha = results[0]
    assert alpha.detail.startswith("5 flavor quotas: flavor f0: nvidia.com/gpu=1 ")
    assert alpha.detail.endswith("+2 more (--verbose or -o json)")
    assert len(alpha.items) == 5 and all(" — fix: add {name: " in i for i in alpha.items)
    assert alpha.fix.startswith("5 changes, listed with --verbose")
    assert "nominalQuota: 51200000" in results[2].fix
    none = preflight_queues.queue_impact([queues[2]], configured=False)
    assert [(r.check, r.outcome) for r in none] == [("clusterqueues", OK)]


def _apply(obj: dict[str, Any], found: list[preflight_queues.Finding]) -> dict[str, Any]:
    """``obj`` with each finding's credits quota put into its flavor, as the fix says."""
    out = copy.deepcopy(obj)
    for f in found:
        for group in out["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                if flavor["name"] == f.flavor:
                    flavor["resources"] = [r for r in flavor["resources"] if r["name"] != f.credit]
                    flavor["resources"].append({"name": f.credit, **f.quota})
    return out


_quota = st.integers(min_value=0, max_value=10_000).map(str)
_entry = st.fixed_dictionaries(
    {"nominalQuota": _quota}, optional={"borrowingLimit": _quota, "lendingLimit": _quota}
)


@settings(max_examples=examples(200))
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared", "amd.com/gpu", "cpu"]),
            _entry,
            min_size=1,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_the_printed_quota_keeps_every_limit(flavors: list[dict[str, dict[str, str]]]) -> None:
    """A queue without credits fails for every flavor with a rewritten resource; the quota printed, put
    into the flavor, passes: the same cards (whole 1,600,000, shares 160,000), limit by limit."""
    obj = _cq("p", [(f"f{i}", [{"name": n, **e} for n, e in rs.items()]) for i, rs in enumerate(flavors)])
    found = preflight_queues.findings(obj, configured=False)
    rewritten = {(f"f{i}", n) for i, rs in enumerate(flavors) for n in rs if n != "cpu"}
    assert {(f.flavor, f.credit) for f in found} == {
        (flavor, NV if n.startswith("nvidia") else AMD) for flavor, n in rewritten
    }
    assert all(f.outcome is FAIL for f in found)
    for f in found:
        rs = flavors[int(f.flavor[1:])]
        mine = {n: e for n, e in rs.items() if n != "cpu" and (n.startswith("nvidia")) == (f.credit == NV)}
        per = {"nvidia.com/gpu": 1_600_000, "nvidia.com/gpu.shared": 160_000, "amd.com/gpu": 1_600_000}
        assert f.quota["nominalQuota"] == str(sum(int(e["nominalQuota"]) * per[n] for n, e in mine.items()))
        for limit in ("borrowingLimit", "lendingLimit"):
            if all(limit in e for e in mine.values()):
                assert f.quota[limit] == str(sum(int(e[limit]) * per[n] for n, e in mine.items()))
            else:
                assert limit not in f.quota
    assert all(f.outcome is OK for f in preflight_queues.findings(_apply(obj, found), configured=False))
