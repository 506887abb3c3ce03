"""Server-side apply with an exact client-side no-op check, so a converged system issues zero writes.

Each controller owns one field manager and applies its whole intent for an object every reconcile
(level-triggered). Sending that apply when nothing changed is not free — it costs a round trip and
some fields even bump resourceVersion on a no-op apply (k/k#121404, #95460) — so :func:`is_noop`
compares the desired body with the cached object first. The PATCH is skipped only when the apply could
not change the object:

1. **the fields this manager owns are exactly the fields of the desired body.** Both are computed as the
   API server does (structured-merge-diff): a map merges key by key, a keyed list item by item
   (``k:{"name":"a"}``), a set list value by value (``v:"x"``), and an atomic list or map is one field.
   Which is which comes from the kind's :class:`~gpustack_worker.runtime.resources.FieldHints` (the
   schema's list and map types). So a field we stopped wanting — anywhere, also inside a keyed list
   item — is still released by a real apply, and a field another manager took over (a forced apply, or
   an update that changed its value) is written back;
2. **every desired value is already there**, compared leaf by leaf in the granular parts and as a whole
   inside an atomic value (a removal inside an atomic list item is a change). Strings are compared byte
   for byte, except where the hints declare a Kubernetes quantity (the server canonicalises those:
   ``"64000m"`` is stored as ``"64"``); inside an atomic value the object may carry only the fields the
   hints declare as server defaults, with their default value; a keyed or set list must hold our items
   in our order (the server reorders a list to the applied order).

Status goes through the ``/status`` subresource with its own managedFields entry.

**Our own write not yet in the cache.** A reconcile can run between an accepted write and the watch
event that brings it into the cache (another event of the object, e.g. Kueue's status update, wakes
it first); against that stale object the apply would be sent again — a doubled write, and a repair
reported twice. So the Applier remembers, per object and subresource, the resourceVersion and UID the
server answered its last write with and the body it sent: while the cached object is the same object
(UID) at an older resourceVersion and the desired body is the one already written, the apply is skipped.
Once the cache reaches that resourceVersion (or the UID changes) the entry is dropped and the cache is
the truth again. At most :data:`RECENT_WRITES_MAX` entries are kept (oldest dropped: that only costs a
redundant write).

**Our own create not yet in the cache** is the same race on an object the cache does not hold yet (a
LocalQueue's Namespace pass runs again before the LocalQueue's ADDED event): its apply is skipped while the
informer has not yet reached the created resourceVersion — its ``last_resource_version``, which every
event and bookmark advances, is still older than the create (client-go's ``MutationCache`` keeps creates
the same way, ``includeAdds``). Once the informer is past it, the informer's store decides: holding our
object, the caller's view merely predates the ADDED event (it read the cache before an await) and nothing
is sent; without it, the object was deleted after the create and is created again (never suppress a
re-create). A cache that does not say how far it is, or an informer that has not moved for
:data:`UNSEEN_CREATE_MAX_S`, gets the write.

**A field another manager changed** (an admin's ``kubectl edit``, a forced apply): the server moves the
field to that manager's entry, so it is missing from ours while the object holds a value other than
ours. :func:`taken_fields` finds exactly those fields; the apply writes them back (rule 1 above makes it a
write) and, once the write is accepted, the :class:`Applier` reports the repair — a warning log line and
its ``on_repair`` hook (the chain posts a Warning Event) — once per write, so once per edit: the next
reconcile finds our entry whole again and is a no-op. A field merely added to our desired body is absent
from the object, and a value we changed ourselves is still in our entry: neither is reported.

**A change another party makes by protocol** is not an edit: Kueue, say, resets every admission check's
state to ``Pending`` when it evicts a Workload, under its own field manager, and the check's controller
then writes its next verdict over it. An Applier can be given ``expected_change(resource, cached, field)``
for such fields: the field is written back like any other, but not reported (no log line, no metric, no
``on_repair``). The predicate decides from the cached object alone — :func:`field_owners` says which of
the cached managedFields entries own the field (the informer must keep that party's entry) — and knows
the other party's protocol; the runtime knows none.

The check reads this manager's managedFields entry from the cache, so the informer's ingest transform
must keep it: an :class:`Applier` is bound to the caches it checks against and refuses, at
construction, a cache whose transform drops its field manager (otherwise every reconcile would write).

Deletes carry the object's UID as precondition (identity is what matters: never delete a recreated
object), the resourceVersion only when the caller asks for it, and an optional propagation policy.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, cast, runtime_checkable

import orjson
import structlog

from gpustack_worker.runtime.metrics import APPLY_REPAIRS, APPLY_SKIPPED
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.runtime.resources import ITEM, NO_HINTS, FieldHints, Pattern

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource

__all__ = (
    "PROPAGATION_POLICIES",
    "RECENT_WRITES_MAX",
    "UNSEEN_CREATE_MAX_S",
    "Applier",
    "ApplierConfigError",
    "FieldPath",
    "ManagedFieldsCache",
    "desired_fields",
    "dotted",
    "field_owners",
    "is_noop",
    "is_own_change",
    "owned_fields",
    "resource_version_number",
    "taken_fields",
)

_log = structlog.get_logger("gpustack_worker.runtime.apply")
#: A field as managedFields spell it: ``("f:spec", "f:groups", 'k:{"name":"a"}', "f:quota")``.
FieldPath = tuple[str, ...]
#: Fields the server never tracks in managedFields (k8s fieldmanager's stripped set).
_UNTRACKED: Final = frozenset(
    {("apiVersion",), ("kind",)}
    | {
        ("metadata", k)
        for k in (
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "selfLink",
            "managedFields",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        )
    }
)
#: Own writes remembered until the cache has them (see "Our own write not yet in the cache").
RECENT_WRITES_MAX: Final = 4096
#: The longest an own create is taken as on its way to a cache that has not reached it (a stalled watch
#: must not keep a missing object missing); a watch event normally arrives within milliseconds.
UNSEEN_CREATE_MAX_S: Final = 30.0
#: ``DeleteOptions.propagationPolicy`` values.
PROPAGATION_POLICIES: Final = frozenset({"Background", "Foreground", "Orphan"})
_MISSING: Final = object()


def resource_version_number(value: Any) -> int | None:
    """A resourceVersion as a number (etcd's revision), or None when it is not one: then it is never
    compared, and the cache is taken as it is."""
    try:
        return int(str(value))
    except ValueError:
        return None


def _version_of(obj: Mapping[str, Any]) -> int | None:
    return resource_version_number((obj.get("metadata") or {}).get("resourceVersion"))


def _plain_value(value: Any) -> Any:
    """orjson's fallback for the read-only mappings and sequences cached objects are made of."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    raise TypeError(type(value).__name__)


def _digest(body: Mapping[str, Any]) -> str:
    """A canonical spelling of an apply body's intent (to tell "the body we already sent" from a new
    one). A status condition's ``lastTransitionTime`` is left out: it is not intent but derived from the
    clock and the condition the reconcile found, so a reconcile that runs before our own write reached the
    cache (finding no condition, or the old one) derives the same condition with a later time — the same
    state, which must not be written twice (issue 18: a ClusterQueue's ``TopologyReady`` written again 77 ms
    after the first, the two bodies a second apart)."""
    status = body.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if isinstance(conditions, list | tuple) and any(
        isinstance(c, Mapping) and "lastTransitionTime" in c for c in conditions
    ):
        timeless = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} if isinstance(c, Mapping) else c
            for c in conditions
        ]
        body = {**body, "status": {**cast("Mapping[str, Any]", status), "conditions": timeless}}
    return orjson.dumps(dict(body), option=orjson.OPT_SORT_KEYS, default=_plain_value).decode()


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _normal(element: str) -> str:
    """A managedFields path element with its JSON part re-serialised canonically (sorted keys)."""
    if element[:2] in ("k:", "v:"):
        try:
            return element[:2] + _json(orjson.loads(element[2:]))
        except orjson.JSONDecodeError:
            return element
    return element


