"""The profile assigner: which levels a Node's hierarchy has, and its Kueue Topology (reference §2.1.2,
"Hierarchy profiles"). Pure table tests; profile values are recomputed here with an independent FNV-1a."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import keys, kinds
from gpustack_worker.topology import profiles
from gpustack_worker.topology.profiles import Assignment, ReadySource, node_assignment
from gpustack_worker.topology.selector import compile_selector

H = keys.HOSTNAME
R, Z, K = keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.PRIVATE_RACK
SR, SZ = keys.STANDARD_REGION, keys.STANDARD_ZONE
T1, T2, T3 = (f"{keys.TOPOGRAPH_TIER_PREFIX}{n}" for n in (1, 2, 3))
MANAGED = {keys.MANAGED: "true", H: "worker-a"}
POOL = "example.com/pool"


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def profile(*levels: str) -> str:
    return "fnv64-" + fnv1a64(b"\x00".join(k.encode() for k in levels))


def ready(name: str, levels: tuple[str, ...], selector: dict[str, Any] | None = None) -> ReadySource:
    return ReadySource(name, compile_selector({} if selector is None else selector), levels)


def pool(value: str) -> dict[str, Any]:
    return {"matchLabels": {POOL: value}}


def test_the_default_profile_is_the_documented_hostname_only_value() -> None:
    assert profile(H) == "fnv64-87bf574bea2a4f23"
    found = node_assignment(MANAGED, [])
    assert found is not None
    assert found.levels == (H,)
    assert found.profile == "fnv64-87bf574bea2a4f23"
    assert found.source == ""
    assert found.fallback != ""


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param({H: "worker-a"}, id="no-managed-label"),
        pytest.param({keys.MANAGED: "false", H: "worker-a"}, id="managed-false"),
        pytest.param({keys.MANAGED: "True", H: "worker-a"}, id="managed-not-exactly-true"),
        pytest.param({}, id="no-labels"),
    ],
)
def test_an_unmanaged_node_gets_no_profile(labels: dict[str, str]) -> None:
    assert node_assignment(labels, [ready("inventory", (R, Z, K))]) is None


def test_a_source_that_does_not_select_the_node_is_ignored() -> None:
    found = node_assignment(
        {**MANAGED, POOL: "b", R: "r", Z: "z", K: "k"}, [ready("a-only", (R, Z, K), pool("a"))]
    )
    assert found is not None
    assert found.levels == (H,) and found.source == ""
    assert found.profile == profile(H)


# (source levels, node labels) → expected levels with the exactly-one matching source
ONE_SOURCE = [
    pytest.param((R, Z, K), {R: "r1", Z: "z1", K: "k1"}, (R, Z, K, H), id="complete"),
    pytest.param((R, Z, K), {R: "r1", Z: "z1"}, (R, Z, H), id="missing-rack-is-a-shorter-profile"),
    pytest.param((R, Z, K), {R: "r1"}, (R, H), id="region-only"),
    pytest.param((R, Z, K), {}, (H,), id="nothing-populated-is-hostname-only"),
    pytest.param((R, Z, K), {R: "r1", K: "k1"}, (R, H), id="child-without-parent-stops-the-prefix"),
    pytest.param((R, Z, K), {R: "r1", Z: "", K: "k1"}, (R, H), id="empty-value-counts-as-missing"),
    pytest.param((R, Z, K), {Z: "z1", K: "k1"}, (H,), id="no-top-level"),
    pytest.param((SR, SZ, K), {SR: "us", SZ: "us-a", K: "k1"}, (SR, SZ, K, H), id="standard-keys"),
    pytest.param((T1, T2), {T1: "leaf", T2: "spine"}, (T2, T1, H), id="topograph-tiers-normalised"),
    pytest.param((T1, T2, T3), {T3: "core", T2: "spine"}, (T3, T2, H), id="tiers-normalised-then-prefix"),
    pytest.param((T1, T2), {T1: "leaf"}, (H,), id="finest-tier-alone-has-no-parent"),
    pytest.param((SR, T1, T2), {SR: "us", T2: "spine", T1: "leaf"}, (SR, T2, T1, H), id="mixed-run"),
    pytest.param((T2, T1), {T1: "leaf", T2: "spine"}, (T2, T1, H), id="already-coarsest-first"),
]


@pytest.mark.parametrize(("levels", "labels", "expected"), ONE_SOURCE)
def test_exactly_one_source_supplies_the_longest_populated_prefix_then_the_hostname(
    levels: tuple[str, ...], labels: dict[str, str], expected: tuple[str, ...]
) -> None:
    found = node_assignment({**MANAGED, **labels}, [ready("inventory", levels)])
    assert found == Assignment(expected, "inventory")
    assert found.profile == profile(*expected)
    assert found.fallback == ""


def test_a_partial_suffix_is_a_different_shorter_profile_than_the_full_one() -> None:
    sources = [ready("inventory", (R, Z, K))]
    full = node_assignment({**MANAGED, R: "r", Z: "z", K: "k"}, sources)
    partial = node_assignment({**MANAGED, R: "r", Z: "z"}, sources)
    assert full is not None and partial is not None
    assert full.profile != partial.profile
    assert partial.levels == (*full.levels[:2], H)


def test_two_matching_sources_fall_back_to_hostname_only_and_name_both() -> None:
    labels = {**MANAGED, POOL: "a", R: "r", Z: "z", K: "k", SR: "us"}
    sources = [
        ready("zeta-inventory", (R, Z, K)),
        ready("cloud", (SR,), pool("a")),
        ready("elsewhere", (R,), pool("b")),  # does not select the Node: not named
    ]
    found = node_assignment(labels, sources)
    assert found is not None
    assert found.levels == (H,) and found.profile == profile(H)
    assert found.source == ""
    assert "cloud" in found.fallback and "zeta-inventory" in found.fallback
    assert "elsewhere" not in found.fallback


def test_two_sources_with_disjoint_selectors_each_supply_their_own_nodes() -> None:
    sources = [ready("a", (R, Z), pool("a")), ready("b", (SR,), pool("b"))]
    on_a = node_assignment({**MANAGED, POOL: "a", R: "r", Z: "z"}, sources)
    on_b = node_assignment({**MANAGED, POOL: "b", SR: "us"}, sources)
    assert on_a == Assignment((R, Z, H), "a")
    assert on_b == Assignment((SR, H), "b")


def test_the_assignment_does_not_depend_on_source_order() -> None:
    labels = {**MANAGED, R: "r"}
    one, two = ready("one", (R,)), ready("two", (Z,))
    forward, backward = node_assignment(labels, [one, two]), node_assignment(labels, [two, one])
    assert forward == backward
    assert forward is not None and forward.fallback.endswith("one, two")


# --- the Kueue Topology -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "levels",
    [
        pytest.param((H,), id="hostname-only"),
        pytest.param((R, Z, K, H), id="private"),
        pytest.param((SR, H), id="sr"),
    ],
)
def test_topology_body_names_the_profile_and_lists_the_levels(levels: tuple[str, ...]) -> None:
    body = profiles.topology_body(levels)
    assert body["apiVersion"] == kinds.TOPOLOGY.api_version
    assert body["kind"] == "Topology"
    assert body["metadata"]["name"] == f"gpustack-{profile(*levels)}"
    assert body["metadata"]["labels"] == {
        keys.RESOURCE_TYPE: keys.TYPE_TOPOLOGY,
        keys.TOPOLOGY_PROFILE: profile(*levels),
    }
    assert body["spec"] == {"levels": [{"nodeLabel": level} for level in levels]}
    assert "namespace" not in body["metadata"]  # Topology is cluster-scoped


def test_every_node_of_one_shape_shares_one_topology() -> None:
    sources = [ready("inventory", (R, Z, K))]
    a = node_assignment({**MANAGED, R: "r1", Z: "z1", K: "k1"}, sources)
    b = node_assignment({**MANAGED, H: "worker-b", R: "r2", Z: "z9", K: "k7"}, sources)
    assert a is not None and b is not None
    assert a.profile == b.profile
    assert profiles.topology_body(a.levels) == profiles.topology_body(b.levels)


def test_topology_drift() -> None:
    desired = profiles.topology_body((R, Z, H))
    assert profiles.topology_drift(desired, None) is None
    assert profiles.topology_drift(desired, desired) is None
    same_levels = {**desired, "metadata": {"name": desired["metadata"]["name"], "resourceVersion": "9"}}
    assert profiles.topology_drift(desired, same_levels) is None
    drifted = {**desired, "spec": {"levels": [{"nodeLabel": R}, {"nodeLabel": H}]}}
    why = profiles.topology_drift(desired, drifted)
    assert why is not None
    assert "immutable level drift" in why and Z in why
    reordered = {**desired, "spec": {"levels": [{"nodeLabel": Z}, {"nodeLabel": R}, {"nodeLabel": H}]}}
    assert profiles.topology_drift(desired, reordered) is not None
    no_levels: dict[str, Any] = {**desired, "spec": {}}
    assert profiles.topology_drift(desired, no_levels) is not None
