"""kube-apiserver's audit log, read back: writes counted from the server's side.

The dev cluster keeps an audit log when :attr:`DevCluster.audit_log
<gpustack_worker.devcluster.cluster.DevCluster.audit_log>` is set (the test fixture always sets it to
``<dir>/audit.log``; ``gpustack-worker devcluster up --audit-log FILE`` does too). The policy
(:func:`audit_policy`) records, at ``Metadata`` level (no bodies):

* every write — verbs ``create``, ``update``, ``patch``, ``delete``, ``deletecollection`` — from every
  user (our processes, Kueue, nfd-master, the test harness);
* every request, reads and watches included, from the ServiceAccounts of the ``gpustack-system``
  namespace (group ``system:serviceaccounts:gpustack-system``), so the RBAC test sees each verb the
  agent and the controller use;
* nothing else.

Stage ``RequestReceived`` is omitted, so a request is one JSON line at ``ResponseComplete``; a watch
(long-running) writes a ``ResponseStarted`` line when it starts and a ``ResponseComplete`` line when it
ends. :class:`AuditLog` folds both into one :class:`AuditEvent` per request (keyed by ``auditID``), so a
watch counts once, as soon as it started. The log backend runs in ``blocking`` mode: a request's line is
in the file before its response reaches the client, so "the client got an answer" implies "the log has
it" — no polling needed to count what a finished call did.

Interface (used by tests and benchmarks):

``AuditLog(path)``
    A reader of the JSON-lines file at ``path``. It parses incrementally (only bytes appended since the
    previous call), so calling it repeatedly on a growing log is cheap. A missing file reads as empty.

``AuditLog.events(*, user_agent_prefix=None, username=None, since=None) -> list[AuditEvent]``
    Every recorded request in log order (first line of each request), optionally filtered: the
    User-Agent starts with ``user_agent_prefix``; the authenticated user name equals ``username``;
    ``requestReceivedTimestamp >= since`` (an aware :class:`~datetime.datetime`; a naive one is taken
    as UTC).

``AuditLog.writes(user_agent_prefix=None, since=None, *, username=None) -> list[AuditEvent]``
    :meth:`events` restricted to the write verbs (:data:`WRITE_VERBS`).

``AuditLog.counts(user_agent_prefix=None, since=None, *, username=None, writes_only=True)
-> Counter[tuple[str, str, str]]``
    Requests per ``(userAgent, resource, verb)``, where ``resource`` is
    :attr:`AuditEvent.resource_path` (``"nodes"``, ``"nodes/status"``, or the URL path for non-resource
    requests). Writes only unless ``writes_only=False``.

``AuditEvent``
    ``audit_id``, ``stage``, ``verb`` (``get``/``list``/``watch``/``create``/``update``/``patch``/
    ``delete``/``deletecollection``, or the HTTP verb for non-resource URLs), ``api_group`` (``""`` for
    core), ``resource`` (``""`` for a non-resource URL), ``subresource``, ``namespace``, ``name``,
    ``user_agent``, ``username``, ``groups``, ``code`` (HTTP status; ``None`` while a watch is open),
    ``request_uri``, ``received`` (``requestReceivedTimestamp`` as an aware ``datetime``); properties
    ``is_write`` and ``resource_path``.

``audit_policy(request_bodies=()) -> dict``
    The ``audit.k8s.io/v1`` Policy the dev cluster starts kube-apiserver with. Writes to the API groups
    named in ``request_bodies`` (``""`` for core) are recorded at ``Request`` level instead: the event's
    ``request_object`` then holds the body that was sent (a test that counts writes shows what changed
    between two writes of one object).
"""

from __future__ import annotations

import collections
import contextlib
import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import orjson

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

__all__ = ("AUDITED_SA_GROUP", "WRITE_VERBS", "AuditEvent", "AuditLog", "audit_policy")

#: The verbs that change state, as the audit log names them.
WRITE_VERBS: Final = frozenset({"create", "update", "patch", "delete", "deletecollection"})
#: Every ServiceAccount of the system namespace is in this group; all their requests are recorded.
AUDITED_SA_GROUP: Final = "system:serviceaccounts:gpustack-system"


def audit_policy(request_bodies: Iterable[str] = ()) -> dict[str, Any]:
    """The audit Policy: Metadata for our ServiceAccounts' every request and for everyone's writes;
    the request body too for writes to the API groups in ``request_bodies``."""
    groups = sorted(set(request_bodies))
    bodies = [{"level": "Request", "verbs": sorted(WRITE_VERBS), "resources": [{"group": g} for g in groups]}]
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        # One line per request (ResponseComplete); watches add ResponseStarted, folded by AuditLog.
        "omitStages": ["RequestReceived"],
        "rules": [
            # First match wins: bodies where asked; our components' reads too, for the RBAC verbs test.
            *(bodies if groups else []),
            {"level": "Metadata", "userGroups": [AUDITED_SA_GROUP]},
            {"level": "Metadata", "verbs": sorted(WRITE_VERBS)},
            {"level": "None"},
        ],
    }


def _timestamp(value: Any) -> datetime.datetime:
    if not isinstance(value, str) or not value:
        return datetime.datetime.min.replace(tzinfo=datetime.UTC)
    return datetime.datetime.fromisoformat(value)


