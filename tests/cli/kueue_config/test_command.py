"""``gpustack-worker kueue-config [--merge FILE]``: the chart's file, or a team's configuration merged."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.api import keys, kueue_config, kueue_merge
from gpustack_worker.cli.main import main

if TYPE_CHECKING:
    from pathlib import Path

TEAM: dict[str, Any] = {
    "apiVersion": kueue_config.CONFIG_API_VERSION,
    "kind": "Configuration",
    "namespace": "kueue-system",
    "integrations": {"frameworks": ["batch/job", "kubeflow.org/pytorchjob"]},
    "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare"]},
    "resources": {
        "transformations": [
            {"input": "example.com/fpga", "strategy": "Retain", "outputs": {"example.com/fpga-units": "4"}}
        ]
    },
}


def test_without_merge_it_prints_the_charts_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kueue-config"]) == 0
    assert capsys.readouterr().out == kueue_config.render()


def test_merge_prints_the_merged_file_and_a_short_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(TEAM))
    record = tmp_path / "record.json"
    assert main(["kueue-config", "--merge", str(path), "--record", str(record)]) == 0
    out, err = capsys.readouterr()
    merged = yaml.safe_load(out)
    assert merged == kueue_merge.merge(TEAM)[0]
    assert merged["fairSharing"] == TEAM["fairSharing"]
    assert merged["integrations"]["frameworks"] == ["batch/job", "kubeflow.org/pytorchjob", "pod"]
    lines = err.splitlines()
    # One row per key, the transformations we add in one: far fewer lines than changes.
    changes = kueue_merge.required_changes(TEAM)
    assert lines[0] == f"kueue-config: {len(changes)} change(s):"
    rows = [line.split()[0] for line in lines[1:] if not line.startswith("kueue-config:")]
    assert rows[0] == "CHANGE"
    assert rows[1:].count("add") == len(changes) - len(kueue_config.transformations()) + 1
    assert len(lines) < 15
    assert json.loads(record.read_text())["original"] == yaml.safe_dump(TEAM)
    # The merged file needs nothing more: --check is silent and exits 0.
    path.write_text(out)
    assert main(["kueue-config", "--merge", str(path), "--check"]) == 0
    assert capsys.readouterr() == ("", "")
    # And --revert with the record gives back the team's file byte for byte.
    assert main(["kueue-config", "--revert", str(path), "--record", str(record)]) == 0
    out, err = capsys.readouterr()
    assert out == yaml.safe_dump(TEAM)
    assert "byte for byte" in err


ISSUE_TEAM = {
    **TEAM,
    "manageJobsWithoutQueueName": True,
    "waitForPodsReady": {"timeout": "5m"},
    "resources": {
        "transformations": [
            {"input": "nvidia.com/gpu", "strategy": "Retain", "outputs": {"acme.io/gpu-cost": "10"}}
        ]
    },
    "featureGates": {"TopologyAwareScheduling": False},
}
ISSUE_ACCEPTS = ["transformation:nvidia.com/gpu", "gate:TopologyAwareScheduling", "integration:pod"]


def test_conflicts_are_refused_naming_each_with_its_override(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(ISSUE_TEAM))
    assert main(["kueue-config", "--merge", str(path), "--no-record"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "refused: 3 conflict(s)" in err
    assert "theirs acme.io/gpu-cost=10 (Retain), ours credits.gpustack.ai/nvidia=1600000 (Replace)" in err
    assert "featureGates.TopologyAwareScheduling: theirs false, ours true" in err
    assert "Kueue would manage every Pod without a queue name" in err
    for token in ISSUE_ACCEPTS:
        assert f"accept: --accept {token}" in err
    # Accepting only some still refuses the rest.
    assert main(["kueue-config", "--merge", str(path), "--no-record", "--accept", ISSUE_ACCEPTS[0]]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "refused: 2 conflict(s)" in err
    assert ISSUE_ACCEPTS[0] not in err.split("to accept them all")[1]
    # Every one accepted: merged, the conflicts shown as such in the table.
    argv = ["kueue-config", "--merge", str(path), "--no-record", "--accept", ",".join(ISSUE_ACCEPTS[:2])]
    assert main([*argv, "--accept", ISSUE_ACCEPTS[2]]) == 0
    out, err = capsys.readouterr()
    assert yaml.safe_load(out) == kueue_merge.merge(ISSUE_TEAM)[0]
    assert sum(line.split()[0] == "conflict" for line in err.splitlines() if line.startswith("  ")) == 3


@pytest.mark.parametrize(
    ("accept", "hint"),
    [
        ("gate:TopologyAwareSchedulng", "did you mean 'gate:TopologyAwareScheduling'?"),
        ("transformation:nvidia.com/gpus", "did you mean 'transformation:nvidia.com/gpu'?"),
        ("integraton:pod", "did you mean 'integration:pod'?"),
        ("gates:Foo", "did you mean 'gate:NAME'?"),
        ("everything", "KIND one of transformation, gate, integration, setting"),
    ],
)
def test_an_unknown_override_is_refused_with_did_you_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], accept: str, hint: str
) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(ISSUE_TEAM))
    assert main(["kueue-config", "--merge", str(path), "--no-record", "--accept", accept]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert f"--accept {accept!r}: no such override" in err
    assert hint in err


def test_a_bare_file_needs_a_record_or_no_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(TEAM))
    assert main(["kueue-config", "--merge", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "pass --record FILE" in err


def _configmap(config: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system", **meta},
        "data": {"controller_manager_config.yaml": yaml.safe_dump(config)},
    }


def test_merge_of_a_configmap_keeps_its_metadata_whole_and_records_in_an_annotation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = {
        "labels": {"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/name": "kueue"},
        "annotations": {
            "meta.helm.sh/release-name": "kueue",
            "meta.helm.sh/release-namespace": "kueue-system",
        },
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "o-1"}],
        "finalizers": ["example.com/keep"],
        "resourceVersion": "7",
        "uid": "u",
    }
    server_set = {
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "generation": 1,
        "managedFields": [{"manager": "helm", "operation": "Update"}],
    }
    cm = _configmap(TEAM, **kept, **server_set)
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(cm)))
    assert main(["kueue-config", "--merge", "-"]) == 0
    out, err = capsys.readouterr()
    doc = yaml.safe_load(out)
    annotations = dict(doc["metadata"]["annotations"])
    record = json.loads(annotations.pop(keys.KUEUE_CONFIG_MERGE_ANNOTATION))
    assert {**doc["metadata"], "annotations": annotations} == {
        "name": "kueue-manager-config",
        "namespace": "kueue-system",
        **kept,
    }
    assert yaml.safe_load(doc["data"]["controller_manager_config.yaml"]) == kueue_merge.merge(TEAM)[0]
    assert "controller_manager_config.yaml: |" in out  # the embedded file stays readable
    assert record["original"] == cm["data"]["controller_manager_config.yaml"]
    assert keys.KUEUE_CONFIG_MERGE_ANNOTATION in err
    # --revert gives back the ConfigMap: data byte for byte, the annotation gone, the rest as it was.
    monkeypatch.setattr("sys.stdin", io.StringIO(out))
    assert main(["kueue-config", "--revert", "-"]) == 0
    back = yaml.safe_load(capsys.readouterr().out)
    assert back == {**cm, "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system", **kept}}
    # A ConfigMap the merge never touched has nothing to revert.
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(cm)))
    assert main(["kueue-config", "--revert", "-"]) == 1
    assert "no merge to revert" in capsys.readouterr().err


def test_check_fails_with_the_table_when_anything_would_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(ISSUE_TEAM))
    assert main(["kueue-config", "--merge", str(path), "--check"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "resources.quotaCheckStrategy" in err
    assert "conflict  featureGates.TopologyAwareScheduling" in err


def test_gates_in_kueues_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = {k: v for k, v in kueue_config.chart_manager_config().items() if k != "featureGates"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = ["kueue-config", "--merge", str(path), "--no-record"]
    assert main([*argv, "--feature-gates", "TopologyAwareScheduling=true"]) == 0
    out, err = capsys.readouterr()
    assert "featureGates" not in yaml.safe_load(out)
    row = next(line.split() for line in err.splitlines() if "--feature-gates " in line)
    assert row[:3] == ["add", "--feature-gates", "TopologyAwareScheduling=true"]
    assert kueue_merge.required_changes(config, gate_flags=kueue_merge.gate_flag_values(row[3])) == []
    assert "set the --feature-gates flag" in err
    # A gate set otherwise in the flag is a conflict; gates in both the file and the flag are refused.
    assert main([*argv, "--feature-gates", "TopologyAwareScheduling=false"]) == 1
    assert "--accept gate:TopologyAwareScheduling" in capsys.readouterr().err
    path.write_text(yaml.safe_dump({**config, "featureGates": {}}))
    assert main([*argv, "--feature-gates", "TopologyAwareScheduling=true"]) == 1
    assert "Kueue refuses both" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "expected a Kueue Configuration"),
        ("apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n", "rewrite it as v1beta2"),
        ("kind: ConfigMap\ndata: {}\n", "has no data key 'controller_manager_config.yaml'"),
        ("a: [", "while parsing"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["kueue-config", "--merge", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"kueue-config --merge {path}: ")
    assert message in err


def test_a_missing_file_is_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kueue-config", "--merge", str(tmp_path / "nope.yaml")]) == 1
    assert "No such file" in capsys.readouterr().err
