"""The queue decision: plan, quota, admission checks and the stop-policy state machine."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.api import keys
from gpustack_worker.chain import flavors, pools, queues
from gpustack_worker.chain.nodes import NodeHardware, node_hardware
from tests.chain.builders import HOSTNAME_PROFILE, mixed_cluster, node

TOPOLOGIES = frozenset({keys.topology_name(HOSTNAME_PROFILE)})
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
GENERIC = "gpustack--generic-linux-amd64"
INTEL = "intel-xeon-platinum-8259cl"
M = 1_600_000


def _hw(objs: list[dict[str, Any]]) -> list[NodeHardware]:
    return [h for h in (node_hardware(o) for o in objs) if h is not None]


def _world(
    mixed: bool = True, aware: bool = False
) -> tuple[list[NodeHardware], list[dict[str, Any]], dict[str, Any]]:
    hw = _hw(mixed_cluster())
    plans = flavors.plan_flavors(hw, mixed_on_node=mixed)
    bodies = [flavors.flavor_body(p, mixed_on_node=mixed, aware=aware) for p in plans]
    types = {}
    for plan in plans:
        it = pools.derived_instance_type(plan, aware=aware)
        types[it["metadata"]["name"]] = it
    return hw, bodies, types


def _inputs(it: dict[str, Any] | None, queue: dict[str, Any] | None = None, **kw: Any) -> queues.QueueInputs:
    hw, bodies, _ = _world()
    base: dict[str, Any] = {
        "instance_type": it,
        "queue": queue,
        "flavors": bodies,
        "nodes": hw,
        "topologies": TOPOLOGIES,
        "active_checks": frozenset(),
    }
    base.update(kw)
    return queues.QueueInputs(**base)


def _queue(decision: queues.QueueDecision, **status: Any) -> dict[str, Any]:
    """The queue as the server would hold it after applying ``decision`` (Kueue status optional: its
    ``Active`` condition follows the stop policy, as Kueue writes it)."""
    assert decision.body is not None
    body = {**decision.body, "metadata": {**decision.body["metadata"], "generation": 1}}
    if status:
        stopped = body["spec"].get("stopPolicy", "None") != "None"
        active = {"type": "Active", "status": "False" if stopped else "True", "observedGeneration": 1}
        body["status"] = {"conditions": [{**active, "reason": "Stopped" if stopped else "Ready"}], **status}
    return body


def test_t4_queue_quota_in_credits_smallest_nodes_first() -> None:
    _, _, types = _world()
    decision = queues.decide(_inputs(types[T4]))
    assert decision.condition == queues.Condition("True", "Ready", "2 topology-aware flavor(s)")
    assert decision.body is not None
    spec = decision.body["spec"]
    assert spec["stopPolicy"] == "None"
    assert "cohortName" not in spec
    assert spec["preemption"] == {
        "reclaimWithinCohort": "Never",
        "borrowWithinCohort": {"policy": "Never"},
        "withinClusterQueue": "Never",
    }
    assert spec["resourceGroups"] == [
        {
            "coveredResources": ["credits.gpustack.ai/nvidia"],
            "flavors": [
                {
                    "name": f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64-1d-{HOSTNAME_PROFILE}",
                    "resources": [{"name": "credits.gpustack.ai/nvidia", "nominalQuota": "1600k"}],
                },
                {
                    "name": f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{HOSTNAME_PROFILE}",
                    "resources": [{"name": "credits.gpustack.ai/nvidia", "nominalQuota": "6400k"}],
                },
            ],
        }
    ]
    assert decision.body["metadata"]["labels"] == {
        "feature.gpustack.ai/acceleratable": "true",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "acceleratable.feature.gpustack.ai/nvidia-tesla-t4": "true",
        "resource.gpustack.ai/type": "instancetypes",
    }
    assert decision.body["metadata"]["annotations"] == {"topology.gpustack.ai/tas-queue": "true"}


def test_generic_cpu_queue_counts_cores() -> None:
    _, _, types = _world()
    decision = queues.decide(_inputs(types[GENERIC]))
    assert decision.body is not None
    group = decision.body["spec"]["resourceGroups"][0]
    assert group["coveredResources"] == ["cpu"]
    assert [(f["name"].split("-fnv64")[0], f["resources"][0]["nominalQuota"]) for f in group["flavors"]] == [
        ("gpustack--intel-xeon-platinum-8259cl-linux-amd64-4c", "8"),
        ("gpustack--amd-epyc-7r32-linux-amd64-8c", "8"),
        ("gpustack--amd-epyc-7r13-linux-amd64-48c", "48"),
    ]


def test_admission_checks_referenced_only_once_active() -> None:
    _, _, types = _world()
    none = queues.decide(_inputs(types[T4]))
    assert none.body is not None and "admissionChecksStrategy" not in none.body["spec"]
    both = queues.decide(
        _inputs(types[T4], active_checks=frozenset({keys.JOINT_CHECK, keys.NODE_DEVICES_CHECK}))
    )
    assert both.body is not None
    assert both.body["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": keys.JOINT_CHECK}, {"name": keys.NODE_DEVICES_CHECK}]
    }
    cpu = queues.decide(
        _inputs(types[GENERIC], active_checks=frozenset({keys.JOINT_CHECK, keys.NODE_DEVICES_CHECK}))
    )
    assert cpu.body is not None
    assert cpu.body["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": keys.JOINT_CHECK}]}
    off = queues.decide(
        _inputs(
            types[T4],
            active_checks=frozenset({keys.JOINT_CHECK, keys.NODE_DEVICES_CHECK}),
            derived_from_node=False,
        )
    )
    assert off.body is not None
    assert off.body["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": keys.JOINT_CHECK}]}


def test_inactive_type_holds_its_queue() -> None:
    _, _, types = _world()
    it = {**types[T4], "spec": {**types[T4]["spec"], "inactive": True}}
    decision = queues.decide(_inputs(it))
    assert decision.body is not None and decision.body["spec"]["stopPolicy"] == "Hold"


def test_foreign_hold_is_kept_until_backfilled() -> None:
    _, _, types = _world()
    first = queues.decide(_inputs(types[T4]))
    held = _queue(first)
    held["spec"] = {**held["spec"], "stopPolicy": "Hold"}
    kept = queues.decide(_inputs(types[T4], held, owns_stop_policy=False))
    # The field is left out, so the admin keeps owning it (and the backfill sees a foreign stop).
    assert kept.body is not None and "stopPolicy" not in kept.body["spec"]
    # Once back-filled (inactive), the chain applies Hold itself.
    it = {**types[T4], "spec": {**types[T4]["spec"], "inactive": True}}
    owned = queues.decide(_inputs(it, held, owns_stop_policy=False))
    assert owned.body is not None and owned.body["spec"]["stopPolicy"] == "Hold"
    # A foreign None is not a stop: the sticky Inactive wins.
    released = {**held, "spec": {**held["spec"], "stopPolicy": "None"}}
    back = queues.decide(_inputs(it, released, owns_stop_policy=False))
    assert back.body is not None and back.body["spec"]["stopPolicy"] == "Hold"


def test_pool_without_flavors_is_held_and_marked() -> None:
    it = pools.derived_instance_type(
        flavors.plan_flavors(
            _hw(
                [
                    node(
                        "x",
                        vendor="AMD",
                        cpu_name="AMD EPYC 7R32",
                        cores=8,
                        devices=(("nvidia", "NVIDIA A10G", 1, 23028),),
                    )
                ]
            ),
            mixed_on_node=True,
        )[0],
        aware=False,
    )
    it["metadata"]["name"] = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
    it["spec"]["acceleratorGroup"] = "nvidia-h100-80gb-hbm3"
    decision = queues.decide(_inputs(it))
    assert decision.body is not None
    assert decision.body["spec"]["stopPolicy"] == "Hold"
    assert decision.body["spec"]["resourceGroups"] == []
    assert decision.body["metadata"]["annotations"] == {keys.EMPTY_PLAN_HOLD: "true"}


def test_drain_then_empty_then_hold_then_restore_with_admin_change() -> None:
    hw, bodies, types = _world()
    it = types[T4]
    filled = _queue(queues.decide(_inputs(it)), reservingWorkloads=1, admittedWorkloads=1)
    no_t4 = [b for b in bodies if "tesla-t4" not in b["metadata"]["name"]]
    hw = [h for h in hw if h.name not in ("t4-a", "t4-b")]

    # The pool's last nodes left: HoldAndDrain, groups kept while Kueue still reports reservations.
    draining = queues.decide(_inputs(it, filled, flavors=no_t4, nodes=hw))
    assert draining.body is not None
    assert draining.body["spec"]["stopPolicy"] == "HoldAndDrain"
    assert draining.body["spec"]["resourceGroups"] == filled["spec"]["resourceGroups"]
    assert draining.body["metadata"]["annotations"][keys.MIGRATION_STOP_POLICY] == "None"
    assert draining.body["metadata"]["annotations"][keys.MIGRATION_PHASE] == "draining"
    assert draining.requeue_after == queues.DRAIN_POLL_S

    # Kueue reports no reservation for the current generation: groups emptied, still HoldAndDrain.
    cleared = _queue(draining, reservingWorkloads=0, admittedWorkloads=0)
    emptied = queues.decide(_inputs(it, cleared, flavors=no_t4, nodes=hw))
    assert emptied.body is not None
    assert emptied.body["spec"]["resourceGroups"] == []
    assert emptied.body["spec"]["stopPolicy"] == "HoldAndDrain"
    assert emptied.body["metadata"]["annotations"][keys.MIGRATION_PHASE] == "switched"

    # Waiting with no flavor: stays HoldAndDrain (never an empty-plan Hold that could be released).
    waiting = queues.decide(_inputs(it, _queue(emptied, reservingWorkloads=0), flavors=no_t4, nodes=hw))
    assert waiting.body is not None and waiting.body["spec"]["stopPolicy"] == "HoldAndDrain"
    assert keys.EMPTY_PLAN_HOLD not in waiting.body["metadata"]["annotations"]

    # The admin sets Inactive while the pool waits; the flavor returns: the new plan, and Hold restored.
    inactive = {**it, "spec": {**it["spec"], "inactive": True}}
    back = queues.decide(_inputs(inactive, _queue(waiting, reservingWorkloads=0)))
    assert back.body is not None
    assert back.body["spec"]["stopPolicy"] == "Hold"
    assert back.body["spec"]["resourceGroups"] == filled["spec"]["resourceGroups"]
    assert back.body["metadata"]["annotations"] == {"topology.gpustack.ai/tas-queue": "true"}

    # Without the admin change, None is restored.
    restored = queues.decide(_inputs(it, _queue(waiting, reservingWorkloads=0)))
    assert restored.body is not None and restored.body["spec"]["stopPolicy"] == "None"


def test_no_drain_decision_on_a_stale_queue_status() -> None:
    _, bodies, types = _world()
    filled = _queue(queues.decide(_inputs(types[T4])))
    filled["status"] = {
        "conditions": [{"type": "Active", "status": "True", "observedGeneration": 0}],
        "reservingWorkloads": 0,
    }
    no_t4 = [b for b in bodies if "tesla-t4" not in b["metadata"]["name"]]
    hw = [h for h in _hw(mixed_cluster()) if h.name not in ("t4-a", "t4-b")]
    decision = queues.decide(_inputs(types[T4], filled, flavors=no_t4, nodes=hw))
    assert decision.condition == queues.Condition(
        "Unknown", "AwaitingQueueStatus", "waiting for Kueue to report the queue's current generation"
    )
    assert decision.body is not None and decision.body["spec"]["resourceGroups"]


def test_without_drain_setting_the_queue_waits_unheld() -> None:
    _, bodies, types = _world()
    filled = _queue(queues.decide(_inputs(types[T4])), reservingWorkloads=2)
    no_t4 = [b for b in bodies if "tesla-t4" not in b["metadata"]["name"]]
    hw = [h for h in _hw(mixed_cluster()) if h.name not in ("t4-a", "t4-b")]
    decision = queues.decide(_inputs(types[T4], filled, flavors=no_t4, nodes=hw, drain_when_no_flavors=False))
    assert decision.body is not None
    assert decision.body["spec"]["stopPolicy"] == "None"
    assert decision.requeue_after == queues.WAIT_POLL_S


def test_deleting_queue_or_type_is_drained_never_recreated() -> None:
    _, _, types = _world()
    queue = _queue(queues.decide(_inputs(types[T4])))
    gone = queues.decide(_inputs(None, queue))
    assert gone.drain_only and gone.body == {"spec": {"stopPolicy": "HoldAndDrain"}}
    assert queues.decide(_inputs(None, None)).body is None
    deleting = {
        **types[T4],
        "metadata": {**types[T4]["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"},
    }
    assert queues.decide(_inputs(deleting, queue)).drain_only


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: b["spec"].update(topologyName="gpustack-other"), "MissingTopology"),
        (
            lambda b: b["metadata"]["labels"].update(
                {"topology.gpustack.ai/profile": "fnv64-0000000000000000"}
            ),
            "MissingTopology",
        ),
        (
            lambda b: b["metadata"]["labels"].update(
                {"acceleratable.feature.gpustack.ai/nvidia-tesla-t4.capacity": "9"}
            ),
            "NonConservedQuota",
        ),
    ],
    ids=["wrong-topology", "profile-mismatch", "capacity-not-conserved"],
)
def test_refusals_keep_the_last_complete_plan(mutate: Any, reason: str) -> None:
    import copy

    _, bodies, types = _world()
    filled = _queue(queues.decide(_inputs(types[T4])))
    broken = copy.deepcopy(bodies)
    target = next(b for b in broken if "amd-epyc-7r13--nvidia-tesla-t4" in b["metadata"]["name"])
    mutate(target)
    decision = queues.decide(_inputs(types[T4], filled, flavors=broken))
    assert decision.condition is not None and decision.condition.status == "False"
    assert decision.condition.reason == reason
    assert decision.body is not None
    assert decision.body["spec"]["resourceGroups"] == filled["spec"]["resourceGroups"]


def test_missing_topology_object_refuses() -> None:
    _, _, types = _world()
    decision = queues.decide(_inputs(types[T4], topologies=frozenset()))
    assert decision.condition is not None and decision.condition.reason == "MissingTopology"
    assert decision.body is not None and decision.body["spec"]["stopPolicy"] == "Hold"
    assert decision.body["metadata"]["annotations"] == {keys.EMPTY_PLAN_HOLD: "true"}


def test_overlapping_selectors_refused() -> None:
    import copy

    _, bodies, types = _world()
    broken = copy.deepcopy(bodies)
    extra = copy.deepcopy(
        next(b for b in broken if "amd-epyc-7r13--nvidia-tesla-t4" in b["metadata"]["name"])
    )
    extra["metadata"]["name"] = "gpustack--overlap"
    broken.append(extra)
    decision = queues.decide(_inputs(types[T4], flavors=broken))
    assert decision.condition is not None and decision.condition.reason == "OverlappingSelectors"


def test_too_many_flavors_refuses_the_whole_plan() -> None:
    import copy

    _, bodies, types = _world()
    template = next(b for b in bodies if "amd-epyc-7r13--nvidia-tesla-t4" in b["metadata"]["name"])
    many = []
    for i in range(queues.MAX_FLAVORS_PER_GROUP + 1):
        f = copy.deepcopy(template)
        f["metadata"]["name"] = f"gpustack--many-{i}"
        many.append(f)
    decision = queues.decide(_inputs(types[T4], flavors=many))
    assert decision.condition is not None and decision.condition.reason == "TooManyFlavors"


def test_a_flavor_being_replaced_is_let_go_without_refusing_the_plan() -> None:
    """A flavor whose immutable selector changed is deleted and recreated under the same name: the queue
    must drop it (so Kueue releases it) although its nodes have no live flavor meanwhile."""
    _, bodies, types = _world()
    one = f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{HOSTNAME_PROFILE}"
    replacing = [
        {**b, "metadata": {**b["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
        if b["metadata"]["name"] == one
        else b
        for b in bodies
    ]
    decision = queues.decide(_inputs(types[T4], flavors=replacing))
    assert decision.condition is not None and decision.condition.status == "True"
    assert decision.body is not None
    assert [f["name"] for f in decision.body["spec"]["resourceGroups"][0]["flavors"]] == [
        f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64-1d-{HOSTNAME_PROFILE}"
    ]


def test_a_refused_plan_still_lets_finalizing_flavors_go() -> None:
    """The last complete plan is kept on a refusal, but never with a flavor being deleted: Kueue releases a
    flavor only once no queue references it, and the replacement waits for that."""
    hw, bodies, types = _world()
    filled = _queue(queues.decide(_inputs(types[T4])))
    one = f"gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64-4d-{HOSTNAME_PROFILE}"
    finalizing = [
        {**b, "metadata": {**b["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
        if b["metadata"]["name"] == one
        else b
        for b in bodies
    ]
    # An unrelated refusal: a pool node no flavor selects (its flavor not created yet).
    extra = node(
        "t4-c",
        vendor="AMD",
        cpu_name="AMD EPYC 7R13 Processor",
        cores=48,
        devices=(("nvidia", "Tesla T4", 2, 15360),),
    )
    nodes = [*hw, *_hw([extra])]
    decision = queues.decide(_inputs(types[T4], filled, flavors=finalizing, nodes=nodes))
    assert decision.condition is not None and decision.condition.reason == "NonConservedQuota"
    assert decision.body is not None
    assert [f["name"] for g in decision.body["spec"]["resourceGroups"] for f in g["flavors"]] == [
        f"gpustack--{INTEL}--nvidia-tesla-t4-linux-amd64-1d-{HOSTNAME_PROFILE}"
    ]
