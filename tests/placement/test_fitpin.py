"""The Workload fit pin (reference §5.3): every recognition rule, the requirements from U and N, how they are
ANDed into the required node affinity, and the AdmissionReview answer (allowed, JSONPatch, never denied)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import shutil
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import orjson
import pytest

from gpustack_worker.api import keys, kinds, webhooks
from gpustack_worker.api.settings import ChainSettings
from gpustack_worker.cli.webhook_serving import admission_webhooks
from gpustack_worker.devcluster.pki import make_pki
from gpustack_worker.placement import fitpin
from gpustack_worker.placement.fitpin_webhook import FitPinWebhook
from gpustack_worker.runtime.frozen import FrozenDict, freeze
from gpustack_worker.runtime.registry import InformerRegistry
from gpustack_worker.runtime.store import Store
from tests.kit import kueue

if TYPE_CHECKING:
    from pathlib import Path

NS = "team-a"
GROUP = "nvidia-a10g"
CQ = keys.pool_name("linux", "amd64", GROUP)
LQ = keys.local_queue_name(CQ)
SLICED_KEY = keys.sliced_max_free_units_key(GROUP)
SHARED_KEY = keys.shared_free_cards_key(GROUP)
#: A 30 % slice, folded by Gate 1.
U30 = 30 * keys.UNITS_PER_PERCENT
REQUIRED = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


# --- builders -----------------------------------------------------------------------------------------


def local_queue(name: str = LQ, namespace: str = NS, cluster_queue: str = CQ) -> dict[str, Any]:
    return kueue.local_queue(name, cluster_queue, namespace)


def cluster_queue(name: str = CQ, labels: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {keys.RESOURCE_TYPE: keys.TYPE_INSTANCE_TYPES} if labels is None else labels
    return kueue.cluster_queue(name, {}, labels=labels)


def instance_type(name: str = CQ, group: str | None = GROUP) -> dict[str, Any]:
    spec: dict[str, Any] = {"acceleratable": True, "os": "linux", "arch": "amd64"}
    if group is not None:
        spec["acceleratorGroup"] = group
    return {
        "apiVersion": kinds.INSTANCE_TYPE.api_version,
        "kind": "InstanceType",
        "metadata": {"name": name},
        "spec": spec,
    }


def container(resources: dict[str, str] | None = None, name: str = "engine") -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "engine:1"}
    if resources:
        out["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    return out


SLICE = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": str(U30)}
SHARED3 = {"nvidia.com/gpu.shared": "3"}


def podset(
    *containers: dict[str, Any], name: str = "main", spec: dict[str, Any] | None = None
) -> dict[str, Any]:
    pod_spec = dict(spec or {})
    pod_spec["containers"] = list(containers) or [container()]
    return kueue.pod_set(pod_spec, name=name)


def workload(
    *podsets: dict[str, Any], queue: str | None = LQ, reserved: bool = False, name: str = "wl"
) -> dict[str, Any]:
    wl = kueue.workload(name, NS, queue, *(podsets or [podset(container(SLICE))]))
    if reserved:
        wl["status"] = {
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}]
        }
    return wl


def request(
    obj: dict[str, Any], *, operation: str = "CREATE", old: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    req: dict[str, Any] = {
        "uid": "0b6e0b4e-0000-4000-8000-000000000001",
        "kind": {"group": "kueue.x-k8s.io", "version": "v1beta2", "kind": "Workload"},
        "resource": {"group": "kueue.x-k8s.io", "version": "v1beta2", "resource": "workloads"},
        "namespace": NS,
        "name": obj["metadata"].get("name", ""),
        "operation": operation,
        "object": obj,
    }
    if old is not None:
        req["oldObject"] = old
    req.update(extra)
    return req


@dataclass
class World:
    """The three caches as the controller's informers hold them (frozen objects in a Store)."""

    local_queues: Store
    cluster_queues: Store
    instance_types: Store

    @classmethod
    def of(
        cls,
        lqs: tuple[dict[str, Any], ...] = (),
        cqs: tuple[dict[str, Any], ...] = (),
        its: tuple[dict[str, Any], ...] = (),
    ) -> World:
        stores = []
        for objs in (lqs, cqs, its):
            store = Store()
            for obj in objs:
                store.upsert(freeze(obj))
            stores.append(store)
        return cls(*stores)

    def decide(self, req: dict[str, Any], *, enabled: bool = True) -> fitpin.Decision:
        return fitpin.decide(
            req,
            enabled=enabled,
            local_queues=self.local_queues,
            cluster_queues=self.cluster_queues,
            instance_types=self.instance_types,
        )


