"""Fields another field manager changed (``taken_fields``) and the Applier's one report of their repair.

The committed fixtures are objects the real API server stored (``capture_fixtures.py``): two of them were
changed by another manager after the apply (a forced apply of the queue's stop policy, a merge patch of a
node label), and only those two report a taken field. Every row of the no-op table (our own edits of the
desired body) reports none, except a field newly desired whose value the server had defaulted — which
cannot be told apart from a foreign edit when the cache keeps only our managedFields entry (documented in
``runtime/apply.py``).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from capture_fixtures import CASES_BY_NAME, load
from hypothesis import given, settings
from hypothesis import strategies as st
from noop_cases import ROWS, Row
from prometheus_client import REGISTRY

from gpustack_worker.runtime.apply import UNSEEN_CREATE_MAX_S, Applier, dotted, is_noop, taken_fields
from gpustack_worker.runtime.client import Conflict
from gpustack_worker.runtime.resources import FieldHints, Resource
from gpustack_worker.runtime.transform import make_transform
from tests.kit.properties import examples

LABEL = ("f:metadata", "f:labels")
TAKEN_IN_FIXTURE = {
    "clusterqueue-taken-over": {"spec.stopPolicy"},
    "node-labels-updated-by-other": {"metadata.labels.shared.fit.gpustack.ai/nvidia-a100"},
}
#: A newly desired field the server had defaulted to another value: reported (see the module docstring).
DEFAULTED = {"cq-field-added": {"spec.queueingStrategy"}}


def _cached(record: dict[str, Any], manager: str) -> dict[str, Any]:
    """The stored object as the informer caches it (only ``manager``'s managedFields kept)."""
    out: dict[str, Any] = make_transform([manager])(copy.deepcopy(record["object"]))
    return out


@pytest.mark.parametrize("name", sorted(CASES_BY_NAME))
def test_only_fixtures_changed_by_another_manager_report_taken_fields(name: str) -> None:
    record = load(name)
    hints = CASES_BY_NAME[name].resource.hints
    cached = _cached(record, record["manager"])
    taken = taken_fields(record["body"], cached, record["manager"], record["subresource"], hints=hints)
    assert {dotted(p) for p in taken} == TAKEN_IN_FIXTURE.get(name, set())


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_our_own_changes_of_the_desired_body_are_not_taken_fields(row: Row) -> None:
    record = load(row.fixture)
    manager = row.manager or record["manager"]
    hints = CASES_BY_NAME[row.fixture].resource.hints
    body = row.change(record["body"])
    taken = taken_fields(body, _cached(record, manager), manager, record["subresource"], hints=hints)
    expected = TAKEN_IN_FIXTURE.get(row.fixture, set()) | DEFAULTED.get(row.id, set())
    assert {dotted(p) for p in taken} == expected


def test_no_cache_or_no_entry_of_ours_reports_nothing() -> None:
    record = load("clusterqueue-taken-over")
    hints = CASES_BY_NAME["clusterqueue-taken-over"].resource.hints
    assert taken_fields(record["body"], None, record["manager"], hints=hints) == frozenset()
    # A manager that never applied to the object (a first apply over an existing one) took nothing back.
    cached = _cached(record, "someone-else")
    assert taken_fields(record["body"], cached, "someone-else", hints=hints) == frozenset()


def test_a_field_still_ours_at_another_granularity_is_not_taken() -> None:
    """A kind whose hints leave a keyed list undeclared (atomic for us, items for the server) — the
    TopologySource's status conditions — and the reverse: a changed value is our own write, not a repair."""
    stored = {
        "metadata": {
            "name": "x",
            "managedFields": [
                {
                    "manager": MANAGER,
                    "operation": "Apply",
                    "subresource": "status",
                    "fieldsV1": {
                        "f:status": {
                            "f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:type": {}, "f:status": {}}}
                        }
                    },
                }
            ],
        },
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }
    body = {"metadata": {"name": "x"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert taken_fields(body, stored, MANAGER, "status") == frozenset()
    assert not is_noop(body, stored, MANAGER, "status")
    keyed = FieldHints(keyed={"status.conditions": ("type",)})
    atomic_entry = copy.deepcopy(stored)
    atomic_entry["metadata"]["managedFields"][0]["fieldsV1"] = {"f:status": {"f:conditions": {}}}
    assert taken_fields(body, atomic_entry, MANAGER, "status", hints=keyed) == frozenset()


# -- the property: labels ours, changed by another manager, newly desired, or changed by ourselves -------
MANAGER = "chain"


def _labelled(labels: dict[str, str], entries: dict[str, set[str]]) -> dict[str, Any]:
    """An object with ``labels`` and one Apply (ours) / Update (others) managedFields entry per manager."""
    managed = [
        {
            "manager": manager,
            "operation": "Apply" if manager == MANAGER else "Update",
            "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in sorted(keys)}}},
        }
        for manager, keys in entries.items()
        if keys
    ]
    return {"metadata": {"name": "x", "labels": dict(labels), "managedFields": managed}}


def _body(labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": labels}}


KEYS = st.sampled_from([f"k{i}" for i in range(8)])


@settings(max_examples=examples(300))
@given(
    desired=st.dictionaries(KEYS, st.sampled_from(["a", "b"]), min_size=1),
    edits=st.dictionaries(KEYS, st.sampled_from(["taken", "added", "ours-changed", "same-by-other"])),
    foreign=st.dictionaries(st.sampled_from(["x0", "x1"]), st.just("theirs")),
)
def test_taken_are_exactly_the_fields_another_manager_changed(
    desired: dict[str, str], edits: dict[str, str], foreign: dict[str, str]
) -> None:
    """Start from our applied labels; another manager changes some (ownership moves to it), sets one to our
    value (moves too, nothing to repair), or adds labels of its own; we add labels or change values
    ourselves. Exactly the changed ones are taken, and the apply is a no-op only when nothing differs."""
    labels = dict(foreign)
    ours: set[str] = set()
    theirs: set[str] = set(foreign)
    for key, value in desired.items():
        edit = edits.get(key)
        if edit == "taken":
            labels[key] = value + "-admin"
            theirs.add(key)
        elif edit == "same-by-other":
            labels[key] = value
            theirs.add(key)
        elif edit == "ours-changed":
            labels[key] = value + "-old"
            ours.add(key)
        elif edit != "added":
            labels[key] = value
            ours.add(key)
    if not ours:  # the server drops an entry that owns nothing: nothing of ours to have been taken
        return
    cached = _labelled(labels, {MANAGER: ours, "admin": theirs})
    taken = taken_fields(_body(desired), cached, MANAGER)
    expected = {(*LABEL, f"f:{k}") for k in desired if edits.get(k) == "taken"}
    assert taken == expected
    differs = {k for k in desired if edits.get(k) in ("taken", "added", "ours-changed", "same-by-other")}
    assert is_noop(_body(desired), cached, MANAGER) is (not differs)


# -- the Applier: one report per accepted repair ----------------------------------------------------------
CM = Resource("", "v1", "ConfigMap", "configmaps", namespaced=False)


class Cache:
    field_managers = frozenset({MANAGER})


class FakeClient:
    def __init__(self, *, refuse: bool = False) -> None:
        self.applied: list[dict[str, Any]] = []
        self.refuse = refuse

    async def apply(self, resource: Resource, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self.applied.append(body)
        if self.refuse:
            raise Conflict(409, "Conflict", {"message": "conflict"})
        labels = dict(body["metadata"]["labels"])
        return _labelled(labels, {MANAGER: set(labels)})


async def test_the_applier_reports_a_repair_once_then_the_next_pass_is_a_noop() -> None:
    client = FakeClient()
    repairs: list[tuple[str, tuple[str, ...]]] = []
    applier = Applier(
        client,  # type: ignore[arg-type]
        MANAGER,
        cache=Cache(),
        on_repair=lambda resource, obj, fields: repairs.append((resource.kind, fields)),
    )
    desired = _body({"a": "1", "b": "2"})
    edited = _labelled({"a": "1", "b": "admin"}, {MANAGER: {"a"}, "kubectl": {"b"}})
    counted = {"field_manager": MANAGER, "kind": "ConfigMap"}
    before = REGISTRY.get_sample_value("gpustack_apply_repairs_total", counted) or 0.0
    written = await applier.apply(CM, desired, edited)
    assert written is not None and len(client.applied) == 1
    assert repairs == [("ConfigMap", ("metadata.labels.b",))]
    assert REGISTRY.get_sample_value("gpustack_apply_repairs_total", counted) == before + 1
    # The repaired object is ours again: no write, no report.
    assert await applier.apply(CM, desired, written) is None
    assert len(client.applied) == 1 and len(repairs) == 1
    # A label of the admin's own (not in our body) is left alone: no write at all.
    theirs = _labelled({"a": "1", "b": "2", "mine": "x"}, {MANAGER: {"a", "b"}, "kubectl": {"mine"}})
    assert await applier.apply(CM, desired, theirs) is None
    assert len(client.applied) == 1 and len(repairs) == 1


async def test_a_refused_repair_is_not_reported() -> None:
    client = FakeClient(refuse=True)
    repairs: list[tuple[str, ...]] = []
    applier = Applier(
        client,  # type: ignore[arg-type]
        MANAGER,
        cache=Cache(),
        on_repair=lambda _resource, _obj, fields: repairs.append(fields),
    )
    edited = _labelled({"a": "admin"}, {MANAGER: {"z"}, "kubectl": {"a"}})
    with pytest.raises(Conflict):
        await applier.apply(CM, _body({"a": "1", "z": "1"}), edited)
    assert repairs == []


# -- our own write not yet in the cache: never sent twice --------------------------------------------------
class VersionedClient:
    """Answers an apply like the server: the object at the next resourceVersion, our entry owning it."""

    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []
        self.version = 10

    async def apply(self, resource: Resource, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self.applied.append(body)
        self.version += 1
        obj = _labelled(dict(body["metadata"]["labels"]), {MANAGER: set(body["metadata"]["labels"])})
        obj["metadata"].update(uid="u1", resourceVersion=str(self.version))
        self.last = obj
        return obj

    def applied_object(self) -> dict[str, Any]:
        return copy.deepcopy(self.last)

    async def delete(self, resource: Resource, name: str, *_a: Any, **_kw: Any) -> bool:
        return True


def _versioned(obj: dict[str, Any], version: int, uid: str = "u1") -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].update(uid=uid, resourceVersion=str(version))
    return out


async def test_a_stale_cache_after_our_own_write_is_not_written_again_nor_reported_again() -> None:
    """The admin's edit (rv 10) is repaired (rv 11); an event older than the repair (Kueue's update at rv
    10.5, say, still holding the admin's value) wakes another reconcile before the repair's event: the
    cache is stale against our own write, so nothing is sent and nothing reported. Once the cache holds
    the repair, the usual check applies."""
    client = VersionedClient()
    repairs: list[tuple[str, ...]] = []
    applier = Applier(
        client,  # type: ignore[arg-type]
        MANAGER,
        cache=Cache(),
        on_repair=lambda _resource, _obj, fields: repairs.append(fields),
    )
    desired = _body({"a": "1", "b": "2"})
    edited = _versioned(_labelled({"a": "1", "b": "admin"}, {MANAGER: {"a"}, "kubectl": {"b"}}), 10)
    written = await applier.apply(CM, desired, edited)
    assert written is not None and len(client.applied) == 1 and len(repairs) == 1
    # The stale cache: the same object, older than our write, still the admin's value.
    assert await applier.apply(CM, desired, edited) is None
    assert len(client.applied) == 1 and len(repairs) == 1
    # A different intent is still written at once, stale cache or not.
    changed = _body({"a": "1", "b": "3"})
    assert await applier.apply(CM, changed, edited) is not None
    assert len(client.applied) == 2
    # The cache caught up (our write's rv): judged by the cache again — a no-op.
    assert await applier.apply(CM, changed, _versioned(client.applied_object(), client.version)) is None
    assert len(client.applied) == 2


async def test_a_missing_or_recreated_object_is_always_written() -> None:
    client = VersionedClient()
    applier = Applier(client, MANAGER, cache=Cache())  # type: ignore[arg-type]
    desired = _body({"a": "1"})
    await applier.apply(CM, desired, None)
    # Deleted by someone before the cache saw it (or never cached): written again, never suppressed.
    assert await applier.apply(CM, desired, None) is not None
    # Another object of that name (another UID), however old its resourceVersion looks.
    other = _versioned(_labelled({"a": "x"}, {MANAGER: {"a"}}), 5, uid="u2")
    assert await applier.apply(CM, desired, other) is not None
    assert len(client.applied) == 3


# -- our own create not yet in the cache ------------------------------------------------------------------
class WatchedCache:
    """An informer as the Applier sees it: its kind and how far its watch has come."""

    field_managers = frozenset({MANAGER})
    resource = CM

    def __init__(self, version: str) -> None:
        self.last_resource_version = version
        self.store: dict[str, dict[str, Any]] = {}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_create_the_informer_has_not_reached_is_not_sent_again() -> None:
    """A second pass before our create's ADDED event (the informer at rv 10, the create at rv 11) sends
    nothing; another body is still written at once."""
    client = VersionedClient()
    informer = WatchedCache("10")
    applier = Applier(client, MANAGER, cache=informer)  # type: ignore[arg-type]
    desired = _body({"a": "1"})
    assert await applier.apply(CM, desired, None) is not None
    assert await applier.apply(CM, desired, None) is None
    assert len(client.applied) == 1
    assert await applier.apply(CM, _body({"a": "2"}), None) is not None
    assert len(client.applied) == 2
    # Once the cache holds the object, the cache judges again (a no-op here).
    assert await applier.apply(CM, _body({"a": "2"}), _versioned(client.applied_object(), 12)) is None
    assert len(client.applied) == 2


async def test_a_create_the_informer_has_passed_and_not_kept_is_made_again() -> None:
    """The informer reached the create's resourceVersion without the object: it was deleted after our
    create, so it is created again — never suppressed."""
    client = VersionedClient()
    informer = WatchedCache("10")
    applier = Applier(client, MANAGER, cache=informer)  # type: ignore[arg-type]
    desired = _body({"a": "1"})
    await applier.apply(CM, desired, None)
    informer.last_resource_version = "13"  # ADDED at 11, DELETED at 13
    assert await applier.apply(CM, desired, None) is not None
    assert len(client.applied) == 2


async def test_a_view_read_before_the_create_reached_the_informer_is_not_written_again() -> None:
    """The caller read the cache, awaited something, and meanwhile the ADDED event arrived: the informer is
    past the create and holds the object, so the caller's empty view is stale — nothing is sent."""
    client = VersionedClient()
    informer = WatchedCache("10")
    applier = Applier(client, MANAGER, cache=informer)  # type: ignore[arg-type]
    desired = _body({"a": "1"})
    created = await applier.apply(CM, desired, None)
    assert created is not None
    informer.store[created["metadata"]["name"]] = created
    informer.last_resource_version = "12"
    assert await applier.apply(CM, desired, None) is None
    assert len(client.applied) == 1
    # A different object of that name in the store (another UID): ours was deleted — written.
    await applier.apply(CM, _body({"a": "2"}), None)
    informer.store[created["metadata"]["name"]] = _versioned(created, 14, uid="u2")
    informer.last_resource_version = "20"
    assert await applier.apply(CM, _body({"a": "2"}), None) is not None
    assert len(client.applied) == 3


@pytest.mark.parametrize("version", ["", "not-a-number"])
async def test_an_informer_that_cannot_say_how_far_it_is_gets_the_create_again(version: str) -> None:
    client = VersionedClient()
    applier = Applier(client, MANAGER, cache=WatchedCache(version))  # type: ignore[arg-type]
    desired = _body({"a": "1"})
    await applier.apply(CM, desired, None)
    assert await applier.apply(CM, desired, None) is not None
    assert len(client.applied) == 2


async def test_a_stalled_informer_holds_back_a_create_for_a_bounded_time_only() -> None:
    client = VersionedClient()
    clock = Clock()
    applier = Applier(client, MANAGER, cache=WatchedCache("10"), monotonic=clock)  # type: ignore[arg-type]
    desired = _body({"a": "1"})
    await applier.apply(CM, desired, None)
    clock.now = UNSEEN_CREATE_MAX_S - 0.1
    assert await applier.apply(CM, desired, None) is None
    clock.now = UNSEEN_CREATE_MAX_S
    assert await applier.apply(CM, desired, None) is not None
    assert len(client.applied) == 2


async def test_deleting_the_object_forgets_its_create() -> None:
    client = VersionedClient()
    applier = Applier(client, MANAGER, cache=WatchedCache("10"))  # type: ignore[arg-type]
    desired = _body({"a": "1"})
    created = await applier.apply(CM, desired, None)
    assert created is not None
    await applier.delete(CM, created)
    assert await applier.apply(CM, desired, None) is not None
    assert len(client.applied) == 2


async def test_the_least_advanced_informer_of_the_kind_decides() -> None:
    """Two informers of one kind (two namespaces' views, say): the create is on its way until both have
    passed it; an informer of another kind says nothing about it."""
    client = VersionedClient()
    ahead, behind = WatchedCache("20"), WatchedCache("10")
    applier = Applier(client, MANAGER, cache=[ahead, behind])  # type: ignore[arg-type]
    desired = _body({"a": "1"})
    await applier.apply(CM, desired, None)
    assert await applier.apply(CM, desired, None) is None
    behind.last_resource_version = "11"
    assert await applier.apply(CM, desired, None) is not None
    assert len(client.applied) == 2


class CreatingClient(VersionedClient):
    """POST as the server answers it: the object, or AlreadyExists once it exists."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[dict[str, Any]] = []
        self.exists = False

    async def create(self, resource: Resource, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if self.exists:
            raise Conflict(409, "AlreadyExists", {"message": "already exists"})
        self.created.append(body)
        self.version += 1
        return _versioned(body, self.version)


async def test_an_authored_create_is_posted_once_until_the_informer_passes_it() -> None:
    client = CreatingClient()
    informer = WatchedCache("10")
    applier = Applier(client, MANAGER, cache=informer)  # type: ignore[arg-type]
    desired = _body({"a": "1"})
    assert await applier.create(CM, desired) is not None
    assert await applier.create(CM, desired) is None  # on its way: not posted again
    assert len(client.created) == 1
    informer.last_resource_version = "12"  # passed without it: deleted since, authored again
    assert await applier.create(CM, desired) is not None
    assert len(client.created) == 2
    client.exists = True  # someone else's object of that name: the caller hears AlreadyExists
    informer.last_resource_version = "20"
    with pytest.raises(Conflict):
        await applier.create(CM, desired)
