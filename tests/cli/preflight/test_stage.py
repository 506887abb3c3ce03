"""Preflight in the install order (issue 29 item 4): before the chart's install, what it installs passes as
``installs with the chart``; after it — or with part of it present — it fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import rbac, webhooks
from gpustack_worker.cli.preflight import preflighting
from gpustack_worker.cli.preflight import stage as preflight_stage
from gpustack_worker.cli.preflight.preflighting import Outcome, Result
from gpustack_worker.cli.preflight.stage import Stage
from tests.kit.properties import examples

OK, WARN, FAIL, INSTALLS = Outcome.OK, Outcome.WARN, Outcome.FAIL, Outcome.INSTALLS
NS = "gpustack-system"
OBJECTS = preflight_stage.release_objects(namespace=NS, settings_configmap="gpustack-settings")
N = len(OBJECTS)

#: The issue's first-hour table before the install, cut to one row per kind of outcome.
_BEFORE = [
    Result("kueue-api", OK, "kueue.x-k8s.io/v1beta2 (6 kinds)"),
    Result("kueue-config", FAIL, "ConfigMap kueue-system/kueue-manager-config lacks: ...", "merge"),
    Result("crds", FAIL, "worker.gpustack.ai/v1alpha1 not served", "apply", chart=True),
    Result("crd-schemas", FAIL, "instancetypes.worker.gpustack.ai: schema differs", "apply", chart=False),
    Result("namespace", FAIL, f"namespace {NS} does not exist", "--create-namespace", chart=True),
    Result("webhook", FAIL, "gpustack-worker-validating is not registered", "install", chart=True),
    Result("rbac:controller", FAIL, "lacks 76 of 76 grants", "helm upgrade", chart=True, items=("a", "b")),
    Result("nfd-master", WARN, "no NodeFeature yet", "start the agent"),
]


@pytest.mark.parametrize(
    ("present", "forced", "stage"),
    [
        ([], None, Stage.BEFORE),
        ([o.describe() for o in OBJECTS], None, Stage.AFTER),
        (["ClusterRole gpustack-worker-controller"], None, Stage.AFTER),  # a half-finished install
        ([f"ConfigMap {NS}/gpustack-settings"], None, Stage.AFTER),
        ([], Stage.AFTER, Stage.AFTER),
        (["ClusterRole gpustack-worker-controller"], Stage.BEFORE, Stage.BEFORE),
    ],
)
def test_the_stage_is_before_only_when_no_object_of_the_chart_exists(
    present: list[str], forced: Stage | None, stage: Stage
) -> None:
    decision = preflight_stage.decide(present, looked_for=N, forced=forced)
    assert (decision.stage, decision.forced) == (stage, forced is not None)


@settings(max_examples=examples(100))
@given(st.sets(st.sampled_from([o.describe() for o in OBJECTS])))
def test_any_object_of_the_chart_is_a_release_partly_installed(present: set[str]) -> None:
    decision = preflight_stage.decide(sorted(present), looked_for=N, forced=None)
    assert decision.stage is (Stage.AFTER if present else Stage.BEFORE)
    judged = preflight_stage.judged(_BEFORE, decision)
    assert preflighting.exit_code(judged) == 1  # kueue-config fails on either side
    assert any(r.outcome is INSTALLS for r in judged) is (not present)


def test_the_description_says_what_the_decision_rests_on() -> None:
    before = preflight_stage.decide([], looked_for=N, forced=None).describe()
    assert before == f"before-install (automatic: none of the chart's {N} objects exists)"
    some = ["ClusterRole gpustack-worker-agent", "ClusterRole gpustack-worker-controller", "A b", "C d"]
    partial = preflight_stage.decide(some, looked_for=N, forced=None).describe()
    assert partial.startswith(
        f"after-install (automatic: 4 of the chart's {N} objects exist (ClusterRole gpustack-worker-agent, "
        "ClusterRole gpustack-worker-controller, A b, +1 more): a partial install is judged as installed"
    )
    everything = [o.describe() for o in OBJECTS]
    assert "all" in preflight_stage.decide(everything, looked_for=N, forced=None).describe()
    assert preflight_stage.decide(some, looked_for=N, forced=Stage.BEFORE).describe() == (
        f"before-install (--before-install; 4 of the chart's {N} objects exist)"
    )


def test_before_the_install_what_the_chart_installs_passes_and_the_rest_stands() -> None:
    decision = preflight_stage.decide([], looked_for=N, forced=None)
    judged = {r.check: r for r in preflight_stage.judged(_BEFORE, decision)}
    assert {c: r.outcome for c, r in judged.items()} == {
        "kueue-api": OK,
        "kueue-config": FAIL,
        "crds": INSTALLS,
        "crd-schemas": FAIL,  # a stale CRD: Helm never replaces it
        "namespace": INSTALLS,
        "webhook": INSTALLS,
        "rbac:controller": INSTALLS,
        "nfd-master": WARN,
    }
    assert all(r.fix == "" for r in judged.values() if r.outcome is INSTALLS)
    assert judged["rbac:controller"].items == ("a", "b")
    after = preflight_stage.judged(_BEFORE, preflight_stage.decide(["x"], looked_for=N, forced=None))
    assert after == _BEFORE


def test_only_installs_pass_before_the_install() -> None:
    ours = [r for r in _BEFORE if r.chart] + [r for r in _BEFORE if r.outcome is not FAIL]
    decision = preflight_stage.decide([], looked_for=N, forced=None)
    assert preflighting.exit_code(preflight_stage.judged(ours, decision)) == 0
    forced = preflight_stage.decide([], looked_for=N, forced=Stage.AFTER)
    assert preflighting.exit_code(preflight_stage.judged(ours, forced)) == 1


def test_text_and_json_carry_the_stage() -> None:
    decision = preflight_stage.decide([], looked_for=N, forced=None)
    judged = preflight_stage.judged(_BEFORE, decision)
    text = preflight_stage.render_text(judged, decision, namespace=NS, verbose=False)
    lines = text.splitlines()
    assert lines[0] == f"install stage: before-install (automatic: none of the chart's {N} objects exists)"
    assert any(line.startswith("crds") and "  installs with the chart  " in line for line in lines)
    assert lines[-1] == (
        f"4 check(s) install with the chart: helm install gpustack-worker ./chart -n {NS} "
        "--create-namespace, then run preflight again (it judges them as installed once any of the chart's "
        "objects exists)"
    )
    assert lines[-2] == "8 checks: 1 ok, 1 warn, 4 installs with the chart, 2 fail"
    assert "- a" not in text and "- a" in preflight_stage.render_text(
        judged, decision, namespace=NS, verbose=True
    )
    data = json.loads(json.dumps(preflight_stage.payload(judged, decision)))
    assert data["stage"] == {"stage": "before-install", "forced": False, "present": [], "lookedFor": N}
    assert {c["check"]: c["outcome"] for c in data["checks"]}["webhook"] == "installs with the chart"
    assert data["ok"] is False


def test_the_release_objects_are_named_as_the_chart_and_api_name_them() -> None:
    """Every object looked for is one the chart renders (default names), so a partial install is seen."""
    described = {o.describe() for o in OBJECTS}
    assert f"ValidatingWebhookConfiguration {webhooks.VALIDATING_CONFIGURATION}" in described
    assert f"MutatingWebhookConfiguration {webhooks.MUTATING_CONFIGURATION}" in described
    for component in rbac.COMPONENTS:
        assert f"ClusterRoleBinding {component.name}" in described
        assert f"ServiceAccount {NS}/{component.name}" in described
    assert f"ConfigMap {NS}/gpustack-settings" in described
    templates = Path(__file__).resolve().parents[3] / "chart" / "templates"
    kinds_in_chart = set()
    for path in templates.glob("*.yaml"):
        for line in path.read_text().splitlines():
            if line.startswith("kind: "):
                kinds_in_chart.add(line.removeprefix("kind: ").strip())
    assert {o.resource.kind for o in OBJECTS} <= kinds_in_chart
    names = {o.name for o in OBJECTS}
    fixed = yaml.safe_load((templates.parent / "values.yaml").read_text())
    assert fixed["settings"]["configMapName"] in names and fixed["systemNamespace"] == ""
    # neither the CRDs nor the namespace: both are routinely made before the install
    assert not {o.resource.kind for o in OBJECTS} & {"CustomResourceDefinition", "Namespace"}
