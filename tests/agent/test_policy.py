from __future__ import annotations

import pytest

from gpustack_worker.agent.policy import AgentPolicy, resolve


@pytest.mark.parametrize(
    ("data", "env", "expected"),
    [
        pytest.param(None, {}, AgentPolicy(False, True, 3.0), id="defaults"),
        pytest.param(
            None,
            {"GPUSTACK_NODE_MANAGEMENT_MANUAL": "true", "GPUSTACK_INSTANCE_TYPE_MIXED_ON_NODE": "false"},
            AgentPolicy(True, False, 3.0),
            id="env-seeds",
        ),
        pytest.param(
            {"node-management-manual": "false", "fit-label-coalesce-seconds": "0.5"},
            {"GPUSTACK_NODE_MANAGEMENT_MANUAL": "true"},
            AgentPolicy(False, True, 0.5),
            id="configmap-over-env",
        ),
        pytest.param(
            {"node-management-manual": "maybe", "fit-label-coalesce-seconds": "-1"},
            {},
            AgentPolicy(False, True, 3.0),
            id="invalid-values-keep-defaults",
        ),
    ],
)
def test_resolve(data: dict[str, str] | None, env: dict[str, str], expected: AgentPolicy) -> None:
    assert resolve(data, env) == expected
