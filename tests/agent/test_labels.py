from __future__ import annotations

import pytest

from gpustack_worker.agent.labels import is_label_value, is_qualified_name


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        pytest.param("gpustack.ai/managed", True, id="prefixed"),
        pytest.param("general.feature.gpustack.ai/amd-epyc-7r32.count", True, id="count-key"),
        pytest.param("nvidia.com/gpu.partitioned.mig-3g.40gb", True, id="profile-resource"),
        pytest.param("plain", True, id="no-prefix"),
        pytest.param("general.feature.gpustack.ai/" + "a" * 58 + ".count", False, id="name-over-63"),
        pytest.param("Upper.Case/x", False, id="prefix-not-dns"),
        pytest.param("a/b/c", False, id="two-slashes"),
        pytest.param("x/-bad", False, id="name-starts-with-dash"),
        pytest.param("/x", False, id="empty-prefix"),
    ],
)
def test_is_qualified_name(key: str, valid: bool) -> None:
    assert is_qualified_name(key) is valid


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        pytest.param("", True, id="empty"),
        pytest.param("0_1", True, id="numa-list"),
        pytest.param("NVIDIA-A10G", True, id="mixed-case"),
        pytest.param("a" * 64, False, id="too-long"),
        pytest.param("_x", False, id="leading-separator"),
    ],
)
def test_is_label_value(value: str, valid: bool) -> None:
    assert is_label_value(value) is valid
