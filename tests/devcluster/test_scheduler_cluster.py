"""The local control plane schedules: kube-scheduler binds Pods to the simulated Nodes, and Kueue's Pod
integration gates a queued Pod group until its one Workload is admitted.

No kubelet runs, so a bound Pod stays ``Pending`` with ``spec.nodeName`` set and never starts; the tests
stop at the binding. The session's control plane put back to its baseline (tests/kit/reset.py): other
modules' Nodes are gone, so its scheduler has only this module's Node to pick (and the baseline's, as a
fresh control plane has).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.devcluster.audit import AuditLog
from gpustack_worker.devcluster.cluster import SCHEDULER_ACCOUNT, SYSTEM_NAMESPACE
from gpustack_worker.runtime.client import Client
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import parse_scenario
from tests.kit import kueue
from tests.kit.cluster import shared_baseline
from tests.kit.waiting import eventually_sync

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap
    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
NODE = "sched-a"
NS = "sched-team"
FLAVOR = "rf-sched"
CLUSTER_QUEUE = "cq-sched"
LOCAL_QUEUE = "lq-sched"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
ADMISSION_GATE = {"name": "kueue.x-k8s.io/admission"}
#: How long kube-scheduler and Kueue may take to act here (a bound for a loaded machine, not a measurement).
SCHEDULED_WITHIN = 90.0
#: One CPU-only Node, written by the simulator exactly as the other end-to-end tests write theirs.
SCENARIO = {
    "nodes": [{"name": NODE, "cpu": {"vendor": "Intel", "model": "Xeon", "cores": 4}, "memory": "16Gi"}]
}


@pytest.fixture(scope="module")
def devcluster() -> DevCluster:
    """The session's control plane, back at its baseline (shadows the session fixture): no other module's
    Node for kube-scheduler to bind to."""
    return shared_baseline()


async def _apply_node(kubeconfig: Path) -> None:
    client = await Client.connect(str(kubeconfig))
    try:
        await apply_scenario(client, parse_scenario(SCENARIO))
    finally:
        await client.close()


def _ok(api: ApiBootstrap, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    resp = api.request(method, path, body)
    assert resp.is_success, f"{method} {path}: HTTP {resp.status_code}: {resp.text[:800]}"
    out: dict[str, Any] = resp.json()
    return out


def _get(api: ApiBootstrap, path: str) -> dict[str, Any]:
    resp = api.request("GET", path)
    return resp.json() if resp.is_success else {}


def _node_name(pod: dict[str, Any]) -> str | None:
    """The Node a Pod is bound to (None while it is not)."""
    return pod.get("spec", {}).get("nodeName")


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


def _pod(name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels, "annotations": annotations or {}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/never-pulled",
                    "resources": {"requests": {"cpu": "250m"}},
                }
            ],
        },
    }


def _pods_path(name: str = "") -> str:
    return f"/api/v1/namespaces/{NS}/pods" + (f"/{name}" if name else "")


def _bound_and_not_running(pod: dict[str, Any]) -> None:
    """Bound by kube-scheduler to the simulated Node, and (no kubelet) never started."""
    assert pod["spec"]["nodeName"] == NODE
    assert _condition(pod, "PodScheduled").get("status") == "True"
    assert pod["status"].get("phase") == "Pending"
    assert not pod["status"].get("containerStatuses")
    assert not _condition(pod, "Ready")


@pytest.fixture(scope="module")
def api(devcluster: DevCluster) -> Iterator[ApiBootstrap]:
    """The admin client, with the simulated Node and a plain (non-TAS) queue set up; everything created
    here and in the tests is removed afterwards."""
    asyncio.run(_apply_node(devcluster.kubeconfig))
    client = devcluster.bootstrap()
    client.ensure_namespace(NS)
    _ok(client, "POST", f"{KUEUE}/resourceflavors", kueue.resource_flavor(FLAVOR))
    queue = kueue.cluster_queue(CLUSTER_QUEUE, kueue.queue_spec(kueue.resource_group(FLAVOR, {"cpu": "2"})))
    _ok(client, "POST", f"{KUEUE}/clusterqueues", queue)
    local_queue = kueue.local_queue(LOCAL_QUEUE, CLUSTER_QUEUE, NS)
    _ok(client, "POST", f"{KUEUE}/namespaces/{NS}/localqueues", local_queue)
    eventually_sync(
        lambda: _get(client, f"{KUEUE}/clusterqueues/{CLUSTER_QUEUE}"),
        lambda o: _condition(o, "Active").get("status") == "True",
        within=SCHEDULED_WITHIN,
    )
    try:
        yield client
    finally:
        _cleanup(client)
        client.close()


def _cleanup(api: ApiBootstrap) -> None:
    """Pods first (Kueue's finalizer dropped: nothing will ever finish them), then what queued them."""
    for pod in _get(api, _pods_path()).get("items") or []:
        name = pod["metadata"]["name"]
        api.request("DELETE", _pods_path(name) + "?gracePeriodSeconds=0")
        if pod["metadata"].get("finalizers"):
            api.merge_patch(_pods_path(name), {"metadata": {"finalizers": None}})
    for wl in _get(api, f"{KUEUE}/namespaces/{NS}/workloads").get("items") or []:
        api.request("DELETE", f"{KUEUE}/namespaces/{NS}/workloads/{wl['metadata']['name']}")
    api.request("DELETE", f"{KUEUE}/namespaces/{NS}/localqueues/{LOCAL_QUEUE}")
    api.request("DELETE", f"{KUEUE}/clusterqueues/{CLUSTER_QUEUE}")
    api.request("DELETE", f"{KUEUE}/resourceflavors/{FLAVOR}")
    eventually_sync(lambda: _get(api, _pods_path()).get("items"), lambda items: not items, within=60)
    eventually_sync(
        lambda: api.request("GET", f"{KUEUE}/clusterqueues/{CLUSTER_QUEUE}").status_code,
        lambda code: code == 404,
        within=60,
    )


def test_a_plain_pod_is_bound_by_kube_scheduler_and_never_starts(
    api: ApiBootstrap, devcluster: DevCluster
) -> None:
    assert devcluster.audit_log is not None
    audit = AuditLog.from_now(devcluster.audit_log)
    created = _ok(api, "POST", _pods_path(), _pod("plain", {"app": "plain"}))
    # No queue name: Kueue's webhook leaves it alone, and nobody set a node.
    assert "schedulingGates" not in created["spec"]
    assert "nodeName" not in created["spec"]
    pod = eventually_sync(lambda: _get(api, _pods_path("plain")), _node_name, within=SCHEDULED_WITHIN)
    _bound_and_not_running(pod)

    # The binding is the scheduler's: its Scheduled event (recorded asynchronously, after the binding)
    # names the Pod and the Node.
    def scheduled_events() -> list[dict[str, Any]]:
        events = _get(api, f"/apis/events.k8s.io/v1/namespaces/{NS}/events").get("items") or []
        return [e for e in events if e["regarding"]["name"] == "plain" and e["reason"] == "Scheduled"]

    scheduled = eventually_sync(scheduled_events, within=SCHEDULED_WITHIN)
    assert scheduled[0]["reportingController"] == "default-scheduler"
    assert NODE in scheduled[0]["note"]
    # ... and made with the scheduler's own ServiceAccount (its RBAC is the built-in scheduler roles).
    namespace, account = SCHEDULER_ACCOUNT
    bindings = [
        e
        for e in audit.writes()
        if (e.resource, e.subresource, e.verb, e.name) == ("pods", "binding", "create", "plain")
    ]
    assert [(e.username, e.code) for e in bindings] == [(f"system:serviceaccount:{namespace}:{account}", 201)]


def test_a_queued_pod_group_is_gated_admitted_as_one_workload_then_bound(api: ApiBootstrap) -> None:
    labels = {QUEUE_LABEL: LOCAL_QUEUE, GROUP_LABEL: "group-a"}
    annotations = {TOTAL_COUNT: "2"}

    first = _ok(api, "POST", _pods_path(), _pod("group-a-0", labels, annotations))
    # Kueue's mutating Pod webhook gated it (and marked it managed) in the create request itself.
    assert ADMISSION_GATE in first["spec"]["schedulingGates"]
    assert first["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"

    # Half a group: Kueue refuses to compose a Workload for it (its event says so) and the Pod stays
    # gated, so kube-scheduler does not touch it.
    def compose_refused() -> bool:
        events = _get(api, f"/apis/events.k8s.io/v1/namespaces/{NS}/events").get("items") or []
        return any(
            e["regarding"]["name"] == "group-a-0"
            and e["reason"] == "ErrWorkloadCompose"
            and "fewer runnable pods than expected" in (e.get("note") or "")
            for e in events
        )

    eventually_sync(compose_refused, within=SCHEDULED_WITHIN)
    assert not _get(api, f"{KUEUE}/namespaces/{NS}/workloads").get("items")
    waiting = _get(api, _pods_path("group-a-0"))
    assert ADMISSION_GATE in waiting["spec"]["schedulingGates"]
    assert "nodeName" not in waiting["spec"]

    second = _ok(api, "POST", _pods_path(), _pod("group-a-1", labels, annotations))
    assert ADMISSION_GATE in second["spec"]["schedulingGates"]

    # One Workload for the whole group, admitted by the plain queue.
    workload = eventually_sync(
        lambda: _get(api, f"{KUEUE}/namespaces/{NS}/workloads"),
        lambda ws: any(_condition(w, "Admitted").get("status") == "True" for w in ws.get("items") or []),
        within=SCHEDULED_WITHIN,
    )["items"]
    assert len(workload) == 1, [w["metadata"]["name"] for w in workload]
    wl = workload[0]
    assert wl["metadata"]["name"] == "group-a"
    assert wl["spec"]["queueName"] == LOCAL_QUEUE
    assert [ps["count"] for ps in wl["spec"]["podSets"]] == [2]
    assert {o["name"] for o in wl["metadata"]["ownerReferences"]} == {"group-a-0", "group-a-1"}
    assert wl["status"]["admission"]["clusterQueue"] == CLUSTER_QUEUE
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": FLAVOR}

    # Kueue removed the gate from both, and kube-scheduler bound them to the Node; none of them starts.
    for name in ("group-a-0", "group-a-1"):
        pod = eventually_sync(partial(_get, api, _pods_path(name)), _node_name, within=SCHEDULED_WITHIN)
        assert ADMISSION_GATE not in (pod["spec"].get("schedulingGates") or [])
        _bound_and_not_running(pod)


def test_the_workers_own_namespace_is_never_gated(api: ApiBootstrap) -> None:
    # gpustack-system is outside Kueue's managed namespaces: even a queue name does not hold a Pod there,
    # so the worker's own Pods are scheduled like any plain Pod.
    path = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/pods"
    body = _pod("system-pod", {QUEUE_LABEL: LOCAL_QUEUE})
    body["metadata"]["namespace"] = SYSTEM_NAMESPACE
    created = _ok(api, "POST", path, body)
    try:
        assert "schedulingGates" not in created["spec"]
        assert "kueue.x-k8s.io/managed" not in created["metadata"]["labels"]
        pod = eventually_sync(partial(_get, api, f"{path}/system-pod"), _node_name, within=SCHEDULED_WITHIN)
        _bound_and_not_running(pod)
    finally:
        api.request("DELETE", f"{path}/system-pod?gracePeriodSeconds=0")
