"""The chart's alerts, run by ``promtool`` against recorded series.

``helm`` renders ``chart/templates/metrics-prometheusrule.yaml`` (as in test_chart_cluster.py) and the rule
groups of the PrometheusRule go to a rules file; ``promtool check rules`` accepts it and ``promtool test
rules`` runs every fixture in ``tests/chart/alerts/``: input series as the worker exports them, under the
labels of several scrape configurations (the chart's ServiceMonitor, a PodMonitor, annotation-based
scraping next to Kueue's pods, a static config), and for each alert the times it must fire and the times
it must stay quiet. A fixture may carry ``chart_values`` (``metrics.prometheusRule`` values for the
render, dropped before promtool reads it); its expected alerts give their labels and ``summary``, and
the static annotations (``description``, ``runbook_url``) are filled from the rendered rule, so a
fixture states what varies. Both tools are built from their Go modules (:data:`build.OPTIONAL`,
cached): a build that fails raises (go's output quoted), it never skips. Marked ``cluster`` like the
other tests that need built components, though no control plane is started.

Every metric a rule names is one the worker registers (or Prometheus's own ``up``), and no rule assumes
a job name.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest
import yaml
from prometheus_client import REGISTRY

from gpustack_worker.cli.controller_cmd import LEASE_NAME
from gpustack_worker.devcluster import build, versions
from gpustack_worker.runtime import metrics
from gpustack_worker.runtime.version import VERSION

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.cluster

REPO: Final = Path(__file__).resolve().parents[2]
CHART: Final = REPO / "chart"
FIXTURES: Final = Path(__file__).resolve().parent / "alerts"
RELEASE: Final = "gpustack-worker"
#: The ``--set`` every render gets; a fixture's ``chart_values`` are merged into ``metrics.prometheusRule``.
BASE_VALUES: Final = ("metrics.prometheusRule.enabled=true",)
#: The operator's selector of the "selector" cases (a comma inside: set through a values file).
SELECTOR: Final = 'cluster="prod", namespace=~"gpu.*"'
#: The alerts the chart ships (the issue's six, and the ones that came before them).
ALERTS: Final = frozenset(
    {
        "GPUStackNoLeader",
        "GPUStackControllerMetricsAbsent",
        "GPUStackTargetDown",
        "GPUStackReconcileErrors",
        "GPUStackAPIForbidden",
        "GPUStackSettingsRejected",
        "GPUStackRequestNeverFits",
        "GPUStackTopologySourceStale",
        "GPUStackTopologySourceExpired",
        "GPUStackQueueHeldInMigration",
        "GPUStackGate3RetryRate",
        "GPUStackJointSetParked",
        "GPUStackInformerUnhealthy",
        "GPUStackEventLoopLag",
    }
)
#: A metric selector in PromQL: a name followed by its label matchers.
_SELECTOR_RE: Final = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{")
#: A recorded series' name (``level:metric:operations``) named anywhere in an expression.
_RECORDED_RE: Final = re.compile(r"\b[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]+\b")
_FIXTURE_FILES: Final = sorted(FIXTURES.glob("*.yaml"))

Doc = dict[str, Any]


# --- the tools ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    binary = build.ensure_optional("helm")
    home = tmp_path_factory.mktemp("helm-home")
    env = dict(os.environ)
    env.update(
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_DATA_HOME=str(home / "data"),
    )
    yield binary, env


@pytest.fixture(scope="module")
def promtool() -> Path:
    """promtool built from the Prometheus Go module (a BuildError quotes go's output)."""
    return build.ensure_optional("promtool")


def _run(
    args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, check=False, timeout=300)


def render_rule(helm: tuple[Path, dict[str, str]], values: dict[str, Any] | None = None) -> Doc:
    """The PrometheusRule the chart renders with ``BASE_VALUES`` and ``values`` (``metrics.prometheusRule``
    keys, through a values file) set."""
    binary, env = helm
    args = [str(binary), "template", RELEASE, str(CHART), "--namespace", "gpustack-system"]
    args += ["--show-only", "templates/metrics-prometheusrule.yaml", "--set", BASE_VALUES[0]]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="alert-values-") as file:
        yaml.safe_dump({"metrics": {"prometheusRule": values or {}}}, file)
        file.flush()
        proc = _run([*args, "--values", file.name], env)
    assert proc.returncode == 0, f"helm template {values}:\n{proc.stderr}"
    (rule,) = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert rule["kind"] == "PrometheusRule"
    return rule


