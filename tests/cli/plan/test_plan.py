"""``gpustack-worker plan``: every packaged scenario plans; ``--set`` changes the plan the way the settings
change the live chain; a TopologySource snapshot gives the racked nodes their profile; bad input is one
clean line and exit 2."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import identity, keys, kinds, validation
from gpustack_worker.chain import admissionchecks
from gpustack_worker.cli.main import main
from gpustack_worker.cli.plan.command import parse_sets
from gpustack_worker.cli.plan.planning import PlanError, PlannedChain, plan_chain, project
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.simulate.load import packaged_scenario, packaged_scenario_names, parse_scenario
from tests.kit.properties import examples

if TYPE_CHECKING:
    from pathlib import Path

P = keys.topology_profile([keys.HOSTNAME])
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
A10G = "gpustack--nvidia-a10g-linux-amd64"
GENERIC = "gpustack--generic-linux-amd64"
M = keys.UNITS_PER_ACCELERATOR
RACK_LEVELS = (keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.PRIVATE_RACK)
RACK_PROFILE = keys.topology_profile([*RACK_LEVELS, keys.HOSTNAME])


def rack_source() -> dict[str, Any]:
    """A configMap TopologySource over topology-8's racked nodes (shared with the cluster comparison)."""
    return {
        "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
        "kind": kinds.TOPOLOGY_SOURCE.kind,
        "metadata": {"name": "data-center"},
        "spec": {
            "nodeSelector": {"matchLabels": {"example.com/inventory": "racks"}},
            "levels": list(RACK_LEVELS),
            "configMap": {
                "configMapRef": {"namespace": kinds.SYSTEM_NAMESPACE, "name": "inventory"},
                "key": "snapshot.yaml",
                "maxStaleness": "10m",
            },
        },
    }


