"""``plan --from-cluster --topology-source FILE [--snapshot FILE]``'s pure part: the preview of applying a
TopologySource to a live cluster (topology-8 settled by the controllers' own decisions, applied until
nothing changes) — a change of the live source previewed as a change, a new one as a create; the profile
labels that change on which Nodes; the flavors that appear and disappear; each ClusterQueue's migration
(``HoldAndDrain``, "dropping N flavor(s) that may be in use") decided by ``queues.decide``; the selected
Nodes a snapshot does not describe; and the preview equals what the controllers do once it is applied."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
import yaml

from gpustack_worker.api import keys
from gpustack_worker.cli.main import main
from gpustack_worker.cli.plan.cluster_plan import LiveCluster, PlanReport, plan_cluster, render_text
from gpustack_worker.cli.plan.command import parse_sets
from gpustack_worker.cli.plan.planning import PlanError
from gpustack_worker.cli.plan.topology_preview import preview, spec_diff, with_source
from gpustack_worker.simulate.load import packaged_scenario
from tests.cli.plan.test_cluster_plan import NS, _only, _with, applied_fleet, converge
from tests.cli.plan.test_plan import rack_snapshot, rack_source

RACK_NODES = [f"rack-node-{i}" for i in range(1, 9)]
LEVELS = (keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.PRIVATE_RACK)
RACKED = keys.topology_profile([*LEVELS, keys.HOSTNAME])
ZONED = keys.topology_profile([keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.HOSTNAME])
HOSTNAME_ONLY = keys.topology_profile([keys.HOSTNAME])
L4_QUEUE = "gpustack--nvidia-l4-linux-amd64"


def _snapshot(names: list[str], revision: str = "inventory-2") -> str:
    doc = yaml.safe_load(rack_snapshot())
    doc["revision"] = revision
    doc["nodes"] = {n: v for n, v in doc["nodes"].items() if n in names}
    return yaml.safe_dump(doc)


def _zoned() -> str:
    """The rack snapshot without its rack level (what a region → zone source serves)."""
    doc = yaml.safe_load(rack_snapshot())
    doc["revision"] = "inventory-zoned"
    doc["nodes"] = {
        n: {k: v for k, v in labels.items() if k != keys.PRIVATE_RACK} for n, labels in doc["nodes"].items()
    }
    return yaml.safe_dump(doc)


def _settled(*, with_source: bool = True) -> LiveCluster:
    """topology-8 (with the rack source, unless not) as the controllers leave it."""
    s = parse_sets([])
    if with_source:
        live = applied_fleet(packaged_scenario("topology-8"), source=rack_source(), snapshot=rack_snapshot())
    else:
        live = applied_fleet(packaged_scenario("topology-8"))
    settled, _ = converge(live, s)
    return _projected_by_nfd(settled)


def _projected_by_nfd(live: LiveCluster) -> LiveCluster:
    """The settled Nodes with the source's labels listed as nfd-master lists what it projected (the
    fixture writes a Node's labels alone): a label of a NodeFeature the source stops publishing is
    then removed, as nfd-master removes it."""
    nodes = copy.deepcopy(live.nodes)
    for node in nodes:
        meta = node["metadata"]
        annotations = meta.setdefault("annotations", {})
        listed = [k for k in annotations.get(keys.NFD_FEATURE_LABELS_ANNOTATION, "").split(",") if k]
        ours = sorted(k for k in meta.get("labels", {}) if k in LEVELS)
        annotations[keys.NFD_FEATURE_LABELS_ANNOTATION] = ",".join(sorted({*listed, *ours}))
    return _with(live, nodes=nodes)


def _preview(live: LiveCluster, doc: dict[str, Any], snapshot: str | None = None) -> PlanReport:
    changed, edit = with_source(live, doc)
    report = plan_cluster(changed, parse_sets([]), namespace=NS, settings_source="test", snapshot=snapshot)
    return replace(report, preview=preview(report, live, edit))


def _l4_flavor(live: LiveCluster, profile: str) -> str:
    (name,) = [
        f["metadata"]["name"]
        for f in live.flavors
        if "nvidia-l4" in f["metadata"]["name"]
        and f["metadata"]["labels"].get(keys.TOPOLOGY_PROFILE) == profile
    ]
    return name


def _in_use(queue: dict[str, Any], flavor: str, workloads: int = 1) -> None:
    """Kueue's report, for the queue's current generation, of ``workloads`` Workload(s) reserving on
    ``flavor`` (0: the flavor idle)."""
    generation = queue["metadata"].setdefault("generation", 2)
    total = "1600k" if workloads else "0"
    used = [{"name": flavor, "resources": [{"name": "credits.gpustack.ai/nvidia", "total": total}]}]
    queue["status"] = {
        **(queue.get("status") or {}),
        "conditions": [
            *[c for c in (queue.get("status") or {}).get("conditions") or () if c.get("type") != "Active"],
            {"type": "Active", "status": "True", "reason": "Ready", "observedGeneration": generation},
        ],
        "reservingWorkloads": workloads,
        "admittedWorkloads": workloads,
        "flavorsReservation": used,
        "flavorsUsage": used,
    }


def test_a_levels_change_of_the_live_source_is_a_change_that_drains_the_pool_in_use() -> None:
    """The issue's H100 case on topology-8's L4 pool: the live source changed to region → zone while a
    Workload reserves on the rack flavor: the preview says change (spec.levels), every rack node's
    profile moves, the zone flavor appears and the rack one disappears, and the queue is held
    HoldAndDrain "dropping 1 flavor(s) that may be in use" — what ``queues.decide`` says."""
    live = _settled()
    rack = _l4_flavor(live, RACKED)
    _in_use(_only(live, "ClusterQueue", L4_QUEUE), rack)
    doc = rack_source()
    doc["spec"]["levels"] = list(LEVELS[:2])
    report = _preview(live, doc, snapshot=_zoned())
    p = report.preview
    assert p is not None
    assert (p.edit.action, [f.path for f in p.edit.fields]) == ("change", ["spec.levels"])
    assert p.edit.fields[0].live == list(LEVELS) and p.edit.fields[0].desired == list(LEVELS[:2])
    assert p.profiles == {(RACKED, ZONED): RACK_NODES}
    # every flavor of the rack profile (the L4 one and the rack nodes' CPU one) goes, a zone one comes
    assert rack in p.flavors_removed and all(f.endswith(RACKED) for f in p.flavors_removed)
    assert len(p.flavors_added) == len(p.flavors_removed) and all(f.endswith(ZONED) for f in p.flavors_added)
    (queue,) = [q for q in p.queues if q.name == L4_QUEUE]
    assert queue.stop_policy == ("None", "HoldAndDrain")
    assert (queue.status, queue.reason) == ("False", "Migrating")
    assert queue.message.startswith(f"dropping 1 flavor(s) that may be in use ({rack})")
    assert p.source is not None and p.source.ready[:2] == ("True", "Observed")
    text = render_text(report)
    assert "topology source data-center: change:" in text
    assert (
        f"profile {RACKED} -> {ZONED}: 8 node(s) (rack-node-1, rack-node-2, rack-node-3 and 5 more)" in text
    )
    assert f"ClusterQueue {L4_QUEUE}: stopPolicy None -> HoldAndDrain; TopologyReady=False/Migrating" in text
    as_json = {q["name"]: q for q in report.as_dict()["topologyPreview"]["clusterQueues"]}
    assert as_json[L4_QUEUE]["stopPolicy"] == {"live": "None", "desired": "HoldAndDrain"}
    print(text)


def test_the_same_change_with_the_pool_idle_switches_in_place() -> None:
    """Kueue reports the rack flavor idle: the queue switches in place, no hold (``queues.decide``)."""
    live = _settled()
    _in_use(_only(live, "ClusterQueue", L4_QUEUE), _l4_flavor(live, RACKED), workloads=0)
    doc = rack_source()
    doc["spec"]["levels"] = list(LEVELS[:2])
    p = _preview(live, doc, snapshot=_zoned()).preview
    assert p is not None
    (queue,) = [q for q in p.queues if q.name == L4_QUEUE]
    assert queue.stop_policy is None
    assert (queue.status, queue.reason) == ("True", "Ready")


def test_a_snapshot_describing_part_of_the_selected_nodes_says_how_many_and_which() -> None:
    """The live source, its snapshot cut to 3 of the 8 selected rack nodes: Ready=True with "describes 3
    of 8" and the 5 others named; those 5 fall to hostname-only; a flavor appears, none disappears."""
    live = _settled()
    report = _preview(live, rack_source(), snapshot=_snapshot(RACK_NODES[:3]))
    p = report.preview
    assert p is not None
    assert p.edit.action == "unchanged"
    assert p.source is not None
    status, reason, message = p.source.ready
    assert (status, reason) == ("True", "Observed")
    assert message == (
        "revision 'inventory-2' describes 3 of 8 selected node(s); 5 selected node(s) not in it get none of "
        "its labels: rack-node-4, rack-node-5, rack-node-6 and 2 more"
    )
    assert p.source.decision.undescribed == RACK_NODES[3:]
    assert p.profiles == {(RACKED, HOSTNAME_ONLY): RACK_NODES[3:]}
    assert p.flavors_removed == []  # the 3 described nodes keep the rack flavors
    # the 5 others' hardware (L4 + CPU) under the hostname-only profile
    assert len(p.flavors_added) == 2 and all(f.endswith(HOSTNAME_ONLY) for f in p.flavors_added)
    assert report.as_dict()["topologyPreview"]["source"]["undescribedNodes"] == RACK_NODES[3:]
    assert "describes 3 of 8 selected node(s)" in render_text(report)


