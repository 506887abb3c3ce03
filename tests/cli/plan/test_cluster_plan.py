"""``plan --from-cluster``'s pure part: the live cluster as a scenario leaves it (``simulate apply`` and
nfd-master's projection, no controller run) plans every chain object as ``create``, the same objects the
scenario plan computes; applying the plan reaches a fixed point where nothing changes; an admin's edit of
one field is that one field's change; only objects a controller owns are ever deleted."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain import admissionchecks, managers
from gpustack_worker.cli.main import main
from gpustack_worker.cli.plan.cluster_plan import (
    Change,
    FieldChange,
    LiveCluster,
    PlanReport,
    field_diff,
    label_diff,
    plan_cluster,
    render_text,
    report_list,
)
from gpustack_worker.cli.plan.command import parse_sets
from gpustack_worker.cli.plan.planning import PlanError, plan_chain, project
from gpustack_worker.runtime.prune import OWNER_LABEL
from gpustack_worker.simulate import render
from gpustack_worker.simulate.load import packaged_scenario
from tests.chain.fleets import Fleet, fleets
from tests.cli.plan.test_plan import rack_snapshot, rack_source
from tests.kit.properties import examples

NS = kinds.SYSTEM_NAMESPACE
TEAM = "team-a"
_uids = itertools.count(1)


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": f"ns-{name}"}}


def applied_fleet(
    scenario: Any, *, source: dict[str, Any] | None = None, snapshot: str | None = None
) -> LiveCluster:
    """What ``simulate apply`` leaves on a cluster whose nfd-master runs and no controller of ours does."""
    nodes, features, devices = [], [], []
    for spec in scenario.nodes:
        uid = f"uid-{spec.name}"
        node = render.render_node(spec, "1970-01-01T00:00:00Z")
        node["metadata"]["uid"] = uid
        feature = render.render_node_feature(spec, uid)
        dm = dict((feature or {}).get("spec", {}).get("labels") or {})
        nodes.append(project(node, [dm]))
        if feature is not None:
            features.append(feature)
        dev = render.render_devices(spec, uid)
        ledger = render.render_devices_status(spec)
        if dev is not None:
            devices.append({**dev, "status": ledger["status"]} if ledger is not None else dev)
    config_maps: dict[str, dict[str, Any]] = {}
    sources = []
    if source is not None:
        source = copy.deepcopy(source)
        source["metadata"].setdefault("uid", "uid-source")
        source["metadata"].setdefault("generation", 1)
        sources.append(source)
        arm = source["spec"].get("configMap")
        if arm is not None and snapshot is not None:
            ref = arm["configMapRef"]
            config_maps[f"{ref['namespace']}/{ref['name']}"] = {
                "metadata": {"name": ref["name"], "namespace": ref["namespace"]},
                "data": {arm["key"]: snapshot},
            }
    return LiveCluster(
        nodes=nodes,
        node_features=features,
        devices=devices,
        topology_sources=sources,
        config_maps=config_maps,
        namespaces=[_namespace(n) for n in ("default", TEAM, NS, "kube-system")],
    )


_FIELD: dict[str, str] = {
    kinds.TOPOLOGY.kind: "topologies",
    kinds.RESOURCE_FLAVOR.kind: "flavors",
    kinds.INSTANCE_TYPE.kind: "instance_types",
    kinds.CLUSTER_QUEUE.kind: "cluster_queues",
    kinds.LOCAL_QUEUE.kind: "local_queues",
    kinds.ADMISSION_CHECK.kind: "admission_checks",
    kinds.NODE.kind: "nodes",
}


def _merge(live: Any, want: Any) -> Any:
    """Server-side apply's effect on the fields ``want`` sets (conditions merged by type)."""
    if isinstance(want, dict) and isinstance(live, dict):
        out = dict(live)
        for k, v in want.items():
            if k == "conditions" and isinstance(v, list) and isinstance(live.get(k), list):
                kept = [c for c in live[k] if c.get("type") not in {w.get("type") for w in v}]
                out[k] = kept + copy.deepcopy(v)
            else:
                out[k] = _merge(live.get(k), v)
        return out
    return copy.deepcopy(want)


