"""``gpustack-worker preflight`` as pure functions: what was read in, one :class:`Result` per check out.

Every rule of the preflight lives here — what is required, how a served thing is compared with it, and
the text that says how to fix it; :mod:`gpustack_worker.cli.preflight.command` only reads (GET, LIST,
discovery, a dry-run create and SelfSubjectRulesReviews) and prints. The checks:

- ``kubernetes``: the API server's version is at least :data:`MIN_KUBERNETES` (the chart's
  ``kubeVersion``);
- ``kueue-api``, ``nfd-api``, ``crds``, ``devices-api`` (and ``kubernetes-apis``): every kind a process
  touches is served at the version we use. The kinds are read off the process' RBAC
  (:mod:`gpustack_worker.api.rbac`), so a kind a controller starts to use is checked without a new rule;
- ``kueue-config``: Kueue's configuration gives the chain what it needs — the one predicate
  :func:`gpustack_worker.api.kueue_merge.required_changes`, which ``kueue-config --merge`` applies;
- ``nfd-master``: a NodeFeature's labels have been projected onto its Node (nfd-master runs);
- ``crd-schemas``: our CRDs are served with the schema this build generates (``api/crdgen.py``);
- ``devices``: the Device Manager has published ledgers;
- ``webhook``: the API server calls our validating webhook (a dry-run create it must refuse);
- ``namespace``, ``settings``: the system namespace and the settings ConfigMap exist;
- ``rbac:<component>``: the ServiceAccount holds every grant of :mod:`gpustack_worker.api.rbac`;
- ``clusterqueue:<name>``, ``cohort:<name>``: existing queues and cohorts whose GPU quota our
  transformations would stop counting (:mod:`gpustack_worker.cli.preflight.queues`).

The outcome of a check is ``ok``, ``warn`` (the chain runs, but look), ``fail`` (exit 1) or
``installs with the chart``: a failure the chart's own install repairs (:attr:`Result.chart`), judged so
only before the install (:mod:`gpustack_worker.cli.preflight.stage` decides which side of it the cluster
is on); it does not change the exit code.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import crdgen, keys, kinds, kueue_config, kueue_merge, rbac, webhooks
from gpustack_worker.api.node_class import nfd_projected

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from gpustack_worker.runtime.resources import Resource

__all__ = (
    "CHART_APIS",
    "MIN_KUBERNETES",
    "STARTUP_CHECKS",
    "ApiGroup",
    "Outcome",
    "Result",
    "api_groups",
    "crd_schemas",
    "devices_published",
    "exit_code",
    "kubernetes_version",
    "kueue_configuration",
    "missing_grants",
    "namespace_present",
    "nfd_master",
    "not_checked",
    "ordered",
    "payload",
    "problem_lines",
    "rbac_result",
    "render_text",
    "served_apis",
    "settings_present",
    "to_json",
    "webhook_reachable",
)

#: The oldest Kubernetes the chart installs on (``chart/Chart.yaml`` ``kubeVersion: >=1.29.0-0``).
MIN_KUBERNETES: Final = (1, 29)
#: What ``controller`` and ``agent`` check before they start: only what makes the process useless when
#: missing (an unserved kind is an informer that never syncs). The rest — Kueue's configuration, the
#: webhook (the controller serves it itself), schemas, RBAC (a SelfSubjectRulesReview is a request the
#: RBAC test would count against the role), NodeFeatures projected — is ``preflight``'s.
STARTUP_CHECKS: Final = frozenset(
    {"kubernetes", "kubernetes-apis", "kueue-api", "nfd-api", "crds", "devices-api"}
)

_KUEUE_INSTALL: Final = (
    "install Kueue v0.19.2 with the chain's configuration: helm install kueue "
    "oci://registry.k8s.io/kueue/charts/kueue --version 0.19.2 -n kueue-system --create-namespace "
    "--set-file managerConfig.controllerManagerConfigYaml=chart/files/kueue-manager-config.yaml "
    "(docs/operations.md, Install)"
)
_CRDS_APPLY: Final = "kubectl apply --server-side -f manifests/crds/ (Helm never upgrades CRDs)"


class Outcome(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    #: A failure the chart's install repairs, before the install (not a failure: exit 0).
    INSTALLS = "installs with the chart"


#: The API checks the chart satisfies: every ``worker.gpustack.ai`` kind is a CRD of ``chart/crds/``.
CHART_APIS: Final = frozenset({"crds", "devices-api"})
#: How many entries of a long list a detail line names (the rest: ``items``, ``--verbose``, ``-o json``).
SHOWN: Final = 3


@dataclass(frozen=True, slots=True)
class Result:
    """One row of the table: the check, its outcome, what was found, and how to fix it (empty when ok).

    ``chart``: the failure is one the chart's own install repairs (an object it creates is missing);
    ``items``: the full list a long ``detail`` summarises (printed with ``--verbose``, always in JSON)."""

    check: str
    outcome: Outcome
    detail: str
    fix: str = ""
    chart: bool = False
    items: tuple[str, ...] = ()


def _some(names: Sequence[str]) -> str:
    """The first :data:`SHOWN` names, then how many more (all of them go to the row's items)."""
    more = f", +{len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def _ok(check: str, detail: str) -> Result:
    return Result(check, Outcome.OK, detail)


# --- Kubernetes ---------------------------------------------------------------------------------------


def _minor(text: object) -> int | None:
    digits = "".join(c for c in str(text or "").strip() if c.isdigit())
    return int(digits) if digits else None


def kubernetes_version(info: Mapping[str, Any] | None) -> Result:
    """The API server's ``/version`` against :data:`MIN_KUBERNETES` (``minor: "29+"`` is 29)."""
    want = f"{MIN_KUBERNETES[0]}.{MIN_KUBERNETES[1]}"
    if not info:
        return Result(
            "kubernetes", Outcome.FAIL, "the API server did not answer /version", "check the kubeconfig"
        )
    major, minor = _minor(info.get("major")), _minor(info.get("minor"))
    shown = str(info.get("gitVersion") or f"{info.get('major')}.{info.get('minor')}")
    if major is None or minor is None:
        return Result(
            "kubernetes", Outcome.FAIL, f"unreadable version {shown!r}", f"run Kubernetes >= {want}"
        )
    if (major, minor) < MIN_KUBERNETES:
        return Result(
            "kubernetes", Outcome.FAIL, f"{shown} is older than {want}", f"upgrade to Kubernetes >= {want}"
        )
    return _ok("kubernetes", f"{shown} (>= {want})")


# --- served APIs ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApiGroup:
    """The kinds one check needs served at one ``group/version``."""

    check: str
    group_version: str
    plurals: tuple[str, ...]
    fix: str


def _owner(res: Resource) -> tuple[str, str]:
    if res.group == kinds.KUEUE_GROUP:
        return "kueue-api", _KUEUE_INSTALL
    if res.group == kinds.NODE_FEATURE.group:
        return "nfd-api", (
            "install Node Feature Discovery v0.19 with its NodeFeature API (its CRDs and nfd-master; "
            "the agent and TopologySources publish through NodeFeatures)"
        )
    if res == kinds.DEVICES:
        return "devices-api", (
            f"{_CRDS_APPLY}; the Devices ledgers are published by GPUStack's Device Manager (stage 2)"
        )
    if res.group == kinds.WORKER_GROUP:
        return "crds", _CRDS_APPLY
    return "kubernetes-apis", "a Kubernetes release that serves these built-in kinds"


def api_groups(components: Iterable[rbac.Component]) -> list[ApiGroup]:
    """What the components' kinds need served, grouped by check and ``group/version`` (sorted)."""
    found: dict[tuple[str, str], set[str]] = {}
    fixes: dict[str, str] = {}
    for component in components:
        rules = [*component.cluster, *(r for rs in component.namespaced.values() for r in rs)]
        for rule in rules:
            check, fix = _owner(rule.resource)
            fixes[check] = fix
            found.setdefault((check, rule.resource.api_version), set()).add(rule.resource.plural)
    return [
        ApiGroup(check, gv, tuple(sorted(plurals)), fixes[check])
        for (check, gv), plurals in sorted(found.items())
    ]


def served_apis(groups: Sequence[ApiGroup], discovery: Mapping[str, frozenset[str] | None]) -> list[Result]:
    """One result per check: every kind its groups need is in ``discovery`` (``group/version`` → served
    plurals; ``None``: the group/version is not served at all)."""
    by_check: dict[str, list[str]] = {}
    served: dict[str, list[str]] = {}
    fixes: dict[str, str] = {}
    for group in groups:
        fixes[group.check] = group.fix
        have = discovery.get(group.group_version)
        missing = list(group.plurals) if have is None else [p for p in group.plurals if p not in have]
        if have is None:
            by_check.setdefault(group.check, []).append(f"{group.group_version} not served")
        elif missing:
            by_check.setdefault(group.check, []).append(f"{group.group_version} lacks {', '.join(missing)}")
        else:
            by_check.setdefault(group.check, [])
            served.setdefault(group.check, []).append(f"{group.group_version} ({len(group.plurals)} kinds)")
    out = []
    for check in sorted(by_check):
        problems = by_check[check]
        if problems:
            out.append(
                Result(check, Outcome.FAIL, "; ".join(problems), fixes[check], chart=check in CHART_APIS)
            )
        else:
            out.append(_ok(check, "served: " + ", ".join(served[check])))
    return out


# --- Kueue's configuration ------------------------------------------------------------------------------


def kueue_configuration(
    config: Mapping[str, Any] | None,
    *,
    source: str,
    gate_flag: str | None = None,
    system_namespace: str = kinds.SYSTEM_NAMESPACE,
) -> Result:
    """Kueue's configuration (read from ``source``) against :func:`kueue_merge.required_changes`;
    ``gate_flag``: the value of Kueue's ``--feature-gates`` flag when its Deployment sets one."""
    fix_merge = (
        "gpustack-worker kueue-config --merge <Kueue's current file> --record merge-record.yaml "
        "> merged.yaml (refused conflicts are listed; --accept each you agree to), then helm upgrade Kueue "
        "with --set-file managerConfig.controllerManagerConfigYaml=merged.yaml; a ConfigMap merged in place "
        "carries its record instead (docs/operations.md, Coexistence with an existing Kueue)"
    )
    if config is None:
        return Result(
            "kueue-config",
            Outcome.FAIL,
            f"no Kueue configuration at {source}",
            "pass --kueue-config FILE or --kueue-configmap NAMESPACE/NAME where Kueue's configuration is; "
            + _KUEUE_INSTALL,
        )
    if config.get("apiVersion") != kueue_config.CONFIG_API_VERSION or config.get("kind") != "Configuration":
        return Result(
            "kueue-config",
            Outcome.FAIL,
            f"{source} is not a {kueue_config.CONFIG_API_VERSION} Configuration "
            f"(apiVersion {config.get('apiVersion')!r}, kind {config.get('kind')!r})",
            "run Kueue v0.19 with a config.kueue.x-k8s.io/v1beta2 file; " + fix_merge,
        )
    try:
        flags = kueue_merge.gate_flag_values(gate_flag) if gate_flag is not None else None
        changes = kueue_merge.required_changes(config, gate_flags=flags, system_namespace=system_namespace)
    except ValueError as exc:
        return Result("kueue-config", Outcome.FAIL, f"{source}: {exc}", fix_merge)
    if changes:
        # The transformations as one item naming their inputs (each in full is kueue-config's output).
        rewrites = [c for c in changes if c.path.startswith("resources.transformations[")]
        items = [c.describe() for c in changes if c not in rewrites]
        full = list(items)
        if rewrites:
            missing = [c.now["input"] for c in rewrites if c.was is None]
            other = [c.now["input"] for c in rewrites if c.was is not None]
            parts = [f"{len(missing)} missing ({_some(missing)})"] if missing else []
            parts += [f"{len(other)} different from ours ({_some(other)})"] if other else []
            items.insert(0, "resources.transformations: " + ", ".join(parts))
            full[:0] = [c.describe() for c in rewrites]
        detail = f"{source} lacks: " + "; ".join(items)
        if len(rewrites) > SHOWN:
            detail += "; all: --verbose or -o json"
        return Result("kueue-config", Outcome.FAIL, detail, fix_merge, items=tuple(full))
    gates = "--feature-gates" if gate_flag is not None else "featureGates"
    return _ok(
        "kueue-config",
        f"{source}: {len(kueue_config.transformations())} credit transformations, quotaCheckStrategy "
        f"IgnoreUndeclared, frameworks include {', '.join(kueue_config.FRAMEWORKS)}, {gates} as needed",
    )


# --- NFD ------------------------------------------------------------------------------------------------


def _projected_name(key: str) -> str:
    return key if "/" in key else f"feature.node.kubernetes.io/{key}"


def nfd_master(node_features: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]) -> Result:
    """nfd-master runs when a NodeFeature's label is on its Node, listed in nfd-master's own
    ``feature-labels`` annotation with the same value (a label written straight to the Node is not
    listed there). No NodeFeature with labels at all: nothing to judge by (warn)."""
    by_name = {str((n.get("metadata") or {}).get("name")): n for n in nodes}
    judged = 0
    for nf in node_features:
        meta = nf.get("metadata") or {}
        node = by_name.get(str((meta.get("labels") or {}).get(keys.NFD_NODE_NAME) or ""))
        labels = {_projected_name(k): str(v) for k, v in ((nf.get("spec") or {}).get("labels") or {}).items()}
        if node is None or not labels:
            continue
        judged += 1
        node_meta = node.get("metadata") or {}
        on_node = node_meta.get("labels") or {}
        owned = nfd_projected(node_meta.get("annotations") or {})
        hit = sorted(k for k, v in labels.items() if k in owned and on_node.get(k) == v)
        if hit:
            return _ok(
                "nfd-master",
                f"NodeFeature {meta.get('namespace')}/{meta.get('name')} projected onto Node "
                f"{node_meta.get('name')} ({hit[0]})",
            )
    fix = (
        "run nfd-master (v0.19) with the NodeFeature API enabled and extra label namespaces gpustack.ai, "
        "topology.gpustack.ai, feature.gpustack.ai; check its logs"
    )
    if judged:
        return Result(
            "nfd-master",
            Outcome.FAIL,
            f"none of {judged} NodeFeature(s) with labels is projected onto its Node",
            fix,
        )
    return Result(
        "nfd-master",
        Outcome.WARN,
        "no NodeFeature with labels for an existing Node yet: nothing shows nfd-master runs",
        "start the agent (it publishes one per node) and run preflight again; " + fix,
    )


