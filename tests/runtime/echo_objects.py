"""The objects the Applier's own-echo tests write and watch (a ConfigMap at a chosen resourceVersion), and
a client stub that answers each write at a version the test chooses."""

from __future__ import annotations

from typing import Any

from gpustack_worker.runtime.resources import Resource

MANAGER = "echo-test"
THING = Resource("", "v1", "ConfigMap", "configmaps", namespaced=True)
OTHER_KIND = Resource("", "v1", "Secret", "secrets", namespaced=True)
NS = "ns"


class StubClient:
    """Answers every apply/create with the body at the resourceVersion in ``answers`` (in order), or
    raises ``refuse``."""

    def __init__(self, *answers: int | None) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.refuse: BaseException | None = None

    def _answer(self, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append((verb, body))
        if self.refuse is not None:
            raise self.refuse
        version = self.answers.pop(0)
        out = {**body, "metadata": {**body["metadata"], "uid": "u1"}}
        if version is not None:
            out["metadata"]["resourceVersion"] = str(version)
        return out

    async def apply(self, resource: Resource, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._answer("apply", body)

    async def create(self, resource: Resource, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._answer("create", body)


class Cache:
    field_managers = frozenset({MANAGER})


def body(value: str = "1", name: str = "x") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "data": {"v": value},
    }


def obj(version: int | None, value: str = "0", name: str = "x", *, ours: bool = False) -> dict[str, Any]:
    """The object as cached / delivered by the watch at ``version`` (``ours``: our managedFields entry owns
    ``data.v``, so applying ``body(value)`` is a no-op)."""
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": "u1"}
    if version is not None:
        meta["resourceVersion"] = str(version)
    if ours:
        meta["managedFields"] = [
            {"manager": MANAGER, "operation": "Apply", "fieldsV1": {"f:data": {"f:v": {}}}}
        ]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": value}}