def _aware(when: datetime.datetime) -> datetime.datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)


#: The ``user.extra`` key naming the Pod a projected ServiceAccount token is bound to.
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One API request as the server recorded it (Metadata level)."""

    audit_id: str
    stage: str
    verb: str
    api_group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    user_agent: str
    username: str
    groups: tuple[str, ...]
    code: int | None
    request_uri: str
    received: datetime.datetime
    #: The body sent (a policy rule at ``Request`` level), else None.
    request_object: Any = None
    #: The Pod a ServiceAccount token was bound to (its projected token: ``user.extra``'s
    #: ``authentication.kubernetes.io/pod-name``), else "" (a token minted for a local process).
    pod_name: str = ""

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> AuditEvent:
        ref = raw.get("objectRef") or {}
        user = raw.get("user") or {}
        status = raw.get("responseStatus") or {}
        code = status.get("code")
        return cls(
            audit_id=str(raw.get("auditID") or ""),
            stage=str(raw.get("stage") or ""),
            verb=str(raw.get("verb") or ""),
            api_group=str(ref.get("apiGroup") or ""),
            resource=str(ref.get("resource") or ""),
            subresource=str(ref.get("subresource") or ""),
            namespace=str(ref.get("namespace") or ""),
            name=str(ref.get("name") or ""),
            user_agent=str(raw.get("userAgent") or ""),
            username=str(user.get("username") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            code=int(code) if isinstance(code, int) else None,
            request_uri=str(raw.get("requestURI") or ""),
            received=_timestamp(raw.get("requestReceivedTimestamp")),
            request_object=raw.get("requestObject"),
            pod_name=str(((user.get("extra") or {}).get(POD_NAME_EXTRA) or [""])[0]),
        )

    @property
    def is_write(self) -> bool:
        return self.verb in WRITE_VERBS

    @property
    def resource_path(self) -> str:
        """``resource`` or ``resource/subresource``; for a non-resource request, its URL path."""
        if not self.resource:
            return self.request_uri.split("?", 1)[0]
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


class AuditLog:
    """Incremental reader of one JSON-lines audit log (see the module docstring for the interface)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._by_id: dict[str, AuditEvent] = {}

    @classmethod
    def from_now(cls, path: Path) -> AuditLog:
        """A reader of what is logged from now on: a window that starts at this mark, so a check on a
        shared control plane sees only its own test's requests (and never re-reads the whole log)."""
        log = cls(path)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        # Only whole lines before the mark: a line being written right now belongs to the window, so the
        # mark is just after the last newline (searched backwards, a block at a time).
        with contextlib.suppress(FileNotFoundError), path.open("rb") as f:
            end = size
            while end > 0:
                start = max(0, end - 65536)
                f.seek(start)
                at = f.read(end - start).rfind(b"\n")
                if at >= 0:
                    log._offset = start + at + 1
                    break
                end = start
        return log

    def _refresh(self) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size < self._offset:  # a new file at the same path: start over
            self._offset = 0
            self._by_id.clear()
        if size == self._offset:
            return
        with self.path.open("rb") as f:
            f.seek(self._offset)
            chunk = f.read(size - self._offset)
        # Only whole lines: a line being written right now is read next time.
        end = chunk.rfind(b"\n") + 1
        self._offset += end
        for line in chunk[:end].splitlines():
            if not line.strip():
                continue
            event = AuditEvent.from_json(orjson.loads(line))
            previous = self._by_id.get(event.audit_id)
            if previous is None:
                self._by_id[event.audit_id] = event
            elif event.stage == "ResponseComplete":
                # A watch that ended: keep its place in the log (dicts keep insertion order), take the code.
                self._by_id[event.audit_id] = event

    def events(
        self,
        *,
        user_agent_prefix: str | None = None,
        username: str | None = None,
        since: datetime.datetime | None = None,
    ) -> list[AuditEvent]:
        """Every recorded request, one per auditID, in log order, filtered as the arguments say."""
        self._refresh()
        floor = _aware(since) if since is not None else None
        return [
            e
            for e in self._by_id.values()
            if (user_agent_prefix is None or e.user_agent.startswith(user_agent_prefix))
            and (username is None or e.username == username)
            and (floor is None or e.received >= floor)
        ]

    def writes(
        self,
        user_agent_prefix: str | None = None,
        since: datetime.datetime | None = None,
        *,
        username: str | None = None,
    ) -> list[AuditEvent]:
        """The write requests (create/update/patch/delete/deletecollection) among :meth:`events`."""
        return [
            e
            for e in self.events(user_agent_prefix=user_agent_prefix, username=username, since=since)
            if e.is_write
        ]

    def counts(
        self,
        user_agent_prefix: str | None = None,
        since: datetime.datetime | None = None,
        *,
        username: str | None = None,
        writes_only: bool = True,
    ) -> collections.Counter[tuple[str, str, str]]:
        """Requests per ``(userAgent, resource_path, verb)`` (writes only unless ``writes_only=False``)."""
        selected = (
            self.writes(user_agent_prefix, since, username=username)
            if writes_only
            else self.events(user_agent_prefix=user_agent_prefix, username=username, since=since)
        )
        return collections.Counter((e.user_agent, e.resource_path, e.verb) for e in selected)