# --- our CRDs -------------------------------------------------------------------------------------------


def _crd_difference(expected: Mapping[str, Any], served: Mapping[str, Any] | None) -> str | None:
    if served is None:
        return "missing"
    want, have = expected["spec"], served.get("spec") or {}
    if have.get("scope") != want["scope"]:
        return f"scope {have.get('scope')} (want {want['scope']})"
    version = want["versions"][0]
    match = next((v for v in have.get("versions") or () if v.get("name") == version["name"]), None)
    if match is None or not match.get("served"):
        return f"{version['name']} not served"
    if not match.get("storage"):
        return f"{version['name']} is not the storage version"
    if (match.get("schema") or {}).get("openAPIV3Schema") != version["schema"]["openAPIV3Schema"]:
        return "schema differs from this build's"
    conditions = {
        c.get("type"): c.get("status") for c in (served.get("status") or {}).get("conditions") or ()
    }
    if conditions.get("Established") != "True":
        return "not Established"
    return None


def crd_schemas(served: Mapping[str, Mapping[str, Any] | None]) -> Result:
    """Each of our CRDs as served (by name; ``None``: absent) against :func:`crdgen.all_crds`."""
    expected = crdgen.all_crds()
    problems = []
    for crd in expected:
        name = crd["metadata"]["name"]
        diff = _crd_difference(crd, served.get(name))
        if diff:
            problems.append(f"{name}: {diff}")
    if problems:
        # Helm installs a CRD that is missing but never replaces one that exists: a stale one is a failure
        # the install does not repair.
        chart = all(p.endswith(": missing") for p in problems)
        return Result("crd-schemas", Outcome.FAIL, "; ".join(problems), _CRDS_APPLY, chart=chart)
    return _ok("crd-schemas", f"{len(expected)} CRDs at this build's schema")


