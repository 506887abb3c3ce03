"""Ingest transforms: keep only what reconcilers read, before anything is cached.

Every object entering an informer goes through :func:`make_transform`'s result once. It drops
``metadata.managedFields`` (20-25 % of an object's bytes) except the entries written by OUR field
managers, which it keeps in a compact form because the apply no-op check needs to know exactly which
fields we own. The transform says which managers it keeps (:attr:`IngestTransform.field_managers`), and
an Applier bound to the cache refuses to start without its own. It drops ``status.images`` (most of a
Node's status) and the ``last-applied-configuration`` annotation, and then deep-freezes the result
(interned strings, immutable containers). Kinds that are cached in bulk (Nodes) get a kind-specific trim
on top; see :data:`KIND_TRIMS`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

import orjson

from gpustack_worker.runtime.frozen import freeze

__all__ = (
    "KIND_TRIMS",
    "LAST_APPLIED",
    "SHARED_PATHS",
    "IngestTransform",
    "Transform",
    "make_transform",
    "trim_node",
)

Transform = Callable[[dict[str, Any]], Any]
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"
#: Node status keys reconcilers read; everything else (images, nodeInfo, addresses, daemonEndpoints,
#: volumesAttached …) is dropped.
_NODE_STATUS_KEEP: Final = ("allocatable", "capacity", "conditions")
#: Condition keys kept; heartbeat times and messages change every few seconds and nobody reads them.
_CONDITION_KEEP: Final = ("type", "status", "reason", "lastTransitionTime")


def trim_node(obj: dict[str, Any]) -> dict[str, Any]:
    """Keep a Node's labels, annotations, spec and the readiness/capacity part of its status."""
    status = obj.get("status")
    if isinstance(status, dict):
        kept = {k: status[k] for k in _NODE_STATUS_KEEP if k in status}
        conditions = kept.get("conditions")
        if isinstance(conditions, list):
            kept["conditions"] = [
                {k: c[k] for k in _CONDITION_KEEP if k in c} for c in conditions if isinstance(c, dict)
            ]
        obj["status"] = kept
    return obj


#: Sub-objects that are usually identical across many objects of a kind (same machine class): frozen once
#: and shared, which is most of what keeps a cached GPU Node near 4 KiB.
SHARED_PATHS: Final[Mapping[str, tuple[tuple[str, str], ...]]] = {
    "Node": (
        ("status", "capacity"),
        ("status", "allocatable"),
        ("status", "conditions"),
        ("metadata", "annotations"),
        ("spec", "taints"),
    ),
}

#: Kind-specific trims applied after the generic strip (kind → trim).
KIND_TRIMS: Final[Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {"Node": trim_node}


class _SharedEntries:
    """Structural sharing of frozen managedFields entries.

    Our field manager writes the same set of fields on every object of a class (every GPU node gets the
    same label keys), so identical entries are frozen once and shared by all objects. Bounded: when
    full, the table is cleared (entries in use stay alive through the objects that hold them).
    """

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._table: dict[bytes, Any] = {}

    def get(self, entry: Any) -> Any:
        key = orjson.dumps(entry, option=orjson.OPT_SORT_KEYS)
        shared = self._table.get(key)
        if shared is None:
            if len(self._table) >= self._limit:
                self._table.clear()
            shared = self._table[key] = freeze(entry)
        return shared


def _compact_managed(entries: Any, managers: Collection[str], shared: _SharedEntries) -> list[Any]:
    """Keep only our managers' entries, and of those only what the no-op check reads."""
    kept: list[Any] = []
    if not isinstance(entries, list):
        return kept
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("manager") not in managers:
            continue
        compact = {k: entry[k] for k in ("manager", "operation", "subresource", "fieldsV1") if k in entry}
        kept.append(shared.get(compact))
    return kept


class IngestTransform:
    """The ingest transform of one informer (or several sharing it); callable on a raw object.

    :attr:`field_managers` says whose managedFields entries survive: an
    :class:`~gpustack_worker.runtime.apply.Applier` bound to a cache checks that its own manager is
    among them, since its no-op check reads that entry.
    """

    __slots__ = ("_shared", "field_managers")

    def __init__(self, field_managers: Collection[str] = ()) -> None:
        self.field_managers: frozenset[str] = frozenset(field_managers)
        self._shared = _SharedEntries()

    def __repr__(self) -> str:
        return f"IngestTransform(field_managers={sorted(self.field_managers)!r})"

    def __call__(self, obj: dict[str, Any]) -> Any:
        shared = self._shared
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            managed = _compact_managed(meta.pop("managedFields", None), self.field_managers, shared)
            if managed:
                meta["managedFields"] = managed
            annotations = meta.get("annotations")
            if isinstance(annotations, dict):
                annotations.pop(LAST_APPLIED, None)
        status = obj.get("status")
        if isinstance(status, dict):
            status.pop("images", None)
        kind = str(obj.get("kind") or "")
        trim = KIND_TRIMS.get(kind)
        if trim is not None:
            obj = trim(obj)
        for outer, inner in SHARED_PATHS.get(kind, ()):
            parent = obj.get(outer)
            if isinstance(parent, dict) and inner in parent:
                parent[inner] = shared.get(parent[inner])
        return freeze(obj)


def make_transform(field_managers: Collection[str] = ()) -> IngestTransform:
    """Build the ingest transform keeping the managedFields entries of ``field_managers``."""
    return IngestTransform(field_managers)
