"""What the runtime needs to address one kind of object on the API server, and to judge an apply.

A :class:`Resource` says where a kind is served. Its :class:`FieldHints` say what server-side apply
knows about the kind's fields from its OpenAPI schema and what the apply no-op check
(:mod:`gpustack_worker.runtime.apply`) must know to be exact: which lists merge item by item (by key,
or as a set), which maps are replaced as a whole, where a Kubernetes quantity lives (compared by value)
and which fields the server fills in inside a value that is replaced as a whole.
"""

from __future__ import annotations

# Imported at run time: pydantic models hold a Resource (api.crds) and resolve these annotations.
from collections.abc import Mapping  # noqa: TC003
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ("CONFIG_MAP", "EVENT", "LEASE", "NO_HINTS", "FieldHints", "Resource", "parse_path")

#: A path pattern segment matching the items of a list.
ITEM: Final = "[]"
#: A path pattern segment matching any key of a map.
ANY_KEY: Final = "*"
Pattern = tuple[str, ...]


def parse_path(text: str) -> Pattern:
    """``"spec.groups[].flavors[].name"`` → ``("spec", "groups", "[]", "flavors", "[]", "name")``."""
    out: list[str] = []
    for part in text.split("."):
        name, depth = part, 0
        while name.endswith(ITEM):
            name, depth = name.removesuffix(ITEM), depth + 1
        if not name or ITEM[0] in name or ITEM[1] in name:
            raise ValueError(f"bad segment {part!r} in field path {text!r}")
        out.extend((name, *(ITEM,) * depth))
    return tuple(out)


def _matches(pattern: Pattern, path: Pattern) -> bool:
    return len(pattern) == len(path) and all(
        p == s or (p == ANY_KEY and s != ITEM) for p, s in zip(pattern, path, strict=True)
    )


#: ObjectMeta, the same for every kind: owner references merge by uid (each one atomic), finalizers as
#: a set.
_META_KEYED: Final = {"metadata.ownerReferences": ("uid",)}
_META_SETS: Final = ("metadata.finalizers",)
_META_ATOMIC: Final = ("metadata.ownerReferences[]",)


