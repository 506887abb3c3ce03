"""Enqueue mappers (own key, owner reference, index of another store, kind-to-kind, all keys, union), and
Controller.watch mapping both the old and the new object of an update."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import pytest
from handler_source import HandlerSource

from gpustack_worker.runtime.clock import FakeClock
from gpustack_worker.runtime.controller import Controller, Result, labels_changed
from gpustack_worker.runtime.indexers import by_label
from gpustack_worker.runtime.mappers import all_keys, by_index, by_owner, merge, own_key, to_keys
from gpustack_worker.runtime.queue import WorkQueue
from gpustack_worker.runtime.resources import Resource
from gpustack_worker.runtime.store import Store

if TYPE_CHECKING:
    from gpustack_worker.runtime.informer import Informer

CQ = Resource("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues", namespaced=False)
LQ = Resource("kueue.x-k8s.io", "v1beta2", "LocalQueue", "localqueues", namespaced=True)
IT = Resource("worker.gpustack.ai", "v1alpha1", "InstanceType", "instancetypes", namespaced=False)
DEPLOY = Resource("apps", "v1", "Deployment", "deployments", namespaced=True)
FLAVOR_OF: str = "flavor-of"
POOL = "example.com/pool"


def obj(name: str, namespace: str | None = None, *, labels: dict[str, str] | None = None, **meta: Any) -> Any:
    m: dict[str, Any] = {"name": name, "labels": labels or {}, **meta}
    if namespace:
        m["namespace"] = namespace
    return {"metadata": m}


def ref(kind: str, name: str, api_version: str, *, controller: bool | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind, "name": name, "apiVersion": api_version, "uid": f"uid-{name}"}
    if controller is not None:
        out["controller"] = controller
    return out


def test_own_key_is_namespace_slash_name_or_name() -> None:
    assert own_key(obj("n1")) == ["n1"]
    assert own_key(obj("lq", "team-a")) == ["team-a/lq"]
    assert own_key({"metadata": {}}) == []
    assert own_key({}) == []


@pytest.mark.parametrize(
    ("owner", "item", "controller_only", "expected"),
    [
        # a LocalQueue owned by a cluster-scoped ClusterQueue: the key is the queue's name
        (CQ, obj("lq", "team-a", ownerReferences=[ref("ClusterQueue", "cq-1", "kueue.x-k8s.io/v1beta2")]),
         False, ["cq-1"]),
        # the owner's version does not matter, its group does
        (CQ, obj("lq", "team-a", ownerReferences=[ref("ClusterQueue", "cq-1", "kueue.x-k8s.io/v1beta1")]),
         False, ["cq-1"]),
        (CQ, obj("lq", "team-a", ownerReferences=[ref("ClusterQueue", "cq-1", "other.io/v1")]), False, []),
        # a namespaced owner lives in the object's namespace
        (DEPLOY, obj("rs", "team-a", ownerReferences=[ref("Deployment", "web", "apps/v1")]), False,
         ["team-a/web"]),
        # core-group owners have an apiVersion without a group
        (Resource("", "v1", "Node", "nodes", False),
         obj("nf", "ns", ownerReferences=[ref("Node", "n1", "v1")]), False, ["n1"]),
        # several owners, other kinds ignored, duplicates once
        (CQ, obj("x", ownerReferences=[ref("ClusterQueue", "a", "kueue.x-k8s.io/v1beta2"),
                                       ref("InstanceType", "a", "worker.gpustack.ai/v1alpha1"),
                                       ref("ClusterQueue", "b", "kueue.x-k8s.io/v1beta2"),
                                       ref("ClusterQueue", "a", "kueue.x-k8s.io/v1beta2")]),
         False, ["a", "b"]),
        # controller_only keeps the controller reference only
        (CQ, obj("x", ownerReferences=[ref("ClusterQueue", "a", "kueue.x-k8s.io/v1beta2"),
                                       ref("ClusterQueue", "b", "kueue.x-k8s.io/v1beta2", controller=True)]),
         True, ["b"]),
        # no references, malformed references, a namespaced owner of a cluster-scoped object
        (CQ, obj("x"), False, []),
        (CQ, obj("x", ownerReferences=["junk", {"kind": "ClusterQueue"}]), False, []),
        (DEPLOY, obj("cluster-scoped", ownerReferences=[ref("Deployment", "web", "apps/v1")]), False, []),
    ],
)  # fmt: skip
def test_by_owner(owner: Resource, item: Any, controller_only: bool, expected: list[str]) -> None:
    assert by_owner(owner, controller_only=controller_only)(item) == expected


def _flavors() -> Store:
    """Flavors indexed by the pool label their nodes carry (the flavor's identity)."""
    store = Store({FLAVOR_OF: by_label(POOL)})
    store.upsert(obj("flavor-a", labels={POOL: "a"}))
    store.upsert(obj("flavor-a-big", labels={POOL: "a"}))
    store.upsert(obj("flavor-b", labels={POOL: "b"}))
    return store


def test_by_index_maps_a_node_to_the_flavors_of_its_pool_through_the_other_store() -> None:
    flavors = _flavors()
    node_pool = by_label(POOL)  # the same identity function, applied to the Node
    mapper = by_index(flavors, FLAVOR_OF, node_pool)
    assert mapper(obj("n1", labels={POOL: "a"})) == ["flavor-a", "flavor-a-big"]
    assert mapper(obj("n2", labels={POOL: "b"})) == ["flavor-b"]
    assert mapper(obj("n3", labels={POOL: "c"})) == []
    assert mapper(obj("n4")) == []
    # looked up when the event arrives: a flavor added later is found
    flavors.upsert(obj("flavor-c", labels={POOL: "c"}))
    assert mapper(obj("n3", labels={POOL: "c"})) == ["flavor-c"]


def test_by_index_with_several_values_and_a_failing_value_function() -> None:
    flavors = _flavors()
    mapper = by_index(flavors, FLAVOR_OF, lambda o: o["metadata"]["labels"]["pools"].split(","))
    assert mapper(obj("n", labels={"pools": "b,a"})) == ["flavor-a", "flavor-a-big", "flavor-b"]
    assert mapper(obj("bad")) == []  # KeyError inside the function: no keys, no exception


def test_to_keys_cluster_scoped_and_namespaced_targets() -> None:
    same_name = to_keys(IT, lambda o: [o["metadata"]["name"]])
    assert same_name(obj("gpustack--nvidia-a10g-linux-amd64")) == ["gpustack--nvidia-a10g-linux-amd64"]
    # a Namespace to its LocalQueues (explicit namespace), and an object to LQs in its own namespace
    per_ns = to_keys(LQ, lambda o: [("lq-1", o["metadata"]["name"]), ("lq-2", o["metadata"]["name"])])
    assert per_ns(obj("team-a")) == ["team-a/lq-1", "team-a/lq-2"]
    own_ns = to_keys(LQ, lambda o: ["lq-1", "lq-1", ""])
    assert own_ns(obj("w", "team-b")) == ["team-b/lq-1"]
    assert own_ns(obj("cluster-scoped")) == []  # namespaced target, no namespace to use
    # a cluster-scoped target never gets a namespace prefix
    assert to_keys(CQ, lambda o: [("cq", "ignored")])(obj("x", "ns")) == ["cq"]

    def broken(o: Any) -> list[str]:
        raise KeyError("spec")

    assert to_keys(CQ, broken)(obj("x")) == []  # a failing function maps to nothing


def test_all_keys_and_merge() -> None:
    flavors = _flavors()
    assert sorted(all_keys(flavors)(obj("topology"))) == ["flavor-a", "flavor-a-big", "flavor-b"]
    union = merge(own_key, to_keys(CQ, lambda o: [o["metadata"]["name"]]), lambda o: ["x", "x"])
    assert union(obj("n1")) == ["n1", "x"]
    assert merge()(obj("n1")) == []


async def _noop(key: str) -> Result:
    return Result.done()


async def _queued(queue: WorkQueue) -> set[str]:
    keys: set[str] = set()
    while len(queue):
        key = await queue.get()
        assert key is not None
        keys.add(key)
        queue.done(key)
    return keys


async def test_controller_watch_maps_old_and_new_object_of_an_update() -> None:
    """A Node moving from pool a to pool b wakes the flavors of both pools (the old one loses a node)."""
    flavors = _flavors()
    queue = WorkQueue("mappers-test", clock=FakeClock())
    ctl = Controller("mappers-test", _noop, queue)
    source = HandlerSource()
    ctl.watch(
        cast("Informer", source),
        mapper=by_index(flavors, FLAVOR_OF, by_label(POOL)),
        predicates=[labels_changed],
    )
    source.emit("MODIFIED", obj("n1", labels={POOL: "a"}), obj("n1", labels={POOL: "b"}))
    assert await _queued(queue) == {"flavor-a", "flavor-a-big", "flavor-b"}
    source.emit("ADDED", None, obj("n2", labels={POOL: "b"}))
    assert await _queued(queue) == {"flavor-b"}
    source.emit("DELETED", obj("n3", labels={POOL: "a"}), None)
    assert await _queued(queue) == {"flavor-a", "flavor-a-big"}
    # an update the predicate drops enqueues nothing
    source.emit("MODIFIED", obj("n1", labels={POOL: "a"}), obj("n1", labels={POOL: "a"}))
    assert await _queued(queue) == set()


async def test_controller_watch_by_owner_maps_both_owners_when_the_owner_reference_changes() -> None:
    queue = WorkQueue("mappers-owner-test", clock=FakeClock())
    ctl = Controller("mappers-owner-test", _noop, queue)
    source = HandlerSource()
    ctl.watch(cast("Informer", source), mapper=by_owner(CQ))
    old = obj("lq", "team-a", ownerReferences=[ref("ClusterQueue", "cq-old", "kueue.x-k8s.io/v1beta2")])
    new = obj("lq", "team-a", ownerReferences=[ref("ClusterQueue", "cq-new", "kueue.x-k8s.io/v1beta2")])
    source.emit("MODIFIED", old, new)
    assert await _queued(queue) == {"cq-old", "cq-new"}
