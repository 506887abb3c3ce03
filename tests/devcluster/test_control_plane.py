"""The local control plane is real: Kueue admits, NFD projects labels, TAS keeps a PodSet in one rack.

These talk to the API with the harness' own bootstrap client, so they prove the harness independently of
the operator runtime they are used to test.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from tests.kit import kueue
from tests.kit.waiting import eventually_sync

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap
    from gpustack_worker.devcluster.cluster import DevCluster

pytestmark = pytest.mark.cluster

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
NFD = "/apis/nfd.k8s-sigs.io/v1alpha1"


@pytest.fixture
def api(devcluster: DevCluster) -> Iterator[ApiBootstrap]:
    client = devcluster.bootstrap()
    yield client
    client.close()


def _node(name: str, labels: dict[str, str], cpu: str = "4") -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    resources = {"cpu": cpu, "memory": "16Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        # A kubelet always sets annotations; nfd-master's JSON patch assumes the map exists.
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **labels},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "test",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return str(cond.get("status"))
    return None


def _get(api: ApiBootstrap, path: str) -> dict[str, Any]:
    resp = api.request("GET", path)
    return resp.json() if resp.is_success else {}


def _queue_chain(api: ApiBootstrap, suffix: str, node_labels: dict[str, str], cpu: int, **flavor: Any) -> str:
    """A ResourceFlavor + ClusterQueue + LocalQueue in namespace ``team-<suffix>``; returns the namespace."""
    ns = f"team-{suffix}"
    api.ensure_namespace(ns)
    api.create(
        f"{KUEUE}/resourceflavors",
        kueue.resource_flavor(f"rf-{suffix}", {"nodeLabels": node_labels, **flavor}),
    )
    cpu_quota = kueue.resource_group(f"rf-{suffix}", {"cpu": cpu})
    api.create(f"{KUEUE}/clusterqueues", kueue.cluster_queue(f"cq-{suffix}", kueue.queue_spec(cpu_quota)))
    api.create(f"{KUEUE}/namespaces/{ns}/localqueues", kueue.local_queue("lq", f"cq-{suffix}", ns))
    return ns


def _workload(ns: str, name: str, count: int, pod_set: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = kueue.pod_spec(kueue.container({"cpu": "1"}))
    return kueue.workload(name, ns, "lq", kueue.pod_set(spec, count=count, **(pod_set or {})))


def decode_topology_assignment(assignment: dict[str, Any]) -> list[tuple[tuple[str, ...], int]]:
    """Expand Kueue v1beta2's compressed ``topologyAssignment`` into ``[(values per level, pod count)]``."""
    domains: list[tuple[tuple[str, ...], int]] = []
    for piece in assignment.get("slices") or []:
        n = int(piece["domainCount"])
        columns: list[list[str]] = []
        for level in piece["valuesPerLevel"]:
            if "universal" in level:
                columns.append([level["universal"]] * n)
            else:
                ind = level["individual"]
                columns.append(
                    [f"{ind.get('prefix', '')}{root}{ind.get('suffix', '')}" for root in ind["roots"]]
                )
        counts = piece["podCounts"]
        per_domain = [counts["universal"]] * n if "universal" in counts else list(counts["individual"])
        domains.extend((tuple(col[i] for col in columns), int(per_domain[i])) for i in range(n))
    return domains


def test_decode_topology_assignment_expands_prefixes_and_counts() -> None:
    compressed = {
        "levels": ["rack", "kubernetes.io/hostname"],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [
                    {"universal": "r1"},
                    {"individual": {"prefix": "n-", "roots": ["a", "b"]}},
                ],
                "podCounts": {"individual": [2, 1]},
            }
        ],
    }
    assert decode_topology_assignment(compressed) == [(("r1", "n-a"), 2), (("r1", "n-b"), 1)]


