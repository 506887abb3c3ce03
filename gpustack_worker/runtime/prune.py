"""Pruning: delete what a controller created and its ``desired()`` no longer produces.

Ownership is a label every controller stamps on each object it creates: :data:`OWNER_LABEL` with the
controller's name as value (:func:`stamp`). The label is the only thing pruning trusts, so

* an object without the label (an admin's, another tool's, Kueue's) is never deleted;
* an object whose label names another controller is never deleted — two controllers writing the same
  kind (a flavor controller and a Topology controller, say) each prune only their own;
* a stamped object is deleted when it is not among the desired keys. Pass the desired keys from the
  same snapshot the desired objects came from, and prune only after the caches synced (the Manager
  guarantees the latter: a half-filled cache would make everything look unwanted, but it would also
  make desired() empty, which is why pruning compares against desired() and not against the cache).

Deletes carry the UID precondition (we delete exactly the object we decided on; a newer object of the
same name is left alone and reconciled on its own event) and are skipped for objects already being
deleted, so a finalizer holding an object costs no write per reconcile.

The selection is pure (:func:`stale`, table-tested); :class:`Pruner` only issues the deletes. The
informer for a pruned kind usually selects ``owner_selector(controller)`` so its cache holds just the
controller's own objects.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_worker.runtime.store import object_key

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource

__all__ = ("OWNER_LABEL", "Pruner", "owner_of", "owner_selector", "stale", "stamp")

#: The ownership label: value = the name of the controller that created the object. The one place the
#: key is spelled (``gpustack_worker.api.keys`` re-exports it for the controller packages).
OWNER_LABEL: Final = "worker.gpustack.ai/managed-by"
_LABEL_VALUE: Final = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_log = structlog.get_logger("gpustack_worker.runtime.prune")


def _check_owner(controller: str) -> str:
    if not _LABEL_VALUE.match(controller):
        raise ValueError(
            f"controller name {controller!r} is not a valid label value (≤ 63 characters, alphanumeric "
            "at both ends, '-', '_' or '.' inside); it is stamped as the owner label"
        )
    return controller


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def stamp(body: Mapping[str, Any], controller: str) -> dict[str, Any]:
    """A copy of the apply body ``body`` with the owner label of ``controller`` added to its labels."""
    _check_owner(controller)
    meta = dict(_meta(body))
    meta["labels"] = {**(meta.get("labels") or {}), OWNER_LABEL: controller}
    return {**body, "metadata": meta}


def owner_of(obj: Mapping[str, Any]) -> str | None:
    """The controller named by ``obj``'s owner label (None when unstamped)."""
    labels = _meta(obj).get("labels")
    value = labels.get(OWNER_LABEL) if isinstance(labels, Mapping) else None
    return str(value) if value else None


def owner_selector(controller: str) -> str:
    """Label selector for the objects ``controller`` stamped (for its informer)."""
    return f"{OWNER_LABEL}={_check_owner(controller)}"


def stale(cached: Iterable[Mapping[str, Any]], desired_keys: Collection[str], controller: str) -> list[Any]:
    """Objects stamped by ``controller``, not in ``desired_keys`` and not already being deleted.

    Sorted by key, so the deletes (and the tests) are deterministic.
    """
    _check_owner(controller)
    wanted = set(desired_keys)
    found = [
        obj
        for obj in cached
        if owner_of(obj) == controller
        and not _meta(obj).get("deletionTimestamp")
        and object_key(obj) not in wanted
    ]
    return sorted(found, key=object_key)


class Pruner:
    """Deletes the stale objects of one kind for one controller (UID precondition)."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        *,
        controller: str,
        propagation_policy: str | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.controller = _check_owner(controller)
        self.propagation_policy = propagation_policy
        #: Objects deleted by this pruner (for tests and logs).
        self.deleted = 0

    def stale(self, cached: Iterable[Mapping[str, Any]], desired_keys: Collection[str]) -> list[Any]:
        """See :func:`stale`."""
        return stale(cached, desired_keys, self.controller)

    async def prune(self, cached: Iterable[Mapping[str, Any]], desired_keys: Collection[str]) -> list[str]:
        """Delete every stale object; returns the keys actually deleted by this call.

        An object that is already gone, or was replaced by a new object of the same name (UID
        precondition failed), is skipped; any other error propagates (the reconcile is retried).
        """
        # imported here: ``api.keys`` re-exports OWNER_LABEL and must stay cheap to import (no HTTP stack)
        from gpustack_worker.runtime.client import Conflict

        done: list[str] = []
        for obj in self.stale(cached, desired_keys):
            meta = _meta(obj)
            key = object_key(obj)
            kwargs: dict[str, Any] = {"uid": str(meta.get("uid") or "") or None}
            if self.propagation_policy is not None:
                kwargs["propagation_policy"] = self.propagation_policy
            try:
                deleted = await self.client.delete(
                    self.resource, str(meta["name"]), meta.get("namespace"), **kwargs
                )
            except Conflict:
                _log.info("prune skipped: replaced by a newer object", kind=self.resource.kind, key=key)
                continue
            if deleted:
                self.deleted += 1
                done.append(key)
                _log.info("pruned", kind=self.resource.kind, key=key, controller=self.controller)
        return done
