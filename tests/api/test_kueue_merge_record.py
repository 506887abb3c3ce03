"""What ``kueue-config --merge`` replaced, recorded, and put back: byte for byte when nothing changed since,
key by key (the team's later changes kept and reported) when something did."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import kueue_merge, kueue_merge_record
from tests.api.test_kueue_merge import _teams
from tests.kit.properties import examples

#: The issue's team, as they wrote it (comments, their key order, flow lists).
TEAM_TEXT = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
manageJobsWithoutQueueName: true   # every Job is queued
waitForPodsReady:
  timeout: 5m
integrations:
  frameworks: ["batch/job", "jobset.x-k8s.io/jobset"]
resources:
  transformations:
  - input: nvidia.com/gpu
    strategy: Retain
    outputs:
      acme.io/gpu-cost: 10
featureGates:
  TopologyAwareScheduling: false
"""


def _merge(text: str) -> tuple[dict[str, Any], str, dict[str, Any]]:
    team = yaml.safe_load(text)
    merged, changes = kueue_merge.merge(team)
    merged_text = kueue_merge_record.dump_config(merged)
    record = kueue_merge_record.record_of(text, team, merged, changes, merged_text)
    return merged, merged_text, json.loads(json.dumps(record))  # survives the annotation's JSON


def test_an_untouched_merge_reverts_to_the_teams_file_byte_for_byte() -> None:
    _, merged_text, record = _merge(TEAM_TEXT)
    by_path = {k["path"]: k for k in record["keys"]}
    assert by_path["resources.transformations[nvidia.com/gpu]"]["was"]["outputs"] == {"acme.io/gpu-cost": 10}
    assert by_path["featureGates.TopologyAwareScheduling"] == {
        "path": "featureGates.TopologyAwareScheduling",
        "was": False,
        "now": True,
    }
    assert by_path["resources.quotaCheckStrategy"]["was"] is None
    reverted = kueue_merge_record.revert(merged_text, record)
    assert reverted.exact
    assert reverted.text == TEAM_TEXT
    assert reverted.kept == ()


def test_a_later_change_of_the_team_is_kept_and_reported_the_rest_restored() -> None:
    merged, _, record = _merge(TEAM_TEXT)
    later = copy.deepcopy(merged)
    later["featureGates"]["TASBalancedPlacement"] = False  # the team turned one of our gates off again
    later["resources"]["quotaCheckStrategy"] = "BlockUndeclared"
    later["fairSharing"] = {"preemptionStrategies": ["LessThanOrEqualToFinalShare"]}  # a new key of theirs
    reverted = kueue_merge_record.revert(kueue_merge_record.dump_config(later), record)
    assert not reverted.exact
    out = yaml.safe_load(reverted.text)
    assert out["featureGates"] == {"TASBalancedPlacement": False, "TopologyAwareScheduling": False}
    assert out["resources"]["quotaCheckStrategy"] == "BlockUndeclared"
    assert out["resources"]["transformations"] == yaml.safe_load(TEAM_TEXT)["resources"]["transformations"]
    assert out["integrations"] == {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]}
    assert "managedJobsNamespaceSelector" not in out
    assert out["fairSharing"] == later["fairSharing"]
    assert sorted(k.split(":")[0] for k in reverted.kept) == [
        "featureGates.TASBalancedPlacement",
        "resources.quotaCheckStrategy",
    ]
    assert "left as is" in reverted.kept[0]


def test_a_second_merge_keeps_the_teams_first_values() -> None:
    merged, _, record = _merge(TEAM_TEXT)
    # Our tool later needs one more key (here: the team's later edit dropped a gate of ours).
    again = copy.deepcopy(merged)
    del again["featureGates"]["TASBalancedPlacement"]
    again_text = kueue_merge_record.dump_config(again)
    merged2, changes2 = kueue_merge.merge(again)
    text2 = kueue_merge_record.dump_config(merged2)
    record2 = kueue_merge_record.record_of(again_text, again, merged2, changes2, text2, record)
    assert [c.path for c in changes2] == ["featureGates.TASBalancedPlacement"]
    assert record2["original"] is None  # the file changed between the merges: no byte-exact revert
    by_path = {k["path"]: k for k in record2["keys"]}
    assert by_path["featureGates.TopologyAwareScheduling"]["was"] is False
    out = yaml.safe_load(kueue_merge_record.revert(text2, record2).text)
    assert out == yaml.safe_load(TEAM_TEXT)


def test_a_gate_in_kueues_flag_is_reported_with_its_old_value() -> None:
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}
    flags = {"TopologyAwareScheduling": False}
    merged, changes = kueue_merge.merge(config, gate_flags=flags)
    text = kueue_merge_record.dump_config(config)
    record = kueue_merge_record.record_of(
        text, config, merged, changes, kueue_merge_record.dump_config(merged)
    )
    reverted = kueue_merge_record.revert(kueue_merge_record.dump_config(merged), record)
    assert any(
        "set Kueue's flag back to" in k and "TopologyAwareScheduling=false" in k for k in reverted.kept
    )


@pytest.mark.parametrize("text", ["[", "{}", '{"version": 2, "keys": []}'])
def test_a_malformed_record_is_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match="not a kueue-config merge record"):
        kueue_merge_record.parse(text)


def _by_input(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with its transformations keyed by input (their order is not the team's to keep)."""
    out = copy.deepcopy(config)
    resources = out.get("resources")
    if isinstance(resources, dict) and "transformations" in resources:
        resources["transformations"] = {t["input"]: t for t in resources["transformations"]}
    return out


@settings(max_examples=examples(150))
@given(_teams, st.data())
def test_merge_then_revert_gives_the_team_back_their_configuration(team: dict[str, Any], data: Any) -> None:
    text = kueue_merge_record.dump_config(team) + "# theirs\n"
    merged, changes = kueue_merge.merge(team)
    merged_text = kueue_merge_record.dump_config(merged)
    record = kueue_merge_record.record_of(text, team, merged, changes, merged_text)
    assert kueue_merge_record.revert(merged_text, record).text == text
    # Reformatted since (not byte-identical): key by key, same configuration.
    reflowed = yaml.safe_dump(merged, sort_keys=False, width=60)
    reverted = kueue_merge_record.revert(reflowed, record)
    assert _by_input(yaml.safe_load(reverted.text) or {}) == _by_input(team)
    assert reverted.kept == ()
    # One key the team changed after the merge stays as they left it and is reported.
    paths = [k["path"] for k in record["keys"]]
    if paths:
        path = data.draw(st.sampled_from(paths))
        edited = copy.deepcopy(merged)
        kueue_merge_record._set(
            edited, path, {"input": path, "strategy": "Retain"} if "[" in path else "theirs"
        )
        result = kueue_merge_record.revert(kueue_merge_record.dump_config(edited), record)
        assert [k.split(":")[0] for k in result.kept] == [path]
        assert kueue_merge_record.value_at(yaml.safe_load(result.text), path) == kueue_merge_record.value_at(
            edited, path
        )