def test_kueue_activates_queue_and_admits_workload(api: ApiBootstrap) -> None:
    for name in ("kq-node-1", "kq-node-2"):
        api.create_node(_node(name, {"pool": "kq"}, cpu="2"))
    ns = _queue_chain(api, "kq", {"pool": "kq"}, cpu=4)

    cq = eventually_sync(
        lambda: _get(api, f"{KUEUE}/clusterqueues/cq-kq"), lambda o: _condition(o, "Active") == "True"
    )
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["name"] == "rf-kq"

    api.create(f"{KUEUE}/namespaces/{ns}/workloads", _workload(ns, "wl", count=3))
    wl = eventually_sync(
        lambda: _get(api, f"{KUEUE}/namespaces/{ns}/workloads/wl"),
        lambda o: _condition(o, "Admitted") == "True",
    )
    assignment = wl["status"]["admission"]["podSetAssignments"][0]
    assert wl["status"]["admission"]["clusterQueue"] == "cq-kq"
    assert assignment["flavors"] == {"cpu": "rf-kq"}
    assert assignment["count"] == 3

    # Quota is real: a second Workload that exceeds what is left stays pending.
    api.create(f"{KUEUE}/namespaces/{ns}/workloads", _workload(ns, "wl-too-big", count=2))
    # Kueue says so itself: QuotaReserved=False once it has tried and found no room (no fixed wait).
    big = eventually_sync(
        lambda: _get(api, f"{KUEUE}/namespaces/{ns}/workloads/wl-too-big"),
        lambda o: _condition(o, "QuotaReserved") == "False",
    )
    assert _condition(big, "Admitted") != "True"


def test_nfd_master_projects_nodefeature_labels(api: ApiBootstrap) -> None:
    api.create_node(_node("nfd-node-1", {}))
    api.create(
        f"{NFD}/namespaces/gpustack-system/nodefeatures",
        {
            "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
            "kind": "NodeFeature",
            "metadata": {
                "name": "nfd-node-1-test",
                "namespace": "gpustack-system",
                "labels": {"nfd.node.kubernetes.io/node-name": "nfd-node-1"},
            },
            "spec": {"labels": {"feature.gpustack.ai/test": "true"}},
        },
    )
    node = eventually_sync(
        lambda: _get(api, "/api/v1/nodes/nfd-node-1"),
        lambda o: (o.get("metadata", {}).get("labels") or {}).get("feature.gpustack.ai/test") == "true",
    )
    managed = node["metadata"]["annotations"]["nfd.node.kubernetes.io/feature-labels"].split(",")
    assert "feature.gpustack.ai/test" in managed

    # Deleting the NodeFeature makes nfd-master take the label away again.
    api.request("DELETE", f"{NFD}/namespaces/gpustack-system/nodefeatures/nfd-node-1-test")
    eventually_sync(
        lambda: _get(api, "/api/v1/nodes/nfd-node-1"),
        lambda o: "feature.gpustack.ai/test" not in (o.get("metadata", {}).get("labels") or {}),
    )


def test_topology_aware_admission_keeps_podset_in_one_rack(api: ApiBootstrap) -> None:
    # rack r1: two nodes of 2 CPUs; rack r2: one node of 2 CPUs. A 3-Pod PodSet that requires the rack
    # level fits only in r1, although the cluster has 6 CPUs in total.
    for name, rack in (("tas-a", "r1"), ("tas-b", "r1"), ("tas-c", "r2")):
        api.create_node(_node(name, {"pool": "tas", "example.com/rack": rack}, cpu="2"))
    api.create(
        f"{KUEUE}/topologies",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": "racks"},
            "spec": {"levels": [{"nodeLabel": "example.com/rack"}, {"nodeLabel": "kubernetes.io/hostname"}]},
        },
    )
    ns = _queue_chain(api, "tas", {"pool": "tas"}, cpu=6, topologyName="racks")
    eventually_sync(
        lambda: _get(api, f"{KUEUE}/clusterqueues/cq-tas"), lambda o: _condition(o, "Active") == "True"
    )

    api.create(
        f"{KUEUE}/namespaces/{ns}/workloads",
        _workload(ns, "wl-rack", count=3, pod_set={"topologyRequest": {"required": "example.com/rack"}}),
    )
    wl = eventually_sync(
        lambda: _get(api, f"{KUEUE}/namespaces/{ns}/workloads/wl-rack"),
        lambda o: _condition(o, "Admitted") == "True",
    )
    assignment = wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    levels = assignment["levels"]
    domains = decode_topology_assignment(assignment)
    assert sum(count for _, count in domains) == 3
    racks = {
        values[levels.index("example.com/rack")] for values, _ in domains if "example.com/rack" in levels
    }
    hosts = {values[levels.index("kubernetes.io/hostname")] for values, _ in domains}
    assert hosts <= {"tas-a", "tas-b"}, f"pods placed outside rack r1: {domains}"
    assert racks <= {"r1"}
