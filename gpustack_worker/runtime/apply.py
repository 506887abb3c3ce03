"""Server-side apply with a client-side no-op check, so a converged system issues zero writes.

Each controller owns one field manager and applies its whole intent for an object every reconcile
(level-triggered). Sending that apply when nothing changed is not free — it costs a round trip and
some fields even bump resourceVersion on a no-op apply (k/k#121404, #95460) — so :func:`is_noop`
compares the desired body with the cached object first and the PATCH is skipped when

1. every field in the desired body already has that value in the cached object (quantities compared by
   value outside ``metadata``, since the server canonicalises them), and
2. the set of fields this manager owns on the object (from the cache's compact managedFields entry for
   the manager and subresource) equals the set of fields in the desired body — so a field we stopped
   wanting is still released by a real apply.

Field sets are compared at the granularity a client can know without the schema: map keys down to
leaves, and lists as one field each (for a list whose items we own by key the number of items must
match as well). Status goes through the ``/status`` subresource with its own managedFields entry.
Deletes carry uid and resourceVersion preconditions so we never delete a newer object than we decided on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_worker.runtime.metrics import APPLY_SKIPPED
from gpustack_worker.runtime.quantity import same_quantity

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource

__all__ = ("Applier", "desired_fields", "is_noop", "owned_fields", "values_match")

_log = structlog.get_logger("gpustack_worker.runtime.apply")
#: Identity fields: part of every apply body but never tracked in managedFields.
_IDENTITY: Final = frozenset({("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")})
#: Field-set entry: a path plus, for lists owned item by item, the number of owned items (else None).
FieldSet = dict[tuple[str, ...], int | None]


def desired_fields(body: Mapping[str, Any]) -> FieldSet:
    """Leaf paths of an apply body (lists are leaves, their length recorded)."""
    out: FieldSet = {}

    def walk(node: Mapping[str, Any], path: tuple[str, ...]) -> None:
        for key, value in node.items():
            here = (*path, key)
            if isinstance(value, Mapping) and value:
                walk(value, here)
            elif isinstance(value, Sequence) and not isinstance(value, str):
                out[here] = len(value)
            else:
                out[here] = None

    walk(body, ())
    for path in _IDENTITY:
        out.pop(path, None)
    for path in [p for p in out if p[:1] == ("metadata",) and p[1:2] in {("resourceVersion",), ("uid",)}]:
        del out[path]
    return out


def owned_fields(fields_v1: Mapping[str, Any]) -> FieldSet:
    """Leaf paths of a managedFields ``fieldsV1`` tree, at the granularity of :func:`desired_fields`."""
    out: FieldSet = {}

    def walk(node: Mapping[str, Any], path: tuple[str, ...]) -> None:
        items = [k for k in node if k[:2] in ("k:", "v:", "i:")]
        if items and path:
            out[path] = len(items)
            return
        children = [k for k in node if k.startswith("f:")]
        if not children:
            if path:
                out[path] = None
            return
        for key in children:
            walk(node[key] or {}, (*path, key[2:]))

    walk(fields_v1, ())
    return out


def _get(obj: Mapping[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    node: Any = obj
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return False, None
        node = node[key]
    return True, node


def values_match(desired: Any, actual: Any, *, quantities: bool, keyed: bool = False) -> bool:
    """Does ``actual`` (server state) already carry ``desired``?

    Maps may hold extra keys (other managers, server defaults). Lists are compared item by item in
    order, except a list whose items we own by key (``keyed``): there other managers' items may be
    interleaved, so each desired item must be contained in some actual item.
    """
    if isinstance(desired, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and values_match(v, actual[k], quantities=quantities) for k, v in desired.items()
        )
    if isinstance(desired, Sequence) and not isinstance(desired, str):
        if not isinstance(actual, Sequence) or isinstance(actual, str):
            return False
        if keyed:
            return all(any(values_match(d, a, quantities=quantities) for a in actual) for d in desired)
        return len(actual) == len(desired) and all(
            values_match(d, a, quantities=quantities) for d, a in zip(desired, actual, strict=True)
        )
    if desired == actual and type(desired) is type(actual):
        return True
    if quantities and isinstance(desired, str) and isinstance(actual, str):
        return same_quantity(desired, actual)
    return bool(isinstance(desired, int | float) and not isinstance(desired, bool) and desired == actual)


def _manager_fields(cached: Mapping[str, Any], manager: str, subresource: str | None) -> FieldSet | None:
    entries = (cached.get("metadata") or {}).get("managedFields") or ()
    found: FieldSet | None = None
    for entry in entries:
        if entry.get("manager") != manager or entry.get("operation", "Apply") != "Apply":
            continue
        if (entry.get("subresource") or None) != (subresource or None):
            continue
        found = {**(found or {}), **owned_fields(entry.get("fieldsV1") or {})}
    return found


def is_noop(
    desired: Mapping[str, Any],
    cached: Mapping[str, Any] | None,
    field_manager: str,
    subresource: str | None = None,
) -> bool:
    """True when applying ``desired`` as ``field_manager`` would change nothing on ``cached``."""
    if cached is None:
        return False
    owned = _manager_fields(cached, field_manager, subresource)
    wanted = desired_fields(desired)
    if owned is None:
        # The server drops a manager's managedFields entry once it owns nothing, so an empty intent
        # against an object we own nothing on is the steady state, not a write.
        return not wanted
    if wanted != owned and not _lists_compatible(wanted, owned):
        return False
    for path in wanted:
        present, actual = _get(cached, path)
        found, value = _get(desired, path)
        if not present or not found:
            return False
        quantities = path[:1] != ("metadata",)
        if not values_match(value, actual, quantities=quantities, keyed=owned.get(path) is not None):
            return False
    return True


def _lists_compatible(wanted: FieldSet, owned: FieldSet) -> bool:
    """Same paths; lengths must agree only where we own list items one by one."""
    if wanted.keys() != owned.keys():
        return False
    return all(owned[p] is None or owned[p] == wanted[p] for p in wanted)


class Applier:
    """Applies desired objects as one field manager, skipping no-ops against the cache."""

    def __init__(self, client: Client, field_manager: str) -> None:
        self.client = client
        self.field_manager = field_manager
        self._skipped = APPLY_SKIPPED.labels(field_manager=field_manager)

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
        if is_noop(desired, cached, self.field_manager, subresource):
            self._skipped.inc()
            return None
        meta = desired.get("metadata") or {}
        # debug: a cold start applies once per object; counts are in rest_client_requests_total.
        _log.debug(
            "apply",
            field_manager=self.field_manager,
            kind=resource.kind,
            name=meta.get("name"),
            namespace=meta.get("namespace"),
            subresource=subresource,
        )
        return await self.client.apply(
            resource, dict(desired), field_manager=self.field_manager, force=force, subresource=subresource
        )

    async def apply_status(
        self, resource: Resource, desired: Mapping[str, Any], cached: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        """Apply a status body through the ``/status`` subresource (we alone own our status fields)."""
        return await self.apply(resource, desired, cached, force=True, subresource="status")

    async def delete(self, resource: Resource, cached: Mapping[str, Any]) -> bool:
        """Delete the cached object with uid + resourceVersion preconditions; False if already gone."""
        meta = cached.get("metadata") or {}
        return await self.client.delete(
            resource,
            str(meta["name"]),
            meta.get("namespace"),
            uid=meta.get("uid"),
            resource_version=meta.get("resourceVersion"),
        )