def devices_published(count: int | None) -> Result:
    """How many Devices ledgers exist (``None``: the kind is not served; ``devices-api`` says so)."""
    if count is None:
        return Result("devices", Outcome.FAIL, "Devices is not served", _CRDS_APPLY, chart=True)
    if count == 0:
        return Result(
            "devices",
            Outcome.WARN,
            "no Devices ledger yet: accelerated nodes get no counting capacities",
            "run GPUStack's Device Manager (stage 2) on the accelerator nodes",
        )
    return _ok("devices", f"{count} Devices ledger(s) published")


# --- the webhook ----------------------------------------------------------------------------------------


def webhook_reachable(
    configuration: Mapping[str, Any] | None, status: int, message: str, *, probe_field: str, namespace: str
) -> Result:
    """Our ValidatingWebhookConfiguration (``None``: absent), and the answer to a dry-run create of a
    TopologySource only the webhook refuses (naming ``probe_field``): the API server called it."""
    fix = (
        f"the controller pods must be Ready behind the Service {namespace}/{webhooks.SERVICE_NAME} "
        f"(port {webhooks.SERVICE_PORT} -> {webhooks.CONTAINER_PORT}), its caBundle must match the Secret, "
        "and the network must let the API server reach the pods (docs/operations.md, Webhook down)"
    )
    if configuration is None:
        return Result(
            "webhook",
            Outcome.FAIL,
            f"ValidatingWebhookConfiguration {webhooks.VALIDATING_CONFIGURATION} is not registered",
            "install the chart (it registers the webhooks)",
            chart=True,
        )
    hooks = configuration.get("webhooks") or ()
    client = next(
        (h.get("clientConfig") or {} for h in hooks if h.get("name") == webhooks.TOPOLOGY_SOURCE_WEBHOOK), {}
    )
    service = client.get("service") or {}
    where = (
        f"Service {service.get('namespace')}/{service.get('name')}:{service.get('port', 443)}"
        if service
        else str(client.get("url") or "no clientConfig")
    )
    if status == 403 and webhooks.TOPOLOGY_SOURCE_WEBHOOK in message and probe_field in message:
        return _ok("webhook", f"the API server calls {webhooks.TOPOLOGY_SOURCE_WEBHOOK} at {where}")
    if "failed calling webhook" in message or "failed to call webhook" in message:
        return Result("webhook", Outcome.FAIL, f"the API server cannot call {where}: {message}", fix)
    if status == 404:
        return Result("webhook", Outcome.FAIL, "TopologySource is not served", _CRDS_APPLY)
    return Result(
        "webhook",
        Outcome.FAIL,
        f"a dry-run TopologySource the webhook must refuse got HTTP {status}: {message or 'accepted'} "
        f"(webhook at {where})",
        fix,
    )


