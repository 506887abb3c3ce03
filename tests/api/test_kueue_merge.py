"""Merging the chain's required Kueue configuration into a team's: what changes, what stays, idempotent."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import kinds, kueue_config, kueue_merge
from tests.kit.properties import examples


def _ours() -> dict[str, Any]:
    return kueue_config.chart_manager_config()


def test_the_charts_own_configuration_needs_nothing() -> None:
    assert kueue_merge.required_changes(_ours()) == []
    assert kueue_merge.required_changes(kueue_config.kueue_manager_config()) == []


def test_an_empty_configuration_gets_every_required_key() -> None:
    merged, changes = kueue_merge.merge({"apiVersion": kueue_config.CONFIG_API_VERSION})
    paths = [c.path for c in changes]
    assert paths[: len(kueue_config.transformations())] == [
        f"resources.transformations[{t['input']}]" for t in kueue_config.transformations()
    ]
    assert "resources.quotaCheckStrategy" in paths
    assert "integrations.frameworks" in paths
    assert "managedJobsNamespaceSelector" in paths
    # Only the gates whose Kueue v0.19 default differs from ours.
    assert sorted(p for p in paths if p.startswith("featureGates.")) == [
        "featureGates.AssignQueueLabelsForPods",
        "featureGates.TASBalancedPlacement",
        "featureGates.TASRespectNodeAffinityPreferred",
    ]
    assert merged["integrations"]["frameworks"] == ["batch/job", "pod"]
    assert merged["resources"]["transformations"] == kueue_config.transformations()
    assert kueue_merge.required_changes(merged) == []


TEAM: dict[str, Any] = {
    "apiVersion": kueue_config.CONFIG_API_VERSION,
    "kind": "Configuration",
    "namespace": "kueue-system",
    "manageJobsWithoutQueueName": True,
    "waitForPodsReady": {"timeout": "5m"},
    "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset", "ray.io/raycluster"]},
    "resources": {
        "excludeResourcePrefixes": ["example.com/"],
        "transformations": [
            {"input": "example.com/fpga", "strategy": "Retain", "outputs": {"example.com/fpga-units": "4"}},
            {"input": "nvidia.com/gpu", "strategy": "Retain", "outputs": {"team.example/gpu": "1"}},
        ],
    },
    "featureGates": {"TASBalancedPlacement": False, "LendingLimit": True},
    "managedJobsNamespaceSelector": {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["ops"]}]
    },
}


def test_a_teams_configuration_keeps_everything_it_had_but_the_keys_we_need() -> None:
    merged, changes = kueue_merge.merge(TEAM)
    assert merged["manageJobsWithoutQueueName"] is True
    assert merged["waitForPodsReady"] == {"timeout": "5m"}
    # Kueue refuses excludeResourcePrefixes with IgnoreUndeclared: it goes, as a conflict.
    assert "excludeResourcePrefixes" not in merged["resources"]
    assert merged["integrations"]["frameworks"] == [
        "batch/job",
        "jobset.x-k8s.io/jobset",
        "pod",
        "ray.io/raycluster",
    ]
    by_input = {t["input"]: t for t in merged["resources"]["transformations"]}
    assert by_input["example.com/fpga"] == TEAM["resources"]["transformations"][0]
    assert by_input["nvidia.com/gpu"]["outputs"] == {"credits.gpustack.ai/nvidia": "1600000"}
    assert merged["featureGates"]["LendingLimit"] is True
    assert merged["featureGates"]["TASBalancedPlacement"] is True
    assert merged["managedJobsNamespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["ops", kinds.SYSTEM_NAMESPACE]}
    ]
    gpu = next(c for c in changes if c.path == "resources.transformations[nvidia.com/gpu]")
    assert gpu.was == TEAM["resources"]["transformations"][1]
    assert gpu.accept == ("transformation:nvidia.com/gpu",)
    assert "team.example/gpu" in gpu.describe()
    assert TEAM["resources"]["transformations"][1]["outputs"] == {"team.example/gpu": "1"}  # input untouched


@pytest.mark.parametrize(
    ("selector", "selects"),
    [
        (None, True),
        ({}, True),
        ({"matchLabels": {"team": "a"}}, False),
        (
            {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a"]}]},
            False,
        ),
        (
            {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gpustack-system"]}
                ]
            },
            False,
        ),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, False),
    ],
)
def test_whether_a_selector_takes_in_the_system_namespace(selector: Any, selects: bool) -> None:
    assert kueue_merge.selects_namespace(selector, kinds.SYSTEM_NAMESPACE) is selects
    changes = kueue_merge.required_changes({**_ours(), "managedJobsNamespaceSelector": selector})
    if selector is None:
        changes = kueue_merge.required_changes(
            {k: v for k, v in _ours().items() if k != "managedJobsNamespaceSelector"}
        )
    assert [c.path for c in changes] == (["managedJobsNamespaceSelector"] if selects else [])


def test_kueues_default_selector_spelled_out_then_narrowed() -> None:
    config = {k: v for k, v in _ours().items() if k != "managedJobsNamespaceSelector"}
    merged, _ = kueue_merge.merge(config)
    assert merged["managedJobsNamespaceSelector"]["matchExpressions"][0]["values"] == [
        "kube-system",
        "kueue-system",
        kinds.SYSTEM_NAMESPACE,
    ]


def test_a_quantity_spelled_differently_is_the_same_transformation() -> None:
    config = _ours()
    for t in config["resources"]["transformations"]:
        if t["input"] == "nvidia.com/gpu":
            t["outputs"] = {"credits.gpustack.ai/nvidia": 1600000}
        if t["input"] == "nvidia.com/gpu.shared":
            t["outputs"] = {"credits.gpustack.ai/nvidia": "160k"}
    assert kueue_merge.required_changes(config) == []


def test_gates_in_kueues_flag_are_judged_there_and_never_written_into_the_file() -> None:
    config = {k: v for k, v in _ours().items() if k != "featureGates"}
    flags = kueue_merge.gate_flag_values("TopologyAwareScheduling=true, VisibilityOnDemand=false")
    merged, changes = kueue_merge.merge(config, gate_flags=flags)
    assert [c.path for c in changes] == ["--feature-gates"]
    assert changes[0].accept == ()  # none of the flag's gates is set otherwise
    assert changes[0].now == (
        "AssignQueueLabelsForPods=false,TASBalancedPlacement=true,TASRespectNodeAffinityPreferred=true,"
        "TopologyAwareScheduling=true,VisibilityOnDemand=false"
    )
    assert "featureGates" not in merged
    ok = kueue_merge.gate_flag_values(changes[0].now)
    assert kueue_merge.required_changes(config, gate_flags=ok) == []


@pytest.mark.parametrize("flag", ["TASBalancedPlacement", "A=yes", "=true"])
def test_a_malformed_gate_flag_is_a_clear_error(flag: str) -> None:
    with pytest.raises(ValueError, match="--feature-gates"):
        kueue_merge.gate_flag_values(flag)


_resource = st.sampled_from(
    [t["input"] for t in kueue_config.transformations()] + ["example.com/fpga", "example.com/nic"]
)
_transformation = st.fixed_dictionaries(
    {
        "input": _resource,
        "strategy": st.sampled_from(["Retain", "Replace"]),
        "outputs": st.dictionaries(
            st.sampled_from(["a.example/x", "b.example/y"]), st.sampled_from(["1", "2"])
        ),
    }
)
_teams = st.fixed_dictionaries(
    {},
    optional={
        "namespace": st.sampled_from(["kueue-system", "kueue"]),
        "manageJobsWithoutQueueName": st.booleans(),
        "integrations": st.fixed_dictionaries(
            {
                "frameworks": st.lists(
                    st.sampled_from(["batch/job", "pod", "jobset.x-k8s.io/jobset"]), unique=True
                )
            }
        ),
        "resources": st.fixed_dictionaries(
            {},
            optional={
                "quotaCheckStrategy": st.sampled_from(["BlockUndeclared", "IgnoreUndeclared"]),
                "transformations": st.lists(_transformation, unique_by=lambda t: t["input"], max_size=5),
            },
        ),
        "featureGates": st.dictionaries(
            st.sampled_from([*kueue_config.FEATURE_GATES, "LendingLimit"]), st.booleans(), max_size=4
        ),
        "managedJobsNamespaceSelector": st.sampled_from(
            [
                {},
                {"matchLabels": {"team": "a"}},
                {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["x"]}
                    ]
                },
                {"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]},
            ]
        ),
    },
)


@settings(max_examples=examples(200))
@given(_teams)
def test_merge_satisfies_the_check_keeps_the_rest_and_is_idempotent(team: dict[str, Any]) -> None:
    merged, changes = kueue_merge.merge(team)
    assert kueue_merge.required_changes(merged) == []
    assert kueue_merge.merge(merged) == (merged, [])
    assert (changes == []) == (merged == team)
    # Every top-level key of theirs we do not need is theirs, byte for byte.
    for key in ("namespace", "manageJobsWithoutQueueName"):
        assert merged.get(key) == team.get(key)
    ours = {t["input"] for t in kueue_config.transformations()}
    theirs_kept = [
        t for t in (team.get("resources") or {}).get("transformations") or [] if t["input"] not in ours
    ]
    assert all(t in merged["resources"]["transformations"] for t in theirs_kept)
    assert set((team.get("integrations") or {}).get("frameworks") or []) <= set(
        merged["integrations"]["frameworks"]
    )
    for gate, value in (team.get("featureGates") or {}).items():
        if gate not in kueue_config.FEATURE_GATES:
            assert merged["featureGates"][gate] is value
    # The narrowed selector still excludes whatever theirs excluded.
    for ns in ("x", "kube-system", "kueue-system", "default", "team-a"):
        if not kueue_merge.selects_namespace(
            team.get("managedJobsNamespaceSelector"),
            ns,
            kueue_namespace=str(team.get("namespace") or "kueue-system"),
        ):
            assert not kueue_merge.selects_namespace(merged["managedJobsNamespaceSelector"], ns)


# --- adds and conflicts ---------------------------------------------------------------------------------
_CV = kueue_config.CONFIG_API_VERSION
_NVIDIA_TEAM_ENTRY = {"input": "nvidia.com/gpu", "strategy": "Retain", "outputs": {"acme.io/gpu-cost": "10"}}


@pytest.mark.parametrize(
    ("team", "gate_flag", "conflicts"),
    [
        # The team: their nvidia.com/gpu entry, TAS off, manageJobsWithoutQueueName with pod added.
        (
            {
                "manageJobsWithoutQueueName": True,
                "resources": {"transformations": [_NVIDIA_TEAM_ENTRY]},
                "featureGates": {"TopologyAwareScheduling": False},
            },
            None,
            {
                "resources.transformations[nvidia.com/gpu]": ("transformation:nvidia.com/gpu",),
                "integrations.frameworks": ("integration:pod",),
                "featureGates.TopologyAwareScheduling": ("gate:TopologyAwareScheduling",),
            },
        ),
        # Their frameworks without batch/job: both frameworks added take over Pods and Jobs.
        (
            {"manageJobsWithoutQueueName": True, "integrations": {"frameworks": ["jobset.x-k8s.io/jobset"]}},
            None,
            {"integrations.frameworks": ("integration:batch/job", "integration:pod")},
        ),
        # Without manageJobsWithoutQueueName the pod integration only takes Pods with a queue name: an add.
        ({"manageJobsWithoutQueueName": False}, None, {}),
        # An explicit BlockUndeclared is theirs; Kueue's default (unset) is not.
        (
            {"resources": {"quotaCheckStrategy": "BlockUndeclared"}},
            None,
            {"resources.quotaCheckStrategy": ("setting:resources.quotaCheckStrategy",)},
        ),
        (
            {"resources": {"excludeResourcePrefixes": ["example.com/"]}},
            None,
            {"resources.excludeResourcePrefixes": ("setting:resources.excludeResourcePrefixes",)},
        ),
        # A gate of ours the team set to our value is no change; one they set otherwise is a conflict.
        (
            {"featureGates": {"TopologyAwareScheduling": True, "AssignQueueLabelsForPods": True}},
            None,
            {"featureGates.AssignQueueLabelsForPods": ("gate:AssignQueueLabelsForPods",)},
        ),
        # The same in Kueue's --feature-gates flag: one flag change, a conflict per gate set otherwise.
        (
            {},
            "TopologyAwareScheduling=false,TASBalancedPlacement=true",
            {"--feature-gates": ("gate:TopologyAwareScheduling",)},
        ),
        # Their transformation for one of our inputs spelled as ours (other quantity spelling): no change.
        (
            {
                "resources": {
                    "transformations": [
                        {
                            "input": "nvidia.com/gpu",
                            "strategy": "Replace",
                            "outputs": {"credits.gpustack.ai/nvidia": "1600k"},
                        }
                    ]
                }
            },
            None,
            {},
        ),
        # Settings the chain does not touch are never conflicts: waitForPodsReady, fairSharing, DRA mappings.
        (
            {
                "waitForPodsReady": {"timeout": "10m", "blockAdmission": True},
                "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare"]},
                "resources": {
                    "deviceClassMappings": [
                        {"name": "example.com/fpga", "deviceClassNames": ["fpga.example.com"]}
                    ]
                },
            },
            None,
            {},
        ),
    ],
)
def test_each_change_is_an_add_or_a_conflict_with_its_override(
    team: dict[str, Any], gate_flag: str | None, conflicts: dict[str, tuple[str, ...]]
) -> None:
    config = {"apiVersion": _CV, "kind": "Configuration", **team}
    flags = kueue_merge.gate_flag_values(gate_flag) if gate_flag else None
    merged, changes = kueue_merge.merge(config, gate_flags=flags)
    assert {c.path: c.accept for c in changes if c.conflict} == conflicts
    for key in ("waitForPodsReady", "fairSharing"):
        assert merged.get(key) == config.get(key)
    assert (merged.get("resources") or {}).get("deviceClassMappings") == (config.get("resources") or {}).get(
        "deviceClassMappings"
    )


def test_pod_with_manage_jobs_without_queue_name_names_the_consequence() -> None:
    config = {"apiVersion": _CV, "manageJobsWithoutQueueName": True}
    frameworks = next(c for c in kueue_merge.required_changes(config) if c.path == "integrations.frameworks")
    assert "every Pod without a queue name" in frameworks.why
    assert "every namespace but kube-system" in frameworks.why


def test_gates_in_both_the_file_and_the_flag_are_refused_as_kueue_does() -> None:
    config = {"apiVersion": _CV, "featureGates": {"LendingLimit": True}}
    with pytest.raises(ValueError, match="Kueue refuses both"):
        kueue_merge.required_changes(config, gate_flags={"TopologyAwareScheduling": True})


@settings(max_examples=examples(200))
@given(_teams)
def test_an_add_never_replaces_a_value_the_team_set(team: dict[str, Any]) -> None:
    """The classification, against the team's own values: an add touches only what they did not set
    (the selector is only ever narrowed); a change of a value they set is always a conflict."""
    from gpustack_worker.api.kueue_merge_record import value_at

    for change in kueue_merge.required_changes(team):
        theirs = value_at(team, change.path)
        if change.path == "managedJobsNamespaceSelector":
            assert not change.conflict
        elif change.path == "integrations.frameworks":
            assert change.conflict is (team.get("manageJobsWithoutQueueName") is True)
        else:
            assert change.conflict is (theirs is not None), change