def rack_snapshot() -> str:
    """rack-node-1..8 in 2 zones × 2 racks (two nodes per rack)."""
    nodes = {}
    for i in range(1, 9):
        rack = (i - 1) // 2 + 1
        nodes[f"rack-node-{i}"] = {
            keys.PRIVATE_REGION: "region-1",
            keys.PRIVATE_ZONE: "zone-a" if rack <= 2 else "zone-b",
            keys.PRIVATE_RACK: f"rack-{rack}",
        }
    return yaml.safe_dump(
        {"apiVersion": keys.SNAPSHOT_API_VERSION, "revision": "inventory-1", "nodes": nodes}
    )


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["plan", *argv, "-o", "json"]) == 0, capsys.readouterr().err
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def _queues(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {q["metadata"]["name"]: q for q in plan["clusterQueues"]}


def _quotas(queue: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [
        (f["name"], r["name"], int(parse(r["nominalQuota"]) or 0))
        for g in queue["spec"]["resourceGroups"]
        for f in g["flavors"]
        for r in f["resources"]
    ]


@pytest.mark.parametrize("scenario", packaged_scenario_names())
def test_every_packaged_scenario_plans_a_ready_chain(
    scenario: str, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _json(capsys, scenario)
    assert plan["resourceFlavors"] and plan["clusterQueues"] and plan["instanceTypes"]
    types = {t["metadata"]["name"] for t in plan["instanceTypes"]}
    assert set(_queues(plan)) == types
    for queue in plan["clusterQueues"]:
        ready = queue["status"]["conditions"][0]
        assert (ready["type"], ready["status"], ready["reason"]) == (keys.TOPOLOGY_READY, "True", "Ready")
        assert queue["spec"]["stopPolicy"] == "None"
        assert _quotas(queue), queue["metadata"]["name"]
    # One LocalQueue per ClusterQueue, named by the hash of its name.
    assert {(lq["name"], lq["clusterQueue"]) for lq in plan["localQueues"]} == {
        (keys.local_queue_name(t), t) for t in types
    }
    # Conservation: each pool's quota is the sum of its flavors' capacities.
    capacities = {
        f["metadata"]["name"]: int(
            next(v for k, v in f["metadata"]["labels"].items() if k.endswith(".capacity"))
        )
        for f in plan["resourceFlavors"]
    }
    for queue in plan["clusterQueues"]:
        for flavor, resource, quota in _quotas(queue):
            scale = 1 if resource == "cpu" else M
            assert quota == capacities[flavor] * scale
    # The text form prints the same objects.
    assert main(["plan", scenario]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in capacities)
    assert all(keys.local_queue_name(t) in text for t in types)


def test_chain_4_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _json(capsys, "chain-4")
    queues = _queues(plan)
    assert set(queues) == {T4, A10G, GENERIC}
    assert [q for _, _, q in _quotas(queues[T4])] == [1 * M, 4 * M]
    assert [q for _, _, q in _quotas(queues[GENERIC])] == [8, 8, 48]
    types = {t["metadata"]["name"]: t for t in plan["instanceTypes"]}
    assert types[T4]["spec"]["unitResources"] == {"cpu": "8", "ram": "32Gi"}
    t4 = types[T4]["status"]
    # Five T4 cards, all free: EX 5 (4 on the largest node), SH 50 shares, SL 500 %, no partitions.
    assert t4["accelerator"] == {"onceMaxRequest": "4", "remaining": "5", "capacity": "5"}
    assert t4["acceleratorShared"]["capacity"] == "50"
    assert t4["acceleratorSliced"]["capacity"] == "500"
    assert t4["acceleratorPartitioned"]["capacity"] == "0"
    assert types[GENERIC]["status"]["cpu"] == {"onceMaxRequest": "48", "remaining": "64", "capacity": "64"}
    # The controller process marks both checks Active; a queue references them then.
    assert [c["name"] for c in queues[T4]["spec"]["admissionChecksStrategy"]["admissionChecks"]] == sorted(
        [keys.JOINT_CHECK, keys.NODE_DEVICES_CHECK]
    )
    assert {n["profile"] for n in plan["nodes"].values()} == {P}
    assert plan["topologies"] == [keys.topology_name(P)]


def test_set_aware_cpu_manufacturer_splits_pools_by_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    default = _json(capsys, "chain-4")
    aware = _json(capsys, "chain-4", "--set", "instance-type-aware-cpu-manufacturer=true")
    # Flavors are the finest grain and independent of the grouping setting.
    assert [f["metadata"]["name"] for f in aware["resourceFlavors"]] == [
        f["metadata"]["name"] for f in default["resourceFlavors"]
    ]
    assert set(_queues(aware)) == {
        "gpustack--amd-epyc-7r13--nvidia-tesla-t4-linux-amd64",
        "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64",
        "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64",
        "gpustack--amd-epyc-7r13-linux-amd64",
        "gpustack--amd-epyc-7r32-linux-amd64",
        "gpustack--intel-xeon-platinum-8259cl-linux-amd64",
    }
    intel_t4 = _queues(aware)["gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64"]
    assert [q for _, _, q in _quotas(intel_t4)] == [1 * M]


def test_set_mixed_on_node_false_keeps_accelerated_nodes_out_of_cpu_pools(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = _json(capsys, "chain-4", "--set", "instance-type-mixed-on-node=false")
    generic = _queues(plan)[GENERIC]
    assert [q for _, _, q in _quotas(generic)] == [4]  # only cpu-a (4 cores) is accelerator-free
    cpu_flavors = [
        f for f in plan["resourceFlavors"] if f["metadata"]["labels"][keys.ACCELERATABLE] == "false"
    ]
    assert len(cpu_flavors) == 1
    assert cpu_flavors[0]["spec"]["nodeLabels"][keys.CPU_ONLY] == "true"
    assert plan["nodes"]["cpu-a"]["labels"][keys.CPU_ONLY] == "true"
    assert keys.CPU_ONLY not in plan["nodes"]["t4-b"]["labels"]
    types = {t["metadata"]["name"]: t for t in plan["instanceTypes"]}
    assert types[GENERIC]["status"]["cpu"]["capacity"] == "4"


def test_set_derived_from_node_false_authors_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _json(capsys, "chain-4", "--set", "instance-type-derived-from-node=false")
    assert plan["resourceFlavors"]
    assert plan["instanceTypes"] == [] and plan["clusterQueues"] == [] and plan["localQueues"] == []
    assert any("instance-type-derived-from-node=false" in n for n in plan["notes"])


def test_set_node_management_manual_leaves_every_node_unmanaged(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _json(capsys, "chain-4", "--set", "node-management-manual=true")
    assert plan["resourceFlavors"] == [] and plan["clusterQueues"] == []
    assert all(n["profile"] == "" for n in plan["nodes"].values())


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--set", "instance-type-mixed-on-nod=false"], "unknown setting"),
        (["--set", "instance-type-mixed-on-node=maybe"], "instance-type-mixed-on-node"),
        (["--set", "instance-type-mixed-on-node"], "expected KEY=VALUE"),
        (["--set", "instance-type-mixed-on-node="], "empty value"),
    ],
)
def test_bad_set_is_one_clean_line_and_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "chain-4", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("plan: ") and needle in captured.err
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err


def test_unknown_key_suggests_the_close_one() -> None:
    with pytest.raises(ValueError, match="did you mean"):
        parse_sets(["instance-type-mixed-on-nod=false"])


def test_unknown_scenario_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "no-such-scenario"]) == 2
    assert "no such file, nor a packaged scenario" in capsys.readouterr().err


def test_invalid_scenario_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: []\n")
    assert main(["plan", str(bad)]) == 2
    assert capsys.readouterr().err.strip()


def test_topology_source_snapshot_profiles_the_racked_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, snap = tmp_path / "source.yaml", tmp_path / "snapshot.yaml"
    source.write_text(yaml.safe_dump(rack_source()))
    snap.write_text(rack_snapshot())
    plan = _json(capsys, "topology-8", "--topology-source", str(source), "--snapshot", str(snap))
    profiles = {name: n["profile"] for name, n in plan["nodes"].items()}
    assert {profiles[f"rack-node-{i}"] for i in range(1, 9)} == {RACK_PROFILE}
    assert {profiles[n] for n in ("hook-a", "hook-b")} == {P}
    assert plan["nodes"]["rack-node-5"]["labels"][keys.PRIVATE_RACK] == "rack-3"
    assert sorted(plan["topologies"]) == sorted({keys.topology_name(RACK_PROFILE), keys.topology_name(P)})
    ready = next(c for c in plan["topologySource"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    l4 = _queues(plan)["gpustack--nvidia-l4-linux-amd64"]
    (flavor, _, quota) = _quotas(l4)[0]
    assert flavor.endswith(RACK_PROFILE) and quota == 16 * M
    # The text form says the source is in effect.
    assert main(["plan", "topology-8", "--topology-source", str(source), "--snapshot", str(snap)]) == 0
    assert "topology source: Ready=True" in capsys.readouterr().out


def test_topology_source_needs_its_snapshot_and_a_valid_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, snap = tmp_path / "source.yaml", tmp_path / "snapshot.yaml"
    source.write_text(yaml.safe_dump(rack_source()))
    assert main(["plan", "topology-8", "--topology-source", str(source)]) == 2
    assert "--snapshot" in capsys.readouterr().err
    # rack-1 under two zones: the snapshot is refused, and so is the plan.
    doc = yaml.safe_load(rack_snapshot())
    doc["nodes"]["rack-node-1"][keys.PRIVATE_ZONE] = "zone-b"
    snap.write_text(yaml.safe_dump(doc))
    assert main(["plan", "topology-8", "--topology-source", str(source), "--snapshot", str(snap)]) == 2
    err = capsys.readouterr().err
    assert "not in effect" in err and "SnapshotInvalid" in err
    source.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap"}))
    assert main(["plan", "topology-8", "--topology-source", str(source), "--snapshot", str(snap)]) == 2
    assert "expected apiVersion" in capsys.readouterr().err


def test_plan_error_without_the_cli() -> None:
    settings = parse_sets([])
    with pytest.raises(PlanError, match="not in effect"):
        plan_chain(
            packaged_scenario("topology-8"), settings, topology_source=rack_source(), snapshot="nodes: {}"
        )


def test_yaml_output_is_a_kubectl_list_of_the_json_plans_objects(capsys: pytest.CaptureFixture[str]) -> None:
    as_json = _json(capsys, "mixed-4")
    assert main(["plan", "mixed-4", "-o", "yaml"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
    assert set(doc) == {"apiVersion", "kind", "items"}
    by_kind: dict[str, list[str]] = {}
    for item in doc["items"]:
        assert item["apiVersion"] and item["metadata"]["name"]
        assert "status" not in item  # kubectl apply takes no partial status (-o json has it)
        by_kind.setdefault(item["kind"], []).append(item["metadata"]["name"])
    assert by_kind["ResourceFlavor"] == [f["metadata"]["name"] for f in as_json["resourceFlavors"]]
    assert by_kind["ClusterQueue"] == [q["metadata"]["name"] for q in as_json["clusterQueues"]]
    assert by_kind["InstanceType"] == [t["metadata"]["name"] for t in as_json["instanceTypes"]]
    assert by_kind["Topology"] == as_json["topologies"]
    assert sorted(by_kind["LocalQueue"]) == sorted(q["name"] for q in as_json["localQueues"])
    assert sorted(by_kind["AdmissionCheck"]) == sorted(admissionchecks.CHECKS)
    queues = {q["metadata"]["name"]: q for q in as_json["clusterQueues"]}
    for item in doc["items"]:
        if item["kind"] == "LocalQueue":
            assert item["metadata"]["namespace"] == "default"
            assert item["spec"]["clusterQueue"] in queues


def test_project_lists_projected_keys_like_nfd_master() -> None:
    node = {"metadata": {"name": "n", "labels": {"a": "1"}, "annotations": {}}}
    out = project(node, [{"example.com/x": "1"}, {"plain": "2"}])
    assert out["metadata"]["labels"] == {
        "a": "1",
        "example.com/x": "1",
        "feature.node.kubernetes.io/plain": "2",
    }
    assert out["metadata"]["annotations"][keys.NFD_FEATURE_LABELS_ANNOTATION] == "example.com/x,plain"
    assert node["metadata"]["labels"] == {"a": "1"}  # the input is not modified


def test_node_labels_source_needs_no_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    levels = [keys.STANDARD_REGION, keys.STANDARD_ZONE]
    source = tmp_path / "cloud.yaml"
    source.write_text(
        yaml.safe_dump(
            {
                "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
                "kind": kinds.TOPOLOGY_SOURCE.kind,
                "metadata": {"name": "cloud"},
                "spec": {
                    "nodeSelector": {"matchLabels": {"example.com/inventory": "cloud"}},
                    "levels": levels,
                    "nodeLabels": {},
                },
            }
        )
    )
    plan = _json(capsys, "topology-8", "--topology-source", str(source))
    cloud = keys.topology_profile([*levels, keys.HOSTNAME])
    profiles = {name: n["profile"] for name, n in plan["nodes"].items()}
    assert profiles["cloud-a"] == profiles["cloud-b"] == cloud
    assert profiles["rack-node-1"] == profiles["hook-a"] == P
    cpu_flavors = [
        f["metadata"]["name"] for f in plan["resourceFlavors"] if f["metadata"]["name"].endswith(cloud)
    ]
    assert cpu_flavors == [f"gpustack--amd-epyc-7r13-linux-amd64-4c-{cloud}"]
    # A nodeLabels source reads no snapshot: one given is a mistake, said so.
    snap = tmp_path / "snapshot.yaml"
    snap.write_text(rack_snapshot())
    assert main(["plan", "topology-8", "--topology-source", str(source), "--snapshot", str(snap)]) == 2
    assert "no configMap or webhook arm" in capsys.readouterr().err


# --- issue 16 defects 3 and 4: one flavor one queue; every generated name fits ---------------------
RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
LONG_CPU = "AMD Ryzen Threadripper PRO 7995WX 96-Cores with a very long marketing name indeed v2 ultra"


def _gpu(product: str, count: int = 1) -> dict[str, Any]:
    return {"manufacturer": "nvidia", "product": product, "memoryMiB": 98304, "cores": 24064, "count": count}


def _node(name: str, vendor: str, model: str, *gpus: dict[str, Any], cores: int = 8) -> dict[str, Any]:
    node: dict[str, Any] = {"name": name, "cpu": {"vendor": vendor, "model": model, "cores": cores}}
    node["memory"] = "64Gi"
    if gpus:
        node["accelerators"] = list(gpus)
    return node


def _plan(nodes: list[dict[str, Any]], *sets: str) -> PlannedChain:
    return plan_chain(parse_scenario({"nodes": nodes}), parse_sets(sets))


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def assert_sound(plan: PlannedChain) -> None:
    """What the defects break: every object valid, every flavor selecting exactly its contributors (stage
    3's labels equal stage 4's keys), every flavor in exactly one queue, every queue Ready."""
    assert plan.refused == []
    bodies = [*plan.flavors.values(), *plan.instance_types.values(), *plan.cluster_queues.values()]
    for body in bodies:
        assert validation.object_problems(body) == [], body["metadata"]["name"]
    owners: dict[str, list[str]] = {}
    for name, queue in plan.cluster_queues.items():
        ready = queue["status"]["conditions"][0]
        assert (ready["status"], ready["reason"]) == ("True", "Ready"), (name, ready)
        for group in queue["spec"].get("resourceGroups") or ():
            for flavor in group["flavors"]:
                owners.setdefault(flavor["name"], []).append(name)
    for name, flavor in plan.flavors.items():
        assert len(owners.get(name, [])) == 1, (name, owners.get(name))
        selector = flavor["spec"]["nodeLabels"]
        selected = [n for n, labels in plan.node_labels.items() if _selects(selector, labels)]
        capacity = next(int(v) for k, v in flavor["metadata"]["labels"].items() if k.endswith(".capacity"))
        count = next(int(v) for k, v in selector.items() if k.endswith(".count"))
        assert capacity == len(selected) * count, (name, selected)


@pytest.mark.parametrize("aware", ["true", "false"])
@pytest.mark.parametrize("mixed", ["true", "false"])
def test_the_named_product_and_a_long_cpu_plan_a_ready_chain(aware: str, mixed: str) -> None:
    plan = _plan(
        [
            _node("rtx-a", "AMD", LONG_CPU, _gpu(RTX_PRO, 2)),
            _node("rtx-b", "AMD", "AMD EPYC 7R32", _gpu(RTX_PRO, 2)),
            _node("cpu-a", "AMD", LONG_CPU),
        ],
        f"instance-type-aware-cpu-manufacturer={aware}",
        f"instance-type-mixed-on-node={mixed}",
    )
    a_key = identity.accelerator_key("nvidia", RTX_PRO)
    assert len(a_key) == 55
    capacity_keys = {k for f in plan.flavors.values() for k in f["metadata"]["labels"] if "capacity" in k}
    assert keys.capacity_key(keys.accelerator_key(a_key)) in capacity_keys
    assert_sound(plan)


@pytest.mark.parametrize("aware", ["true", "false"])
def test_generic_gkey_feeds_one_queue_under_either_grouping(aware: str) -> None:
    plan = _plan(
        [
            _node("gen-gpu", "VendorUnknown", "@unreported", _gpu("NVIDIA A10G")),
            _node("epyc-gpu", "AMD", "AMD EPYC 7R32", _gpu("NVIDIA A10G")),
            _node("gen-cpu", "VendorUnknown", "@unreported"),
            _node("epyc-cpu", "AMD", "AMD EPYC 7R32"),
        ],
        f"instance-type-aware-cpu-manufacturer={aware}",
    )
    if aware == "true":
        assert set(plan.cluster_queues) == {
            "gpustack--generic--nvidia-a10g-linux-amd64",
            "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64",
            "gpustack--generic-linux-amd64",
            "gpustack--amd-epyc-7r32-linux-amd64",
        }
    else:
        assert set(plan.cluster_queues) == {A10G, GENERIC}
    assert_sound(plan)


@pytest.mark.parametrize("aware", ["true", "false"])
@pytest.mark.parametrize("mixed", ["true", "false"])
def test_a_bare_vendor_gkey_selects_only_its_own_nodes(aware: str, mixed: str) -> None:
    # gKey "amd" (no CPU name, family or id) next to several AMD nodes of other gKeys, same GPU and count:
    # every AMD node carries general.feature.gpustack.ai/amd=true, so only the .bare label tells them apart.
    plan = _plan(
        [
            _node("bare-1", "AMD", "@unreported", _gpu("NVIDIA A10G")),
            _node("bare-2", "AMD", "@unreported", _gpu("NVIDIA A10G")),
            _node("epyc-1", "AMD", "AMD EPYC 7R32", _gpu("NVIDIA A10G")),
            _node("epyc-2", "AMD", "AMD EPYC 7763 64-Core Processor", _gpu("NVIDIA A10G")),
            _node("bare-cpu", "AMD", "@unreported"),
        ],
        f"instance-type-aware-cpu-manufacturer={aware}",
        f"instance-type-mixed-on-node={mixed}",
    )
    bare = "gpustack--amd--nvidia-a10g-linux-amd64-1d-" + P
    selector = plan.flavors[bare]["spec"]["nodeLabels"]
    assert selector[keys.cpu_key_label("amd", "amd")] == "true"
    assert keys.general_key("amd") not in selector
    selected = sorted(n for n, labels in plan.node_labels.items() if _selects(selector, labels))
    assert selected == ["bare-1", "bare-2"]
    assert plan.node_labels["epyc-1"].get("general.feature.gpustack.ai/amd.bare") is None
    assert_sound(plan)


@settings(max_examples=examples(25))
@given(
    products=st.lists(
        st.sampled_from([RTX_PRO, "NVIDIA A10G", "Tesla T4", "N" * 80, "NVIDIA " + "é-x_" * 20]),
        min_size=1,
        max_size=3,
    ),
    cpus=st.lists(
        st.tuples(
            st.sampled_from(["AMD", "Intel", "VendorUnknown"]),
            st.sampled_from([LONG_CPU, "@unreported", "EPYC 7R32"]),
        ),
        min_size=1,
        max_size=3,
    ),
    aware=st.sampled_from(["true", "false"]),
    mixed=st.sampled_from(["true", "false"]),
)
def test_random_fleets_plan_sound_chains(
    products: list[str], cpus: list[tuple[str, str]], aware: str, mixed: str
) -> None:
    nodes = [
        _node(f"gpu-{i}", *cpus[i % len(cpus)], _gpu(product, 1 + i % 2))
        for i, product in enumerate(products)
    ]
    nodes += [_node(f"cpu-{i}", vendor, model) for i, (vendor, model) in enumerate(cpus)]
    assert_sound(
        _plan(nodes, f"instance-type-aware-cpu-manufacturer={aware}", f"instance-type-mixed-on-node={mixed}")
    )


def test_an_object_the_server_would_refuse_is_reported_and_feeds_no_ready_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A 63-character vendor_id (an NFD label value may be that long) leaves the CPU name no budget, so the
    # gKey exceeds the InstanceType CRD's 63-character generalGroup: the derived type would be refused.
    vendor = "V" * 63
    nodes = [_node("odd", vendor, "Some CPU", _gpu("NVIDIA A10G"))]
    plan = _plan(nodes, "instance-type-aware-cpu-manufacturer=true")
    g_key = identity.general_key({keys.NFD_CPU_VENDOR: vendor}, {keys.CPU_NAME_ANNOTATION: "Some CPU"})
    assert len(g_key) > 63
    refused = [(r["kind"], r["path"]) for r in plan.refused]
    assert ("InstanceType", "spec.generalGroup") in refused
    # No queue is reported Ready for what the server would not create.
    labels = [q["metadata"].get("labels") or {} for q in plan.cluster_queues.values()]
    assert all(keys.general_key(g_key) not in queue_labels for queue_labels in labels)
    path = tmp_path / "odd.yaml"
    path.write_text(yaml.safe_dump({"nodes": nodes}))
    assert main(["plan", str(path), "--set", "instance-type-aware-cpu-manufacturer=true"]) == 0
    out = capsys.readouterr().out
    assert "REFUSED BY THE API SERVER" in out and "spec.generalGroup" in out
