"""A derived InstanceType's ``spec.displayName`` is at most 64 runes (reference Appendix A.3 "truncate to
64 runes"), counted in characters, not bytes: exactly 64 is kept whole, 65 is cut to 64, and multi-byte
runes count one each (issue 27: a cut at 63 passed every test).

The CPU name is the one display source without a bound of its own (an accelerator's comes from the
``.product`` label, at most 63 characters), so the pool is a CPU pool under
``instance-type-aware-cpu-manufacturer=true``, whose display name is the CPU name.
"""

from __future__ import annotations

import pytest

from gpustack_worker.chain import pools
from gpustack_worker.cli.plan.planning import plan_chain
from gpustack_worker.simulate.scenario import Scenario
from tests.chain.fleets import Grouping


def display_name_of(cpu_name: str) -> str:
    scenario = Scenario.model_validate(
        {"nodes": [{"name": "n0", "cpu": {"vendor": "AMD", "model": cpu_name, "cores": 8}, "memory": "64Gi"}]}
    )
    plan = plan_chain(scenario, Grouping(aware=True, mixed=False, manual=False).settings())
    (it,) = plan.instance_types.values()
    return str(it["spec"]["displayName"])


@pytest.mark.parametrize(
    ("cpu_name", "want"),
    [
        pytest.param("AMD " + "x" * 59, "AMD " + "x" * 59, id="63-kept"),
        pytest.param("AMD " + "x" * 60, "AMD " + "x" * 60, id="64-kept-whole"),
        pytest.param("AMD " + "x" * 61, "AMD " + "x" * 60, id="65-cut-to-64"),
        pytest.param("AMD " + "x" * 90, "AMD " + "x" * 60, id="94-cut-to-64"),
        # 64 runes of 2 bytes each after the prefix: 119 bytes, kept whole.
        pytest.param("AMD EPYC " + "é" * 55, "AMD EPYC " + "é" * 55, id="64-runes-two-byte-kept"),
        pytest.param("AMD EPYC " + "é" * 56, "AMD EPYC " + "é" * 55, id="65-runes-two-byte-cut"),
        # Three-byte runes: the cut falls on a rune, never inside one.
        pytest.param("AMD EPYC " + "模" * 56, "AMD EPYC " + "模" * 55, id="65-runes-three-byte-cut"),
    ],
)
def test_the_display_name_keeps_at_most_64_runes(cpu_name: str, want: str) -> None:
    got = display_name_of(cpu_name)
    assert got == want
    assert len(got) == min(len(cpu_name), 64) == min(len(cpu_name), pools.DISPLAY_NAME_MAX)