def write_rules(rule: Doc, directory: Path) -> Path:
    """The rule groups as a Prometheus rules file (what the Prometheus Operator hands Prometheus)."""
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


def _alerts(rule: Doc) -> dict[str, Doc]:
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r}


# --- promtool -----------------------------------------------------------------------------------------
def test_promtool_is_the_pinned_release(promtool: Path) -> None:
    proc = _run([str(promtool), "--version"])
    assert proc.returncode == 0, proc.stderr
    assert f"promtool, version {versions.PROMETHEUS_RELEASE}" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "values", [{}, {"selector": SELECTOR, "runbookBaseURL": "https://x.io/r"}], ids=["default", "selector"]
)
def test_promtool_check_rules_accepts_the_rendered_rules(
    helm: tuple[Path, dict[str, str]], promtool: Path, tmp_path: Path, values: dict[str, Any]
) -> None:
    rules = write_rules(render_rule(helm, values), tmp_path)
    proc = _run([str(promtool), "check", "rules", "--lint-fatal", str(rules)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_promtool_test_rules_fails_on_a_wrong_expectation(
    helm: tuple[Path, dict[str, str]], promtool: Path, tmp_path: Path
) -> None:
    """The harness notices a failing promtool test (a fixture that expects a quiet alert to fire)."""
    write_rules(render_rule(helm), tmp_path)
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": f'leader_election_master_status{{name="{LEASE_NAME}", instance="a"}}',
                        "values": "1x30",
                    }
                ],
                "alert_rule_test": [
                    {"eval_time": "20m", "alertname": "GPUStackNoLeader", "exp_alerts": [{"exp_labels": {}}]}
                ],
            }
        ],
    }
    path = tmp_path / "wrong.yaml"
    path.write_text(yaml.safe_dump(test))
    proc = _run([str(promtool), "test", "rules", str(path)], cwd=tmp_path)
    assert proc.returncode != 0
    assert "GPUStackNoLeader" in proc.stdout + proc.stderr


def _completed(fixture: Doc, rule: Doc) -> Doc:
    """``fixture`` as promtool reads it: ``chart_values`` dropped, the rules file named, each expected
    alert's static annotations (the rule's, which hold no template) filled in where the fixture has none."""
    alerts = _alerts(rule)
    out = {k: v for k, v in fixture.items() if k != "chart_values"}
    out["rule_files"] = ["rules.yaml"]
    for group in out["tests"]:
        for case in group.get("alert_rule_test", ()):
            annotations = alerts[case["alertname"]]["annotations"]
            static = {k: v for k, v in annotations.items() if "{{" not in v}
            for expected in case.get("exp_alerts") or ():
                expected["exp_annotations"] = static | (expected.get("exp_annotations") or {})
    return out


