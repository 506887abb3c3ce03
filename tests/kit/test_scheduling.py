"""Every module with real nodes is one xdist scope; any other module is its own (tests/kit/scheduling.py)."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from xdist.scheduler import LoadFileScheduling

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


def test_the_real_node_scope_is_handed_out_first(monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler = object.__new__(ModulesWithRealNodesTogether)
    scheduler.workqueue = OrderedDict(
        (scope, {}) for scope in ("tests/a/test_x.py", REAL_NODE_SCOPE, "tests/b/test_y.py")
    )
    handed: list[str] = []

    def take(self: LoadFileScheduling, node: object) -> None:  # xdist's own: the queue's first scope
        handed.append(self.workqueue.popitem(last=False)[0])

    monkeypatch.setattr(LoadFileScheduling, "_assign_work_unit", take)
    for _ in range(3):
        scheduler._assign_work_unit(object())
    assert handed == [REAL_NODE_SCOPE, "tests/a/test_x.py", "tests/b/test_y.py"]
