"""The desired Pods of a role replica: Kueue pod-group metadata, resources, level check, render hash."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import keys
from gpustack_worker.api.crds.model_deployment import ModelDeployment
from gpustack_worker.placement import pods
from tests.kit.properties import examples

TYPE = "gpustack--nvidia-a10g-linux-amd64"
CPU_TYPE = "gpustack--generic-linux-amd64"
RACK = keys.PRIVATE_RACK
LEVELS = {TYPE: frozenset({RACK, keys.HOSTNAME}), CPU_TYPE: frozenset({keys.HOSTNAME})}


def instance_type(
    name: str = TYPE, *, acceleratable: bool = True, a_key: str = "nvidia-a10g"
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "acceleratable": acceleratable,
        "os": "linux",
        "arch": "amd64",
        "unitResources": {"cpu": "4", "ram": "16Gi"} if acceleratable else {"cpu": "1", "ram": "2Gi"},
        "localStorage": "100Gi",
    }
    if acceleratable:
        spec["acceleratorGroup"] = a_key
    return {"metadata": {"name": name}, "spec": spec}


TYPES = {TYPE: instance_type(), CPU_TYPE: instance_type(CPU_TYPE, acceleratable=False)}


def role(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "decode",
        "replicas": 3,
        "size": 8,
        "instanceType": TYPE,
        "resources": {"accelerator": "2"},
        "topology": {"requiredLevel": RACK},
        "template": {
            "metadata": {"labels": {"app": "llm"}, "annotations": {"team": "a"}},
            "spec": {
                "containers": [{"name": "engine", "image": "vllm:1", "resources": {"requests": {"cpu": "1"}}}]
            },
        },
    }
    base.update(over)
    return base


def deployment(*roles: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "llama", "namespace": "team-a", "uid": "uid-1", "generation": 1},
        "spec": {"roles": list(roles) or [role()]},
    }


def plan(r: dict[str, Any] | None = None, types: dict[str, Any] | None = None) -> pods.RolePlan:
    r = r or role()
    got = pods.plan_role(deployment(r), r, TYPES if types is None else types, LEVELS)
    assert isinstance(got, pods.RolePlan), got
    return got


def test_a_replica_is_one_pod_group_of_size_pods_with_a_role_named_podset() -> None:
    p = plan()
    members = pods.replica_pods(deployment(), p, 1)
    assert len(members) == 8
    group = pods.group_of(deployment(), p, 1)
    assert len(group) <= 63 and group.startswith("llama-decode-1-")
    for index, pod in enumerate(members):
        meta = pod["metadata"]
        assert meta["name"] == f"{group}-{index}"
        assert meta["namespace"] == "team-a"
        assert meta["labels"][keys.QUEUE_NAME] == keys.local_queue_name(TYPE)
        assert meta["labels"][keys.POD_GROUP_NAME] == group
        assert meta["labels"][keys.POD_GROUP_POD_INDEX] == str(index)
        assert meta["labels"][keys.POD_ORDINAL] == "1"
        assert meta["labels"][keys.MODEL_DEPLOYMENT_ROLE] == "decode"
        assert meta["labels"][keys.MODEL_DEPLOYMENT_UID] == "uid-1"
        assert meta["labels"][keys.RENDER_HASH] == p.render_hash
        assert meta["labels"]["app"] == "llm"
        assert meta["annotations"][keys.POD_GROUP_TOTAL_COUNT] == "8"
        assert meta["annotations"][keys.ROLE_HASH] == "decode"  # Kueue names the PodSet after it
        assert meta["annotations"][keys.PODSET_REQUIRED_TOPOLOGY] == RACK
        assert meta["annotations"]["team"] == "a"
        (owner,) = meta["ownerReferences"]
        assert owner == {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "ModelDeployment",
            "name": "llama",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }


def test_three_replicas_are_three_independent_groups() -> None:
    p = plan()
    groups = {pods.group_of(deployment(), p, i) for i in range(p.replicas)}
    assert len(groups) == 3


def test_resources_are_unit_resources_times_cards_plus_the_accelerator() -> None:
    r = role()
    got = pods.plan_role(deployment(r), r, TYPES, LEVELS, overcommit=False)
    assert isinstance(got, pods.RolePlan)
    (pod,) = pods.replica_pods(deployment(r), got, 0, indices=[0])
    resources = pod["spec"]["containers"][0]["resources"]
    preset = {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "100Gi", "nvidia.com/gpu": "2"}
    assert resources == {"requests": preset, "limits": preset}


def test_overcommit_scales_requests_down_and_keeps_limits_at_the_preset() -> None:
    (pod,) = pods.replica_pods(deployment(), plan(), 0, indices=[0])
    resources = pod["spec"]["containers"][0]["resources"]
    # 2 cards of a 4-core / 16Gi unit: 100m per core and 128Mi per Gi each; an eighth of 100Gi
    assert resources["requests"] == {
        "cpu": "800m",
        "memory": "4096Mi",
        "ephemeral-storage": "12800Mi",
        "nvidia.com/gpu": "2",
    }
    assert resources["limits"] == {
        "cpu": "8",
        "memory": "32Gi",
        "ephemeral-storage": "100Gi",
        "nvidia.com/gpu": "2",
    }


def test_a_partition_profile_requests_the_partitioned_keys_and_one_unit() -> None:
    r = role(resources={"acceleratorPartitionedProfile": "3g.40gb"})
    (pod,) = pods.replica_pods(deployment(r), plan(r), 0, indices=[0])
    resources = pod["spec"]["containers"][0]["resources"]
    for side in ("requests", "limits"):
        assert resources[side]["nvidia.com/gpu.partitioned"] == "1"
        assert resources[side]["nvidia.com/gpu.partitioned.mig-3g.40gb"] == "1"
    assert resources["limits"]["cpu"] == "4" and resources["limits"]["memory"] == "16Gi"


def test_a_cpu_role_gets_one_general_unit_and_no_accelerator() -> None:
    r = role(instanceType=CPU_TYPE, resources=None, topology=None)
    (pod,) = pods.replica_pods(deployment(r), plan(r), 0, indices=[0])
    assert pod["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "800m", "memory": "128Mi", "ephemeral-storage": "12800Mi"},
        "limits": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "100Gi"},
    }


def test_the_overcommit_setting_is_part_of_the_render() -> None:
    r = role()
    off = pods.plan_role(deployment(r), r, TYPES, LEVELS, overcommit=False)
    assert isinstance(off, pods.RolePlan) and off.render_hash != plan().render_hash


def test_omitted_level_means_no_topology_request() -> None:
    r = role(topology=None)
    (pod,) = pods.replica_pods(deployment(r), plan(r), 0, indices=[0])
    assert keys.PODSET_REQUIRED_TOPOLOGY not in pod["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"instanceType": None}, pods.NO_INSTANCE_TYPE),
        ({"instanceType": "missing"}, pods.INSTANCE_TYPE_NOT_FOUND),
        ({"topology": {"requiredLevel": keys.STANDARD_ZONE}}, pods.UNKNOWN_LEVEL),
        ({"instanceType": CPU_TYPE, "topology": {"requiredLevel": RACK}}, pods.UNKNOWN_LEVEL),
        ({"resources": {"accelerator": "1.5"}}, pods.INVALID_RESOURCES),
        ({"resources": {"accelerator": "0"}}, pods.INVALID_RESOURCES),
        (
            {"resources": {"accelerator": "1", "acceleratorPartitionedProfile": "1g.10gb"}},
            pods.INVALID_RESOURCES,
        ),
        ({"instanceType": CPU_TYPE, "topology": None}, pods.INVALID_RESOURCES),  # accelerator on a CPU pool
        ({"template": {"spec": {"containers": []}}}, pods.INVALID_TEMPLATE),
    ],
)
def test_a_role_that_cannot_render_is_a_problem_not_a_crash(change: dict[str, Any], reason: str) -> None:
    r = role(**change)
    got = pods.plan_role(deployment(r), r, TYPES, LEVELS)
    assert isinstance(got, pods.RoleProblem)
    assert got.reason == reason and got.role == "decode" and got.message


def test_unknown_level_names_the_levels_the_queue_has() -> None:
    r = role(topology={"requiredLevel": keys.STANDARD_ZONE})
    got = pods.plan_role(deployment(r), r, TYPES, LEVELS)
    assert isinstance(got, pods.RoleProblem)
    assert keys.STANDARD_ZONE in got.message and RACK in got.message


def test_a_queue_not_known_yet_makes_a_requested_level_unknown() -> None:
    r = role()
    got = pods.plan_role(deployment(r), r, TYPES, {TYPE: None})
    assert isinstance(got, pods.RoleProblem) and got.reason == pods.UNKNOWN_LEVEL


@pytest.mark.parametrize(
    "change",
    [
        {"topology": {"requiredLevel": keys.HOSTNAME}},
        {"topology": None},
        {"resources": {"accelerator": "4"}},
        {"size": 4},
        {"template": {"spec": {"containers": [{"name": "engine", "image": "vllm:2"}]}}},
    ],
)
def test_the_render_hash_follows_the_render(change: dict[str, Any]) -> None:
    assert plan(role(**change)).render_hash != plan().render_hash


def test_the_render_hash_ignores_replicas_and_is_stable() -> None:
    assert plan(role(replicas=5)).render_hash == plan().render_hash
    assert plan().render_hash == plan(copy.deepcopy(role())).render_hash


def test_store_terms_are_appended_after_the_templates_own_preferred_terms() -> None:
    own = {"weight": 5, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}
    template = role()["template"]
    template["spec"]["affinity"] = {
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [own]}
    }
    p = plan(role(template=template))
    term = {
        "weight": 100,
        "preference": {"matchExpressions": [{"key": keys.HOSTNAME, "operator": "In", "values": ["n1"]}]},
    }
    members = pods.replica_pods(deployment(), p, 0, [term])
    for pod in members:
        assert pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [
            own,
            term,
        ]
    assert pods.template_preferred_count(p) == 1
    # the render (and its hash) never holds the store term
    assert plan(role(template=template)).render_hash == p.render_hash


def test_group_names_stay_label_values_for_long_names() -> None:
    name = "a" * 60
    r = role(name="r" * 63)
    d = deployment(r)
    d["metadata"]["name"] = name
    got = pods.plan_role(d, r, TYPES, LEVELS)
    assert isinstance(got, pods.RolePlan)
    groups = {pods.group_of(d, got, i) for i in range(3)}
    assert len(groups) == 3
    assert all(len(g) <= 63 and g[0].isalnum() and g[-1].isalnum() for g in groups)


def test_the_rendered_role_fixture_is_a_valid_model_deployment() -> None:
    ModelDeployment.model_validate(
        {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "ModelDeployment", **deployment()}
    )


def test_queue_levels_follow_flavors_to_their_topologies() -> None:
    queue = {"spec": {"resourceGroups": [{"flavors": [{"name": "f1"}, {"name": "f2"}, {"name": "gone"}]}]}}
    flavors = {"f1": {"spec": {"topologyName": "t1"}}, "f2": {"spec": {"topologyName": "t2"}}}
    topologies = {
        "t1": {"spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": keys.HOSTNAME}]}},
        "t2": {"spec": {"levels": [{"nodeLabel": keys.STANDARD_ZONE}, {"nodeLabel": keys.HOSTNAME}]}},
    }
    assert pods.queue_levels(queue, flavors, topologies) == frozenset(
        {RACK, keys.STANDARD_ZONE, keys.HOSTNAME}
    )
    assert pods.queue_levels(None, flavors, topologies) is None
    assert pods.queue_levels({"spec": {}}, flavors, topologies) == frozenset()


# --- the template's metadata: which keys are the render's alone -----------------------------------------
#: Every label, annotation, finalizer and gate key Kueue v0.19.2 defines under its domain (pkg/ and apis/,
#: read from its sources), plus a provisioning-request parameter (the ``provreq.kueue.x-k8s.io/`` subdomain).
KUEUE_KEYS = (
    "kueue.x-k8s.io/admission",
    "kueue.x-k8s.io/admission-gated-by",
    "kueue.x-k8s.io/cluster-queue-name",
    "kueue.x-k8s.io/component-workload-index",
    "kueue.x-k8s.io/concurrent-admission",
    "kueue.x-k8s.io/concurrent-admission-parent",
    "kueue.x-k8s.io/elastic-job",
    "kueue.x-k8s.io/is-group-workload",
    "kueue.x-k8s.io/job-completions-equal-parallelism",
    "kueue.x-k8s.io/job-min-parallelism",
    "kueue.x-k8s.io/job-owner-gvk",
    "kueue.x-k8s.io/job-owner-name",
    "kueue.x-k8s.io/job-uid",
    "kueue.x-k8s.io/local-queue-name",
    "kueue.x-k8s.io/managed",
    "kueue.x-k8s.io/manager",
    "kueue.x-k8s.io/multikueue",
    "kueue.x-k8s.io/multikueue-origin",
    "kueue.x-k8s.io/multikueue-origin-uid",
    "kueue.x-k8s.io/multikueue-worker-workload-pod",
    "kueue.x-k8s.io/pod-group-fast-admission",
    "kueue.x-k8s.io/pod-group-name",
    "kueue.x-k8s.io/pod-group-pod-index",
    "kueue.x-k8s.io/pod-group-pod-index-label",
    "kueue.x-k8s.io/pod-group-serving",
    "kueue.x-k8s.io/pod-group-total-count",
    "kueue.x-k8s.io/pod-index-offset",
    "kueue.x-k8s.io/pod-suspending-parent",
    "kueue.x-k8s.io/podset",
    "kueue.x-k8s.io/podset-group-name",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kueue.x-k8s.io/podset-replica-sizes",
    "kueue.x-k8s.io/podset-required-topology",
    "kueue.x-k8s.io/podset-slice-required-topology",
    "kueue.x-k8s.io/podset-slice-required-topology-constraints",
    "kueue.x-k8s.io/podset-slice-size",
    "kueue.x-k8s.io/podset-unconstrained-topology",
    "kueue.x-k8s.io/prebuilt-workload-name",
    "kueue.x-k8s.io/priority-boost",
    "kueue.x-k8s.io/priority-class",
    "kueue.x-k8s.io/provisioning-request",
    "kueue.x-k8s.io/queue-name",
    "kueue.x-k8s.io/retriable-in-group",
    "kueue.x-k8s.io/role-hash",
    "kueue.x-k8s.io/safe-to-forcefully-delete",
    "kueue.x-k8s.io/stopping",
    "kueue.x-k8s.io/topology",
    "kueue.x-k8s.io/workload",
    "kueue.x-k8s.io/workload-allowed-resource-flavors",
    "kueue.x-k8s.io/workload-slice-name",
    "kueue.x-k8s.io/workload-slice-replacement-for",
    "kueue.x-k8s.io/workloadpriorityclass",
    "provreq.kueue.x-k8s.io/ValidUntilSeconds",
)
#: The deployment's Pod identity labels (and any other key of their domain).
IDENTITY_KEYS = (
    keys.MODEL_DEPLOYMENT_UID,
    keys.MODEL_DEPLOYMENT_ROLE,
    keys.POD_ORDINAL,
    keys.RENDER_HASH,
    "modeldeployment.gpustack.ai/anything",
)
#: Keys that only look like reserved ones: a template may carry them.
LOOKALIKES = (
    "queue-name",
    "kueue.x-k8s.io",
    "x-k8s.io/queue-name",
    "notkueue.x-k8s.io/queue-name",
    "kueue.x-k8s.io.example.com/queue-name",
    "example.com/kueue.x-k8s.io",
    "gpustack.ai/role",
    "app.kubernetes.io/name",
)


def _with_metadata(field: str, entries: dict[str, str], **over: Any) -> dict[str, Any]:
    template = copy.deepcopy(role()["template"])
    template["metadata"][field] = {**template["metadata"][field], **entries}
    return role(template=template, **over)


@pytest.mark.parametrize("field", ["labels", "annotations"])
@pytest.mark.parametrize("key", KUEUE_KEYS + IDENTITY_KEYS)
def test_a_template_carrying_a_reserved_key_is_refused_by_name(field: str, key: str) -> None:
    assert pods.reserved_key(key)
    r = _with_metadata(field, {key: "x"})
    got = pods.plan_role(deployment(r), r, TYPES, LEVELS)
    assert isinstance(got, pods.RoleProblem)
    assert got.reason == pods.RESERVED_TEMPLATE_METADATA and got.role == "decode"
    assert f"{key} ({field[:-1]})" in got.message


@pytest.mark.parametrize("key", LOOKALIKES)
def test_a_key_that_only_looks_reserved_is_carried(key: str) -> None:
    assert not pods.reserved_key(key)
    r = _with_metadata("labels", {key: "x"})
    (pod,) = pods.replica_pods(deployment(r), plan(r), 0, indices=[0])
    assert pod["metadata"]["labels"][key] == "x"


def test_the_template_preferred_topology_is_refused_not_left_to_suppress_the_store_terms() -> None:
    """The filed case: a template's own podset-preferred-topology (and required-topology, which would skip
    the level check) is refused, with every reserved key named, whatever the role's level."""
    r = _with_metadata(
        "annotations",
        {keys.PODSET_PREFERRED_TOPOLOGY: RACK, keys.PODSET_REQUIRED_TOPOLOGY: keys.STANDARD_ZONE},
        topology=None,
    )
    got = pods.plan_role(deployment(r), r, TYPES, LEVELS)
    assert isinstance(got, pods.RoleProblem) and got.reason == pods.RESERVED_TEMPLATE_METADATA
    assert keys.PODSET_PREFERRED_TOPOLOGY in got.message and keys.PODSET_REQUIRED_TOPOLOGY in got.message