def test_a_new_source_is_previewed_as_a_create() -> None:
    live = _settled(with_source=False)
    report = _preview(live, rack_source(), snapshot=rack_snapshot())
    p = report.preview
    assert p is not None
    assert (p.edit.action, p.edit.fields) == ("create", ())
    assert p.profiles == {(HOSTNAME_ONLY, RACKED): RACK_NODES}
    assert p.source is not None and "describes 8 of 8 selected node(s)" in p.source.ready[2]
    assert "topology source data-center: create" in render_text(report)


def test_applying_the_preview_is_what_the_controllers_reach() -> None:
    """The preview's profiles and flavors are the state the controllers settle on once the source is
    applied (its ConfigMap holding the snapshot): the preview composes their decisions."""
    live = _settled()
    snap = _snapshot(RACK_NODES[:3])
    p = _preview(live, rack_source(), snapshot=snap).preview
    assert p is not None
    cm = copy.deepcopy(live.config_maps)
    ref = rack_source()["spec"]["configMap"]
    cm[f"{NS}/{ref['configMapRef']['name']}"]["data"] = {ref["key"]: snap}
    after, _ = converge(_with(live, config_maps=cm), parse_sets([]))
    profiles = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(keys.TOPOLOGY_PROFILE) for n in after.nodes
    }
    for (_before, to), nodes in p.profiles.items():
        assert {profiles[n] for n in nodes} == {to}
    names = {f["metadata"]["name"] for f in after.flavors}
    assert set(p.flavors_added) <= names
    assert not set(p.flavors_removed) & names


