"""The same writes, sent by a bare client: the raw reference a writer of mixed objects is measured by.

A one-label Node apply is the cheapest write the API server takes; a writer whose writes are whole
Nodes, custom resources and status subresources (``simulate apply``, the ``--all-nodes`` agent) cannot
reach that rate however few cycles it spends, so a ratio against it mixes the writer's own cost with the
price of its objects. This module prices the writes themselves:

- :class:`WriteRecorder` wraps the client a writer is given (duck-typed, as ``apply_scenario`` and the
  Agent use it) and keeps every server-side apply it sends — resource, body, subresource — in order,
  and counts its other writes (creates, patches, deletes) by kind.
- :func:`replay_rate` sends the recorded applies again with ``concurrency`` in flight from a bare client
  under another field manager (``force``): the same bodies to the same objects, so each is a real write
  (the object's managed fields change, its resourceVersion moves) of the same size and shape. The writes
  to one object keep their order (a status apply after the object's own); different objects go in
  parallel, in the recorded order. Returns (writes, seconds): the rate at which the API server takes
  those very writes from a client that does nothing else.

The ratio ``writer's writes / replay rate / writer's time`` is then 1.0 when the writer is as fast as the
server takes those writes from 8 concurrent requests. Non-apply writes are priced at the replay's rate
(the benches print how many there are; a cold run has few or none). The replay is an update by a second
manager: where the writer's own write was a create or the first apply into its managedFields entry (a
simulator filling an empty cluster) the server does more work for the replay, which then overprices
the writes — the benches print it as context next to the one-label raw rate, their reference.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource

#: The field manager of the replay (never one of ours: its writes are real, not no-ops).
REPLAY_MANAGER = "gpustack-bench-replay"


@dataclass(frozen=True, slots=True)
class RecordedApply:
    resource: Resource
    body: dict[str, Any]
    subresource: str | None

    @property
    def object_key(self) -> tuple[str, str, str]:
        meta = self.body.get("metadata") or {}
        return (self.resource.plural, str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class WriteRecorder:
    """The client as a writer uses it; every apply it sends is kept (:attr:`applies`), every other write
    counted by ``"<Kind> <verb>"`` (:attr:`other_writes`). Reads and watches pass through untouched."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.applies: list[RecordedApply] = []
        self.other_writes: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def apply(self, resource: Resource, body: dict[str, Any], **kw: Any) -> Any:
        written = await self._client.apply(resource, body, **kw)
        self.applies.append(RecordedApply(resource, dict(body), kw.get("subresource")))
        return written

    async def create(self, resource: Resource, body: dict[str, Any], *args: Any, **kw: Any) -> Any:
        written = await self._client.create(resource, body, *args, **kw)
        # A create is replayed as the apply of the same body (the object exists by then).
        self.applies.append(RecordedApply(resource, dict(body), None))
        return written

    async def patch(self, resource: Resource, *args: Any, **kw: Any) -> Any:
        self.other_writes[f"{resource.kind} patch"] += 1
        return await self._client.patch(resource, *args, **kw)

    async def delete(self, resource: Resource, *args: Any, **kw: Any) -> Any:
        self.other_writes[f"{resource.kind} delete"] += 1
        return await self._client.delete(resource, *args, **kw)

    def by_kind(self) -> dict[str, int]:
        """Recorded applies by ``"<Kind>[/<subresource>] apply"``, then the other writes."""
        out: collections.Counter[str] = collections.Counter(
            f"{a.resource.kind}{'/' + a.subresource if a.subresource else ''} apply" for a in self.applies
        )
        out.update(self.other_writes)
        return dict(sorted(out.items()))


def replay_groups(applies: list[RecordedApply]) -> list[list[RecordedApply]]:
    """The recorded applies grouped by object, groups in the order of each object's first write and each
    group in its recorded order (pure: what :func:`replay_rate` sends, in that order)."""
    groups: dict[tuple[str, str, str], list[RecordedApply]] = {}
    for applied in applies:
        groups.setdefault(applied.object_key, []).append(applied)
    return list(groups.values())


def _for_replay(applied: RecordedApply) -> dict[str, Any]:
    """The body as sent, without the fields an apply may not carry back (a create's body can hold a
    resourceVersion or managedFields when it was built from a read object)."""
    body = dict(applied.body)
    meta = {
        k: v
        for k, v in (body.get("metadata") or {}).items()
        if k not in ("resourceVersion", "managedFields", "uid", "creationTimestamp", "generation")
    }
    body["metadata"] = meta
    if applied.subresource != "status":
        body.pop("status", None)
    return body


async def replay_rate(client: Client, applies: list[RecordedApply], concurrency: int) -> tuple[int, float]:
    """Send ``applies`` again as :data:`REPLAY_MANAGER` (force) with ``concurrency`` requests in flight,
    one object's writes in order; returns (writes, seconds)."""
    todo = iter(replay_groups(applies))

    async def worker() -> None:
        for group in todo:
            for applied in group:
                await client.apply(
                    applied.resource,
                    _for_replay(applied),
                    field_manager=REPLAY_MANAGER,
                    force=True,
                    subresource=applied.subresource,
                )

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(applies), time.perf_counter() - start
