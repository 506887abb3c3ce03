"""Every module with real nodes is one xdist scope; any other module is its own (tests/kit/scheduling.py)."""

from __future__ import annotations

import pytest

from tests.kit.scheduling import REAL_NODE_SCOPE, ModulesWithRealNodesTogether


def _scope(nodeid: str) -> str:
    return ModulesWithRealNodesTogether._split_scope(object.__new__(ModulesWithRealNodesTogether), nodeid)


@pytest.mark.parametrize(
    "nodeid",
    [
        "tests/agent/test_real_node_cluster.py::test_counting",
        "tests/chart/test_helm_real_node_cluster.py::test_install",
        "tests/chart/test_helm_production_real_node_cluster.py::test_production[x]",
    ],
)
def test_modules_with_real_nodes_share_one_scope(nodeid: str) -> None:
    assert _scope(nodeid) == REAL_NODE_SCOPE


@pytest.mark.parametrize(
    ("nodeid", "scope"),
    [
        ("tests/chart/test_chart_cluster.py::test_lint[default]", "tests/chart/test_chart_cluster.py"),
        ("tests/real_node_tools/test_other.py::test_x", "tests/real_node_tools/test_other.py"),
        ("tests/kit/test_waiting.py::TestX::test_y", "tests/kit/test_waiting.py"),
    ],
)
def test_every_other_module_is_its_own_scope(nodeid: str, scope: str) -> None:
    assert _scope(nodeid) == scope
