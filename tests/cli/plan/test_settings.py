"""``plan --from-cluster``'s settings: the live ConfigMap judged as the controllers judge it
(``runtime.settings.check_revision``, what ``SettingsSource.load`` calls). A revision they reject is planned
with the defaults a controller starting now runs on, and one warning line names the bad keys — never exit
2; a bad ``--set`` is still bad input."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_worker.cli.plan.settings import bad_keys, plan_settings
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.settings import SettingsError, SettingsSource, check_revision, settings_from

WHERE = "gpustack-system/gpustack-settings"
DEFAULTS = settings_from(WorkerSettings, {}, {})


def _cm(data: dict[str, str], binary: dict[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "gpustack-settings", "namespace": "gpustack-system"}}
    body["data"] = data
    if binary:
        body["binaryData"] = binary
    return body


def test_a_good_revision_is_planned_with_set_over_it() -> None:
    got = plan_settings(_cm({"instance-type-mixed-on-node": "false"}), WHERE, {})
    assert got.warning is None
    assert got.settings.instance_type_mixed_on_node is False
    assert got.source == f"ConfigMap {WHERE} (1 keys)"
    over = plan_settings(
        _cm({"instance-type-mixed-on-node": "false"}), WHERE, {"instance-type-mixed-on-node": "true"}
    )
    assert over.settings.instance_type_mixed_on_node is True and over.warning is None


@pytest.mark.parametrize(
    ("data", "binary", "named"),
    [
        ({"instance-type-mixed-on-nodes": "false"}, None, ["instance-type-mixed-on-nodes"]),  # a typo
        ({"instance-type-mixed-on-node": "maybe"}, None, ["instance-type-mixed-on-node"]),  # malformed
        ({"instance-type-mixed-on-node": ""}, None, ["instance-type-mixed-on-node"]),  # empty
        ({"controller-workers": "4"}, None, ["controller-workers"]),  # start-up-only
        ({}, {"instance-type-mixed-on-node": "ZmFsc2U="}, ["instance-type-mixed-on-node"]),  # binaryData
        (
            {"instance-type-mixed-on-node": "false", "no-such-key": "1", "node-management-manual": "x"},
            None,
            ["no-such-key", "node-management-manual"],
        ),
    ],
)
def test_a_revision_the_controllers_reject_is_planned_with_the_defaults_and_one_warning_line(
    data: dict[str, str], binary: dict[str, str] | None, named: list[str]
) -> None:
    cm = _cm(data, binary)
    # the controllers' own judgement rejects it, and a running source keeps what it had
    settings, problems = check_revision(WorkerSettings, cm, {})
    assert settings is None and problems
    got = plan_settings(cm, WHERE, {})
    assert got.settings == DEFAULTS  # a good key beside the bad ones is not taken: the revision never is
    assert got.source == f"defaults (ConfigMap {WHERE} rejected)"
    assert got.warning is not None and "\n" not in got.warning
    assert f"(bad key(s): {', '.join(named)})" in got.warning
    assert f"{len(problems)} problem(s): {'; '.join(problems)}" in got.warning


def test_the_source_the_controllers_run_keeps_its_settings_where_the_plan_warns() -> None:
    """The same revision, fed to the controllers' SettingsSource after a good one: rejected, the good
    one stays in force; at start-up (nothing good before) the defaults are in force — the plan's."""
    source = SettingsSource(object(), model=WorkerSettings, env={}, post_events=False)  # type: ignore[arg-type]
    assert source.load(_cm({"instance-type-mixed-on-node": "false"}))
    assert not source.load(_cm({"instance-type-mixed-on-nodes": "true"}))
    assert source.current.instance_type_mixed_on_node is False
    fresh = SettingsSource(object(), model=WorkerSettings, env={}, post_events=False)  # type: ignore[arg-type]
    assert not fresh.load(_cm({"instance-type-mixed-on-nodes": "true"}))
    assert fresh.current == plan_settings(_cm({"instance-type-mixed-on-nodes": "true"}), WHERE, {}).settings


def test_set_still_applies_over_the_defaults_of_a_rejected_revision() -> None:
    got = plan_settings(_cm({"bogus": "1"}), WHERE, {"instance-type-mixed-on-node": "false"})
    assert got.settings.instance_type_mixed_on_node is False
    assert got.source.endswith("with --set instance-type-mixed-on-node") and got.warning is not None


def test_a_bad_set_is_bad_input_not_a_warning() -> None:
    with pytest.raises(SettingsError):
        plan_settings(_cm({}), WHERE, {"instance-type-mixed-on-node": "maybe"})
    with pytest.raises(SettingsError):
        plan_settings(None, WHERE, {"nope": "1"})
    with pytest.raises(SettingsError):  # the live revision is good: the --set is what breaks it
        plan_settings(
            _cm({"instance-type-mixed-on-node": "false"}), WHERE, {"instance-type-mixed-on-node": ""}
        )


def test_bad_keys_reads_every_problem_form() -> None:
    problems = [
        "a-key='x': unknown setting",
        "b-key: in binaryData; settings are read from data only",
        "c-key='1' must be ≤ d-key='0': why",
    ]
    assert bad_keys(["a-key", "b-key", "c-key", "d-key", "e-key", "key"], problems) == [
        "a-key",
        "b-key",
        "c-key",
        "d-key",
    ]
