"""The tree rules of reference §2.1.3 (child without parent, one parent chain per value)."""

from __future__ import annotations

import pytest

from gpustack_worker.api import keys
from gpustack_worker.topology.hierarchy import hierarchy_errors

R, Z, K = keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.PRIVATE_RACK
LEVELS = (R, Z, K)


@pytest.mark.parametrize(
    "nodes",
    [
        pytest.param({}, id="no-nodes"),
        pytest.param({"a": {}}, id="node-without-levels"),
        pytest.param(
            {"a": {R: "r1", Z: "z1", K: "k1"}, "b": {R: "r1", Z: "z1", K: "k2"}, "c": {R: "r1", Z: "z2"}},
            id="tree-with-partial-suffix",
        ),
        pytest.param({"a": {R: "r1", Z: "z1"}, "b": {R: "r1"}}, id="only-region-zone"),
        pytest.param({"a": {R: "r1", Z: "z1", K: ""}}, id="empty-trailing-value-is-missing"),
        pytest.param({"a": {R: "r1", "other.example/x": "y"}}, id="keys-outside-levels-ignored"),
        pytest.param(
            {"a": {R: "r1", Z: "z1", K: "k1"}, "b": {R: "r1", Z: "z1", K: "k1"}}, id="same-rack-same-chain"
        ),
        pytest.param({"a": {R: "r1", Z: "z1"}, "b": {R: "r2", Z: "z2"}}, id="two-regions"),
    ],
)
def test_valid_trees(nodes: dict[str, dict[str, str]]) -> None:
    assert hierarchy_errors(LEVELS, nodes) == []


@pytest.mark.parametrize(
    ("nodes", "fragments"),
    [
        pytest.param(
            {"a": {Z: "z1"}},
            [["node a", f"{Z}=z1", f"no parent {R}", "child without parent"]],
            id="zone-without-region",
        ),
        pytest.param(
            {"a": {R: "r1", K: "k1"}},
            [["node a", f"{K}=k1", f"no parent {Z}", "child without parent"]],
            id="rack-skips-zone",
        ),
        pytest.param(
            {"a": {K: "k1"}},
            [["node a", f"{K}=k1", f"no parent {R}, {Z}"]],
            id="rack-alone-names-both-parents",
        ),
        pytest.param(
            {"a": {R: "", Z: "z1"}},
            [["node a", f"{Z}=z1", f"no parent {R}"]],
            id="empty-parent-counts-as-missing",
        ),
        pytest.param(
            {"a": {R: "r1", Z: "z1", K: "k1"}, "b": {R: "r1", Z: "z2", K: "k1"}},
            [["node b", f"{K}=k1", f"({R}=r1, {Z}=z2)", "node a", f"({R}=r1, {Z}=z1)", "one parent chain"]],
            id="rack-under-two-zones",
        ),
        pytest.param(
            {"a": {R: "r1", Z: "z1"}, "b": {R: "r2", Z: "z1"}},
            [["node b", f"{Z}=z1", f"({R}=r2)", "node a", f"({R}=r1)"]],
            id="zone-under-two-regions",
        ),
        pytest.param(
            {"b": {R: "r2", Z: "z1"}, "a": {R: "r1", Z: "z1"}, "c": {R: "r2", Z: "z1"}},
            [["node b", f"({R}=r2)", "node a"]],
            id="contradiction-reported-once-nodes-by-name",
        ),
        pytest.param(
            {"b": {Z: "z1"}, "a": {R: "r1", K: "k1"}},
            [["node a", K], ["node b", Z]],
            id="errors-in-node-order",
        ),
        pytest.param(
            {"a": {R: "r1", Z: "z1", K: "k1"}, "b": {R: "r2", Z: "z1", K: "k1"}},
            [["node b", f"{Z}=z1"], ["node b", f"{K}=k1"]],
            id="levels-in-order-within-node",
        ),
    ],
)
def test_broken_trees(nodes: dict[str, dict[str, str]], fragments: list[list[str]]) -> None:
    errors = hierarchy_errors(LEVELS, nodes)
    assert len(errors) == len(fragments), errors
    for error, expected in zip(errors, fragments, strict=True):
        for fragment in expected:
            assert fragment in error, (fragment, error)


def test_deterministic_whatever_the_input_order() -> None:
    nodes = {f"n{i:02}": {R: f"r{i % 2}", Z: "z", K: f"k{i % 3}"} for i in range(12)}
    backwards = dict(reversed(list(nodes.items())))
    assert hierarchy_errors(LEVELS, nodes) == hierarchy_errors(LEVELS, backwards)
    assert hierarchy_errors(LEVELS, nodes)  # z sits under r0 and r1
