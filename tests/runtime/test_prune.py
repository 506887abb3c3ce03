"""Pruning selects only objects stamped by this controller and no longer desired; deletes carry the UID."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.runtime.client import Conflict
from gpustack_worker.runtime.frozen import freeze
from gpustack_worker.runtime.prune import OWNER_LABEL, Pruner, owner_of, owner_selector, stale, stamp
from gpustack_worker.runtime.resources import Resource

RF = Resource("kueue.x-k8s.io", "v1beta2", "ResourceFlavor", "resourceflavors", namespaced=False)
LQ = Resource("kueue.x-k8s.io", "v1beta2", "LocalQueue", "localqueues", namespaced=True)
ME = "chain-flavors"


def obj(name: str, owner: str | None = ME, namespace: str | None = None, **meta: Any) -> Any:
    labels = {"x": "y"} | ({OWNER_LABEL: owner} if owner is not None else {})
    m: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "labels": labels, **meta}
    if namespace:
        m["namespace"] = namespace
    return freeze({"metadata": m})


def test_stamp_adds_the_owner_label_without_touching_the_input() -> None:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "labels": {"k": "v"}}}
    out = stamp(body, ME)
    assert out["metadata"]["labels"] == {"k": "v", OWNER_LABEL: ME}
    assert body["metadata"]["labels"] == {"k": "v"}
    assert stamp({"metadata": {"name": "a"}}, ME)["metadata"]["labels"] == {OWNER_LABEL: ME}
    assert owner_of(out) == ME
    assert owner_of({"metadata": {"name": "a"}}) is None
    assert owner_selector(ME) == f"{OWNER_LABEL}={ME}"


@pytest.mark.parametrize("bad", ["", "-leading", "trailing-", "has space", "x" * 64, "a/b"])
def test_controller_names_must_be_label_values(bad: str) -> None:
    with pytest.raises(ValueError, match="not a valid label value"):
        stamp({"metadata": {"name": "a"}}, bad)
    with pytest.raises(ValueError):
        Pruner(object(), RF, controller=bad)  # type: ignore[arg-type]


def test_stale_selects_only_our_undesired_live_objects() -> None:
    cached = [
        obj("wanted"),
        obj("gone-from-plan"),
        obj("another-stale"),
        obj("admins", owner=None),  # unstamped: never ours
        obj("topologys", owner="chain-topology"),  # another controller's
        obj("empty-stamp", owner=""),
        obj("already-deleting", deletionTimestamp="2025-01-01T00:00:00Z"),
    ]
    picked = stale(cached, {"wanted", "not-cached-yet"}, ME)
    assert [o["metadata"]["name"] for o in picked] == ["another-stale", "gone-from-plan"]
    assert stale(cached, {"wanted", "gone-from-plan", "another-stale"}, ME) == []


def test_stale_compares_namespaced_keys() -> None:
    cached = [obj("lq", namespace="team-a"), obj("lq", namespace="team-b")]
    assert [o["metadata"]["namespace"] for o in stale(cached, {"team-a/lq"}, ME)] == ["team-b"]


class DeleteRecorder:
    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[tuple[str, str, str | None, dict[str, Any]]] = []

    async def delete(self, resource: Resource, name: str, namespace: str | None = None, **kw: Any) -> bool:
        self.calls.append((resource.plural, name, namespace, kw))
        answer = self.answers.get(name, True)
        if isinstance(answer, BaseException):
            raise answer
        return bool(answer)


async def test_pruner_deletes_with_the_uid_precondition_and_skips_replaced_or_gone_objects() -> None:
    client = DeleteRecorder({"replaced": Conflict(409, "Conflict", {}), "vanished": False})
    pruner = Pruner(client, LQ, controller=ME)  # type: ignore[arg-type]
    cached = [
        obj("keep", namespace="ns"),
        obj("stale", namespace="ns"),
        obj("replaced", namespace="ns"),
        obj("vanished", namespace="ns"),
        obj("foreign", owner="someone-else", namespace="ns"),
    ]
    deleted = await pruner.prune(cached, {"ns/keep"})
    assert deleted == ["ns/stale"]
    assert pruner.deleted == 1
    assert client.calls == [
        ("localqueues", "replaced", "ns", {"uid": "uid-replaced"}),
        ("localqueues", "stale", "ns", {"uid": "uid-stale"}),
        ("localqueues", "vanished", "ns", {"uid": "uid-vanished"}),
    ]


async def test_pruner_passes_a_propagation_policy_when_asked_and_propagates_other_errors() -> None:
    client = DeleteRecorder({"boom": RuntimeError("server down")})
    pruner = Pruner(client, RF, controller=ME, propagation_policy="Foreground")  # type: ignore[arg-type]
    assert await pruner.prune([obj("a")], set()) == ["a"]
    assert client.calls[0][3] == {"uid": "uid-a", "propagation_policy": "Foreground"}
    with pytest.raises(RuntimeError, match="server down"):
        await pruner.prune([obj("boom")], set())


async def test_nothing_to_prune_issues_no_request() -> None:
    client = DeleteRecorder()
    pruner = Pruner(client, RF, controller=ME)  # type: ignore[arg-type]
    assert await pruner.prune([obj("a"), obj("b", owner=None)], {"a"}) == []
    assert client.calls == []
