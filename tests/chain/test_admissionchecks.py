"""The two AdmissionChecks (never Active on their own) and the hostname-only profile and Topology."""

from __future__ import annotations

from gpustack_worker.chain import admissionchecks, topologies


def test_both_checks_name_their_controllers() -> None:
    assert {n: b["spec"] for n, b in admissionchecks.desired_admission_checks().items()} == {
        "gpustack-node-devices": {"controllerName": "worker.gpustack.ai/node-devices"},
        "gpustack-model-deployment-joint": {"controllerName": "worker.gpustack.ai/model-deployment-joint"},
    }
    assert all("status" not in b for b in admissionchecks.desired_admission_checks().values())


def test_only_checks_with_a_true_active_condition_count() -> None:
    def check(name: str, status: str | None) -> dict[str, object]:
        conds = [] if status is None else [{"type": "Active", "status": status}]
        return {"metadata": {"name": name}, "status": {"conditions": conds}}

    assert admissionchecks.active_checks(
        [
            check("gpustack-node-devices", None),
            check("gpustack-model-deployment-joint", "True"),
            check("someone-elses", "True"),
        ]
    ) == frozenset({"gpustack-model-deployment-joint"})
    assert admissionchecks.active_checks([check("gpustack-node-devices", "False")]) == frozenset()


def test_hostname_profile_on_managed_nodes_only() -> None:
    managed = {"metadata": {"labels": {"gpustack.ai/managed": "true"}}}
    assert topologies.desired_node_profile(managed) == "fnv64-87bf574bea2a4f23"
    for value in (None, "false", "True", ""):
        labels = {} if value is None else {"gpustack.ai/managed": value}
        assert topologies.desired_node_profile({"metadata": {"labels": labels}}) is None


def test_hostname_topology() -> None:
    body = topologies.topology_body(topologies.HOSTNAME_LEVELS)
    assert body["metadata"]["name"] == "gpustack-fnv64-87bf574bea2a4f23"
    assert body["metadata"]["labels"] == {
        "resource.gpustack.ai/type": "topology",
        "topology.gpustack.ai/profile": "fnv64-87bf574bea2a4f23",
    }
    assert body["spec"] == {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]}
