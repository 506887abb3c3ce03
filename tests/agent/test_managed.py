from __future__ import annotations

import pytest

from gpustack_worker.agent.managed import admin_managed_value, is_managed, stamps_managed
from gpustack_worker.api import keys

from .builders import node

PROJECTED = {keys.NFD_FEATURE_LABELS_ANNOTATION: "cpu-model.vendor_id,gpustack.ai/managed"}
NOT_PROJECTED = {keys.NFD_FEATURE_LABELS_ANNOTATION: "cpu-model.vendor_id"}


@pytest.mark.parametrize(
    ("manual", "label", "annotations", "admin", "stamps", "managed"),
    [
        pytest.param(False, None, {}, None, True, True, id="auto-fresh-node-stamped"),
        pytest.param(False, "true", PROJECTED, None, True, True, id="auto-our-own-projection"),
        pytest.param(False, "true", NOT_PROJECTED, "true", False, True, id="auto-admin-true-wins"),
        pytest.param(False, "false", {}, "false", False, False, id="auto-admin-false-opts-out"),
        pytest.param(True, None, {}, None, False, False, id="manual-no-label"),
        pytest.param(True, "true", {}, "true", False, True, id="manual-admin-true"),
        pytest.param(True, "true", PROJECTED, None, False, False, id="manual-stale-projection-ignored"),
        pytest.param(True, "false", {}, "false", False, False, id="manual-admin-false"),
    ],
)
def test_managed_decision(
    manual: bool,
    label: str | None,
    annotations: dict[str, str],
    admin: str | None,
    stamps: bool,
    managed: bool,
) -> None:
    n = node(labels={keys.MANAGED: label} if label is not None else {}, annotations=annotations)
    assert admin_managed_value(n) == admin
    assert stamps_managed(n, manual=manual) is stamps
    assert is_managed(n, manual=manual) is managed