def apply_changes(live: LiveCluster, changes: list[Change]) -> LiveCluster:
    """The cluster after the controllers wrote ``changes`` (a create gets a uid)."""
    lists = {f: [copy.deepcopy(o) for o in getattr(live, f)] for f in _FIELD.values()}

    def where(obj: dict[str, Any]) -> tuple[str | None, str]:
        return obj["metadata"].get("namespace"), obj["metadata"]["name"]

    for c in changes:
        objs = lists[_FIELD[c.kind]]
        at = next((i for i, o in enumerate(objs) if where(o) == (c.namespace, c.name)), None)
        if c.action == "delete":
            assert at is not None
            del objs[at]
        elif c.action == "create":
            assert at is None
            body = copy.deepcopy(c.body)
            body["metadata"]["uid"] = f"uid-{next(_uids)}"
            objs.append(body)
        elif c.kind == kinds.NODE.kind:
            assert at is not None  # the labels, as nfd-master and the topology controller leave them
            objs[at]["metadata"]["labels"] = dict(c.body["metadata"]["labels"])
        elif c.kind == kinds.INSTANCE_TYPE.kind:
            assert at is not None  # the InstanceType controller applies the status whole
            objs[at] = {**objs[at], "status": copy.deepcopy(c.body["status"])}
        else:
            assert at is not None
            objs[at] = _merge(objs[at], c.body)
    return _with(live, **lists)


def converge(live: LiveCluster, s: Any, rounds: int = 4) -> tuple[LiveCluster, PlanReport]:
    """Plan and apply until the plan is empty (at most ``rounds`` times)."""
    for _ in range(rounds):
        report = plan_cluster(live, s, namespace=NS, settings_source="test")
        if not report.changes:
            return live, report
        live = apply_changes(live, report.changes)
    raise AssertionError(f"still changing after {rounds} rounds: {render_text(report)}")


#: On a cluster with no chain object, what is written next and what follows once it is in the caches.
NEXT: frozenset[str] = frozenset({"Topology", "ResourceFlavor", "InstanceType", "AdmissionCheck", "Node"})
THEN: frozenset[str] = frozenset({"ClusterQueue", "LocalQueue", "InstanceType"})


def assert_creates_then_statuses(report: PlanReport) -> None:
    """Every chain object is a create: the flavor pass's (flavors, authored InstanceTypes), the Topologies
    and the AdmissionChecks next; the queues (whose keys are the InstanceTypes, not there yet), their
    LocalQueues and the new InstanceTypes' status once those are in the caches — the status being the
    only ``change``, on an InstanceType created the step before."""
    created = {c.name for c in report.changes if c.action == "create"}
    for c in report.changes:
        assert c.kind in (NEXT if c.step == 1 else THEN), (c.step, c.kind, c.name)
        if c.kind == "Node":
            assert (c.action, c.step) == ("change", 1)
        elif c.action != "create":
            assert (c.action, c.kind, c.step) == ("change", "InstanceType", 2), c
            assert c.name in created
            assert {f.path.split(".")[0] for f in c.fields} == {"status"}


def _names(report: PlanReport, kind: str, action: str = "create") -> list[str]:
    return sorted(c.name for c in report.changes if c.kind == kind and c.action == action)


@pytest.mark.parametrize("scenario", ["chain-4", "mixed-4", "families"])
def test_a_fresh_fleet_plans_the_scenario_plans_chain_as_creates(scenario: str) -> None:
    s = parse_sets([])
    live = applied_fleet(packaged_scenario(scenario))
    report = plan_cluster(live, s, namespace=NS, settings_source="test")
    assert_creates_then_statuses(report)
    assert report.unchanged == 0
    plan = plan_chain(packaged_scenario(scenario), s, checks_active=False)
    # every Node gets the labels the scenario plan converges to (agent, nfd-master, topology)
    relabelled = {c.name: c.body["metadata"]["labels"] for c in report.changes if c.kind == "Node"}
    assert relabelled == {n: labels for n, labels in plan.node_labels.items() if n in relabelled}
    assert {n for n, p in plan.profiles.items() if p} <= set(relabelled)
    assert _names(report, "ResourceFlavor") == sorted(plan.flavors)
    assert _names(report, "ClusterQueue") == sorted(plan.cluster_queues)
    assert _names(report, "InstanceType") == sorted(plan.instance_types)
    assert _names(report, "Topology") == sorted(plan.topologies)
    assert _names(report, "AdmissionCheck") == sorted(admissionchecks.CHECKS)
    # one LocalQueue per queue in each non-system namespace (default and team-a)
    assert _names(report, "LocalQueue") == sorted(list(plan.local_queues) * 2)
    created = {c.name: c.body for c in report.changes}
    for name, body in plan.cluster_queues.items():
        assert created[name]["spec"] == body["spec"]
    for name, body in plan.flavors.items():
        assert created[name]["spec"] == body["spec"]
        assert created[name]["metadata"]["labels"] == body["metadata"]["labels"]


