"""Named cache indexes, declared in one place.

An index function maps a cached object to the exact values it should be found under
(client-go's ``IndexFunc``); :meth:`Store.by_index` looks objects up by one such value. Secondary →
primary mapping (which Nodes belong to a flavor, which objects a Node owns) goes through these
indexes instead of scanning the cache. The generic ones live here; a controller package declares its
own in its ``indexers`` module using the same :data:`IndexFunc` shape and registers them on the
informer before start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = (
    "BY_NAMESPACE",
    "BY_OWNER_UID",
    "IndexFunc",
    "by_label",
    "by_label_key",
    "namespace_of",
    "owner_uids",
)

IndexFunc = Callable[[Mapping[str, Any]], list[str]]

#: Index names (the strings used with ``Store.by_index``).
BY_NAMESPACE: Final = "namespace"
BY_OWNER_UID: Final = "owner-uid"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def namespace_of(obj: Mapping[str, Any]) -> list[str]:
    """Index: the object's namespace (none for cluster-scoped objects)."""
    ns = _meta(obj).get("namespace")
    return [ns] if ns else []


def owner_uids(obj: Mapping[str, Any]) -> list[str]:
    """Index: the UIDs of the object's owners."""
    return [str(ref["uid"]) for ref in _meta(obj).get("ownerReferences") or () if ref.get("uid")]


def by_label(key: str) -> IndexFunc:
    """Index factory: the value of label ``key`` (objects without it are not indexed)."""

    def index(obj: Mapping[str, Any]) -> list[str]:
        value = (_meta(obj).get("labels") or {}).get(key)
        return [value] if value is not None else []

    return index


def by_label_key(prefix: str) -> IndexFunc:
    """Index factory: every label key starting with ``prefix`` (for "nodes having any X label")."""

    def index(obj: Mapping[str, Any]) -> list[str]:
        return [k for k in _meta(obj).get("labels") or {} if k.startswith(prefix)]

    return index