def owned_fields(fields_v1: Mapping[str, Any]) -> frozenset[FieldPath]:
    """The leaf fields of a managedFields ``fieldsV1`` tree.

    A node is a leaf when it has no children besides ``"."`` (the marker saying the node itself is a
    member: a list item or map entry whose members are its fields, which are leaves themselves).
    """
    out: set[FieldPath] = set()

    def walk(node: Mapping[str, Any], path: FieldPath) -> None:
        children = [k for k in node if k != "."]
        if not children:
            if path:
                out.add(path)
            return
        for key in children:
            child = node[key]
            walk(child if isinstance(child, Mapping) else {}, (*path, _normal(key)))

    walk(fields_v1, ())
    return frozenset(out)


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _item_key(item: Any, keys: Sequence[str]) -> str | None:
    if not isinstance(item, Mapping):
        return None
    return "k:" + _json({k: item[k] for k in keys if k in item})


def desired_fields(body: Mapping[str, Any], hints: FieldHints = NO_HINTS) -> frozenset[FieldPath]:
    """The leaf fields applying ``body`` makes the manager own (what :func:`owned_fields` will read back).

    The same walk as the server's: scalars, nulls, empty maps and atomic values are leaves; a keyed list
    item's leaves are its fields (key fields included), a set item is a leaf; an empty keyed or set list
    owns nothing.
    """
    out: set[FieldPath] = set()

    def walk(value: Any, path: FieldPath, pattern: Pattern) -> None:
        if isinstance(value, Mapping):
            if not value or hints.is_atomic_map(pattern):
                out.add(path)
                return
            for key, child in value.items():
                walk(child, (*path, f"f:{key}"), (*pattern, str(key)))
            return
        if _is_list(value):
            keys = hints.list_keys(pattern)
            if keys is not None:
                for item in value:
                    element = _item_key(item, keys)
                    if element is None:  # not an object: the server will refuse it; make it a write
                        out.add((*path, f"i:{_json(item)}"))
                    else:
                        walk(item, (*path, element), (*pattern, ITEM))
            elif hints.is_set(pattern):
                out.update((*path, f"v:{_json(item)}") for item in value)
            else:
                out.add(path)
            return
        out.add(path)

    for key, child in body.items():
        if key == "metadata" and isinstance(child, Mapping):
            for mkey, mchild in child.items():
                if ("metadata", mkey) not in _UNTRACKED:
                    walk(mchild, ("f:metadata", f"f:{mkey}"), ("metadata", str(mkey)))
        elif (key,) not in _UNTRACKED:
            walk(child, (f"f:{key}",), (str(key),))
    return frozenset(out)


# -- values ----------------------------------------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same_scalar(desired: Any, actual: Any, pattern: Pattern, hints: FieldHints) -> bool:
    if desired == actual and (type(desired) is type(actual) or (_number(desired) and _number(actual))):
        return True
    if hints.is_quantity(pattern) and isinstance(desired, str | int) and isinstance(actual, str | int):
        if isinstance(desired, bool) or isinstance(actual, bool):
            return False
        a, b = parse(str(desired)), parse(str(actual))
        return a is not None and a == b
    return False


def _same_atomic(desired: Any, actual: Any, pattern: Pattern, hints: FieldHints) -> bool:
    """Deep equality of a value the server replaces as a whole; only declared defaults may be extra."""
    if isinstance(desired, Mapping):
        if not isinstance(actual, Mapping):
            return False
        for key, want in desired.items():
            have = actual.get(key, _MISSING)
            if want is None:
                if have is not _MISSING and have is not None:
                    return False
            elif have is _MISSING or not _same_atomic(want, have, (*pattern, str(key)), hints):
                return False
        for key, have in actual.items():
            if key in desired:
                continue
            defaulted, value = hints.default((*pattern, str(key)))
            if not defaulted or not _same_atomic(value, have, (*pattern, str(key)), hints):
                return False
        return True
    if _is_list(desired):
        return (
            _is_list(actual)
            and len(actual) == len(desired)
            and all(_same_atomic(d, a, (*pattern, ITEM), hints) for d, a in zip(desired, actual, strict=True))
        )
    return _same_scalar(desired, actual, pattern, hints)


