"""A recording stand-in for the runtime Client, for driving the agent's reconcilers without a server."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpustack_worker.runtime.resources import Resource


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class RecordingClient:
    """Records every write; ``apply`` answers with the current object merged with the body."""

    def __init__(self, objects: dict[str, dict[str, Any]] | None = None) -> None:
        self.objects = objects or {}
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    async def apply(
        self, resource: Resource, body: dict[str, Any], *, subresource: str | None = None, **_: Any
    ) -> dict[str, Any]:
        self.calls.append(("apply", subresource or "", body))
        name = body["metadata"]["name"]
        return _merge(self.objects.get(name, {}), body)

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: dict[str, Any],
        *,
        subresource: str | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        self.calls.append(("patch", subresource or "", body))
        return _merge(self.objects.get(name, {}), body)

    async def delete(self, resource: Resource, name: str, namespace: str | None = None, **_: Any) -> bool:
        self.calls.append(("delete", "", {"name": name}))
        return True
