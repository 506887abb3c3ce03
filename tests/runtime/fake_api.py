"""An in-memory stand-in for the API server at the HTTP level, for driving the real ``Client`` (and through it
the leader elector and the Manager) without a control plane.

``FakeServer`` keeps objects by URL path with resourceVersions and the optimistic-concurrency rules the
elector relies on (POST of an existing name and PUT with a stale resourceVersion answer 409). Each
``Client`` gets its own ``FakeApi(server, name)``, the shape of kr8s' ``Api`` that ``Client`` calls
(``call_api`` as an async context manager yielding an ``httpx.Response``), so the server knows who sent
what: every request that reached it is recorded with the sender and the time on the test's clock, and
failures or hangs can be injected per sender and resource.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import orjson

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from gpustack_worker.runtime.clock import Clock

__all__ = ("FakeApi", "FakeServer", "Request")

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True, slots=True)
class Request:
    """One request that reached the server."""

    sender: str
    method: str
    path: str
    at: float
    body: dict[str, Any] | None
    status: int

    @property
    def resource(self) -> str:
        """The plural of the addressed kind (``leases``, ``configmaps``...)."""
        parts = self.path.strip("/").split("/")
        if "namespaces" in parts:
            i = parts.index("namespaces")
            return parts[i + 2] if len(parts) > i + 2 else "namespaces"
        return parts[3] if parts[0] == "apis" else parts[2]

    @property
    def is_write(self) -> bool:
        return self.method in WRITES


@dataclass
class _Auth:
    server: str = "https://fake.invalid:6443"

    async def reauthenticate(self) -> None:
        return None


@dataclass
class FakeServer:
    """Objects by path; requests recorded; per-(sender, resource) failures and hangs."""

    clock: Clock
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    #: (sender, resource plural) -> HTTP status answered to that sender's *writes* of that resource.
    failing: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (sender, resource plural) whose writes never get an answer (until ``unhang``).
    hanging: set[tuple[str, str]] = field(default_factory=set)
    _rv: int = 0
    _unhang: asyncio.Event = field(default_factory=asyncio.Event)

    def fail(self, sender: str, resource: str, status: int = 500) -> None:
        self.failing[(sender, resource)] = status

    def heal(self, sender: str, resource: str) -> None:
        self.failing.pop((sender, resource), None)

    def hang(self, sender: str, resource: str) -> None:
        self.hanging.add((sender, resource))

    def unhang(self) -> None:
        self.hanging.clear()
        self._unhang.set()

    def writes(self, *, sender: str | None = None, resource: str | None = None) -> list[Request]:
        """Writes that reached the server (answered or not), optionally for one sender / resource."""
        return [
            r
            for r in self.requests
            if r.is_write
            and (sender is None or r.sender == sender)
            and (resource is None or r.resource == resource)
        ]

    def get(self, path: str) -> dict[str, Any] | None:
        return self.objects.get(path)

    async def handle(
        self, sender: str, method: str, path: str, body: dict[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        probe = Request(sender, method, path, self.clock.now(), body, 0)
        key = (sender, probe.resource)
        if method in WRITES and key in self.hanging:
            self.requests.append(probe)
            while key in self.hanging:
                self._unhang.clear()
                await self._unhang.wait()
            return 503, {"reason": "ServiceUnavailable", "message": "was hanging"}
        status, out = self._answer(sender, method, path, body)
        self.requests.append(Request(sender, method, path, self.clock.now(), body, status))
        return status, out

    def _answer(
        self, sender: str, method: str, path: str, body: dict[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        probe = Request(sender, method, path, 0.0, body, 0)
        if method in WRITES and (sender, probe.resource) in self.failing:
            status = self.failing[(sender, probe.resource)]
            return status, {"reason": "InternalError", "message": "injected failure"}
        if method == "GET":
            obj = self.objects.get(path)
            return (200, obj) if obj is not None else (404, {"reason": "NotFound"})
        if method == "DELETE":
            return (200, {}) if self.objects.pop(path, None) is not None else (404, {"reason": "NotFound"})
        assert body is not None
        meta = body.setdefault("metadata", {})
        if method == "POST":
            path = f"{path}/{meta['name']}"
            if path in self.objects:
                return 409, {"reason": "AlreadyExists"}
        elif method == "PUT":
            current = self.objects.get(path)
            if current is None:
                return 404, {"reason": "NotFound"}
            if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return 409, {"reason": "Conflict"}
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        self.objects[path] = body
        return (201 if method == "POST" else 200), body


class FakeApi:
    """The part of kr8s' ``Api`` that ``Client`` uses, answering from a :class:`FakeServer` as ``sender``."""

    def __init__(self, server: FakeServer, sender: str) -> None:
        self.server = server
        self.sender = sender
        self.auth = _Auth()

    @contextlib.asynccontextmanager
    async def call_api(
        self,
        method: str = "GET",
        version: str = "v1",
        base: str = "",
        namespace: str | None = None,
        url: str = "",
        raise_for_status: bool = True,
        stream: bool = False,
        **kwargs: Any,
    ) -> AsyncIterator[httpx.Response]:
        content = kwargs.get("content")
        body = orjson.loads(content) if content else None
        status, out = await self.server.handle(self.sender, method, f"{base}/{url}", body)
        yield httpx.Response(status, content=orjson.dumps(out), headers={"Content-Type": "application/json"})

    async def reauthenticate(self) -> None:
        return None