@dataclass(frozen=True, eq=False)
class FieldHints:
    """The parts of a kind's schema the apply no-op check needs (what SSA reads from the OpenAPI schema).

    Paths are dotted field names; ``[]`` stands for the items of a list, ``*`` for any key of a map
    (``"status.capacity.*"``). What is not declared follows the CRD defaults, which are also what the
    built-in kinds use where they declare nothing: a map (or struct) merges key by key, a list is
    atomic (replaced as a whole).

    - ``keyed``: ``x-kubernetes-list-type: map`` lists and their ``list-map-keys``;
    - ``sets``: ``x-kubernetes-list-type: set`` lists;
    - ``atomic``: ``x-kubernetes-map-type: atomic`` maps / structs (replaced as a whole);
    - ``quantities``: fields holding a Kubernetes quantity, compared by value (``"1000m"`` == ``"1"``):
      nowhere else is a string compared other than byte for byte;
    - ``defaults``: fields the server fills in *inside an atomic value* when we leave them out, with the
      value it fills in (learned from the real server: ``tests/runtime/capture_fixtures.py``). Defaults
      anywhere else need no hint: a field we did not send is not ours, so it is not compared.

    ``metadata.ownerReferences`` (by ``uid``, each reference atomic) and ``metadata.finalizers`` (a set)
    hold for every kind.
    """

    keyed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    sets: tuple[str, ...] = ()
    atomic: tuple[str, ...] = ()
    quantities: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    _keyed: tuple[tuple[Pattern, tuple[str, ...]], ...] = field(init=False, repr=False)
    _sets: tuple[Pattern, ...] = field(init=False, repr=False)
    _atomic: tuple[Pattern, ...] = field(init=False, repr=False)
    _quantities: tuple[Pattern, ...] = field(init=False, repr=False)
    _defaults: tuple[tuple[Pattern, Any], ...] = field(init=False, repr=False)
    _memo: dict[tuple[str, Pattern], Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        keyed = {**_META_KEYED, **self.keyed}
        put = object.__setattr__
        put(self, "_keyed", tuple((parse_path(p), tuple(keys)) for p, keys in keyed.items()))
        put(self, "_sets", tuple(parse_path(p) for p in (*_META_SETS, *self.sets)))
        put(self, "_atomic", tuple(parse_path(p) for p in (*_META_ATOMIC, *self.atomic)))
        put(self, "_quantities", tuple(parse_path(p) for p in self.quantities))
        put(self, "_defaults", tuple((parse_path(p), v) for p, v in self.defaults.items()))
        put(self, "_memo", {})
        for pattern, keys in self._keyed:
            if not keys:
                raise ValueError(f"keyed list {'.'.join(pattern)!r} needs at least one key")

    def _lookup(self, what: str, path: Pattern) -> Any:
        memo_key = (what, path)
        try:
            return self._memo[memo_key]
        except KeyError:
            pass
        found: Any
        if what == "keyed":
            found = next((keys for p, keys in self._keyed if _matches(p, path)), None)
        elif what == "default":
            found = next(((True, v) for p, v in self._defaults if _matches(p, path)), (False, None))
        else:
            patterns: tuple[Pattern, ...] = getattr(self, f"_{what}")
            found = any(_matches(p, path) for p in patterns)
        if len(self._memo) > 65536:  # label keys make paths unbounded in principle
            self._memo.clear()
        self._memo[memo_key] = found
        return found

    def list_keys(self, path: Pattern) -> tuple[str, ...] | None:
        """The key fields of the keyed list at ``path`` (None: not a keyed list)."""
        keys: tuple[str, ...] | None = self._lookup("keyed", path)
        return keys

    def is_set(self, path: Pattern) -> bool:
        """Is the list at ``path`` a set (items are scalars, each its own field)?"""
        return bool(self._lookup("sets", path))

    def is_atomic_map(self, path: Pattern) -> bool:
        """Is the map at ``path`` replaced as a whole?"""
        return bool(self._lookup("atomic", path))

    def is_quantity(self, path: Pattern) -> bool:
        """Does ``path`` hold a Kubernetes quantity?"""
        return bool(self._lookup("quantities", path))

    def default(self, path: Pattern) -> tuple[bool, Any]:
        """``(True, value)`` when the server fills ``path`` in with ``value`` inside an atomic value."""
        found: tuple[bool, Any] = self._lookup("default", path)
        return found


#: The CRD defaults (maps granular, lists atomic) plus ObjectMeta's lists.
NO_HINTS: Final = FieldHints()


@dataclass(frozen=True, slots=True)
class Resource:
    """A served kind: group/version, kind, plural and scope.

    The runtime never discovers kinds at run time (kr8s' discovery cache is slow and can go stale);
    every kind the project touches is declared once in :mod:`gpustack_worker.api.kinds`.
    """

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    #: What the apply no-op check must know about the kind's fields (declared next to the kind).
    hints: FieldHints = field(default=NO_HINTS, compare=False)

    @property
    def api_version(self) -> str:
        """``group/version``, or just ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def collection_path(self, namespace: str | None = None) -> str:
        """URL path of the collection (all namespaces when ``namespace`` is None)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"

    def object_path(self, name: str, namespace: str | None = None, subresource: str | None = None) -> str:
        """URL path of one object, optionally of one of its subresources (``status``)."""
        if self.namespaced and not namespace:
            raise ValueError(f"{self.kind} is namespaced: a namespace is required for {name!r}")
        path = f"{self.collection_path(namespace)}/{name}"
        return f"{path}/{subresource}" if subresource else path

    def key(self, name: str, namespace: str | None = None) -> str:
        """The cache/workqueue key of one object: ``namespace/name`` or ``name``."""
        return f"{namespace}/{name}" if self.namespaced and namespace else name


# The built-in kinds the runtime itself uses (settings, Events, leader election). The rest of the project
# declares its kinds in ``gpustack_worker.api.kinds``, which re-exports these.
CONFIG_MAP: Final = Resource("", "v1", "ConfigMap", "configmaps", namespaced=True)
EVENT: Final = Resource("events.k8s.io", "v1", "Event", "events", namespaced=True)
LEASE: Final = Resource("coordination.k8s.io", "v1", "Lease", "leases", namespaced=True)
