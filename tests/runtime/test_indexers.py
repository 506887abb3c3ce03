"""The generic index functions and the Store's named indexes: values, updates and deletes moving objects
between index values, relists, indexes added after objects are cached."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.runtime.frozen import freeze
from gpustack_worker.runtime.indexers import (
    BY_NAMESPACE,
    BY_OWNER_UID,
    by_label,
    by_label_key,
    namespace_of,
    owner_uids,
)
from gpustack_worker.runtime.store import Store

ACC = "acceleratable.feature.gpustack.ai/"
POOL = "example.com/pool"


def obj(name: str, namespace: str | None = None, *, rv: str = "1", **meta: Any) -> Any:
    m: dict[str, Any] = {"name": name, "resourceVersion": rv, **meta}
    if namespace:
        m["namespace"] = namespace
    return freeze({"metadata": m})


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (obj("a", "team-a"), ["team-a"]),
        (obj("a"), []),
        ({"metadata": None}, []),
        ({}, []),
    ],
)
def test_namespace_of(item: Any, expected: list[str]) -> None:
    assert namespace_of(item) == expected


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (obj("a", ownerReferences=[{"uid": "u1", "kind": "Node"}, {"uid": "u2", "kind": "X"}]), ["u1", "u2"]),
        (obj("a", ownerReferences=[{"kind": "Node"}, {"uid": "", "kind": "X"}]), []),
        (obj("a", ownerReferences=None), []),
        (obj("a"), []),
    ],
)
def test_owner_uids(item: Any, expected: list[str]) -> None:
    assert owner_uids(item) == expected


def test_by_label_indexes_the_value_and_skips_objects_without_the_label() -> None:
    index = by_label(POOL)
    assert index(obj("a", labels={POOL: "gpu", "other": "x"})) == ["gpu"]
    assert index(obj("a", labels={POOL: ""})) == [""]  # an empty value is a value
    assert index(obj("a", labels={"other": "x"})) == []
    assert index(obj("a")) == []


def test_by_label_key_indexes_every_key_with_the_prefix() -> None:
    index = by_label_key(ACC)
    labels = {f"{ACC}nvidia": "true", f"{ACC}nvidia-a10g": "true", "kubernetes.io/os": "linux"}
    assert sorted(index(obj("n", labels=labels))) == [f"{ACC}nvidia", f"{ACC}nvidia-a10g"]
    assert index(obj("n", labels={"kubernetes.io/os": "linux"})) == []
    assert index(obj("n")) == []


def _store() -> Store:
    return Store({BY_NAMESPACE: namespace_of, "pool": by_label(POOL), "acc": by_label_key(ACC)})


def test_store_lookup_by_index_value() -> None:
    store = _store()
    store.upsert(obj("n1", labels={POOL: "a", f"{ACC}nvidia": "true"}))
    store.upsert(obj("n2", labels={POOL: "a"}))
    store.upsert(obj("n3", labels={POOL: "b", f"{ACC}nvidia": "true", f"{ACC}amd": "true"}))
    store.upsert(obj("lq", "team-a"))
    assert [o["metadata"]["name"] for o in store.by_index("pool", "a")] == ["n1", "n2"]
    assert store.index_keys("acc", f"{ACC}nvidia") == {"n1", "n3"}
    assert store.index_keys(BY_NAMESPACE, "team-a") == {"team-a/lq"}
    assert store.index_keys("pool", "missing") == set()
    assert store.index_values("pool") == ["a", "b"]
    with pytest.raises(KeyError, match="no index named"):
        store.by_index("nope", "a")
    # the returned key set is a copy: changing it does not change the index
    store.index_keys("pool", "a").clear()
    assert store.index_keys("pool", "a") == {"n1", "n2"}


def test_an_update_moves_the_object_between_index_values_and_empty_values_disappear() -> None:
    store = _store()
    store.upsert(obj("n1", labels={POOL: "a", f"{ACC}nvidia": "true"}))
    store.upsert(obj("n2", labels={POOL: "a"}))
    old = store.upsert(obj("n1", rv="2", labels={POOL: "b", f"{ACC}amd": "true"}))
    assert old is not None and old["metadata"]["resourceVersion"] == "1"
    assert store.index_keys("pool", "a") == {"n2"}
    assert store.index_keys("pool", "b") == {"n1"}
    assert store.index_keys("acc", f"{ACC}nvidia") == set()
    assert f"{ACC}nvidia" not in store.index_values("acc")
    assert store.index_values("acc") == [f"{ACC}amd"]
    # losing the label removes it from the index entirely
    store.upsert(obj("n1", rv="3", labels={}))
    assert store.index_values("pool") == ["a"]
    assert store.index_values("acc") == []


def test_a_delete_removes_the_object_from_every_index() -> None:
    store = _store()
    store.upsert(obj("n1", labels={POOL: "a", f"{ACC}nvidia": "true"}))
    store.upsert(obj("n2", labels={POOL: "a"}))
    removed = store.delete("n1")
    assert removed is not None
    assert store.index_keys("pool", "a") == {"n2"}
    assert store.index_values("acc") == []
    assert store.delete("n1") is None  # deleting twice is harmless
    assert store.delete("n2") is not None
    assert store.index_values("pool") == []
    assert len(store) == 0


def test_replace_reindexes_changed_objects_and_drops_vanished_ones() -> None:
    store = _store()
    store.upsert(obj("n1", labels={POOL: "a"}))
    store.upsert(obj("n2", labels={POOL: "a"}))
    store.upsert(obj("n3", labels={POOL: "b"}))
    same = obj("n3", labels={POOL: "b"})  # same resourceVersion: neither returned nor re-indexed
    added, updated, deleted = store.replace(
        [obj("n1", rv="2", labels={POOL: "c"}), same, obj("n4", labels={POOL: "a"})]
    )
    assert [o["metadata"]["name"] for o in added] == ["n4"]
    assert [(o["metadata"]["name"], n["metadata"]["resourceVersion"]) for o, n in updated] == [("n1", "2")]
    assert [o["metadata"]["name"] for o in deleted] == ["n2"]
    assert store.index_keys("pool", "a") == {"n4"}
    assert store.index_keys("pool", "b") == {"n3"}
    assert store.index_keys("pool", "c") == {"n1"}
    assert store.get("n3") is not same  # the cached object was kept


def test_an_index_added_after_objects_are_cached_indexes_them_at_once() -> None:
    store = Store()
    store.upsert(obj("o1", ownerReferences=[{"uid": "u1"}]))
    store.upsert(obj("o2", ownerReferences=[{"uid": "u1"}, {"uid": "u2"}]))
    store.add_indexers({BY_OWNER_UID: owner_uids})
    assert store.index_keys(BY_OWNER_UID, "u1") == {"o1", "o2"}
    assert store.index_keys(BY_OWNER_UID, "u2") == {"o2"}
    with pytest.raises(ValueError, match="already exists"):
        store.add_indexers({BY_OWNER_UID: owner_uids})


def test_an_index_function_yielding_a_value_twice_indexes_the_key_once() -> None:
    store = Store({"twice": lambda o: ["x", "x", "y"]})
    store.upsert(obj("a"))
    assert store.index_keys("twice", "x") == {"a"}
    store.delete("a")
    assert store.index_values("twice") == []
