"""LocalQueues: one per operator queue per non-system namespace, 31-character names."""

from __future__ import annotations

from typing import Any

from gpustack_worker.api import keys
from gpustack_worker.chain.localqueues import desired_local_queues
from gpustack_worker.runtime.labelselector import parse_selector


def _ns(name: str, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta}}


def _cq(name: str, uid: str = "u-1", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": uid,
            "labels": {"resource.gpustack.ai/type": "instancetypes"},
            **meta,
        }
    }


def test_one_local_queue_per_operator_queue() -> None:
    got = desired_local_queues(
        _ns("team-a"),
        [_cq("gpustack--nvidia-tesla-t4-linux-amd64"), {"metadata": {"name": "admin-queue", "uid": "x"}}],
        system_namespace="gpustack-system",
    )
    assert list(got) == ["gpustack-fnv64-6b371caa2da0b799"]
    body = got["gpustack-fnv64-6b371caa2da0b799"]
    assert len(body["metadata"]["name"]) == 31
    assert body["metadata"]["namespace"] == "team-a"
    assert body["metadata"]["annotations"] == {
        "schedule.gpustack.ai/queue": "gpustack--nvidia-tesla-t4-linux-amd64"
    }
    assert body["spec"] == {"clusterQueue": "gpustack--nvidia-tesla-t4-linux-amd64"}
    owner = body["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "ClusterQueue",
        "gpustack--nvidia-tesla-t4-linux-amd64",
        "u-1",
        True,
    )


def test_long_queue_names_still_fit_a_label() -> None:
    long_name = "gpustack--intel-xeon-platinum-8259cl--nvidia-a100-sxm4-80gb-linux-amd64"
    got = desired_local_queues(_ns("team-a"), [_cq(long_name)], system_namespace="gpustack-system")
    (name,) = got
    assert len(long_name) > 63 and len(name) == 31


def test_no_local_queue_in_system_or_terminating_namespaces_or_for_deleting_queues() -> None:
    queues = [_cq("gpustack--generic-linux-amd64")]
    for ns in (
        _ns("kube-system"),
        _ns("kube-public"),
        _ns("gpustack-system"),
        _ns("t", deletionTimestamp="x"),
    ):
        assert desired_local_queues(ns, queues, system_namespace="gpustack-system") == {}
    deleting = [_cq("gpustack--generic-linux-amd64", deletionTimestamp="x")]
    assert desired_local_queues(_ns("team-a"), deleting, system_namespace="gpustack-system") == {}
    assert desired_local_queues(_ns("team-a"), [_cq("q", uid="")], system_namespace="gpustack-system") == {}


def test_only_namespaces_the_selector_selects_get_local_queues() -> None:
    queues = [_cq("gpustack--generic-linux-amd64")]
    gpu = parse_selector("gpustack.ai/queues in (yes,true)")
    labelled = _ns("team-a", labels={"gpustack.ai/queues": "yes"})
    assert set(desired_local_queues(labelled, queues, system_namespace="s", selector=gpu)) == {
        keys.local_queue_name("gpustack--generic-linux-amd64")
    }
    for ns in (_ns("team-b"), _ns("team-c", labels={"gpustack.ai/queues": "no"})):
        assert desired_local_queues(ns, queues, system_namespace="s", selector=gpu) == {}
    # A system Namespace never gets one, selected or not; the empty selector is today's default.
    system = _ns("kube-system", labels={"gpustack.ai/queues": "yes"})
    assert desired_local_queues(system, queues, system_namespace="s", selector=gpu) == {}
    everything = parse_selector("")
    assert desired_local_queues(_ns("team-b"), queues, system_namespace="s", selector=everything) == (
        desired_local_queues(_ns("team-b"), queues, system_namespace="s")
    )
