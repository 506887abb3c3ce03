"""The informer's local cache: key → immutable object, plus named exact-value indexes.

Keys are ``namespace/name`` (or ``name`` for cluster-scoped kinds), the same strings the workqueue
carries. Objects are the frozen projections made by :mod:`gpustack_worker.runtime.transform`, returned
without copying. Indexes follow client-go's contract: an index name maps to an :data:`IndexFunc`, an
indexed value maps to the set of keys whose object produced that value. All mutation happens on the
event loop that runs the informer, so no locking is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import builtins
    from collections.abc import Iterator, Mapping

    from gpustack_worker.runtime.indexers import IndexFunc

__all__ = ("Store", "object_key")


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` or ``name`` from an object's metadata."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


def resource_version(obj: Mapping[str, Any] | None) -> str:
    """The object's ``metadata.resourceVersion`` (empty when absent)."""
    if obj is None:
        return ""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Store:
    """Key → object map with named indexes."""

    def __init__(self, indexers: Mapping[str, IndexFunc] | None = None) -> None:
        self._items: dict[str, Any] = {}
        self._indexers: dict[str, IndexFunc] = dict(indexers or {})
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        self._values: dict[str, dict[str, tuple[str, ...]]] = {name: {} for name in self._indexers}

    # -- reads ---------------------------------------------------------------------------------------

    def get(self, key: str) -> Any | None:
        """The cached object under ``key`` (or None)."""
        return self._items.get(key)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def keys(self) -> builtins.list[str]:
        """All keys (a snapshot)."""
        return list(self._items)

    def list(self) -> builtins.list[Any]:
        """All objects (a snapshot list of immutable objects)."""
        return list(self._items.values())

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._items))

    def by_index(self, name: str, value: str) -> builtins.list[Any]:
        """Objects whose index ``name`` produced ``value``."""
        return [self._items[k] for k in sorted(self.index_keys(name, value))]

    def index_keys(self, name: str, value: str) -> set[str]:
        """Keys whose index ``name`` produced ``value``."""
        if name not in self._indexers:
            raise KeyError(f"no index named {name!r}")
        return set(self._indices[name].get(value, ()))

    def index_values(self, name: str) -> builtins.list[str]:
        """Every value currently present in index ``name``."""
        return sorted(self._indices[name])

    # -- writes (informer only) -------------------------------------------------------------------

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add indexes (also after objects are cached: existing objects are indexed at once)."""
        for name, fn in indexers.items():
            if name in self._indexers:
                raise ValueError(f"index {name!r} already exists")
            self._indexers[name] = fn
            self._indices[name] = {}
            self._values[name] = {}
            for key, obj in self._items.items():
                self._index_one(name, key, obj)

    def upsert(self, obj: Any) -> Any | None:
        """Insert or replace ``obj``; returns the previous object under its key."""
        key = object_key(obj)
        old = self._items.get(key)
        self._items[key] = obj
        for name in self._indexers:
            self._unindex_one(name, key)
            self._index_one(name, key, obj)
        return old

    def delete(self, key: str) -> Any | None:
        """Remove ``key``; returns the removed object."""
        old = self._items.pop(key, None)
        if old is not None:
            for name in self._indexers:
                self._unindex_one(name, key)
        return old

    def replace(
        self, objs: builtins.list[Any]
    ) -> tuple[builtins.list[Any], builtins.list[tuple[Any, Any]], builtins.list[Any]]:
        """Replace the whole content (after a relist).

        Returns ``(added, updated as (old, new), deleted)``; objects whose resourceVersion did not
        change are neither returned nor re-indexed. ``deleted`` are the objects that vanished while
        we were not watching (client-go's ``DeletedFinalStateUnknown`` tombstones).
        """
        fresh = {object_key(o): o for o in objs}
        deleted = [self._items[k] for k in list(self._items) if k not in fresh]
        for obj in deleted:
            self.delete(object_key(obj))
        added: builtins.list[Any] = []
        updated: builtins.list[tuple[Any, Any]] = []
        for key, obj in fresh.items():
            old = self._items.get(key)
            if old is None:
                self.upsert(obj)
                added.append(obj)
            elif resource_version(old) != resource_version(obj):
                self.upsert(obj)
                updated.append((old, obj))
        return added, updated, deleted

    # -- index maintenance ---------------------------------------------------------------------------

    def _index_one(self, name: str, key: str, obj: Any) -> None:
        values = tuple(dict.fromkeys(self._indexers[name](obj)))
        if not values:
            return
        self._values[name][key] = values
        index = self._indices[name]
        for value in values:
            index.setdefault(value, set()).add(key)

    def _unindex_one(self, name: str, key: str) -> None:
        values = self._values[name].pop(key, ())
        index = self._indices[name]
        for value in values:
            keys = index.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[value]
