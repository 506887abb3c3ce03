"""A ModelDeployment whose roles do not render gets a Warning Event once per generation and problem, not
per reconcile (issue 29 item 8: a missing InstanceType got only a condition): :func:`render_warning`."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.placement import pods
from gpustack_worker.placement.deployments import render_warning

MISSING = pods.RoleProblem("main", pods.INSTANCE_TYPE_NOT_FOUND, "InstanceType gpustack--b200 does not exist")
LEVEL = pods.RoleProblem("side", pods.UNKNOWN_LEVEL, "level x is not in the queue's hierarchy")
MESSAGE = f"role main: {MISSING.message}"


def _md(generation: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "m", "namespace": "t", "generation": generation}, "status": status or {}}


def _shown(reason: str, message: str, observed: int) -> dict[str, Any]:
    cond = {"type": "Rendered", "status": "False", "reason": reason, "message": message}
    return {"observedGeneration": observed, "conditions": [cond]}


CASES: list[tuple[str, dict[str, Any], dict[str, Any], tuple[str, str] | None]] = [
    ("first-seen", _md(1), {"main": MISSING}, ("InstanceTypeNotFound", f"generation 1: {MESSAGE}")),
    ("already-reported", _md(1, _shown("InstanceTypeNotFound", MESSAGE, 1)), {"main": MISSING}, None),
    (
        "new-generation",
        _md(2, _shown("InstanceTypeNotFound", MESSAGE, 1)),
        {"main": MISSING},
        ("InstanceTypeNotFound", f"generation 2: {MESSAGE}"),
    ),
    (
        "other-problem-same-generation",
        _md(1, _shown("UnknownLevel", "role side: x", 1)),
        {"main": MISSING},
        ("InstanceTypeNotFound", f"generation 1: {MESSAGE}"),
    ),
    (
        "two-roles-first-reason",
        _md(3),
        {"main": MISSING, "side": LEVEL},
        ("InstanceTypeNotFound", f"generation 3: {MESSAGE}; role side: {LEVEL.message}"),
    ),
    ("renders", _md(1), {}, None),
    (
        "was-true",
        _md(1, {"observedGeneration": 1, "conditions": [{"type": "Rendered", "status": "True"}]}),
        {"main": MISSING},
        ("InstanceTypeNotFound", f"generation 1: {MESSAGE}"),
    ),
]


@pytest.mark.parametrize(
    ("deployment", "plans", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_render_warning(
    deployment: dict[str, Any], plans: dict[str, Any], expected: tuple[str, str] | None
) -> None:
    assert render_warning(deployment, plans) == expected