def test_applying_the_plan_reaches_a_fixed_point_with_nothing_to_change() -> None:
    s = parse_sets([])
    _live, report = converge(applied_fleet(packaged_scenario("mixed-4")), s)
    assert report.changes == []
    assert report.unchanged > 0
    assert "no changes" in render_text(report)


def test_a_rack_topology_source_is_decided_from_its_snapshot_configmap() -> None:
    s = parse_sets([])
    live = applied_fleet(packaged_scenario("topology-8"), source=rack_source(), snapshot=rack_snapshot())
    report = plan_cluster(live, s, namespace=NS, settings_source="test")
    plan = plan_chain(
        packaged_scenario("topology-8"),
        s,
        topology_source=rack_source(),
        snapshot=rack_snapshot(),
        checks_active=False,
    )
    assert _names(report, "Topology") == sorted(plan.topologies)
    assert _names(report, "ResourceFlavor") == sorted(plan.flavors)
    assert report.desired.profiles == plan.profiles
    _, done = converge(live, s)
    assert done.changes == []


def test_an_admin_edit_is_that_one_field() -> None:
    s = parse_sets([])
    live, _ = converge(applied_fleet(packaged_scenario("chain-4")), s)
    queue = live.cluster_queues[0]
    name = queue["metadata"]["name"]
    resource = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    was = resource["nominalQuota"]
    resource["nominalQuota"] = "999"
    flavor = live.flavors[0]
    flavor["metadata"]["labels"][keys.RESOURCE_TYPE] = "edited"
    report = plan_cluster(live, s, namespace=NS, settings_source="test")
    assert [(c.action, c.kind, c.name) for c in report.changes] == [
        ("change", "ResourceFlavor", flavor["metadata"]["name"]),
        ("change", "ClusterQueue", name),
    ]
    assert report.changes[0].fields == (
        FieldChange(f"metadata.labels[{keys.RESOURCE_TYPE}]", "edited", keys.TYPE_NODES),
    )
    assert report.changes[1].fields == (
        FieldChange("spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "999", was),
    )
    text = render_text(report)
    assert f'nominalQuota: "999" -> {was!r}'.replace("'", '"') in text


def test_only_owned_objects_are_deleted() -> None:
    s = parse_sets([])
    live, _ = converge(applied_fleet(packaged_scenario("chain-4")), s)
    ours = copy.deepcopy(live.flavors[0])
    ours["metadata"]["name"] = "leftover-of-ours"
    theirs = copy.deepcopy(live.flavors[0])
    theirs["metadata"]["name"] = "an-admins-flavor"
    theirs["metadata"]["labels"].pop(OWNER_LABEL)
    live.flavors.extend([ours, theirs])
    stale_lq = copy.deepcopy(live.local_queues[0])
    stale_lq["metadata"]["namespace"] = "gone"
    live.local_queues.append(stale_lq)
    report = plan_cluster(live, s, namespace=NS, settings_source="test")
    assert [(c.action, c.kind, c.where) for c in report.changes if c.action == "delete"] == [
        ("delete", "ResourceFlavor", "leftover-of-ours"),
        ("delete", "LocalQueue", f"gone/{stale_lq['metadata']['name']}"),
    ]
    # The admin's flavor is never deleted, but it carries the chain's type label, so it is in the flavor
    # cache and the queue controller reads it: it selects the nodes of the flavor it was copied from.
    (queue,) = [c for c in report.changes if c.action != "delete"]
    assert (queue.action, queue.kind, queue.step) == ("change", "ClusterQueue", 2)
    ready = queue.body["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "OverlappingSelectors")
    assert "an-admins-flavor" in ready["message"]
    assert stale_lq["metadata"]["labels"][OWNER_LABEL] == managers.OWNER_LOCAL_QUEUES


def test_yaml_is_a_list_of_the_objects_to_write_with_every_action_commented() -> None:
    s = parse_sets([])
    live, _ = converge(applied_fleet(packaged_scenario("chain-4")), s)
    live.flavors.append(
        {**copy.deepcopy(live.flavors[0]), "metadata": {**live.flavors[0]["metadata"], "name": "leftover"}}
    )
    live.cluster_queues.pop()
    report = plan_cluster(live, s, namespace=NS, settings_source="test")
    doc, comments = report_list(report)
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
    assert [i["kind"] for i in doc["items"]] == [c.kind for c in report.changes if c.action != "delete"]
    assert "# delete ResourceFlavor leftover" in comments
    assert all("status" not in i for i in doc["items"])  # kubectl apply takes no partial status
    assert all(line.startswith("# ") for line in comments)


def test_more_than_one_source_or_a_webhook_source_is_refused_with_a_reason() -> None:
    s = parse_sets([])
    live = applied_fleet(packaged_scenario("topology-8"), source=rack_source(), snapshot=rack_snapshot())
    two = copy.deepcopy(live.topology_sources[0])
    two["metadata"]["name"] = "other"
    with pytest.raises(PlanError, match="2 TopologySources"):
        both = _with(live, topology_sources=[*live.topology_sources, two])
        plan_cluster(both, s, namespace=NS, settings_source="test")
    hook = copy.deepcopy(live.topology_sources[0])
    hook["spec"].pop("configMap")
    hook["spec"]["webhook"] = {"url": "https://example.com/snapshot"}
    with pytest.raises(PlanError, match="webhook"):
        plan_cluster(_with(live, topology_sources=[hook]), s, namespace=NS, settings_source="test")


def _with(live: LiveCluster, **changes: Any) -> LiveCluster:
    return LiveCluster(**{**{f: getattr(live, f) for f in LiveCluster.__dataclass_fields__}, **changes})


# --- field_diff ----------------------------------------------------------------------------------------


def test_field_diff_compares_only_what_the_controller_sets() -> None:
    desired = {
        "metadata": {"name": "q", "labels": {"a/b": "1"}},
        "spec": {"quota": "8", "groups": [{"n": 1}], "flag": True},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ok", "message": "m"}]},
    }
    live = {
        "metadata": {"name": "q", "uid": "u", "labels": {"a/b": "1", "other": "x"}, "generation": 4},
        "spec": {"quota": 8, "groups": [{"n": 1, "defaulted": "yes"}], "flag": True, "extra": 1},
        "status": {
            "conditions": [
                {"type": "Other", "status": "False"},
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Ok",
                    "message": "m",
                    "lastTransitionTime": "1",
                },
            ],
            "counts": 3,
        },
    }
    assert field_diff(desired, live) == []
    live["spec"]["groups"].append({"n": 2})
    live["spec"]["flag"] = "true"
    live["status"]["conditions"][1]["reason"] = "Other"
    assert field_diff(desired, live) == [
        FieldChange("spec.groups", live["spec"]["groups"], [{"n": 1}]),
        FieldChange("spec.flag", "true", True),
        FieldChange("status.conditions[Ready].reason", "Other", "Ok"),
    ]
    assert field_diff(desired, live, status_only=True) == [
        FieldChange("status.conditions[Ready].reason", "Other", "Ok")
    ]


def test_field_diff_names_an_absent_field() -> None:
    assert field_diff({"spec": {"a": {"b": "1"}}}, {"spec": {}}) == [FieldChange("spec.a", None, {"b": "1"})]
    assert field_diff({"spec": {"a": "2Gi"}}, {"spec": {"a": "2048Mi"}}) == []


# --- the property: any fleet ---------------------------------------------------------------------------


@settings(max_examples=examples(25), suppress_health_check=[HealthCheck.too_slow])
@given(fleets(min_nodes=1, max_nodes=6, long_names=False))
def test_any_fleet_plans_the_scenario_plans_chain_and_reaches_a_fixed_point(fleet: Fleet) -> None:
    s = fleet.grouping.settings()
    racks = fleet.racks
    source = racks.source() if racks is not None else None
    snapshot = racks.snapshot() if racks is not None else None
    try:
        plan = plan_chain(fleet.scenario, s, topology_source=source, snapshot=snapshot, checks_active=False)
    except PlanError:
        return  # the scenario plan refuses it (a source not in effect): nothing to compare with
    live = applied_fleet(fleet.scenario, source=source, snapshot=snapshot)
    report = plan_cluster(live, s, namespace=NS, settings_source="test")
    assert_creates_then_statuses(report)
    assert _names(report, "ResourceFlavor") == sorted(plan.flavors)
    assert _names(report, "ClusterQueue") == sorted(plan.cluster_queues)
    assert report.desired.profiles == plan.profiles
    _, done = converge(live, s)
    assert done.changes == []


def test_the_local_queue_namespace_selector_setting_is_honoured() -> None:
    s = parse_sets(["local-queue-namespace-selector=team"])
    live = applied_fleet(packaged_scenario("chain-4"))
    labelled = copy.deepcopy(live.namespaces)
    for ns in labelled:
        if ns["metadata"]["name"] == TEAM:
            ns["metadata"]["labels"] = {"team": "a"}
    _, done = converge(_with(live, namespaces=labelled), s)
    report = plan_cluster(_with(live, namespaces=labelled), s, namespace=NS, settings_source="test")
    queues = _names(report, "ClusterQueue")
    assert queues
    assert {c.namespace for c in report.changes if c.kind == "LocalQueue"} == {TEAM}
    assert done.changes == []


def test_the_command_says_why_it_cannot_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["plan"]) == 2
    assert "give a SCENARIO" in capsys.readouterr().err
    assert main(["plan", "chain-4", "--from-cluster"]) == 2
    assert "drop SCENARIO" in capsys.readouterr().err
    assert main(["plan", "--from-cluster", "--set", "nokey"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["plan", "--from-cluster", "--kubeconfig", str(tmp_path / "absent")]) == 1
    error = capsys.readouterr().err
    assert error.startswith("gpustack-worker: error:") and error.count("\n") == 1, error


def test_immutable_differences_are_classified_as_the_controller_acts_on_them() -> None:
    s = parse_sets([])
    fleet = applied_fleet(packaged_scenario("topology-8"), source=rack_source(), snapshot=rack_snapshot())
    live, _ = converge(fleet, s)
    selector, drifted = live.flavors[0], live.flavors[1]
    count_key = next(k for k in selector["spec"]["nodeLabels"] if k.endswith(".count"))
    selector["spec"]["nodeLabels"][count_key] = "99"
    drifted["spec"]["topologyName"] = "someone-elses"
    topology = live.topologies[0]
    topology["spec"]["levels"] = [{"nodeLabel": "example.com/other"}]
    report = plan_cluster(live, s, namespace=NS, settings_source="test")
    actions = {(c.kind, c.name): c.action for c in report.changes if c.step == 1}
    assert actions == {
        ("Topology", topology["metadata"]["name"]): "drift",
        ("ResourceFlavor", selector["metadata"]["name"]): "replace",
        ("ResourceFlavor", drifted["metadata"]["name"]): "drift",
    }
    # Then, with the replaced flavor finalizing and the drifted one still naming another Topology, the
    # queues refuse (the settle gate held them while the flavor pass wrote): each the queue controller's
    # own decision over those caches.
    then = {(c.kind, c.name): c for c in report.changes if c.step == 2}
    reasons = {
        name: c.body["status"]["conditions"][0]["reason"]
        for (kind, name), c in then.items()
        if kind == "ClusterQueue"
    }
    l4 = next(n for n in reasons if "nvidia-l4" in n)
    assert reasons[l4] == "MissingTopology"
    assert set(reasons) <= {q["metadata"]["name"] for q in live.cluster_queues}
    doc, _comments = report_list(report)
    assert [i["metadata"]["name"] for i in doc["items"]] == [
        selector["metadata"]["name"],
        *(n for k, n in then if k == "ClusterQueue"),
    ]
    text = render_text(report)
    assert "-/+ replace" in text and "! drift" in text


def test_label_diff_names_added_changed_and_removed_labels() -> None:
    desired = {"a": "1", "b.example.com/x": "2", "kept": "k"}
    live = {"a": "0", "gone": "g", "kept": "k"}
    assert label_diff(desired, live) == [
        FieldChange("metadata.labels.a", "0", "1"),
        FieldChange("metadata.labels[b.example.com/x]", None, "2"),
        FieldChange("metadata.labels.gone", "g", None),
    ]
    assert label_diff(live, live) == []


# --- the next writes: each decision fed what the controller's caches hold ----------------------------

T4 = "gpustack--nvidia-tesla-t4-linux-amd64"


def _settled_chain_4() -> LiveCluster:
    """chain-4 with every controller's writes applied until nothing changes."""
    live, _ = converge(applied_fleet(packaged_scenario("chain-4")), parse_sets([]))
    return live


def _only(live: LiveCluster, kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in getattr(live, _FIELD[kind]) if o["metadata"]["name"] == name]
    return found


def _writes(report: PlanReport, step: int, kind: str) -> dict[str, Change]:
    return {c.name: c for c in report.changes if c.step == step and c.kind == kind}


def _draining(queue: dict[str, Any], reserving: int) -> None:
    """The queue as a migration leaves it while Kueue reports ``reserving`` Workloads on every flavor."""
    queue["metadata"]["annotations"] = {
        **queue["metadata"].get("annotations", {}),
        keys.MIGRATION_PHASE: "draining",
        keys.MIGRATION_STOP_POLICY: "None",
    }
    queue["spec"]["stopPolicy"] = "HoldAndDrain"
    # the chain's queue controller applied that stop policy
    queue["metadata"]["managedFields"] = [
        {"manager": managers.QUEUE, "operation": "Apply", "fieldsV1": {"f:spec": {"f:stopPolicy": {}}}}
    ]
    generation = queue["metadata"].setdefault("generation", 3)
    names = [f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]]
    credits = [{"name": "credits.gpustack.ai/nvidia", "total": "1600k"}]
    used = [{"name": n, "resources": credits} for n in names]
    queue["status"] = {
        "conditions": [
            {"type": "Active", "status": "False", "reason": "Stopped", "observedGeneration": generation}
        ],
        "reservingWorkloads": reserving,
        "admittedWorkloads": 0,
        "flavorsReservation": used,
        "flavorsUsage": used,
    }


