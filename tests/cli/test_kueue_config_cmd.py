"""``gpustack-worker kueue-config [--merge FILE]``: the chart's file, or a team's configuration merged."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gpustack_worker.api import kueue_config, kueue_merge
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


def test_merge_prints_the_merged_file_and_what_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(TEAM))
    assert main(["kueue-config", "--merge", str(path)]) == 0
    out, err = capsys.readouterr()
    merged = yaml.safe_load(out)
    assert merged == kueue_merge.merge(TEAM)[0]
    assert merged["fairSharing"] == TEAM["fairSharing"]
    assert merged["integrations"]["frameworks"] == ["batch/job", "kubeflow.org/pytorchjob", "pod"]
    lines = err.splitlines()
    assert len(lines) == len(kueue_merge.required_changes(TEAM))
    assert all(line.startswith("kueue-config: ") for line in lines)
    assert any(line.startswith("kueue-config: integrations.frameworks: ") for line in lines)
    # The merged file needs nothing more.
    path.write_text(out)
    assert main(["kueue-config", "--merge", str(path), "--check"]) == 0
    assert capsys.readouterr() == (
        "",
        "kueue-config: nothing to change: the configuration already gives the chain what it needs\n",
    )


def test_merge_of_a_configmap_gives_back_the_configmap(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "kueue-manager-config",
            "namespace": "kueue-system",
            "resourceVersion": "7",
            "uid": "u",
        },
        "data": {"controller_manager_config.yaml": yaml.safe_dump(TEAM)},
    }
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(cm)))
    assert main(["kueue-config", "--merge", "-"]) == 0
    out = capsys.readouterr().out
    doc = yaml.safe_load(out)
    assert doc["metadata"] == {"name": "kueue-manager-config", "namespace": "kueue-system"}
    assert yaml.safe_load(doc["data"]["controller_manager_config.yaml"]) == kueue_merge.merge(TEAM)[0]
    assert "controller_manager_config.yaml: |" in out  # the embedded file stays readable


def test_check_fails_when_anything_would_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(TEAM))
    assert main(["kueue-config", "--merge", str(path), "--check"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "resources.quotaCheckStrategy" in err


def test_gates_in_kueues_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = {k: v for k, v in kueue_config.chart_manager_config().items() if k != "featureGates"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    assert (
        main(["kueue-config", "--merge", str(path), "--feature-gates", "TopologyAwareScheduling=true"]) == 0
    )
    out, err = capsys.readouterr()
    assert "featureGates" not in yaml.safe_load(out)
    assert (
        "kueue-config: --feature-gates: TopologyAwareScheduling=true -> AssignQueueLabelsForPods=false,"
        in err
    )
    assert "set the --feature-gates flag" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "expected a Kueue Configuration"),
        ("apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n", "convert a v1beta1 file"),
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