@pytest.mark.parametrize("fixture_file", _FIXTURE_FILES, ids=[p.stem for p in _FIXTURE_FILES])
def test_alerts_fire_and_stay_quiet_on_recorded_series(
    helm: tuple[Path, dict[str, str]], promtool: Path, tmp_path: Path, fixture_file: Path
) -> None:
    fixture = yaml.safe_load(fixture_file.read_text())
    rule = render_rule(helm, fixture.get("chart_values"))
    write_rules(rule, tmp_path)
    path = tmp_path / fixture_file.name
    path.write_text(yaml.safe_dump(_completed(fixture, rule), sort_keys=False))
    proc = _run([str(promtool), "test", "rules", str(path)], cwd=tmp_path)
    assert proc.returncode == 0, f"{fixture_file.name}:\n{proc.stdout}{proc.stderr}"
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_every_alert_is_tested_firing_and_quiet() -> None:
    """Each alert has a fixture where it fires and one where it must not (both sides, per alert)."""
    fires: set[str] = set()
    quiet: set[str] = set()
    for path in _FIXTURE_FILES:
        for group in yaml.safe_load(path.read_text())["tests"]:
            for case in group.get("alert_rule_test", ()):
                (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert fires == ALERTS, f"never shown firing: {sorted(ALERTS - fires)}; unknown: {sorted(fires - ALERTS)}"
    assert quiet == ALERTS, f"never shown quiet: {sorted(ALERTS - quiet)}; unknown: {sorted(quiet - ALERTS)}"


# --- what the rules name ------------------------------------------------------------------------------
def _registered_metric_names() -> set[str]:
    """Every series name the worker's registry exports (a counter's ``_total`` included)."""
    names: set[str] = set()
    for family in REGISTRY.collect():
        names.add(family.name)
        names |= {sample.name for sample in family.samples}
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return names


@pytest.mark.parametrize("selector", ["", SELECTOR], ids=["default", "selector"])
def test_every_rule_names_only_metrics_the_worker_registers_and_no_job(
    helm: tuple[Path, dict[str, str]], selector: str
) -> None:
    """Each expression selects metrics the worker exports (``up`` is Prometheus's, the recorded series
    are the group's own), under no job name; the operator's selector is on every selector."""
    rule = render_rule(helm, {"selector": selector})
    rules = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    recorded = {r["record"] for r in rules if "record" in r}
    assert set(_alerts(rule)) == ALERTS
    registered = _registered_metric_names() | {"up"}
    named: set[str] = set()
    for r in rules:
        expr = str(r["expr"])
        names = set(_SELECTOR_RE.findall(expr))
        assert names, f"{r}: no metric selector in {expr!r}"
        assert set(_RECORDED_RE.findall(expr)) <= recorded, expr
        named |= names
        assert "job=" not in expr.replace(" ", ""), f"a rule assumes a job name: {expr!r}"
        for one in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*\s*\{[^}]*\}", expr):
            assert selector in one, f"{one!r} lacks the operator's selector"
        if "alert" in r:
            assert r["labels"]["severity"] in ("warning", "critical")
            assert f"docs/operations.md#{r['alert'].lower()}" in r["annotations"]["description"]
    missing = named - registered
    assert not missing, f"rules on metrics the worker does not register: {sorted(missing)}"
    assert {
        "gpustack_worker_build_info",
        "leader_election_master_status",
        "controller_runtime_reconcile_errors_total",
        "rest_client_requests_total",
        "gpustack_settings_rejected",
        metrics.NEVER_FITTING.name,
        metrics.TOPOLOGY_SOURCES_LAPSED.name,
        metrics.QUEUES_HELD_IN_MIGRATION.name,
        "gpustack_gate3_verdicts_total",
        metrics.PARKED_SETS.name,
        metrics.INFORMER_HEALTHY.name,
        "gpustack_event_loop_lag_max_seconds",
    } <= named
    assert f'leader_election_master_status{{name="{LEASE_NAME}"' in str(
        _alerts(rule)["GPUStackNoLeader"]["expr"]
    )
    # what tells the worker's targets from others': 1 in every process from import on
    assert REGISTRY.get_sample_value("gpustack_worker_build_info", {"version": VERSION}) == 1


def test_each_alert_has_its_runbook_line_and_url(helm: tuple[Path, dict[str, str]]) -> None:
    """docs/operations.md has an anchor per alert (what the description names), and the runbook_url is
    the base URL with that anchor once one is set."""
    doc = (REPO / "docs" / "operations.md").read_text()
    rule = render_rule(helm, {"runbookBaseURL": "https://docs.example/ops.html"})
    for name, alert in _alerts(rule).items():
        assert f'<a id="{name.lower()}"></a>' in doc, f"{name}: no runbook line in docs/operations.md"
        assert alert["annotations"]["runbook_url"] == f"https://docs.example/ops.html#{name.lower()}"
    assert all("runbook_url" not in a["annotations"] for a in _alerts(render_rule(helm)).values())


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (
            'metrics.prometheusRule.selector=cluster="a"} or vector(1) or up{',
            "/metrics/prometheusRule/selector",
        ),
        ("metrics.prometheusRule.selector=cluster=prod", "/metrics/prometheusRule/selector"),
        ("metrics.prometheusRule.noLeaderFor=5 minutes", "/metrics/prometheusRule/noLeaderFor"),
        ("metrics.prometheusRule.runbookBaseURL=docs#x", "/metrics/prometheusRule/runbookBaseURL"),
    ],
)
def test_values_schema_refuses_a_selector_that_is_not_matchers(
    helm: tuple[Path, dict[str, str]], value: str, error: str
) -> None:
    binary, env = helm
    args = [str(binary), "template", RELEASE, str(CHART), "--set", BASE_VALUES[0], "--set", value]
    proc = _run(args, env)
    assert proc.returncode != 0
    assert error in proc.stderr, proc.stderr
