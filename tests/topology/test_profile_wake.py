"""What wakes the profile controllers on a TopologySource event (defect class: a source's effective state
changing without waking them, so Nodes kept an expired source's profile until an unrelated label change).

The predicate is :func:`profiles.wakes_profiles`; what the assigner reads is :func:`profiles.source_input`.
The regression cases name the transitions that flip no ``Ready`` status; the property checks, over random
pairs of source objects, that a source event which does not wake the controllers changes no Node's
profile, and that every change of ``in_effect`` (or of the selected Nodes or levels while in effect) wakes
them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import keys
from gpustack_worker.topology import profiles, sources
from gpustack_worker.topology.profiles import node_assignment, source_input, wakes_profiles
from gpustack_worker.topology.selector import compile_selector
from tests.kit.properties import examples

H = keys.HOSTNAME
R, Z, K = keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.PRIVATE_RACK
T1, T2 = (f"{keys.TOPOGRAPH_TIER_PREFIX}{n}" for n in (1, 2))
POOL = "example.com/pool"


def _source(
    ready: tuple[str, str] | None = ("True", "Observed"),
    *,
    selector: dict[str, Any] | None = None,
    levels: tuple[str, ...] = (R, Z, K),
    deleting: bool = False,
    generation: int = 1,
    mutated: int = 0,
    message: str = "m",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "inventory", "generation": generation, "resourceVersion": "1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    conds = [{"type": sources.VALID, "status": "False", "reason": "SnapshotInvalid", "message": message}]
    if ready is not None:
        conds.insert(0, {"type": sources.READY, "status": ready[0], "reason": ready[1], "message": message})
    return {
        "metadata": meta,
        "spec": {"nodeSelector": {} if selector is None else selector, "levels": list(levels)},
        "status": {"mutatedNodes": mutated, "conditions": conds},
    }


STALE = ("False", sources.STALE)
EXPIRED = ("False", "Expired")
CONFLICT = ("False", sources.OWNERSHIP_CONFLICT)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param(_source(STALE), _source(EXPIRED), id="stale-to-expired"),
        pytest.param(_source(STALE), _source(CONFLICT), id="stale-to-ownership-conflict"),
        pytest.param(_source(STALE), _source(("False", "SnapshotInvalid")), id="stale-to-never-succeeded"),
        pytest.param(_source(EXPIRED), _source(STALE), id="expired-to-stale"),
        pytest.param(_source(), _source(deleting=True), id="deletion-requested"),
        pytest.param(_source(), None, id="deleted"),
        pytest.param(None, _source(), id="created-in-effect"),
        pytest.param(_source(), _source(levels=(R, Z)), id="levels"),
        pytest.param(_source(), _source(selector={"matchLabels": {POOL: "a"}}), id="selector"),
        pytest.param(_source(("True", "Observed")), _source(None), id="ready-condition-gone"),
    ],
)
def test_a_change_of_what_the_assigner_reads_wakes_the_profile_controllers(
    old: dict[str, Any] | None, new: dict[str, Any] | None
) -> None:
    assert source_input(old) != source_input(new)
    assert wakes_profiles("update", old, new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param(_source(), _source(STALE), id="ready-to-stale-keeps-the-snapshot-in-effect"),
        pytest.param(_source(), _source(mutated=3, message="other"), id="status-counters-and-messages"),
        pytest.param(_source(), _source(generation=2), id="a-spec-change-elsewhere"),
        pytest.param(_source(EXPIRED), _source(CONFLICT, levels=(R,)), id="out-of-effect-either-way"),
        pytest.param(None, _source(EXPIRED), id="created-out-of-effect"),
        pytest.param(_source(EXPIRED, deleting=True), None, id="deleted-out-of-effect"),
        pytest.param(_source(levels=(T1, T2)), _source(levels=(T2, T1)), id="same-levels-once-normalised"),
        pytest.param(
            _source(selector={"matchLabels": {POOL: "a", R: "r"}}),
            _source(selector={"matchLabels": {R: "r", POOL: "a"}}),
            id="same-selector-other-key-order",
        ),
    ],
)
def test_a_change_the_assigner_does_not_read_wakes_nothing(
    old: dict[str, Any] | None, new: dict[str, Any] | None
) -> None:
    assert not wakes_profiles("update", old, new)


@pytest.mark.parametrize(
    ("ready", "in_effect"),
    [
        (("True", "Observed"), True),
        (STALE, True),
        (EXPIRED, False),
        (CONFLICT, False),
        (("False", "InvalidHierarchy"), False),
        (("Unknown", "PendingInventoryAdapter"), False),
        (None, False),
    ],
)
def test_in_effect_is_ready_or_stale(ready: tuple[str, str] | None, in_effect: bool) -> None:
    assert profiles.in_effect(_source(ready)) is in_effect
    assert profiles.in_effect(_source(ready, deleting=True)) is False


def test_the_assigners_view_is_built_from_the_same_input() -> None:
    found = source_input(_source(selector={"matchLabels": {POOL: "a"}}, levels=(T1, T2)))
    ready = profiles.ready_source("inventory", found)
    assert ready is not None and ready.levels == (T2, T1)
    assert ready.matches({POOL: "a"}) and not ready.matches({POOL: "b"})
    assert profiles.ready_source("inventory", source_input(_source(EXPIRED))) is None


# --- the property ---------------------------------------------------------------------------------------
READY_STATES = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from(["True", "False", "Unknown"]),
        st.sampled_from(
            ["Observed", sources.STALE, "Expired", sources.OWNERSHIP_CONFLICT, "SnapshotInvalid", "Other"]
        ),
    ),
)
SELECTORS = st.sampled_from(
    [
        {},
        {"matchLabels": {POOL: "a"}},
        {"matchLabels": {POOL: "b"}},
        {"matchExpressions": [{"key": POOL, "operator": "In", "values": ["a", "b"]}]},
        {"matchExpressions": [{"key": POOL, "operator": "Exists"}]},
    ]
)
LEVELS = st.sampled_from([(R, Z, K), (R, Z), (Z, K), (T1, T2), (T2, T1), (R,)])
SOURCES = st.one_of(
    st.none(),
    st.builds(
        _source,
        READY_STATES,
        selector=SELECTORS,
        levels=LEVELS,
        deleting=st.booleans(),
        generation=st.integers(1, 3),
        mutated=st.integers(0, 3),
        message=st.sampled_from(["m", "n"]),
    ),
)
#: Managed Nodes of every shape the strategies can tell apart (pool a, b or none; full, partial, tiered).
NODES = [
    {keys.MANAGED: "true", H: f"n{i}", **pool, **labels}
    for i, (pool, labels) in enumerate(
        (pool, labels)
        for pool in ({}, {POOL: "a"}, {POOL: "b"})
        for labels in ({}, {R: "r", Z: "z", K: "k"}, {R: "r", Z: "z"}, {Z: "z", K: "k"}, {T1: "l", T2: "s"})
    )
]
#: Another source in effect over pool b: the assignment of those Nodes depends on whether ours matches too.
OTHER = profiles.ReadySource("other", compile_selector({"matchLabels": {POOL: "b"}}), (R,))


def _assignments(source: dict[str, Any] | None) -> list[profiles.Assignment | None]:
    ready = profiles.ready_source("inventory", source_input(source))
    fleet = [OTHER, *([ready] if ready is not None else [])]
    return [node_assignment(labels, fleet) for labels in NODES]


@settings(max_examples=examples(400))
@given(old=SOURCES, new=SOURCES)
def test_a_source_event_that_wakes_nothing_changes_no_profile(
    old: dict[str, Any] | None, new: dict[str, Any] | None
) -> None:
    if not wakes_profiles("update", old, new):
        assert _assignments(old) == _assignments(new)
    if profiles.in_effect(old) != profiles.in_effect(new):
        assert wakes_profiles("update", old, new)
    elif profiles.in_effect(old):
        assert old is not None and new is not None
        selected_old = [compile_selector(old["spec"]["nodeSelector"])(n) for n in NODES]
        selected_new = [compile_selector(new["spec"]["nodeSelector"])(n) for n in NODES]
        old_levels, new_levels = source_input(old).levels, source_input(new).levels
        if selected_old != selected_new or old_levels != new_levels:
            assert wakes_profiles("update", old, new)