def _in_order(wanted: Sequence[str], present: Sequence[str]) -> bool:
    """Do our elements appear in ``present`` in the order we want them (others may sit in between)?"""
    ours = set(wanted)
    return [p for p in present if p in ours] == list(wanted)


def _same(desired: Any, actual: Any, pattern: Pattern, hints: FieldHints) -> bool:
    """Does ``actual`` already hold every value ``desired`` sets, field by field as the server merges?"""
    if actual is _MISSING:
        return desired is None
    if isinstance(desired, Mapping):
        if hints.is_atomic_map(pattern):
            return _same_atomic(desired, actual, pattern, hints)
        if not isinstance(actual, Mapping):
            return False
        return all(
            _same(value, actual.get(key, _MISSING), (*pattern, str(key)), hints)
            for key, value in desired.items()
        )
    if _is_list(desired):
        keys = hints.list_keys(pattern)
        if keys is not None:
            if not desired:
                return True  # an empty keyed list owns nothing
            if not _is_list(actual):
                return False
            by_key = {_item_key(item, keys): item for item in actual}
            wanted = [_item_key(item, keys) for item in desired]
            if any(w is None or w not in by_key for w in wanted):
                return False
            if not _in_order([w for w in wanted if w is not None], [k for k in by_key if k is not None]):
                return False
            pairs = zip(desired, wanted, strict=True)
            return all(_same(item, by_key[w], (*pattern, ITEM), hints) for item, w in pairs)
        if hints.is_set(pattern):
            if not desired:
                return True
            if not _is_list(actual):
                return False
            present = [_json(a) for a in actual]
            return _in_order([_json(d) for d in desired], present)
        return _same_atomic(desired, actual, pattern, hints)
    return _same_scalar(desired, actual, pattern, hints)


def _manager_fields(
    cached: Mapping[str, Any], manager: str, subresource: str | None
) -> frozenset[FieldPath] | None:
    entries = (cached.get("metadata") or {}).get("managedFields") or ()
    found: set[FieldPath] | None = None
    for entry in entries:
        if entry.get("manager") != manager or entry.get("operation", "Apply") != "Apply":
            continue
        if (entry.get("subresource") or None) != (subresource or None):
            continue
        found = (found or set()) | owned_fields(entry.get("fieldsV1") or {})
    return None if found is None else frozenset(found)


def _without_untracked(body: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in body.items() if (k,) not in _UNTRACKED}
    meta = out.get("metadata")
    if isinstance(meta, Mapping):
        out["metadata"] = {k: v for k, v in meta.items() if ("metadata", k) not in _UNTRACKED}
    return out


def is_noop(
    desired: Mapping[str, Any],
    cached: Mapping[str, Any] | None,
    field_manager: str,
    subresource: str | None = None,
    *,
    hints: FieldHints = NO_HINTS,
) -> bool:
    """True when applying ``desired`` as ``field_manager`` would change nothing on ``cached``.

    ``hints`` are the kind's field hints (:attr:`Resource.hints`); :class:`Applier` passes them.
    """
    if cached is None:
        return False
    owned = _manager_fields(cached, field_manager, subresource)
    wanted = desired_fields(desired, hints)
    if owned is None:
        # The server drops a manager's managedFields entry once it owns nothing, so an empty intent
        # against an object we own nothing on is the steady state, not a write.
        return not wanted
    if owned != wanted:
        return False
    return _same(_without_untracked(desired), cached, (), hints)


def _pattern(path: FieldPath) -> Pattern:
    """The schema pattern of a field path (a list element is :data:`ITEM`), as hints are keyed."""
    return tuple(e[2:] if e.startswith("f:") else ITEM for e in path)


def _at(value: Any, path: FieldPath) -> Any:
    """The value at a managedFields path inside ``value`` (``_MISSING`` when there is none)."""
    for element in path:
        kind, rest = element[:2], element[2:]
        if kind == "f:":
            if not isinstance(value, Mapping) or rest not in value:
                return _MISSING
            value = value[rest]
        elif kind in ("k:", "v:") and _is_list(value):
            try:
                want = orjson.loads(rest)
            except orjson.JSONDecodeError:
                return _MISSING
            if kind == "v:":
                found = [item for item in value if item == want]
            else:
                found = [
                    item
                    for item in value
                    if isinstance(item, Mapping)
                    and isinstance(want, Mapping)
                    and all(item.get(k, _MISSING) == v for k, v in want.items())
                ]
            if not found:
                return _MISSING
            value = found[0]
        else:
            return _MISSING
    return value


def dotted(path: FieldPath) -> str:
    """A field path for people: ``spec.resourceGroups``, ``metadata.labels.a``, ``x.items[{"name":"a"}]``."""
    out = ""
    for element in path:
        if element.startswith("f:"):
            out += ("." if out else "") + element[2:]
        else:
            out += f"[{element[2:]}]"
    return out


def taken_fields(
    desired: Mapping[str, Any],
    cached: Mapping[str, Any] | None,
    field_manager: str,
    subresource: str | None = None,
    *,
    hints: FieldHints = NO_HINTS,
) -> frozenset[FieldPath]:
    """The fields of ``desired`` another manager changed on ``cached``: this manager has an apply entry on
    the object (it applied before), neither the field nor a part or a whole of it (a kind whose hints
    differ from the served schema) is in that entry, and the object holds a value there other than the
    desired one. Empty for a first apply, a field newly desired (absent from the object), and a value this
    manager changed itself (the field is still in its entry)."""
    if cached is None:
        return frozenset()
    owned = _manager_fields(cached, field_manager, subresource)
    if owned is None:
        return frozenset()
    body = _without_untracked(desired)
    out = set()
    for path in desired_fields(desired, hints) - owned:
        if any(q[: len(path)] == path or path[: len(q)] == q for q in owned):
            # We still own that field at another granularity (the served schema splits or joins what the
            # kind's hints say): not taken from us — an undeclared keyed list is only a write too many.
            continue
        have = _at(cached, path)
        want = _at(body, path)
        if have is _MISSING or want is _MISSING:
            continue
        if not _same(want, have, _pattern(path), hints):
            out.add(path)
    return frozenset(out)