_TEMPLATE_KEYS = st.sampled_from(("app", "example.com/team", *LOOKALIKES, *KUEUE_KEYS, *IDENTITY_KEYS))
_ENTRIES = st.dictionaries(_TEMPLATE_KEYS, st.sampled_from(("a", "b")), max_size=4)
#: The Kueue keys every rendered Pod carries (the topology one only with a level), label or annotation.
_OURS_LABELS = {keys.QUEUE_NAME, keys.POD_GROUP_NAME, keys.POD_GROUP_POD_INDEX}
_OURS_ANNOTATIONS = {keys.POD_GROUP_TOTAL_COUNT, keys.ROLE_HASH}
_TOPOLOGY_PREFIX = f"{keys.KUEUE_DOMAIN}/podset-"


@settings(max_examples=examples(300))
@given(labels=_ENTRIES, annotations=_ENTRIES, level=st.sampled_from([None, RACK, keys.HOSTNAME]))
def test_a_rendered_pods_topology_annotations_are_exactly_the_roles_level(
    labels: dict[str, str], annotations: dict[str, str], level: str | None
) -> None:
    template = {**role()["template"], "metadata": {"labels": labels, "annotations": annotations}}
    r = role(template=template, topology={"requiredLevel": level} if level else None)
    got = pods.plan_role(deployment(r), r, TYPES, LEVELS)
    reserved = sorted(k for k in (*labels, *annotations) if pods.reserved_key(k))
    if reserved:
        assert isinstance(got, pods.RoleProblem) and got.reason == pods.RESERVED_TEMPLATE_METADATA
        assert all(k in got.message for k in reserved)
        return
    assert isinstance(got, pods.RolePlan)
    for pod in pods.replica_pods(deployment(r), got, 0, indices=[0, 7]):
        meta = pod["metadata"]
        topology = {k: v for k, v in meta["annotations"].items() if k.startswith(_TOPOLOGY_PREFIX)}
        assert topology == ({keys.PODSET_REQUIRED_TOPOLOGY: level} if level else {})
        kueue = f"{keys.KUEUE_DOMAIN}/"
        assert {k for k in meta["labels"] if k.startswith(kueue)} == _OURS_LABELS
        assert {k for k in meta["annotations"] if k.startswith(kueue)} == _OURS_ANNOTATIONS | (
            {keys.PODSET_REQUIRED_TOPOLOGY} if level else set()
        )
        # the template's own keys ride along verbatim
        assert all(meta["labels"][k] == v for k, v in labels.items())
        assert all(meta["annotations"][k] == v for k, v in annotations.items())
