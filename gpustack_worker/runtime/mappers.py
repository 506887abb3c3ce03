"""Enqueue mappers: which keys of the controller's own kind an event on some object should wake.

A mapper is ``fn(obj) -> Iterable[str]`` (the ``mapper=`` of :meth:`Controller.watch`); it gets the
cached object (on an update it is called for the old and for the new object, so a key the object
stopped pointing at is reconciled too — that is the Controller's job and is tested there). The
shapes here are controller-runtime's handlers:

* :func:`own_key` — the object's own key (``EnqueueRequestForObject``, the default);
* :func:`by_owner` — the key of the owner named in ``ownerReferences`` (``EnqueueRequestForOwner``);
* :func:`by_index` — keys of another informer's store found through a named index, e.g. a Node event
  wakes every ResourceFlavor whose index value the Node produces (``EnqueueRequestsFromMapFunc`` with a
  cache index: no scan of the other cache);
* :func:`to_keys` — any pure function from one kind to names of another (a ClusterQueue to the
  InstanceType of the same name, a Namespace to its LocalQueue keys);
* :func:`all_keys` — every key of a store (a cluster-wide input such as a Topology changed);
* :func:`merge` — the union of several mappers, each key once.

Mappers never raise for a malformed object: a bad object maps to nothing (and is logged), it does
not stop the informer's other handlers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from gpustack_worker.runtime.store import object_key

if TYPE_CHECKING:
    from gpustack_worker.runtime.resources import Resource
    from gpustack_worker.runtime.store import Store

__all__ = ("Mapper", "all_keys", "by_index", "by_owner", "merge", "own_key", "to_keys")

Mapper = Callable[[Any], Iterable[str]]
_log = structlog.get_logger("gpustack_worker.runtime.mappers")


def _meta(obj: Any) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def own_key(obj: Any) -> list[str]:
    """The object's own ``namespace/name`` (or ``name``) key."""
    if not _meta(obj).get("name"):
        return []
    return [object_key(obj)]


def _group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def by_owner(owner: Resource, *, controller_only: bool = False) -> Mapper:
    """Map an object to the keys of its owners of kind ``owner`` (matched by kind and API group).

    A namespaced owner lives in the object's namespace (owner references cannot cross namespaces);
    a cluster-scoped owner's key is its name. With ``controller_only`` only the reference marked
    ``controller: true`` counts.
    """

    def mapper(obj: Any) -> list[str]:
        meta = _meta(obj)
        refs = meta.get("ownerReferences")
        if not isinstance(refs, Iterable):
            return []
        keys: list[str] = []
        for ref in refs:
            if not isinstance(ref, Mapping) or ref.get("kind") != owner.kind or not ref.get("name"):
                continue
            if _group_of(str(ref.get("apiVersion") or "")) != owner.group:
                continue
            if controller_only and ref.get("controller") is not True:
                continue
            namespace = meta.get("namespace") if owner.namespaced else None
            if owner.namespaced and not namespace:
                continue  # a cluster-scoped object cannot be owned by a namespaced one
            key = owner.key(str(ref["name"]), namespace)
            if key not in keys:
                keys.append(key)
        return keys

    return mapper


def by_index(store: Store, index: str, values: Callable[[Any], Iterable[str]]) -> Mapper:
    """Map an object to the keys of ``store`` whose index ``index`` holds one of ``values(obj)``.

    ``store`` is another informer's store (the controller's own kind); ``values`` computes from the
    event's object the index values to look up — typically the same function the index is built with
    applied to the other side (a Node's flavor identity, looked up in the flavors' identity index).
    The lookup happens when the event arrives, against the store as it is then.
    """

    def mapper(obj: Any) -> list[str]:
        found: set[str] = set()
        for value in _safe(values, obj):
            found |= store.index_keys(index, value)
        return sorted(found)

    return mapper


def to_keys(target: Resource, names: Callable[[Any], Iterable[str | tuple[str, str | None]]]) -> Mapper:
    """Map an object to keys of kind ``target`` from ``names(obj)``.

    ``names`` yields object names (for a namespaced target the source object's namespace is used) or
    ``(name, namespace)`` pairs. Keys are built with :meth:`Resource.key`, so a cluster-scoped target
    never gets a namespace prefix.
    """

    def mapper(obj: Any) -> list[str]:
        keys: list[str] = []
        own_ns = _meta(obj).get("namespace")
        for item in _safe(names, obj):
            name, namespace = item if isinstance(item, tuple) else (item, own_ns)
            if not name or (target.namespaced and not namespace):
                continue
            key = target.key(name, namespace)
            if key not in keys:
                keys.append(key)
        return keys

    return mapper


def all_keys(store: Store) -> Mapper:
    """Map any object to every key currently in ``store`` (a change that concerns them all)."""

    def mapper(obj: Any) -> list[str]:
        return store.keys()

    return mapper


def merge(*mappers: Mapper) -> Mapper:
    """The union of ``mappers``' keys, in first-seen order."""

    def mapper(obj: Any) -> list[str]:
        keys: dict[str, None] = {}
        for fn in mappers:
            for key in _safe(fn, obj):
                keys.setdefault(key, None)
        return list(keys)

    return mapper


def _safe(fn: Callable[[Any], Iterable[Any]], obj: Any) -> list[Any]:
    """Call a user function; a failure on one bad object maps it to nothing and is logged."""
    try:
        return list(fn(obj))
    except Exception:
        _log.exception("mapper failed; the object maps to no key", object=_meta(obj).get("name"))
        return []