# --- RBAC -----------------------------------------------------------------------------------------------


def _grants(rule: Mapping[str, Any], group: str, resource: str, verb: str) -> bool:
    if rule.get("resourceNames"):
        return False  # a grant on named objects only does not cover list/watch/create
    groups, resources, verbs = (
        rule.get("apiGroups") or (),
        rule.get("resources") or (),
        rule.get("verbs") or (),
    )
    plural, _, sub = resource.partition("/")
    resource_ok = "*" in resources or resource in resources
    if sub:
        resource_ok = resource_ok or f"{plural}/*" in resources or f"*/{sub}" in resources
    return ("*" in groups or group in groups) and resource_ok and ("*" in verbs or verb in verbs)


def missing_grants(
    component: rbac.Component, rules: Mapping[str, Sequence[Mapping[str, Any]]], *, system_namespace: str
) -> list[str]:
    """Grants of ``component`` no rule covers. ``rules``: the ``resourceRules`` of a SelfSubjectRulesReview
    per namespace reviewed; ``""`` is the review made for cluster-scoped grants (a namespace with no
    Role of ours, so only ClusterRoleBindings count there)."""
    out = []
    for namespace, group, resource, verb in sorted(component.grants()):
        ns = system_namespace if namespace == rbac.SYSTEM else namespace
        if not any(_grants(r, group, resource, verb) for r in rules.get(ns, ())):
            where = f" in {ns}" if ns else ""
            out.append(f"{verb} {resource}{'.' + group if group else ''}{where}")
    return out