def field_owners(
    cached: Mapping[str, Any], path: FieldPath, subresource: str | None = None
) -> frozenset[str]:
    """The managers among ``cached``'s managedFields entries (for ``subresource``) that own the field
    ``path``, a part of it or a whole containing it. Only the entries the cache keeps are seen (an
    informer's ingest transform drops all but the managers registered with it)."""
    out: set[str] = set()
    for entry in (cached.get("metadata") or {}).get("managedFields") or ():
        if (entry.get("subresource") or None) != (subresource or None):
            continue
        owned = owned_fields(entry.get("fieldsV1") or {})
        if any(q[: len(path)] == path or path[: len(q)] == q for q in owned):
            out.add(str(entry.get("manager") or ""))
    return frozenset(out)


# -- own changes -------------------------------------------------------------------------------------

#: Metadata a write changes besides the fields it sets: the version, the generation (bumped by any
#: change of a tracked spec field, which the walk sees itself) and the managedFields (compared apart).
_WRITE_BOOKKEEPING: Final = frozenset({"resourceVersion", "generation", "managedFields"})


def _equal(a: Any, b: Any) -> bool:
    """Deep equality of JSON values, a cached (frozen: tuples) and a plain (lists) spelling alike."""
    if a is b:
        return True
    if type(a) is type(b) and not isinstance(a, float):
        return bool(a == b)
    if isinstance(a, Mapping):
        return (
            isinstance(b, Mapping)
            and len(a) == len(b)
            and all(k in b and _equal(v, b[k]) for k, v in a.items())
        )
    if _is_list(a):
        return _is_list(b) and len(a) == len(b) and all(map(_equal, a, b))
    if isinstance(b, Mapping) or _is_list(b):
        return False
    return _same_scalar(a, b, (), NO_HINTS)


def _other_entries(obj: Mapping[str, Any], manager: str, subresource: str | None) -> list[Any]:
    """The managedFields entries of ``obj`` other than ``manager``'s for ``subresource`` (its apply entry,
    and the update entry a create-only POST of ours leaves)."""
    return [
        entry
        for entry in (obj.get("metadata") or {}).get("managedFields") or ()
        if not (
            entry.get("manager") == manager and (entry.get("subresource") or None) == (subresource or None)
        )
    ]


def _keyed(items: Any, keys: Sequence[str]) -> dict[str, Any] | None:
    """A keyed list's items by their managedFields element (None: an item without its keys, or twice)."""
    out: dict[str, Any] = {}
    for item in items:
        element = _item_key(item, keys)
        if element is None or element in out:
            return None
        out[element] = item
    return out


class _OwnChange:
    """The walk of :func:`is_own_change`: is every difference between two objects one the write makes?"""

    __slots__ = ("hints", "inner", "released", "written")

    def __init__(
        self, written: frozenset[FieldPath], released: frozenset[FieldPath], hints: FieldHints
    ) -> None:
        self.written = written
        self.released = released
        self.hints = hints
        self.inner = frozenset(p[:i] for p in written | released for i in range(len(p)))

    def allowed(self, old: Any, new: Any, path: FieldPath, pattern: Pattern) -> bool:
        if _equal(old, new):
            return True
        for i in range(len(path), 0, -1):
            prefix = path[:i]
            if prefix in self.written:
                return True  # set by the write (whatever it stored there: defaults, canonical spelling)
            if prefix in self.released:
                return new is _MISSING  # released by the write: removed, or unchanged (co-owned) above
        if path not in self.inner:
            return False  # a change outside every field the write touches
        if isinstance(old, Mapping) or isinstance(new, Mapping):
            old = {} if old is _MISSING else old
            new = {} if new is _MISSING else new
            if not (isinstance(old, Mapping) and isinstance(new, Mapping)):
                return False
            return all(
                self.allowed(
                    old.get(key, _MISSING), new.get(key, _MISSING), (*path, f"f:{key}"), (*pattern, str(key))
                )
                for key in old.keys() | new.keys()
            )
        if _is_list(old) or _is_list(new):
            old = () if old is _MISSING else old
            new = () if new is _MISSING else new
            if not (_is_list(old) and _is_list(new)):
                return False
            keys = self.hints.list_keys(pattern)
            if keys is not None:
                before, after = _keyed(old, keys), _keyed(new, keys)
                if before is None or after is None:
                    return False
                item = (*pattern, ITEM)
                return all(
                    self.allowed(before.get(e, _MISSING), after.get(e, _MISSING), (*path, e), item)
                    for e in before.keys() | after.keys()
                )
            if self.hints.is_set(pattern):
                before_set, after_set = {_json(v) for v in old}, {_json(v) for v in new}
                return all(
                    self.allowed(
                        True if e in before_set else _MISSING,
                        True if e in after_set else _MISSING,
                        (*path, f"v:{e}"),
                        (*pattern, ITEM),
                    )
                    for e in before_set ^ after_set
                )
        return False


