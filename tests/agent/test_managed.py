from __future__ import annotations

import pytest

from gpustack_worker.agent.managed import is_managed, managed_label, stamps_managed
from gpustack_worker.api import keys, node_class

from .builders import node

PROJECTED = {keys.NFD_FEATURE_LABELS_ANNOTATION: "cpu-model.vendor_id,gpustack.ai/managed"}
NOT_PROJECTED = {keys.NFD_FEATURE_LABELS_ANNOTATION: "cpu-model.vendor_id"}


@pytest.mark.parametrize(
    ("manual", "label", "annotations", "stamps", "managed"),
    [
        pytest.param(False, None, {}, True, True, id="auto-fresh-node-stamped"),
        pytest.param(False, "true", PROJECTED, True, True, id="auto-our-own-projection"),
        pytest.param(False, "true", NOT_PROJECTED, False, True, id="auto-admin-true-wins"),
        pytest.param(False, "false", {}, False, False, id="auto-admin-false-opts-out"),
        pytest.param(True, None, {}, False, False, id="manual-no-label"),
        pytest.param(True, "true", {}, False, True, id="manual-admin-true"),
        # Whoever wrote it: a projected 'true' counts while it is on the Node (an admin's NodeFeatureRule
        # may be what projects it); our own stale stamp is removed by nfd-master once we stop stamping.
        pytest.param(True, "true", PROJECTED, False, True, id="manual-projected-true-counts-while-there"),
        pytest.param(True, "false", {}, False, False, id="manual-admin-false"),
        # Issue 16 defect 11: an admin overwrote nfd-master's projected 'true'. The chain's flavors stop
        # selecting the node at once, so the agent withholds its keys too (and keeps stamping: nfd-master
        # owns the key and would delete it, with the admin's value, were the stamp withdrawn).
        pytest.param(False, "yes", PROJECTED, True, False, id="auto-projected-overwritten-yes"),
        pytest.param(False, "True", PROJECTED, True, False, id="auto-projected-overwritten-True"),
        pytest.param(False, "false", PROJECTED, True, False, id="auto-projected-overwritten-false"),
        pytest.param(False, "yes", NOT_PROJECTED, False, False, id="auto-admin-yes"),
        pytest.param(True, "TRUE", {}, False, False, id="manual-admin-TRUE"),
        pytest.param(True, " true", {}, False, False, id="manual-admin-space-true"),
        pytest.param(True, "1", {}, False, False, id="manual-admin-1"),
        pytest.param(True, "", {}, False, False, id="manual-admin-empty"),
    ],
)
def test_managed_decision(
    manual: bool,
    label: str | None,
    annotations: dict[str, str],
    stamps: bool,
    managed: bool,
) -> None:
    labels = {keys.MANAGED: label} if label is not None else {}
    n = node(labels=labels, annotations=annotations)
    assert stamps_managed(n, manual=manual) is stamps
    assert is_managed(n, manual=manual) is managed
    # One meaning: once a value is on the Node, the agent counts the node exactly when the chain does.
    if label is not None:
        assert is_managed(n, manual=manual) is node_class.is_managed(labels)
    assert managed_label(n).projected is (annotations is PROJECTED)