def full_world() -> World:
    return World.of((local_queue(),), (cluster_queue(),), (instance_type(),))


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 ``add`` (the only operation the pin emits), applied to a copy."""
    out = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] == "add", op
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = out
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if isinstance(parent, list):
            if last == "-":
                parent.append(copy.deepcopy(op["value"]))
            else:
                assert 0 <= int(last) <= len(parent)
                parent.insert(int(last), copy.deepcopy(op["value"]))
        else:
            assert isinstance(parent, dict), (op, parent)
            parent[last] = copy.deepcopy(op["value"])
    return out


def required_terms(wl: dict[str, Any], index: int = 0) -> Any:
    node: Any = wl["spec"]["podSets"][index]["template"]["spec"]
    for name in REQUIRED:
        node = node.get(name) if isinstance(node, dict) else None
    return None if node is None else node.get("nodeSelectorTerms")


def sliced_pin(units: int = U30) -> dict[str, Any]:
    return {"key": SLICED_KEY, "operator": "Gt", "values": [str(units - 1)]}


def shared_pin(cards: int) -> dict[str, Any]:
    return {"key": SHARED_KEY, "operator": "Gt", "values": [str(cards - 1)]}


def pinned(req: dict[str, Any], world: World | None = None) -> tuple[fitpin.Decision, dict[str, Any]]:
    decision = (world or full_world()).decide(req)
    return decision, apply_patch(req["object"], decision.patch)


# --- recognition ----------------------------------------------------------------------------------------


def test_a_recognised_workload_with_a_slice_is_pinned() -> None:
    decision, out = pinned(request(workload()))
    assert decision.group == GROUP
    assert decision.reason == "pinned 1 PodSet(s)"
    assert required_terms(out) == [{"matchExpressions": [sliced_pin()]}]
    assert out["spec"]["podSets"][0]["template"]["spec"]["containers"] == [container(SLICE)]  # nothing else


NOT_OURS: list[tuple[str, World, dict[str, Any], str]] = [
    (
        "wrong prefix",
        full_world(),
        request(workload(queue="team-a-queue")),
        "queue 'team-a-queue' is not an operator entrance",
    ),
    ("no queue name", full_world(), request(workload(queue=None)), "queue None is not an operator entrance"),
    (
        "LocalQueue missing",
        World.of((), (cluster_queue(),), (instance_type(),)),
        request(workload()),
        f"LocalQueue {NS}/{LQ} not found",
    ),
    (
        "LocalQueue only in another namespace",
        World.of((local_queue(namespace="team-b"),), (cluster_queue(),), (instance_type(),)),
        request(workload()),
        f"LocalQueue {NS}/{LQ} not found",
    ),
    (
        "LocalQueue names no ClusterQueue",
        World.of((local_queue(cluster_queue=""),), (cluster_queue(),), (instance_type(),)),
        request(workload()),
        "names no ClusterQueue",
    ),
    (
        "ClusterQueue missing",
        World.of((local_queue(),), (), (instance_type(),)),
        request(workload()),
        f"ClusterQueue {CQ} not found",
    ),
    (
        "ClusterQueue without the type label",
        World.of((local_queue(),), (cluster_queue(labels={}),), (instance_type(),)),
        request(workload()),
        f"ClusterQueue {CQ} is not an InstanceType queue",
    ),
    (
        "ClusterQueue of another type",
        World.of(
            (local_queue(),),
            (cluster_queue(labels={keys.RESOURCE_TYPE: keys.TYPE_NODES}),),
            (instance_type(),),
        ),
        request(workload()),
        f"ClusterQueue {CQ} is not an InstanceType queue",
    ),
    (
        "no InstanceType",
        World.of((local_queue(),), (cluster_queue(),), ()),
        request(workload()),
        f"InstanceType {CQ} not found",
    ),
    (
        "InstanceType of another name only",
        World.of((local_queue(),), (cluster_queue(),), (instance_type(name=CQ + "-x"),)),
        request(workload()),
        f"InstanceType {CQ} not found",
    ),
    (
        "empty acceleratorGroup",
        World.of((local_queue(),), (cluster_queue(),), (instance_type(group=""),)),
        request(workload()),
        f"InstanceType {CQ} has no acceleratorGroup",
    ),
    (
        "no acceleratorGroup (CPU type)",
        World.of((local_queue(),), (cluster_queue(),), (instance_type(group=None),)),
        request(workload()),
        f"InstanceType {CQ} has no acceleratorGroup",
    ),
    (
        "acceleratorGroup forming an invalid key",
        World.of((local_queue(),), (cluster_queue(),), (instance_type(group="nvidia a10g!"),)),
        request(workload()),
        "is not a valid label key",
    ),
    (
        "UPDATE while the old Workload holds a quota reservation",
        full_world(),
        request(workload(), operation="UPDATE", old=workload(reserved=True)),
        "the old Workload holds a quota reservation",
    ),
    (
        "UPDATE without the old object",
        full_world(),
        request(workload(), operation="UPDATE"),
        "UPDATE without the old Workload",
    ),
    ("DELETE", full_world(), request(workload(), operation="DELETE"), "operation 'DELETE'"),
    (
        "a status subresource write",
        full_world(),
        request(workload(), operation="UPDATE", old=workload(), subResource="status"),
        "not a Workload",
    ),
]


@pytest.mark.parametrize(("world", "req", "why"), [c[1:] for c in NOT_OURS], ids=[c[0] for c in NOT_OURS])
def test_every_missing_link_leaves_the_workload_untouched(
    world: World, req: dict[str, Any], why: str
) -> None:
    decision = world.decide(req)
    assert decision.patch == []
    assert why in decision.reason


def test_setting_off_leaves_a_recognised_workload_untouched() -> None:
    decision = full_world().decide(request(workload()), enabled=False)
    assert decision == fitpin.Decision(reason="workload-fit-affinity is off")


def test_update_acts_while_the_old_workload_holds_no_reservation() -> None:
    # An evicted Workload (QuotaReserved False) counts as not reserved: it is being placed again.
    old = workload()
    old["status"] = {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending"}]}
    new = workload(reserved=True)  # whatever the new object says: the old one decides
    decision, out = pinned(request(new, operation="UPDATE", old=old))
    assert required_terms(out) == [{"matchExpressions": [sliced_pin()]}]
    assert decision.reason == "pinned 1 PodSet(s)"


def test_pods_are_never_touched() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": LQ}},
        "spec": {"queueName": LQ, "containers": [container(SLICE)]},
    }
    req = request(
        pod,
        kind={"group": "", "version": "v1", "kind": "Pod"},
        resource={"group": "", "version": "v1", "resource": "pods"},
    )
    assert full_world().decide(req) == fitpin.Decision(reason="not a Workload")
    answer = FitPinWebhook(
        local_queues=full_world().local_queues,
        cluster_queues=full_world().cluster_queues,
        instance_types=full_world().instance_types,
        settings=_Settings(),
    ).review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
    assert answer["response"] == {"uid": req["uid"], "allowed": True}


# --- requirements from U and N ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        pytest.param(SLICE, [sliced_pin()], id="U>0: Gt U-1 on the sliced key"),
        pytest.param(
            {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "1"},
            [sliced_pin(1)],
            id="U=1: Gt 0",
        ),
        pytest.param(
            {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"},
            [sliced_pin(50 * keys.UNITS_PER_PERCENT)],
            id="percentage not yet folded: the parser folds it",
        ),
        pytest.param(SHARED3, [shared_pin(3)], id="N=3: Gt 2 on the shared key"),
        pytest.param({"nvidia.com/gpu.shared": "2"}, [shared_pin(2)], id="N=2: Gt 1"),
    ],
)
def test_requirements_follow_u_and_n(resources: dict[str, str], expected: list[dict[str, Any]]) -> None:
    _, out = pinned(request(workload(podset(container(resources)))))
    assert required_terms(out) == [{"matchExpressions": expected}]


@pytest.mark.parametrize(
    "resources",
    [
        pytest.param({"nvidia.com/gpu.shared": "1"}, id="N=1"),
        pytest.param({"nvidia.com/gpu": "2"}, id="exclusive cards"),
        pytest.param({"cpu": "2", "memory": "4Gi"}, id="CPU only"),
        pytest.param(
            {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "4096"}, id="not folded"
        ),
        pytest.param(
            {"example.com/fpga.sliced": "1", "example.com/fpga.sliced.units": "5"}, id="unknown base"
        ),
    ],
)
def test_no_slice_and_no_multi_card_share_means_no_pin(resources: dict[str, str]) -> None:
    decision = full_world().decide(request(workload(podset(container(resources)))))
    assert decision.patch == []
    assert decision.group == GROUP
    assert decision.reason == "no PodSet asks for a logical slice or shares on several cards"


def test_the_largest_shared_container_decides_n() -> None:
    ps = podset(
        container({"nvidia.com/gpu.shared": "2"}, "a"), container({"nvidia.com/gpu.shared": "4"}, "b")
    )
    _, out = pinned(request(workload(ps)))
    assert required_terms(out) == [{"matchExpressions": [shared_pin(4)]}]


def test_each_podset_gets_its_own_pin() -> None:
    wl = workload(
        podset(container(SLICE), name="decode"),
        podset(container({"cpu": "1"}), name="router"),
        podset(container(SHARED3), name="prefill"),
    )
    decision, out = pinned(request(wl))
    assert decision.reason == "pinned 2 PodSet(s)"
    assert required_terms(out, 0) == [{"matchExpressions": [sliced_pin()]}]
    assert "affinity" not in out["spec"]["podSets"][1]["template"]["spec"]
    assert required_terms(out, 2) == [{"matchExpressions": [shared_pin(3)]}]


# --- how the requirements join the required node affinity -------------------------------------------------


def _with_required(terms: list[dict[str, Any]], **node_affinity: Any) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms},
                **node_affinity,
            }
        }
    }


ZONE_A = {"key": keys.PRIVATE_ZONE, "operator": "In", "values": ["a"]}
NAME_FIELD = {"key": "metadata.name", "operator": "In", "values": ["node-1"]}


def test_anded_into_every_non_empty_term_and_empty_terms_left_alone() -> None:
    terms: list[dict[str, Any]] = [
        {"matchExpressions": [ZONE_A]},
        {"matchFields": [NAME_FIELD]},
        {},
        {"matchExpressions": [], "matchFields": [NAME_FIELD]},
        {"matchExpressions": []},
    ]
    decision, out = pinned(request(workload(podset(container(SLICE), spec=_with_required(terms)))))
    assert required_terms(out) == [
        {"matchExpressions": [ZONE_A, sliced_pin()]},
        {"matchFields": [NAME_FIELD], "matchExpressions": [sliced_pin()]},
        {},
        {"matchExpressions": [sliced_pin()], "matchFields": [NAME_FIELD]},
        {"matchExpressions": []},
    ]
    assert len(decision.patch) == 3


def test_both_requirements_join_every_term() -> None:
    ps = podset(
        container(SLICE, "a"), container(SHARED3, "b"), spec=_with_required([{"matchExpressions": [ZONE_A]}])
    )
    _, out = pinned(request(workload(ps)))
    assert required_terms(out) == [{"matchExpressions": [ZONE_A, sliced_pin(), shared_pin(3)]}]


PREFERRED = [{"weight": 10, "preference": {"matchExpressions": [ZONE_A]}}]


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({}, id="no affinity"),
        pytest.param({"affinity": None}, id="null affinity"),
        pytest.param({"affinity": {"podAntiAffinity": {}}}, id="only pod anti-affinity"),
        pytest.param(
            {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": PREFERRED}}},
            id="only preferred terms",
        ),
        pytest.param(_with_required([]), id="required without terms"),
        pytest.param(
            {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
            id="required without the terms field",
        ),
    ],
)
def test_without_required_terms_one_term_with_just_the_pin(spec: dict[str, Any]) -> None:
    _, out = pinned(request(workload(podset(container(SLICE), spec=spec))))
    assert required_terms(out) == [{"matchExpressions": [sliced_pin()]}]
    affinity = out["spec"]["podSets"][0]["template"]["spec"]["affinity"]
    before = spec.get("affinity") or {}
    for key, value in before.items():  # what was there stays
        if key != "nodeAffinity":
            assert affinity[key] == value
    if "preferredDuringSchedulingIgnoredDuringExecution" in (before.get("nodeAffinity") or {}):
        assert affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == PREFERRED


def test_only_empty_terms_get_nothing() -> None:
    decision = full_world().decide(request(workload(podset(container(SLICE), spec=_with_required([{}])))))
    assert decision.patch == []
    assert decision.reason == "the pin is already there"


def test_an_identical_expression_is_not_duplicated() -> None:
    terms = [{"matchExpressions": [ZONE_A, sliced_pin()]}, {"matchExpressions": [ZONE_A]}]
    decision, out = pinned(request(workload(podset(container(SLICE), spec=_with_required(terms)))))
    assert required_terms(out) == [
        {"matchExpressions": [ZONE_A, sliced_pin()]},
        {"matchExpressions": [ZONE_A, sliced_pin()]},
    ]
    assert decision.patch == [
        {
            "op": "add",
            "path": "/spec/podSets/0/template/spec/affinity/nodeAffinity/"
            "requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/1/matchExpressions/-",
            "value": sliced_pin(),
        }
    ]


def test_a_pinned_workload_is_left_as_it_is() -> None:
    # The UPDATE after a CREATE that pinned: nothing to add (an idempotent webhook).
    _, out = pinned(request(workload()))
    decision = full_world().decide(request(out, operation="UPDATE", old=out))
    assert decision.patch == []
    assert decision.reason == "the pin is already there"


def test_a_different_value_on_the_same_key_is_anded_not_replaced() -> None:
    # Only an identical expression is recognised as already there (reference §5.3).
    stale = {"key": SLICED_KEY, "operator": "Gt", "values": ["99"]}
    _, out = pinned(
        request(workload(podset(container(SLICE), spec=_with_required([{"matchExpressions": [stale]}]))))
    )
    assert required_terms(out) == [{"matchExpressions": [stale, sliced_pin()]}]


def test_frozen_cache_shapes_and_tuples_are_read() -> None:
    # The cached objects are FrozenDicts with tuples; the request is plain JSON.
    world = World.of((local_queue(),), (cluster_queue(),), (instance_type(),))
    cached = world.local_queues.get(f"{NS}/{LQ}")
    assert isinstance(cached, FrozenDict)
    labels = world.cluster_queues.get(CQ)["metadata"]["labels"]  # type: ignore[index]
    assert isinstance(labels, FrozenDict)
    assert world.decide(request(workload())).patch


# --- the AdmissionReview answer --------------------------------------------------------------------------


@dataclass
class _Settings:
    on: bool = True

    @property
    def current(self) -> ChainSettings:
        return ChainSettings(workload_fit_affinity=self.on)


def _hook(world: World | None = None, settings: _Settings | None = None) -> FitPinWebhook:
    world = world or full_world()
    return FitPinWebhook(
        local_queues=world.local_queues,
        cluster_queues=world.cluster_queues,
        instance_types=world.instance_types,
        settings=settings or _Settings(),
    )


def _review(req: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def test_review_answers_a_base64_json_patch() -> None:
    hook = _hook()
    req = request(workload())
    answer = hook.review(_review(req))
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == req["uid"]
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    ops = orjson.loads(base64.b64decode(response["patch"]))
    assert required_terms(apply_patch(req["object"], ops)) == [{"matchExpressions": [sliced_pin()]}]
    assert hook.answered == {"pinned": 1}


def test_review_reads_the_setting_live() -> None:
    settings = _Settings(on=False)
    hook = _hook(settings=settings)
    assert "patch" not in hook.review(_review(request(workload())))["response"]
    settings.on = True
    assert "patch" in hook.review(_review(request(workload())))["response"]


def test_review_without_a_pin_has_no_patch() -> None:
    answer = _hook().review(_review(request(workload(queue="other"))))
    assert answer["response"] == {"uid": "0b6e0b4e-0000-4000-8000-000000000001", "allowed": True}


class _Broken:
    def get(self, key: str) -> Any:
        raise RuntimeError(f"cache exploded on {key}")


#: A container whose resource value is a list (the API server would refuse it; the webhook must not care).
NO_QUANTITY: dict[str, Any] = {"name": "x", "resources": {"requests": {"nvidia.com/gpu.sliced": []}}}


def test_a_failing_lookup_is_answered_allowed_without_a_patch() -> None:
    hook = _hook()
    hook.local_queues = _Broken()
    req = request(workload())
    answer = hook.review(_review(req))
    assert answer["response"] == {"uid": req["uid"], "allowed": True}
    assert hook.answered == {"error": 1}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({}, id="no request"),
        pytest.param({"request": "nonsense"}, id="request not an object"),
        pytest.param(
            {"request": {"uid": "u", "operation": "CREATE", "object": "x"}}, id="object not an object"
        ),
        pytest.param(_review(request(workload(podset(NO_QUANTITY)))), id="a request that is no quantity"),
    ],
)
def test_malformed_reviews_are_allowed(body: Any) -> None:
    hook = _hook()
    answer = hook.review(body)
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["allowed"] is True
    assert "patch" not in answer["response"]
    assert sum(hook.answered.values()) == 1


def test_from_registry_reads_the_shared_informer_stores() -> None:
    registry = InformerRegistry(cast("Any", None))
    hook = FitPinWebhook.from_registry(registry, _Settings())
    assert hook.local_queues is registry.informer(kinds.LOCAL_QUEUE).store
    queues = registry.informer(kinds.CLUSTER_QUEUE, label_selector="resource.gpustack.ai/type=instancetypes")
    assert hook.cluster_queues is queues.store
    assert hook.instance_types is registry.informer(kinds.INSTANCE_TYPE).store
    assert len(registry) == 3


async def test_served_over_https_through_the_controller_wiring(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    shutil.copyfile(pki.serving_cert, tmp_path / "tls.crt")
    shutil.copyfile(pki.serving_key, tmp_path / "tls.key")
    args = argparse.Namespace(webhook_bind="127.0.0.1:0", webhook_cert_dir=str(tmp_path))
    req = request(workload())
    body = orjson.dumps(_review(req))
    hook = _hook()
    async with admission_webhooks(
        args, namespace="gpustack-system", handlers={webhooks.WORKLOAD_FIT_PATH: hook.review}
    ) as server:
        assert server is not None
        ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=ctx)
        try:
            writer.write(
                f"POST {webhooks.WORKLOAD_FIT_PATH}?timeout=10s HTTP/1.1\r\nHost: x\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            async with asyncio.timeout(10):
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(h.split(b":")[1])
                    for h in head.split(b"\r\n")
                    if h.lower().startswith(b"content-length")
                )
                answer = orjson.loads(await reader.readexactly(length))
        finally:
            writer.close()
            await writer.wait_closed()
    assert head.startswith(b"HTTP/1.1 200 ")
    ops = orjson.loads(base64.b64decode(answer["response"]["patch"]))
    assert required_terms(apply_patch(req["object"], ops)) == [{"matchExpressions": [sliced_pin()]}]
    assert hook.answered == {"pinned": 1}