def is_own_change(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    written: frozenset[FieldPath],
    field_manager: str,
    subresource: str | None = None,
    *,
    hints: FieldHints = NO_HINTS,
) -> bool:
    """Is every difference between ``old`` and ``new`` one that ``field_manager``'s apply of a body with
    the fields ``written`` (:func:`desired_fields`) makes, computed from ``old``?

    Allowed: any change at or under a written field (its value, however the server stored it); the
    removal of a field ``old``'s entry of this manager owns and the body released; the resourceVersion,
    generation and this manager's own managedFields entry. Anything else — another field's value, a label,
    a finalizer, ``deletionTimestamp``, another managedFields entry the cache keeps, a released field
    given another value — is a change the write did not make. ``old`` None (an ADDED event) is compared
    with an empty object whose untracked metadata (name, uid, ...) may appear. Only what both objects hold
    is compared: a field the cache's ingest transform drops is read by nobody. Keyed list items are
    matched by key (their order is not compared).
    """
    manager_entry = None if old is None else _manager_fields(old, field_manager, subresource)
    released = (manager_entry or frozenset()) - written
    if not _equal(
        _other_entries(old or {}, field_manager, subresource), _other_entries(new, field_manager, subresource)
    ):
        return False
    walk = _OwnChange(written, released, hints)
    before = _MISSING if old is None else old
    for key in new.keys() | (old or {}).keys():
        if key == "metadata":
            meta_old = (old or {}).get("metadata") or {}
            meta_new = new.get("metadata") or {}
            for mkey in meta_old.keys() | meta_new.keys():
                if mkey in _WRITE_BOOKKEEPING or (old is None and ("metadata", mkey) in _UNTRACKED):
                    continue
                path = ("f:metadata", f"f:{mkey}")
                if not walk.allowed(
                    meta_old.get(mkey, _MISSING), meta_new.get(mkey, _MISSING), path, ("metadata", mkey)
                ):
                    return False
            continue
        if old is None and (key,) in _UNTRACKED:
            continue
        previous = _MISSING if before is _MISSING else old.get(key, _MISSING)  # type: ignore[union-attr]
        if not walk.allowed(previous, new.get(key, _MISSING), (f"f:{key}",), (str(key),)):
            return False
    return True


# -- the applier -------------------------------------------------------------------------------------


@runtime_checkable
class ManagedFieldsCache(Protocol):
    """A cache the no-op check reads: it says whose managedFields entries its ingest transform keeps
    (an :class:`~gpustack_worker.runtime.informer.Informer`, or the transform itself)."""

    @property
    def field_managers(self) -> frozenset[str]:
        """The field managers whose managedFields entries the cached objects keep."""
        ...


def _write_key(
    resource: Resource, meta: Mapping[str, Any], subresource: str | None
) -> tuple[str, str, str, str]:
    """(kind, namespace, name, subresource) of a write: the key of the Applier's records."""
    return (resource.kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""), subresource or "")


class _Written(NamedTuple):
    """What a write sets: its fields (:func:`desired_fields`) and the kind's hints (:func:`is_own_change`)."""

    fields: frozenset[FieldPath]
    hints: FieldHints


class _Echo(NamedTuple):
    """Our last accepted write of a key, for :meth:`Applier.is_own_echo`: the version it was computed from
    (None: the object was not cached), the version the server answered, what it set, and — for a write
    to an uncached object — whether the answer proves that our request created the object."""

    base: int | None
    version: int
    written: _Written
    created: bool


class _InFlight:
    """One write on its way: the version it was computed from (None: a create), what it sets, and the
    watch events held until its answer, each ``(its new version, release)`` (held only when its old
    version is ``base`` and its change is one the write makes)."""

    __slots__ = ("base", "held", "written")

    def __init__(self, base: int | None, written: _Written) -> None:
        self.base = base
        self.written = written
        self.held: list[tuple[int | None, Callable[[], None]]] = []


class ApplierConfigError(ValueError):
    """An :class:`Applier` bound to a cache that drops its field manager's managedFields."""


def _describe(cache: object) -> str:
    resource = getattr(cache, "resource", None)
    kind = getattr(resource, "kind", None)
    return f"the {kind} informer" if kind else type(cache).__name__


