"""A small model of the API server's server-side apply for the echo tests: one ConfigMap, its field
ownership per manager as structured-merge-diff keeps it, versions, and the watch events between them.

The object's fields are the keys of two maps, ``data`` and ``metadata.labels`` (each a leaf field, as
managedFields spell it: ``("f:data", "f:k")``). What the model does, read from structured-merge-diff
(``merge/update.go``) and the API server's field manager (``managedfieldsupdater.go``):

- an **apply** by a manager sets the body's fields, makes the manager's entry exactly the body's fields,
  takes a field whose value it changes from every other manager (``force``), and removes a field it
  released (in its entry, not in the body) unless another manager still owns it. When the object's
  content is unchanged the entry's ``time`` stays (SMD returns no object); when content and managedFields
  are both unchanged nothing is written and the answer is the current object at the current version;
- an **update** by another manager (``kubectl edit``, a controller's PUT) changes some fields; each field
  whose value it changed is taken from every other manager and owned by the updater (a removed field by
  nobody); an update that changes nothing writes nothing;
- ``mark_deleting`` sets ``metadata.deletionTimestamp`` (a DELETE of an object with a finalizer): no
  field manager sees it.

Every write bumps the resourceVersion and records the watch event (old → new, raw objects with every
managedFields entry and its time; the tests pass them through the runtime's real ingest transform).
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpustack_worker.runtime.resources import Resource
from gpustack_worker.runtime.transform import make_transform

if TYPE_CHECKING:
    from gpustack_worker.runtime.apply import FieldPath

MANAGER = "echo-ssa-test"
THING = Resource("", "v1", "ConfigMap", "configmaps", namespaced=True)
NS = "ns"
NAME = "x"
DATA: FieldPath = ("f:data",)
LABELS: FieldPath = ("f:metadata", "f:labels")


def data(key: str) -> FieldPath:
    return (*DATA, f"f:{key}")


def label(key: str) -> FieldPath:
    return (*LABELS, f"f:{key}")


@dataclass
class Entry:
    operation: str
    fields: set[FieldPath]
    time: int


@dataclass
class Event:
    """One watch event: raw objects, and who wrote ``new`` (the manager of the write that made it)."""

    old: dict[str, Any]
    new: dict[str, Any]
    writer: str


@dataclass
class Server:
    content: dict[FieldPath, str] = field(default_factory=dict)
    managers: dict[str, Entry] = field(default_factory=dict)
    version: int = 1
    clock: int = 0
    deleting: bool = False
    events: list[Event] = field(default_factory=list)
    #: version → (content, managers, deleting) as stored at that version.
    states: dict[int, tuple[dict[FieldPath, str], dict[str, Entry], bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._snapshot()

    def _snapshot(self) -> None:
        self.states[self.version] = (dict(self.content), copy.deepcopy(self.managers), self.deleting)

    def at(self, version: int) -> Server:
        """A copy of the server as it was at ``version`` (to ask what a write would have made there)."""
        content, managers, deleting = self.states[version]
        return Server(
            content=dict(content), managers=copy.deepcopy(managers), version=version, deleting=deleting
        )

    def render(self) -> dict[str, Any]:
        """The object as the API server returns it (every managedFields entry, with its time)."""
        meta: dict[str, Any] = {
            "name": NAME,
            "namespace": NS,
            "uid": "u1",
            "resourceVersion": str(self.version),
            "creationTimestamp": "t0",
            "managedFields": [
                {
                    "manager": name,
                    "operation": entry.operation,
                    "apiVersion": "v1",
                    "time": f"t{entry.time}",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": _fields_v1(entry.fields),
                }
                for name, entry in sorted(self.managers.items())
            ],
        }
        if self.deleting:
            meta["deletionTimestamp"] = "t-delete"
        labels = {p[-1][2:]: v for p, v in self.content.items() if p[:-1] == LABELS}
        if labels:
            meta["labels"] = labels
        obj: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
        values = {p[-1][2:]: v for p, v in self.content.items() if p[:-1] == DATA}
        if values:
            obj["data"] = values
        return obj

    def _commit(self, content: dict[FieldPath, str], managers: dict[str, Entry], writer: str) -> bool:
        """Store the new state if anything changed (a new version and its event); else nothing."""
        if content == self.content and managers == self.managers:
            return False
        old = self.render()
        self.content, self.managers = content, {m: e for m, e in managers.items() if e.fields}
        self.version += 1
        self._snapshot()
        self.events.append(Event(old, self.render(), writer))
        return True

    def apply(self, manager: str, body: dict[FieldPath, str]) -> tuple[dict[str, Any], bool]:
        """A forced server-side apply; returns the answer and whether it wrote a new version."""
        self.clock += 1
        content = dict(self.content)
        content.update(body)
        managers = copy.deepcopy(self.managers)
        changed = {p for p, v in body.items() if self.content.get(p) != v}
        for name, entry in managers.items():
            if name != manager:
                entry.fields -= changed
        previous = managers[manager].fields if manager in managers else set()
        for released in previous - set(body):
            if not any(released in e.fields for n, e in managers.items() if n != manager):
                content.pop(released, None)
        time = managers[manager].time if manager in managers else self.clock
        if content != self.content:
            time = self.clock  # SMD returned an object: the entry's time moves
        managers[manager] = Entry("Apply", set(body), time)
        wrote = self._commit(content, managers, manager)
        return self.render(), wrote

    def update(self, manager: str, changes: dict[FieldPath, str | None]) -> bool:
        """Another manager's update (``None`` removes the field); returns whether it wrote."""
        self.clock += 1
        content = dict(self.content)
        for path, value in changes.items():
            if value is None:
                content.pop(path, None)
            else:
                content[path] = value
        changed = {p for p in changes if self.content.get(p) != content.get(p)}
        if not changed:
            return False
        managers = copy.deepcopy(self.managers)
        for entry in managers.values():
            entry.fields -= changed
        taken = {p for p in changed if p in content}
        mine = managers.get(manager)
        managers[manager] = Entry("Update", (mine.fields if mine else set()) | taken, self.clock)
        return self._commit(content, managers, manager)

    def mark_deleting(self) -> bool:
        if self.deleting:
            return False
        old = self.render()
        self.deleting = True
        self.version += 1
        self._snapshot()
        self.events.append(Event(old, self.render(), "deleter"))
        return True