def rbac_result(
    component: rbac.Component,
    rules: Mapping[str, Sequence[Mapping[str, Any]]] | None,
    *,
    system_namespace: str,
    error: str = "",
) -> Result:
    """The ServiceAccount of ``component`` against its grants (``rules`` None: could not be reviewed)."""
    check = f"rbac:{component.key}"
    account = f"system:serviceaccount:{system_namespace}:{component.name}"
    fix = (
        "helm upgrade the chart, or kubectl apply -f manifests/rbac/ (generated from api/rbac.py; "
        "nox -s rbac)"
    )
    if rules is None:
        return Result(
            check, Outcome.FAIL, f"could not review {account}: {error}", "run preflight as a cluster admin"
        )
    missing = missing_grants(component, rules, system_namespace=system_namespace)
    if missing:
        total = len(component.grants())
        return Result(
            check,
            Outcome.FAIL,
            f"ServiceAccount {system_namespace}/{component.name} lacks {len(missing)} of {total} grants"
            + _grants_summary(missing),
            fix,
            chart=True,
            items=tuple(missing),
        )
    return _ok(check, f"{account} holds all {len(component.grants())} grants of api/rbac.py")


def _grants_summary(missing: Sequence[str]) -> str:
    """``: a; b`` for a few grants, else counts per resource and the first :data:`SHOWN` grants."""
    if len(missing) <= SHOWN:
        return ": " + "; ".join(missing)
    per: dict[str, int] = {}
    for grant in missing:
        _, _, resource = grant.partition(" ")
        plural, _, where = resource.partition(" ")  # "clusterqueues.kueue.x-k8s.io" [ "in NAMESPACE"]
        key = plural.split(".", 1)[0] + (f" {where}" if where else "")
        per[key] = per.get(key, 0) + 1
    top = sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))
    counts = ", ".join(f"{resource} {n}" for resource, n in top[:SHOWN])
    more = f", +{len(top) - SHOWN} more" if len(top) > SHOWN else ""
    return (
        f" on {len(per)} resources ({counts}{more}); first: {'; '.join(missing[:SHOWN])}; "
        "all: --verbose or -o json"
    )