class Applier:
    """Applies desired objects as one field manager, skipping no-ops against the cache.

    ``cache`` is the informer whose objects the caller passes as ``cached`` (or a list / tuple / set of
    them): each must keep this field manager's managedFields entries
    (``make_transform([..., field_manager])``), else :class:`ApplierConfigError` is raised here, at
    start-up — without the entry no apply could ever be judged a no-op.

    ``on_repair(resource, cached, fields)`` is called after an accepted apply that wrote back fields
    another manager had changed (:func:`taken_fields`, as :func:`dotted` paths); it must not raise.

    ``expected_change(resource, cached, field)`` (a managedFields path) says whether another manager's
    change of that field is one the caller expects by that manager's protocol (see the module doc): such
    fields are written back but left out of the report; when none is left, nothing is reported. It must not
    raise.
    """

    def __init__(
        self,
        client: Client,
        field_manager: str,
        *,
        cache: ManagedFieldsCache | Iterable[ManagedFieldsCache],
        on_repair: Callable[[Resource, Mapping[str, Any], tuple[str, ...]], None] | None = None,
        expected_change: Callable[[Resource, Mapping[str, Any], FieldPath], bool] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.field_manager = field_manager
        self.on_repair = on_repair
        self.expected_change = expected_change
        self.monotonic = monotonic
        #: (kind, namespace, name, subresource) → (uid, resourceVersion, body digest) of our last write.
        self._recent: OrderedDict[tuple[str, str, str, str], tuple[str, int, str]] = OrderedDict()
        #: The same key → (uid, resourceVersion, body digest, when) of a create the cache has not shown yet.
        self._unseen: OrderedDict[tuple[str, str, str, str], tuple[str, int, str, float]] = OrderedDict()
        #: The same key → our last accepted write, for telling the watch event of that very write
        #: (:meth:`is_own_echo`).
        self._echoes: OrderedDict[tuple[str, str, str, str], _Echo] = OrderedDict()
        #: The last event :func:`is_own_change` judged (old, new, written, verdict): every handler of an
        #: informer asks about the same event in turn.
        self._judged: tuple[Any, Any, Any, bool] | None = None
        #: The same key → our write on its way (sent, not yet answered) and the watch events held until its
        #: answer says whether they are its echo (:meth:`hold_own_echo`).
        self._in_flight: dict[tuple[str, str, str, str], _InFlight] = {}
        #: kind → the bound informers of that kind (they say how far their watch has come).
        self._informers: dict[str, list[Any]] = {}
        self._skipped = APPLY_SKIPPED.labels(field_manager=field_manager)
        several = isinstance(cache, list | tuple | set | frozenset)
        caches = list(cast("Iterable[ManagedFieldsCache]", cache)) if several else [cache]
        if not caches:
            raise ApplierConfigError(f"Applier {field_manager!r} is bound to no cache")
        for one in caches:
            self.bind(cast("ManagedFieldsCache", one))

    def bind(self, cache: ManagedFieldsCache) -> None:
        """Check that ``cache`` keeps this manager's managedFields (raises :class:`ApplierConfigError`)."""
        kept = getattr(cache, "field_managers", None)
        if not isinstance(kept, frozenset | set):
            raise ApplierConfigError(
                f"Applier {self.field_manager!r}: {_describe(cache)} does not say which field managers its "
                "ingest transform keeps (build the transform with make_transform([...]))"
            )
        if self.field_manager not in kept:
            raise ApplierConfigError(
                f"Applier {self.field_manager!r} checks no-ops against {_describe(cache)}, whose ingest "
                f"transform keeps the managedFields of {sorted(kept)} only: add {self.field_manager!r} to "
                "its make_transform([...]) (without it every reconcile would write)"
            )
        kind = getattr(getattr(cache, "resource", None), "kind", None)
        if isinstance(kind, str) and hasattr(cache, "last_resource_version") and hasattr(cache, "store"):
            self._informers.setdefault(kind, []).append(cache)

    async def apply(
        self,
        resource: Resource,
        desired: Mapping[str, Any],
        cached: Mapping[str, Any] | None,
        *,
        force: bool = False,
        subresource: str | None = None,
    ) -> dict[str, Any] | None:
        """Apply ``desired`` unless it is a no-op against ``cached``; returns the server's object or None.

        ``force`` takes fields over from other managers: pass it only for fields this controller alone
        owns by design.
        """
        meta = desired.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        key = (resource.kind, ns, name, subresource or "")
        if self._written_already(key, cached, desired) or is_noop(
            desired, cached, self.field_manager, subresource, hints=resource.hints
        ):
            self._skipped.inc()
            return None
        # debug: a cold start applies once per object; counts are in rest_client_requests_total.
        _log.debug(
            "apply",
            field_manager=self.field_manager,
            kind=resource.kind,
            name=meta.get("name"),
            namespace=meta.get("namespace"),
            subresource=subresource,
        )
        taken = taken_fields(desired, cached, self.field_manager, subresource, hints=resource.hints)
        if taken and cached is not None and self.expected_change is not None:
            expected = self.expected_change
            taken = frozenset(p for p in taken if not expected(resource, cached, p))
        digest = _digest(desired)  # only for a write: a no-op pass never serialises its body
        manager = self.field_manager
        written = await self._write(
            key,
            cached,
            digest,
            _Written(desired_fields(desired, resource.hints), resource.hints),
            lambda: self.client.apply(
                resource, dict(desired), field_manager=manager, force=force, subresource=subresource
            ),
        )
        if taken and cached is not None:
            fields = tuple(sorted(dotted(p) for p in taken))
            _log.warning(
                "repaired fields another field manager changed",
                field_manager=self.field_manager,
                kind=resource.kind,
                name=meta.get("name"),
                namespace=meta.get("namespace"),
                subresource=subresource,
                fields=list(fields),
            )
            APPLY_REPAIRS.labels(field_manager=self.field_manager, kind=resource.kind).inc()
            if self.on_repair is not None:
                self.on_repair(resource, cached, fields)
        return written

    async def create(self, resource: Resource, desired: Mapping[str, Any]) -> dict[str, Any] | None:
        """Create ``desired`` (a POST: create-only, an existing object raises
        :class:`~gpustack_worker.runtime.client.Conflict`), unless our own create of this very body is
        still on its way to the cache — then None. For an object that is authored once and never updated
        (the caller found no object of that name in its cache)."""
        meta = desired.get("metadata") or {}
        key = (resource.kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""), "")
        if self._created_already(key, desired):
            self._skipped.inc()
            return None
        digest = _digest(desired)
        manager = self.field_manager
        return await self._write(
            key,
            None,
            digest,
            _Written(desired_fields(desired, resource.hints), resource.hints),
            lambda: self.client.create(resource, dict(desired), field_manager=manager),
            creates=True,
        )

    async def _write(
        self,
        key: tuple[str, str, str, str],
        cached: Mapping[str, Any] | None,
        digest: str,
        sets: _Written,
        send: Callable[[], Awaitable[dict[str, Any]]],
        *,
        creates: bool = False,
    ) -> dict[str, Any]:
        """``send()`` our write of ``key`` computed from ``cached``, setting ``sets`` (``creates``: a
        create-only POST): on its way meanwhile (watch events that may be its echo are held), remembered
        once answered, the held events decided on the answer."""
        flight = self._take_off(key, cached, sets)
        answered: int | None = None
        created = False
        try:
            written = await send()
            created = cached is None and (creates or self._created_by(written, key[3]))
            answered = self._remember(key, written, digest, cached, sets, created)
        finally:
            self._land(key, flight, answered, created)
        return written

    def _created_by(self, answer: Any, subresource: str) -> bool:
        """Does the answer to our apply of an uncached object prove that our request created it? Every
        managedFields entry it carries is this manager's — an object someone else created (whose
        event our apply, a no-op there, would be answered with) carries its creator's entry."""
        meta = answer.get("metadata") if isinstance(answer, Mapping) else None
        entries = (meta or {}).get("managedFields") or ()
        return all(
            entry.get("manager") == self.field_manager and (entry.get("subresource") or "") == subresource
            for entry in entries
        )

    def _take_off(
        self, key: tuple[str, str, str, str], cached: Mapping[str, Any] | None, sets: _Written
    ) -> _InFlight | None:
        """Record our write of ``key``, computed from ``cached``, as on its way (None: not recorded — the
        base version is unknown, or another write of ours to the key is already on its way)."""
        base = None if cached is None else _version_of(cached)
        if (cached is not None and base is None) or key in self._in_flight:
            return None
        flight = _InFlight(base, sets)
        self._in_flight[key] = flight
        return flight

    def _land(
        self, key: tuple[str, str, str, str], flight: _InFlight | None, answered: int | None, created: bool
    ) -> None:
        """The write ``flight`` was answered at version ``answered`` (None: failed, cancelled or answered
        without a version; ``created``: the answer proves our request created the uncached object): drop
        the held events that were its echo, release the others."""
        if flight is None:
            return
        if self._in_flight.get(key) is flight:
            del self._in_flight[key]
        for seen, release in flight.held:
            if answered is None or seen != answered or (flight.base is None and not created):
                release()

    def _expect_echo(
        self,
        key: tuple[str, str, str, str],
        cached: Mapping[str, Any] | None,
        version: int | None,
        sets: _Written,
        created: bool,
    ) -> None:
        """Record a write computed from ``cached``, setting ``sets`` and answered at ``version`` for
        :meth:`is_own_echo`."""
        base = None if cached is None else _version_of(cached)
        if version is None or (cached is not None and base is None):
            self._echoes.pop(key, None)  # a version missing on either side cannot be matched
            return
        self._echoes[key] = _Echo(base, version, sets, created)
        self._echoes.move_to_end(key)
        while len(self._echoes) > RECENT_WRITES_MAX:
            self._echoes.popitem(last=False)

    def is_own_echo(
        self,
        resource: Resource,
        old: Mapping[str, Any] | None,
        new: Mapping[str, Any],
        subresource: str | None = None,
    ) -> bool:
        """Is the watch event ``old`` → ``new`` provably this manager's last accepted write of the object?

        Three things must hold. ``new`` is at the resourceVersion the server answered the write with;
        ``old`` is at the one the write was computed from (``old`` None: the object was not cached — then
        the answer must prove that our request created it: a create-only POST, or an apply answered with
        no managedFields entry but ours). And old → new changed nothing but what the write makes
        (:func:`is_own_change`: the fields it sets, the fields it released removed, the version and its own
        managedFields entry) — nothing another writer changed and nothing else a reconcile reads.

        The versions alone prove nothing: a server-side apply that changes nothing is not written and is
        answered with the *current* version, which someone else may have made — at base B our entry still
        owns a field G our body released; another manager's update of G takes it out of our entry (and
        changes H); at that state our apply is a no-op, answered X, and B → X is theirs, though its
        versions are our write's. The cache keeps no managedFields times, so the server's own word (our
        entry's time moved) is not available at the event; the content is, and it decides. Its one
        allowance: a foreign change that makes exactly what our write makes (removing the very fields we
        released, nothing else) is dropped like our echo — a reconcile woken by it would find what our
        echo shows.

        Then a reconcile woken by the event would find its desired state in place (a no-op), so a
        controller may drop it. Only for events of a watch, in order: a relist compares the cached object
        with the listed one, which may fold someone else's write into ours (the caller must not ask then).
        The record is dropped once a later version is seen, or with the oldest of :data:`RECENT_WRITES_MAX`.
        """
        meta = new.get("metadata") or {}
        key = _write_key(resource, meta, subresource)
        entry = self._echoes.get(key)
        if entry is None:
            return False
        seen = resource_version_number(meta.get("resourceVersion"))
        if seen is None or seen > entry.version:
            del self._echoes[key]
            return False
        if seen != entry.version:
            return False
        if old is None or entry.base is None:
            return (
                old is None
                and entry.base is None
                and entry.created
                and self._own_change(None, new, entry.written, subresource)
            )
        return _version_of(old) == entry.base and self._own_change(old, new, entry.written, subresource)

    def _own_change(
        self,
        old: Mapping[str, Any] | None,
        new: Mapping[str, Any],
        written: _Written,
        subresource: str | None,
    ) -> bool:
        """:func:`is_own_change` for this manager, remembered for the event every handler asks about."""
        judged = self._judged
        if judged is not None and judged[0] is old and judged[1] is new and judged[2] is written:
            return judged[3]
        verdict = is_own_change(
            old, new, written.fields, self.field_manager, subresource, hints=written.hints
        )
        self._judged = (old, new, written, verdict)
        return verdict

    def hold_own_echo(
        self,
        resource: Resource,
        old: Mapping[str, Any] | None,
        new: Mapping[str, Any] | None,
        subresource: str | None,
        release: Callable[[], None],
    ) -> bool:
        """:meth:`is_own_echo`, also for the watch event that arrives before our write's answer: True when
        the event is provably our last write's echo (drop it), or when it may be the echo of the write
        still on its way — ``old`` is the version that write was computed from and old → new changed
        nothing but what that write makes (:func:`is_own_change`) — and is held until the answer: dropped
        if it is exactly that write (``new`` at the answered version; for an uncached object, the answer
        proves our request created it), else ``release()`` is called then (also when the write fails).
        False: not provably ours, pass it on now. For a watch's events only, like :meth:`is_own_echo`;
        ``new`` None (a deletion) is never held.

        About half of a busy controller's own echoes come before the answer is read (the server sends the
        watch event and the response at once), and each would wake a no-op reconcile of its key."""
        if new is None:
            return False
        if self.is_own_echo(resource, old, new, subresource):
            return True
        meta = new.get("metadata") or {}
        flight = self._in_flight.get(_write_key(resource, meta, subresource))
        if flight is None:
            return False
        old_version = None if old is None else _version_of(old)
        if (old is None) != (flight.base is None) or old_version != flight.base:
            return False  # computed from another version than our write's: someone else's change
        if not self._own_change(old, new, flight.written, subresource):
            return False  # a change our write does not make: someone else's, whatever the answer says
        flight.held.append((resource_version_number(meta.get("resourceVersion")), release))
        return True

    def echo_hold(
        self, informer: Any, subresource: str | None = None
    ) -> Callable[[str, Any, Any, Callable[[], None]], bool]:
        """A hold for ``Controller.watch(informer, hold=...)`` of the controller writing through this
        Applier: the watch event of its own write wakes it not (:meth:`hold_own_echo`, held until the
        write's answer when it comes first); a LIST's updates always pass (``informer.dispatching_list``)."""
        resource = informer.resource

        def own_echo(_event: str, old: Any, new: Any, release: Callable[[], None]) -> bool:
            if informer.dispatching_list:
                return False
            return self.hold_own_echo(resource, old, new, subresource, release)

        return own_echo

    def _written_already(
        self, key: tuple[str, str, str, str], cached: Mapping[str, Any] | None, desired: Mapping[str, Any]
    ) -> bool:
        """Is ``cached`` older than our last accepted write of this very body (the watch event not yet
        delivered)? Drops the entry once the cache has caught up or holds another object."""
        if cached is None:
            return self._created_already(key, desired)
        self._unseen.pop(key, None)
        entry = self._recent.get(key)
        if entry is None:
            return False
        meta = cached.get("metadata") or {}
        seen = resource_version_number(meta.get("resourceVersion"))
        uid, version, sent = entry
        if seen is None or meta.get("uid") != uid or seen >= version:
            del self._recent[key]
            return False
        return sent == _digest(desired)

    def _created_already(self, key: tuple[str, str, str, str], desired: Mapping[str, Any]) -> bool:
        """Is the uncached object one we created with this very body, which the informer has not reached
        yet? Drops the entry once it has (a missing object then was deleted: write it again) or after
        :data:`UNSEEN_CREATE_MAX_S`."""
        entry = self._unseen.get(key)
        if entry is None:
            return False
        uid, version, sent, at = entry
        reached = self._informer_version(key[0])
        if reached is not None and reached >= version:
            del self._unseen[key]
            # Passed: the object is in the informer unless it was deleted since. The caller's view may
            # predate the ADDED event (it read the cache before an await): then the cache judges next time.
            return self._informer_holds(key, uid) and sent == _digest(desired)
        if reached is None or self.monotonic() - at >= UNSEEN_CREATE_MAX_S:
            del self._unseen[key]
            return False
        return sent == _digest(desired)

    def _informer_holds(self, key: tuple[str, str, str, str], uid: str) -> bool:
        """Does a bound informer of the key's kind hold the object ``uid``?"""
        kind, namespace, name, _sub = key
        store_key = f"{namespace}/{name}" if namespace else name
        for informer in self._informers.get(kind, ()):
            held = informer.store.get(store_key)
            if held is not None and (held.get("metadata") or {}).get("uid") == uid:
                return True
        return False

    def _informer_version(self, kind: str) -> int | None:
        """How far the bound informers of ``kind`` have come (the least of them), None if unknown."""
        reached = [
            resource_version_number(informer.last_resource_version)
            for informer in self._informers.get(kind, ())
        ]
        if not reached or any(v is None for v in reached):
            return None
        return min(v for v in reached if v is not None)

    def _remember(
        self,
        key: tuple[str, str, str, str],
        written: Any,
        digest: str,
        cached: Mapping[str, Any] | None,
        sets: _Written,
        created_by_us: bool,
    ) -> int | None:
        """Our accepted write of ``key``, computed from ``cached`` (None: the object was not cached, a
        create): for the own-write guards and for :meth:`is_own_echo`. Returns the version the server
        answered (None: none readable)."""
        meta = written.get("metadata") if isinstance(written, Mapping) else None
        version = resource_version_number((meta or {}).get("resourceVersion"))
        uid = (meta or {}).get("uid")
        created = cached is None
        self._unseen.pop(key, None)
        self._expect_echo(key, cached, version, sets, created_by_us)
        if version is None or not uid:
            self._recent.pop(key, None)
            return version
        self._recent[key] = (str(uid), version, digest)
        self._recent.move_to_end(key)
        while len(self._recent) > RECENT_WRITES_MAX:
            self._recent.popitem(last=False)
        if created:
            self._unseen[key] = (str(uid), version, digest, self.monotonic())
            while len(self._unseen) > RECENT_WRITES_MAX:
                self._unseen.popitem(last=False)
        return version

    def _forget(self, resource: Resource, namespace: str | None, name: str) -> None:
        for key in [k for k in self._recent if k[:3] == (resource.kind, namespace or "", name)]:
            del self._recent[key]
        for key in [k for k in self._unseen if k[:3] == (resource.kind, namespace or "", name)]:
            del self._unseen[key]

    async def apply_status(
        self, resource: Resource, desired: Mapping[str, Any], cached: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        """Apply a status body through the ``/status`` subresource (we alone own our status fields)."""
        return await self.apply(resource, desired, cached, force=True, subresource="status")

    async def delete(
        self,
        resource: Resource,
        cached: Mapping[str, Any],
        *,
        check_resource_version: bool = False,
        propagation_policy: str | None = None,
    ) -> bool:
        """Delete the cached object if it is still the same object (UID precondition); False if gone.

        ``check_resource_version`` adds the resourceVersion precondition — only for a decision that
        depends on the object's exact content: on an object whose status another controller updates
        (every ClusterQueue) it fails with Conflict until the cache catches up. ``propagation_policy``
        (``Background`` / ``Foreground`` / ``Orphan``) goes into DeleteOptions as is.
        """
        meta = cached.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            raise ValueError(f"{resource.kind} {meta.get('name')!r}: no metadata.uid to delete by")
        self._forget(resource, meta.get("namespace"), str(meta["name"]))
        return await self.client.delete(
            resource,
            str(meta["name"]),
            meta.get("namespace"),
            uid=str(uid),
            resource_version=str(meta["resourceVersion"]) if check_resource_version else None,
            propagation_policy=propagation_policy,
        )