def _fields_v1(fields: set[FieldPath]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(fields):
        node = tree
        for element in path:
            node = node.setdefault(element, {})
    return tree


def body_of(fields: dict[FieldPath, str]) -> dict[str, Any]:
    """The apply body that sets exactly ``fields``."""
    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": NS},
    }
    labels = {p[-1][2:]: v for p, v in fields.items() if p[:-1] == LABELS}
    if labels:
        out["metadata"]["labels"] = labels
    values = {p[-1][2:]: v for p, v in fields.items() if p[:-1] == DATA}
    if values:
        out["data"] = values
    return out


def fields_of(body: dict[str, Any]) -> dict[FieldPath, str]:
    out = {label(k): v for k, v in (body.get("metadata") or {}).get("labels", {}).items()}
    out.update({data(k): v for k, v in (body.get("data") or {}).items()})
    return out


@dataclass
class _Pending:
    body: dict[FieldPath, str]
    manager: str
    answer: asyncio.Future[dict[str, Any]]
    result: dict[str, Any] | None = None
    wrote: bool = False


class ModelClient:
    """The Applier's client against :class:`Server`: each apply waits until the test has the server
    :meth:`process` it (at the moment of the test's choosing) and then :meth:`answer` it."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.pending: list[_Pending] = []

    async def apply(self, resource: Resource, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        gate: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending.append(_Pending(fields_of(body), str(kwargs["field_manager"]), gate))
        return await gate

    def process(self) -> bool:
        """The server handles the oldest pending apply now; returns whether it wrote a new version."""
        pending = next(p for p in self.pending if p.result is None)
        pending.result, pending.wrote = self.server.apply(pending.manager, pending.body)
        return pending.wrote

    def answer(self) -> None:
        """The oldest processed apply's response reaches the Applier."""
        pending = self.pending.pop(0)
        assert pending.result is not None, "process() it first"
        pending.answer.set_result(pending.result)


@dataclass
class Delivery:
    """One watch event as the controller's handler saw it: woken (passed at once, or held and released) or
    not (dropped as our own echo)."""

    event: Event
    old: Any
    new: Any
    woken: bool = False


class Watch:
    """The informer's side: the server's events delivered in order, each object through the runtime's real
    ingest transform (the cache keeps this manager's managedFields entry only, without its time), each
    event asked of ``applier.hold_own_echo`` as ``Controller.watch(hold=...)`` asks it."""

    def __init__(self, server: Server, applier: Any) -> None:
        self.server = server
        self.applier = applier
        self.transform = make_transform([MANAGER])
        self.store: Any = self.transform(server.render())
        self.deliveries: list[Delivery] = []

    @property
    def pending(self) -> int:
        return len(self.server.events) - len(self.deliveries)

    def deliver(self, count: int | None = None) -> None:
        """Deliver the next ``count`` events (all pending ones by default)."""
        for _ in range(self.pending if count is None else min(count, self.pending)):
            event = self.server.events[len(self.deliveries)]
            old, new = self.store, self.transform(copy.deepcopy(event.new))
            self.store = new
            delivery = Delivery(event, old, new)
            self.deliveries.append(delivery)

            def release(d: Delivery = delivery) -> None:
                assert not d.woken, "released twice"
                d.woken = True

            if not self.applier.hold_own_echo(THING, old, new, None, release):
                delivery.woken = True
