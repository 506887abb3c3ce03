"""The preflight's pure checks: what is required, how it is compared, and the fix text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.api import crdgen, kinds, kueue_config, rbac, webhooks
from gpustack_worker.cli.preflight import preflighting
from gpustack_worker.cli.preflight.preflighting import Outcome
from tests.kit.properties import examples

OK, WARN, FAIL = Outcome.OK, Outcome.WARN, Outcome.FAIL


@pytest.mark.parametrize(
    ("info", "outcome", "text"),
    [
        ({"major": "1", "minor": "35", "gitVersion": "v1.35.4"}, OK, "v1.35.4 (>= 1.29)"),
        ({"major": "1", "minor": "29+", "gitVersion": "v1.29.3-eks"}, OK, "v1.29.3-eks"),
        ({"major": "1", "minor": "28", "gitVersion": "v1.28.9"}, FAIL, "older than 1.29"),
        ({"major": "", "minor": ""}, FAIL, "unreadable"),
        (None, FAIL, "did not answer"),
    ],
)
def test_kubernetes_version(info: Any, outcome: Outcome, text: str) -> None:
    result = preflighting.kubernetes_version(info)
    assert (result.check, result.outcome) == ("kubernetes", outcome)
    assert text in result.detail
    assert bool(result.fix) is (outcome is FAIL)


def _all_served() -> dict[str, frozenset[str] | None]:
    served: dict[str, frozenset[str] | None] = {}
    for g in preflighting.api_groups(rbac.COMPONENTS):
        served[g.group_version] = (served.get(g.group_version) or frozenset()) | set(g.plurals)
    return served


def test_the_kinds_checked_are_the_kinds_the_roles_use() -> None:
    groups = {g.group_version: (g.check, g.plurals) for g in preflighting.api_groups(rbac.COMPONENTS)}
    assert groups["kueue.x-k8s.io/v1beta2"] == (
        "kueue-api",
        ("admissionchecks", "clusterqueues", "localqueues", "resourceflavors", "topologies", "workloads"),
    )
    assert groups["nfd.k8s-sigs.io/v1alpha1"] == ("nfd-api", ("nodefeatures",))
    assert groups["worker.gpustack.ai/v1alpha1"][0] in ("crds", "devices-api")
    agent = {g.check for g in preflighting.api_groups([rbac.AGENT])}
    assert "kueue-api" not in agent  # the agent starts without Kueue
    assert {"nfd-api", "devices-api"} <= agent


def test_every_api_served_is_green() -> None:
    results = preflighting.served_apis(preflighting.api_groups(rbac.COMPONENTS), _all_served())
    assert {r.check for r in results} == {"crds", "devices-api", "kubernetes-apis", "kueue-api", "nfd-api"}
    assert all(r.outcome is OK for r in results), results


def test_a_bare_api_server_names_every_missing_piece() -> None:
    served = {
        gv: (None if "/" in gv and not gv.startswith(("storage.", "coordination.", "events.")) else p)
        for gv, p in _all_served().items()
    }
    results = {r.check: r for r in preflighting.served_apis(preflighting.api_groups(rbac.COMPONENTS), served)}
    assert results["kueue-api"].outcome is FAIL
    assert "kueue.x-k8s.io/v1beta2 not served" in results["kueue-api"].detail
    assert "helm install kueue" in results["kueue-api"].fix
    assert "nfd.k8s-sigs.io/v1alpha1 not served" in results["nfd-api"].detail
    assert "Node Feature Discovery" in results["nfd-api"].fix
    assert results["crds"].outcome is FAIL and "manifests/crds" in results["crds"].fix
    assert "Device Manager" in results["devices-api"].fix


def test_a_missing_kind_in_a_served_group_is_named() -> None:
    served = _all_served()
    served["kueue.x-k8s.io/v1beta2"] = frozenset(
        {"clusterqueues", "localqueues", "resourceflavors", "workloads"}
    )
    (kueue,) = [
        r
        for r in preflighting.served_apis(preflighting.api_groups(rbac.COMPONENTS), served)
        if r.check == "kueue-api"
    ]
    assert kueue.detail == "kueue.x-k8s.io/v1beta2 lacks admissionchecks, topologies"


def test_kueue_configuration_ours_passes_and_missing_pieces_are_listed() -> None:
    ok = preflighting.kueue_configuration(kueue_config.chart_manager_config(), source="f")
    assert ok.outcome is OK and "credit transformations" in ok.detail
    bare = {"apiVersion": kueue_config.CONFIG_API_VERSION, "kind": "Configuration"}
    result = preflighting.kueue_configuration(bare, source="ConfigMap kueue-system/kueue-manager-config")
    assert result.outcome is FAIL
    count = len(kueue_config.transformations())
    # the row names three transformations and counts the rest; every one is in its items (--verbose, JSON)
    assert f"resources.transformations: {count} missing (alibabacloud.com/ppu, " in result.detail
    assert f", +{count - preflighting.SHOWN} more)" in result.detail
    assert "nvidia.com/gpu.sliced.units" not in result.detail
    listed = [i.split(":", 1)[0] for i in result.items]
    assert {f"resources.transformations[{t['input']}]" for t in kueue_config.transformations()} <= set(listed)
    for needed in (
        "integrations.frameworks",
        "featureGates.TASBalancedPlacement",
        "featureGates.TASRespectNodeAffinityPreferred",
        "resources.quotaCheckStrategy",
    ):
        assert needed in result.detail and needed in listed
    assert "kueue-config --merge" in result.fix


def test_kueue_configuration_unreadable_or_absent() -> None:
    absent = preflighting.kueue_configuration(None, source="ConfigMap kueue-system/kueue-manager-config")
    assert absent.outcome is FAIL and "--kueue-config FILE" in absent.fix
    v1beta1 = preflighting.kueue_configuration(
        {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration"}, source="f"
    )
    assert (
        v1beta1.outcome is FAIL and "is not a config.kueue.x-k8s.io/v1beta2 Configuration" in v1beta1.detail
    )
    flag = preflighting.kueue_configuration(kueue_config.chart_manager_config(), source="f", gate_flag="X")
    assert flag.outcome is FAIL and "--feature-gates" in flag.detail


def test_a_teams_transformation_of_one_of_our_inputs_is_named_as_different() -> None:
    config = kueue_config.chart_manager_config()
    for t in config["resources"]["transformations"]:
        if t["input"] == "nvidia.com/gpu":
            t["outputs"] = {"team.example/gpu": "1"}
    result = preflighting.kueue_configuration(config, source="f")
    assert result.detail == "f lacks: resources.transformations: 1 different from ours (nvidia.com/gpu)"


def test_gates_in_kueues_flag_win_over_the_file() -> None:
    config = {k: v for k, v in kueue_config.chart_manager_config().items() if k != "featureGates"}
    result = preflighting.kueue_configuration(
        config, source="f", gate_flag="TASBalancedPlacement=true,TASRespectNodeAffinityPreferred=true"
    )
    assert result.outcome is FAIL
    assert "--feature-gates: TASBalancedPlacement=true" in result.detail
    assert "AssignQueueLabelsForPods=false" in result.detail
    fine = "AssignQueueLabelsForPods=false,TASBalancedPlacement=true,TASRespectNodeAffinityPreferred=true"
    assert preflighting.kueue_configuration(config, source="f", gate_flag=fine).outcome is OK


def _node(name: str, labels: dict[str, str], projected: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if projected:
        meta["annotations"] = {"nfd.node.kubernetes.io/feature-labels": projected}
    return {"metadata": meta}


def _nf(node: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{node}-x",
            "namespace": "gpustack-system",
            "labels": {"nfd.node.kubernetes.io/node-name": node},
        },
        "spec": {"labels": labels},
    }


@pytest.mark.parametrize(
    ("features", "nodes", "outcome"),
    [
        # projected: on the Node and listed in nfd-master's annotation
        (
            [_nf("n1", {"gpustack.ai/managed": "true"})],
            [_node("n1", {"gpustack.ai/managed": "true"}, "gpustack.ai/managed")],
            OK,
        ),
        # an unprefixed key is projected under feature.node.kubernetes.io/
        ([_nf("n1", {"cpu-x": "1"})], [_node("n1", {"feature.node.kubernetes.io/cpu-x": "1"}, "cpu-x")], OK),
        # on the Node but written there by someone else (not in the annotation): not nfd-master's doing
        ([_nf("n1", {"gpustack.ai/managed": "true"})], [_node("n1", {"gpustack.ai/managed": "true"})], FAIL),
        # in the annotation with another value: stale
        ([_nf("n1", {"a.example/x": "2"})], [_node("n1", {"a.example/x": "1"}, "a.example/x")], FAIL),
        # nothing to judge by
        ([], [_node("n1", {})], WARN),
        ([_nf("gone", {"a.example/x": "1"})], [], WARN),
        ([_nf("n1", {})], [_node("n1", {})], WARN),
    ],
)
def test_nfd_master_is_judged_by_a_projected_nodefeature(
    features: list[dict[str, Any]], nodes: list[dict[str, Any]], outcome: Outcome
) -> None:
    result = preflighting.nfd_master(features, nodes)
    assert result.outcome is outcome, result


def _served_crd(crd: dict[str, Any]) -> dict[str, Any]:
    return {**crd, "status": {"conditions": [{"type": "Established", "status": "True"}]}}


def test_crd_schemas() -> None:
    served: dict[str, Any] = {c["metadata"]["name"]: _served_crd(c) for c in crdgen.all_crds()}
    assert preflighting.crd_schemas(served).outcome is OK
    stale = json.loads(json.dumps(served))
    stale["instancetypes.worker.gpustack.ai"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"
    ].pop("status")
    stale["devices.worker.gpustack.ai"] = None
    result = preflighting.crd_schemas(stale)
    assert result.outcome is FAIL
    assert "instancetypes.worker.gpustack.ai: schema differs from this build's" in result.detail
    assert "devices.worker.gpustack.ai: missing" in result.detail
    assert "kubectl apply --server-side -f manifests/crds/" in result.fix


@pytest.mark.parametrize(("count", "outcome"), [(None, FAIL), (0, WARN), (3, OK)])
def test_devices_published(count: int | None, outcome: Outcome) -> None:
    assert preflighting.devices_published(count).outcome is outcome


_SERVICE_CONFIG = {
    "webhooks": [
        {
            "name": webhooks.TOPOLOGY_SOURCE_WEBHOOK,
            "clientConfig": {
                "service": {"namespace": "gpustack-system", "name": webhooks.SERVICE_NAME, "port": 443}
            },
        }
    ]
}
_FIELD = "spec.configMap.configMapRef.namespace"


@pytest.mark.parametrize(
    ("configuration", "status", "message", "outcome", "text"),
    [
        (
            _SERVICE_CONFIG,
            403,
            f'admission webhook "{webhooks.TOPOLOGY_SOURCE_WEBHOOK}" denied the request: {_FIELD}: no',
            OK,
            "calls topologysources.worker.gpustack.ai at Service gpustack-system/gpustack-worker-webhook:443",
        ),
        (
            _SERVICE_CONFIG,
            500,
            'Internal error occurred: failed calling webhook "topologysources.worker.gpustack.ai": '
            "no endpoints available for service",
            FAIL,
            "cannot call Service gpustack-system/gpustack-worker-webhook:443",
        ),
        (None, 201, "", FAIL, "is not registered"),
        (_SERVICE_CONFIG, 201, "", FAIL, "got HTTP 201: accepted"),
        (_SERVICE_CONFIG, 404, "the server could not find the requested resource", FAIL, "not served"),
    ],
)
def test_webhook_reachable(
    configuration: Any, status: int, message: str, outcome: Outcome, text: str
) -> None:
    result = preflighting.webhook_reachable(
        configuration, status, message, probe_field=_FIELD, namespace="gpustack-system"
    )
    assert result.outcome is outcome
    assert text in result.detail


def _rules_for(component: rbac.Component, namespace: str) -> dict[str, list[dict[str, Any]]]:
    """What a SelfSubjectRulesReview answers when exactly the role of api/rbac.py is bound."""
    out: dict[str, list[dict[str, Any]]] = {}
    for ns, group, resource, verb in component.grants():
        key = namespace if ns == rbac.SYSTEM else ns
        out.setdefault(key, []).append({"apiGroups": [group], "resources": [resource], "verbs": [verb]})
    cluster = out.get("", [])
    for key in list(out):
        if key:
            out[key] = [*out[key], *cluster]  # ClusterRoleBindings answer in every namespace
    return out


@pytest.mark.parametrize("component", rbac.COMPONENTS, ids=lambda c: c.key)
def test_rbac_exact_role_passes_and_a_dropped_grant_is_named(component: rbac.Component) -> None:
    rules = _rules_for(component, "gpustack-system")
    assert preflighting.rbac_result(component, rules, system_namespace="gpustack-system").outcome is OK
    first = sorted(component.grants())[0]
    ns, group, resource, verb = first
    key = "gpustack-system" if ns == rbac.SYSTEM else ns
    rules[key] = [
        r for r in rules[key] if r != {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
    ]
    result = preflighting.rbac_result(component, rules, system_namespace="gpustack-system")
    assert result.outcome is FAIL
    assert f"{verb} {resource}" in result.detail
    assert "manifests/rbac" in result.fix


def test_rbac_wildcards_count_and_named_objects_do_not() -> None:
    admin = {"": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}
    admin |= {"gpustack-system": admin[""], "default": admin[""]}
    assert preflighting.missing_grants(rbac.CONTROLLER, admin, system_namespace="gpustack-system") == []
    sub = {"": [{"apiGroups": [""], "resources": ["nodes/*"], "verbs": ["patch"]}]}
    assert "patch nodes/status" not in preflighting.missing_grants(rbac.AGENT, sub, system_namespace="x")
    named = {"": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"], "resourceNames": ["n1"]}]}
    assert "list nodes" in preflighting.missing_grants(rbac.AGENT, named, system_namespace="x")
    unreviewed = preflighting.rbac_result(rbac.AGENT, None, system_namespace="x", error="HTTP 403")
    assert unreviewed.outcome is FAIL and "as a cluster admin" in unreviewed.fix


def test_what_the_chart_installs_is_marked_and_nothing_else() -> None:
    """The failures the chart's install repairs carry ``chart``: our API group, a missing CRD, the webhook
    registration, the grants, the namespace and the settings ConfigMap. Kueue, NFD, a stale CRD (Helm
    never replaces one) and an RBAC review that could not be made do not."""
    served = {gv: None for gv in _all_served()}
    apis = {
        r.check: r.chart for r in preflighting.served_apis(preflighting.api_groups(rbac.COMPONENTS), served)
    }
    assert apis == {
        "crds": True,
        "devices-api": True,
        "kubernetes-apis": False,
        "kueue-api": False,
        "nfd-api": False,
    }
    missing: dict[str, Any] = {c["metadata"]["name"]: None for c in crdgen.all_crds()}
    assert preflighting.crd_schemas(missing).chart is True
    stale = {**missing, "devices.worker.gpustack.ai": {"spec": {"scope": "Namespaced"}}}
    assert preflighting.crd_schemas(stale).chart is False
    assert preflighting.devices_published(None).chart is True
    assert preflighting.devices_published(0).chart is False
    unregistered = preflighting.webhook_reachable(None, 404, "", probe_field=_FIELD, namespace="ns")
    unreachable = preflighting.webhook_reachable(
        _SERVICE_CONFIG, 500, "failed calling webhook", probe_field=_FIELD, namespace="ns"
    )
    assert (unregistered.chart, unreachable.chart) == (True, False)
    assert preflighting.rbac_result(rbac.AGENT, {}, system_namespace="ns").chart is True
    assert preflighting.rbac_result(rbac.AGENT, None, system_namespace="ns", error="403").chart is False
    assert preflighting.namespace_present(None, namespace="ns").chart is True
    assert preflighting.settings_present(None, namespace="ns", name="s").chart is True
    no_kueue = preflighting.kueue_configuration(None, source="x")
    assert no_kueue.outcome is FAIL and no_kueue.chart is False


@pytest.mark.parametrize(
    ("found", "outcome", "text"),
    [
        (None, FAIL, "namespace gpustack-system does not exist"),
        ({"metadata": {"name": "gpustack-system"}, "status": {"phase": "Active"}}, OK, "exists"),
        (
            {"metadata": {"name": "gpustack-system"}, "status": {"phase": "Terminating"}},
            FAIL,
            "is Terminating",
        ),
    ],
)
def test_namespace_present(found: Any, outcome: Outcome, text: str) -> None:
    result = preflighting.namespace_present(found, namespace="gpustack-system")
    assert (result.check, result.outcome) == ("namespace", outcome)
    assert text in result.detail
    if found is None:
        assert "--create-namespace" in result.fix


def test_settings_present() -> None:
    absent = preflighting.settings_present(None, namespace="gpustack-system", name="gpustack-settings")
    assert (absent.outcome, absent.detail) == (
        FAIL,
        "settings ConfigMap gpustack-system/gpustack-settings does not exist",
    )
    there = preflighting.settings_present(
        {"data": {"a": "1", "b": "2"}}, namespace="gpustack-system", name="gpustack-settings"
    )
    assert (there.outcome, there.detail) == (OK, "ConfigMap gpustack-system/gpustack-settings holds 2 key(s)")


def test_many_missing_grants_are_a_short_summary_with_the_full_list_in_items() -> None:
    """Issue 29: ``rbac:controller fail … lacks 76: list namespaces; watch namespaces; …`` on one line."""
    result = preflighting.rbac_result(rbac.CONTROLLER, {}, system_namespace="gpustack-system")
    everything = preflighting.missing_grants(rbac.CONTROLLER, {}, system_namespace="gpustack-system")
    total = len(rbac.CONTROLLER.grants())
    assert len(everything) == total > 20
    assert result.items == tuple(everything)
    account = "ServiceAccount gpustack-system/gpustack-worker-controller"
    assert result.detail.startswith(f"{account} lacks {total} of {total} grants on ")
    assert (
        f"; first: {everything[0]}; {everything[1]}; {everything[2]}; all: --verbose or -o json"
        in result.detail
    )
    assert len(result.detail) < 300, result.detail
    # counts per resource (its plural, and where), the largest first
    counts = result.detail.split(" resources (", 1)[1].split(")", 1)[0].split(", ")
    per: dict[str, int] = {}
    for grant in everything:  # "verb plural[.group][ in namespace]"
        _, plural, *where = grant.split(" ")
        key = " ".join([plural.split(".")[0], *where])
        per[key] = per.get(key, 0) + 1
    top = sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    assert counts == [f"{key} {n}" for key, n in top] + [f"+{len(per) - 3} more"]
    few = preflighting.rbac_result(
        rbac.AGENT, _drop(_rules_for(rbac.AGENT, "ns"), 2, rbac.AGENT, "ns"), system_namespace="ns"
    )
    assert few.detail.count(";") == 1 and "first:" not in few.detail


def _drop(rules: dict[str, list[dict[str, Any]]], n: int, component: rbac.Component, namespace: str) -> Any:
    for ns, group, resource, verb in sorted(component.grants())[:n]:
        key = namespace if ns == rbac.SYSTEM else ns
        for k in {key, *(rules if not ns else ())}:
            rules[k] = [
                r for r in rules[k] if r != {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
            ]
    return rules


def test_verbose_text_lists_the_items_and_json_always_has_them() -> None:
    result = preflighting.rbac_result(rbac.AGENT, {}, system_namespace="ns")
    short = preflighting.render_text([result])
    full = preflighting.render_text([result], verbose=True)
    assert all(f"- {item}" not in short for item in result.items)
    assert all(f"- {item}\n" in full for item in result.items)
    (check,) = json.loads(preflighting.to_json([result]))["checks"]
    assert check["items"] == list(result.items) and check["chart"] is True


_results = st.lists(
    st.builds(
        preflighting.Result,
        st.sampled_from(["a", "bb", "rbac:agent"]),
        st.sampled_from(list(Outcome)),
        st.text(max_size=20),
        st.text(max_size=10),
        st.booleans(),
    ),
    max_size=8,
)


@settings(max_examples=examples(100))
@given(_results)
def test_exit_code_text_and_json_agree(results: list[preflighting.Result]) -> None:
    failed = [r for r in results if r.outcome is FAIL]
    assert preflighting.exit_code(results) == (1 if failed else 0)
    data = json.loads(preflighting.to_json(results))
    assert data["ok"] is (not failed)
    assert [c["check"] for c in data["checks"]] == [r.check for r in results]
    text = preflighting.render_text(results)
    assert text.splitlines()[-1].endswith(f"{len(failed)} fail")
    installs = sum(r.outcome is Outcome.INSTALLS for r in results)
    assert (f", {installs} installs with the chart," in text) is bool(installs)
    assert len(preflighting.problem_lines(results, prefix="controller")) == len(failed)


def test_startup_checks_are_only_what_stops_a_process() -> None:
    assert {
        "kubernetes",
        "kubernetes-apis",
        "kueue-api",
        "nfd-api",
        "crds",
        "devices-api",
    } == preflighting.STARTUP_CHECKS
    line = preflighting.problem_lines(
        [preflighting.Result("nfd-api", FAIL, "nfd.k8s-sigs.io/v1alpha1 not served", "install NFD")],
        prefix="agent",
    )
    assert line == ["agent: nfd-api: nfd.k8s-sigs.io/v1alpha1 not served — fix: install NFD"]
    assert kinds.NODE_FEATURE.api_version == "nfd.k8s-sigs.io/v1alpha1"