def test_the_next_queue_and_status_decisions_read_the_flavor_cache_finalizing_flavors_included() -> None:
    """Mid-migration: the T4 queue draining while Kueue reports a reservation, its 4-card flavor being let
    go by Kueue (finalizing). The next queue write is ``queues.decide`` over the cached flavors — the
    finalizing one among them — and the next status counts the 1-card flavor's card alone."""
    s = parse_sets([])
    live = _settled_chain_4()
    queue = _only(live, "ClusterQueue", T4)
    _draining(queue, reserving=1)
    four = next(f for f in live.flavors if "nvidia-tesla-t4-linux-amd64-4d-" in f["metadata"]["name"])
    four["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    report = plan_cluster(live, s, namespace=NS, settings_source="test")

    assert not _writes(report, 1, "ResourceFlavor")  # the finalizing flavor waits for Kueue, no write
    status = _writes(report, 1, "InstanceType")[T4].body["status"]
    assert status["accelerator"]["capacity"] == "1"  # the 4-card flavor's nodes no longer count
    cached = [f for f in live.flavors if f["metadata"]["labels"].get(keys.RESOURCE_TYPE) == keys.TYPE_NODES]
    decided = _decide(live, queue, cached, s)
    written = _writes(report, 1, "ClusterQueue").get(T4)
    expected = _expected_write(decided)
    if written is None:  # nothing to change: the decision is the queue as it is
        assert not field_diff(expected, queue)
    else:
        assert written.body == expected
    assert f"ResourceFlavor {four['metadata']['name']} is being deleted" in " ".join(report.desired.notes)


def _decide(
    live: LiveCluster, queue: dict[str, Any], flavors: list[dict[str, Any]], s: Any, topologies: Any = None
) -> Any:
    from gpustack_worker.chain import queues
    from gpustack_worker.chain.inputs import owns_field
    from gpustack_worker.chain.nodes import node_hardware

    names = {t["metadata"]["name"] for t in live.topologies} if topologies is None else topologies
    return queues.decide(
        queues.QueueInputs(
            instance_type=_only(live, "InstanceType", queue["metadata"]["name"]),
            queue=queue,
            flavors=flavors,
            nodes=[h for n in live.nodes if (h := node_hardware(n)) is not None],
            topologies=frozenset(names),
            active_checks=frozenset(),
            owns_stop_policy=owns_field(queue, managers.QUEUE, queues.STOP_POLICY_FIELD),
            aware=s.instance_type_aware_cpu_manufacturer,
            mixed_on_node=s.instance_type_mixed_on_node,
        )
    )


def _expected_write(decided: Any) -> dict[str, Any]:
    from gpustack_worker.cli.plan.planning import topology_ready_status

    assert decided.body is not None
    return {**decided.body, "status": topology_ready_status(decided.condition)}


def test_a_topology_not_created_yet_or_not_the_chains_is_missing_for_the_next_queue_decision() -> None:
    """The queue controller reads the Topologies its cache holds: one the topology controller is about
    to create, or one without the chain's type label, is missing for the next decision. An inactive type
    makes that write one the settle gate never defers (the stop policy changes to Hold): the next write
    says MissingTopology; once the Topology is in the cache, Ready."""
    s = parse_sets([])
    for how in ("absent", "unlabelled"):
        live = _settled_chain_4()
        _only(live, "InstanceType", T4)["spec"]["inactive"] = True
        (topology,) = live.topologies
        if how == "absent":
            live.topologies.clear()
        else:
            topology["metadata"]["labels"].pop(keys.RESOURCE_TYPE)
        report = plan_cluster(live, s, namespace=NS, settings_source="test")
        assert [(c.action, c.step) for c in report.changes if c.kind == "Topology"] == [
            ("create" if how == "absent" else "change", 1)
        ], how
        first = _writes(report, 1, "ClusterQueue")[T4].body
        ready = first["status"]["conditions"][0]
        assert (first["spec"]["stopPolicy"], ready["status"], ready["reason"]) == (
            "Hold",
            "False",
            "MissingTopology",
        ), how
        then = _writes(report, 2, "ClusterQueue")[T4].body
        assert then["status"]["conditions"][0]["reason"] == "Ready", how
        assert then["spec"]["stopPolicy"] == "Hold"


def test_a_flavor_name_held_by_an_object_not_the_chains_is_refused_and_the_queue_decides_without_it() -> None:
    """An admin's flavor took the name of the chain's 4-card T4 flavor (no owner label, not the chain's
    type): the flavor pass never writes over it, so nothing is in flight, and the next queue decision
    has no flavor for t4-b: NonConservedQuota, the groups kept."""
    s = parse_sets([])
    live = _settled_chain_4()
    four = next(f for f in live.flavors if "nvidia-tesla-t4-linux-amd64-4d-" in f["metadata"]["name"])
    four["metadata"]["labels"] = {"team": "admins"}
    report = plan_cluster(live, s, namespace=NS, settings_source="test")
    assert not [c for c in report.changes if c.kind == "ResourceFlavor"]
    assert [(r["kind"], r["name"]) for r in report.desired.refused] == [
        ("ResourceFlavor", four["metadata"]["name"])
    ]
    first = _writes(report, 1, "ClusterQueue")[T4]
    ready = first.body["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "NonConservedQuota")
    assert "t4-b" in ready["message"]
    assert [f.path for f in first.fields if f.path.startswith("spec")] == []  # the last plan kept
    held = f"refused by the chain (not written): ResourceFlavor {four['metadata']['name']} metadata.name"
    assert held in render_text(report)


def test_a_status_applied_whole_shows_a_field_the_controller_no_longer_sets_as_removed() -> None:
    """The InstanceType controller applies its status whole: a view it drops (the pool's first flavor
    without descriptors) is removed by the apply, so the plan shows it as a change to absent."""
    desired = {"status": {"phase": "Active"}}
    live = {"status": {"phase": "Active", "detail": {"product": "T4"}}}
    assert field_diff(desired, live, status_only=True) == []
    assert field_diff(desired, live, status_only=True, whole_status=True) == [
        FieldChange("status.detail", {"product": "T4"}, None)
    ]