# --- what the chart creates in the system namespace -------------------------------------------------------


def namespace_present(found: Mapping[str, Any] | None, *, namespace: str) -> Result:
    """The system namespace (``None``: absent). ``helm install -n NAMESPACE --create-namespace`` makes it."""
    if found is None:
        return Result(
            "namespace",
            Outcome.FAIL,
            f"namespace {namespace} does not exist",
            f"helm install the chart with -n {namespace} --create-namespace",
            chart=True,
        )
    phase = str((found.get("status") or {}).get("phase") or "Active")
    if phase != "Active":
        return Result(
            "namespace",
            Outcome.FAIL,
            f"namespace {namespace} is {phase}",
            "wait for its deletion to finish, then install the chart again",
        )
    return _ok("namespace", f"namespace {namespace} exists")


def settings_present(found: Mapping[str, Any] | None, *, namespace: str, name: str) -> Result:
    """The settings ConfigMap the controllers read (``None``: absent); the chart creates it from
    ``settings.values``."""
    if found is None:
        return Result(
            "settings",
            Outcome.FAIL,
            f"settings ConfigMap {namespace}/{name} does not exist",
            "helm upgrade the chart (it creates the ConfigMap from settings.values; settings.configMapName "
            "names it), or pass --settings-configmap NAME",
            chart=True,
        )
    data = found.get("data") or {}
    return _ok("settings", f"ConfigMap {namespace}/{name} holds {len(data)} key(s)")