def test_unchanged_source_and_snapshot_preview_nothing() -> None:
    live = _settled()
    p = _preview(live, rack_source()).preview
    assert p is not None
    assert (p.edit.action, p.profiles, p.flavors_added, p.flavors_removed, p.queues) == (
        "unchanged",
        {},
        [],
        [],
        [],
    )


def test_a_second_source_beside_the_live_one_is_refused_with_the_limit() -> None:
    live = _settled()
    other = rack_source()
    other["metadata"]["name"] = "other"
    with pytest.raises(PlanError, match="2 TopologySources"):
        _preview(live, other, snapshot=rack_snapshot())


@pytest.mark.parametrize(
    ("live_spec", "desired_spec", "paths"),
    [
        ({"levels": ["a"]}, {"levels": ["a", "b"]}, ["spec.levels"]),
        ({"configMap": {"key": "k"}}, {"webhook": {"url": "u"}}, ["spec.configMap.key", "spec.webhook.url"]),
        (
            {"nodeSelector": {"matchLabels": {"x/y": "1"}}},
            {"nodeSelector": {}},
            ["spec.nodeSelector", "spec.nodeSelector.matchLabels[x/y]"],
        ),
        ({"levels": ["a"]}, {"levels": ["a"]}, []),
    ],
)
def test_spec_diff_names_added_changed_and_removed_fields(
    live_spec: dict[str, Any], desired_spec: dict[str, Any], paths: list[str]
) -> None:
    assert [f.path for f in spec_diff({"spec": live_spec}, {"spec": desired_spec})] == paths


def test_a_changed_source_keeps_the_live_identity_and_status() -> None:
    live = _settled()
    (src,) = live.topology_sources
    src["status"] = {"lastSuccessfulRevision": "inventory-1"}
    doc = rack_source()
    doc["spec"]["levels"] = list(LEVELS[:2])
    changed, edit = with_source(live, doc)
    (new,) = changed.topology_sources
    assert new["metadata"]["uid"] == src["metadata"]["uid"]
    assert new["metadata"]["generation"] == src["metadata"]["generation"] + 1
    assert new["status"] == src["status"]
    assert edit.action == "change"
    assert live.topology_sources == [src]  # the live view is not touched


def test_the_command_checks_the_preview_inputs_before_reading_the_cluster(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = rack_source()
    hook["spec"].pop("configMap")
    hook["spec"]["webhook"] = {
        "url": "https://inventory.example/snapshot",
        "pollInterval": "1m",
        "timeout": "10s",
        "maxStaleness": "5m",
        "bearerTokenSecretRef": {"namespace": NS, "name": "token"},
    }
    path = tmp_path / "hook.yaml"
    path.write_text(yaml.safe_dump(hook))
    assert main(["plan", "--from-cluster", "--topology-source", str(path)]) == 2
    assert "webhook arm (not fetched by plan): give its --snapshot FILE" in capsys.readouterr().err
    snap = tmp_path / "snap.yaml"
    snap.write_text(rack_snapshot())
    assert main(["plan", "--from-cluster", "--snapshot", str(snap)]) == 2
    assert "--snapshot needs --topology-source" in capsys.readouterr().err
    # inputs accepted (a configMap arm may take its live ConfigMap): then the cluster is read
    cm = tmp_path / "cm.yaml"
    cm.write_text(yaml.safe_dump(rack_source()))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    argv = ["plan", "--from-cluster", "--kubeconfig", str(tmp_path / "absent"), "--topology-source", str(cm)]
    assert main(argv) == 1
    assert capsys.readouterr().err.startswith("gpustack-worker: error:")


def test_the_preview_does_not_apply_anything_to_the_live_view() -> None:
    live = _settled()
    before = copy.deepcopy(live)
    _preview(live, rack_source(), snapshot=_snapshot(RACK_NODES[:3]))
    assert live == before
