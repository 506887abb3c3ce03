"""LocalQueues: one per operator queue per non-system namespace, 31-character names."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.api.settings import ControllerSettings
from gpustack_worker.chain.localqueues import desired_local_queues, gets_local_queues
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
    # A system Namespace never gets one, selected or not; the empty selector selects every other one.
    system = _ns("kube-system", labels={"gpustack.ai/queues": "yes"})
    assert desired_local_queues(system, queues, system_namespace="s", selector=gpu) == {}
    everything = parse_selector("")
    assert desired_local_queues(_ns("team-b"), queues, system_namespace="s", selector=everything) == (
        desired_local_queues(_ns("team-b"), queues, system_namespace="s")
    )


def _named(name: str, **labels: str) -> dict[str, Any]:
    """A Namespace as the API server stores it: labelled with its own name."""
    return _ns(name, labels={keys.NAMESPACE_NAME: name, **labels})


#: (namespace, gets LocalQueues under the default settings): Kueue's and NFD's namespaces are not
#: workload namespaces (issue 29: six LocalQueues each by default); system ones never get any.
DEFAULT_SCOPE = [
    ("kueue-system", False),
    ("node-feature-discovery", False),
    ("gpustack-system", False),
    ("kube-system", False),
    ("kube-node-lease", False),
    ("default", True),
    ("team-a", True),
    ("kueue-system-team", True),  # a name that merely starts like one is a team's
    ("node-feature-discovery-2", True),
]


@pytest.mark.parametrize(("namespace", "gets"), DEFAULT_SCOPE)
def test_the_default_selector_leaves_out_kueue_and_nfd(namespace: str, gets: bool) -> None:
    selector = parse_selector(ControllerSettings().local_queue_namespace_selector)
    queues = [_cq("gpustack--generic-linux-amd64")]
    got = desired_local_queues(
        _named(namespace), queues, system_namespace="gpustack-system", selector=selector
    )
    assert bool(got) is gets
    assert gets_local_queues(_named(namespace), system_namespace="gpustack-system", selector=selector) is gets


def test_the_default_is_overridable_both_ways() -> None:
    """Empty brings Kueue's and NFD's namespaces back; a team's own selector replaces the default whole
    (adding the name clause keeps them out); a Kueue elsewhere is named in the same clause."""
    kueue, team = _named("kueue-system", team="yes"), _named("team-a", team="yes")
    for text, expected in (
        ("", {"kueue-system": True, "team-a": True}),
        ("team", {"kueue-system": True, "team-a": True}),
        (f"team,{keys.NAMESPACE_NAME} notin (kueue-system)", {"kueue-system": False, "team-a": True}),
    ):
        selector = parse_selector(
            ControllerSettings(local_queue_namespace_selector=text).local_queue_namespace_selector
        )
        got = {
            str(ns["metadata"]["name"]): gets_local_queues(ns, system_namespace="s", selector=selector)
            for ns in (kueue, team)
        }
        assert got == expected, text