def not_checked(check: str, needs: str, fix: str) -> Result:
    """A check that cannot run because the API it reads (``needs``) is not served."""
    return Result(check, Outcome.FAIL, f"not checked: {needs} is not served", fix)


#: The table's order: what the cluster runs on, then Kueue, NFD, ours, the namespace and settings, the
#: webhook, RBAC, other queues and cohorts.
ORDER: Final = (
    "kubernetes",
    "kubernetes-apis",
    "kueue-api",
    "kueue-config",
    "nfd-api",
    "nfd-master",
    "crds",
    "crd-schemas",
    "devices-api",
    "devices",
    "namespace",
    "settings",
    "webhook",
    "rbac",
    "clusterqueue",
    "cohort",
)


def ordered(results: Iterable[Result]) -> list[Result]:
    """``results`` in :data:`ORDER` (by the part of the check name before ``:``), stable within one."""
    rank = {name: i for i, name in enumerate(ORDER)}

    def key(r: Result) -> int:
        head = r.check.split(":", 1)[0]
        return rank.get(head, rank.get(head.rstrip("s"), len(ORDER)))

    return sorted(results, key=key)


# --- output ---------------------------------------------------------------------------------------------


def exit_code(results: Iterable[Result]) -> int:
    """1 when any check failed, else 0 (warnings and what installs with the chart pass)."""
    return 1 if any(r.outcome is Outcome.FAIL for r in results) else 0


def problem_lines(results: Iterable[Result], *, prefix: str) -> list[str]:
    """One line per failed check (the start-up's report): ``<prefix>: <check>: <detail> — fix: <fix>``."""
    return [f"{prefix}: {r.check}: {r.detail} — fix: {r.fix}" for r in results if r.outcome is Outcome.FAIL]


def render_text(results: Sequence[Result], *, verbose: bool = False) -> str:
    """The table: check, result, and what was found or how to fix it; ``verbose``: each row's ``items``
    too, one per line."""
    width = max((len(r.check) for r in results), default=5)
    result_width = max((len(r.outcome.value) for r in results), default=6)
    pad = f"{'':<{width}}  {'':<{result_width}}  "
    lines = [f"{'CHECK':<{width}}  {'RESULT':<{result_width}}  DETAIL / FIX"]
    for r in results:
        lines.append(f"{r.check:<{width}}  {r.outcome.value:<{result_width}}  {r.detail}")
        if verbose:
            lines.extend(f"{pad}- {item}" for item in r.items)
        if r.fix:
            lines.append(f"{pad}fix: {r.fix}")
    counts = {o: sum(r.outcome is o for r in results) for o in Outcome}
    installs = f", {counts[Outcome.INSTALLS]} {Outcome.INSTALLS.value}" if counts[Outcome.INSTALLS] else ""
    lines.append(
        f"{len(results)} checks: {counts[Outcome.OK]} ok, {counts[Outcome.WARN]} warn{installs}, "
        f"{counts[Outcome.FAIL]} fail"
    )
    return "\n".join(lines) + "\n"


def payload(results: Sequence[Result]) -> dict[str, Any]:
    """The results as data: ``{"ok": bool, "checks": [{check, outcome, detail, fix, chart, items}, ...]}``."""
    checks = [{**dataclasses.asdict(r), "items": list(r.items)} for r in results]
    return {"ok": exit_code(results) == 0, "checks": checks}


def to_json(results: Sequence[Result]) -> str:
    """:func:`payload` as indented JSON with sorted keys."""
    return json.dumps(payload(results), indent=2, sort_keys=True)
