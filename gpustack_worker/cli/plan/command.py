"""``gpustack-worker plan SCENARIO [--set KEY=VALUE ...]``: the chain a scenario yields, with no cluster;
``gpustack-worker plan --from-cluster``: what the controllers would create, change and delete on the
cluster the kubeconfig names, read-only (:mod:`gpustack_worker.cli.plan.cluster_plan`).

Prints the ResourceFlavors, ClusterQueues (quota, stop policy, ``TopologyReady``), InstanceTypes (unit
resources, the four-view) and LocalQueue names that the controllers would write for the scenario's
Nodes, computed by the controllers' own pure functions (:mod:`gpustack_worker.cli.plan.planning`).

``SCENARIO`` is a scenario file or the name of a packaged one (``mixed-4``). ``--set`` takes the same
keys as the settings ConfigMap (validated by the same model; the ``GPUSTACK_*`` environment is not
read: a plan depends on its arguments only). ``--topology-source FILE`` adds a TopologySource (YAML),
``--snapshot FILE`` the snapshot its ConfigMap or webhook serves. ``-o text|json|yaml``: ``yaml`` is a
``v1 List`` of the objects (kubectl reads it), ``json`` the whole plan.

With ``--from-cluster`` the settings are the live settings ConfigMap's, with ``--set`` over them (a
revision the controllers reject: the defaults they would start on, and one warning line);
``--topology-source FILE [--snapshot FILE]`` previews applying that source — a new one, or a change of the
live one of that name — to the live pools (:mod:`gpustack_worker.cli.plan.topology_preview`).

Exit codes: ``0`` planned; ``1`` the API server refused a read (``--from-cluster``); ``2`` an input is
unreadable or invalid (one line per problem on stderr).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from gpustack_worker.api import keys, kinds
from gpustack_worker.api.crds.topology_source import TopologySource
from gpustack_worker.chain import admissionchecks, localqueues, managers
from gpustack_worker.cli.plan import cluster_plan
from gpustack_worker.cli.plan.cluster_plan import applicable
from gpustack_worker.cli.plan.planning import PLAN_NAMESPACE, PlanError, PlannedChain, plan_chain
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.prune import stamp
from gpustack_worker.runtime.settings import SettingsError, settings_from
from gpustack_worker.simulate.load import load_scenario, packaged_scenario, packaged_scenario_names
from gpustack_worker.simulate.scenario import Scenario, ScenarioError
from gpustack_worker.topology.snapshot import MAX_SNAPSHOT_BYTES
from gpustack_worker.topology.spec_check import format_errors, level_limit_errors

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence

__all__ = (
    "InputError",
    "load_inputs",
    "parse_sets",
    "plan_list",
    "render_text",
    "run",
    "source_inputs",
)

#: A TopologySource file is a small YAML document; anything larger is not one.
_MAX_SOURCE_BYTES = 1 << 20


class InputError(ValueError):
    """An input of the plan is unreadable or invalid; ``str`` is the one-line reason."""


def _pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs as ConfigMap data (raises :class:`InputError` naming each malformed one)."""
    data: dict[str, str] = {}
    problems: list[str] = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            problems.append(f"--set {pair!r}: expected KEY=VALUE (a settings ConfigMap key)")
            continue
        data[key.strip()] = value
    if problems:
        raise InputError("; ".join(problems))
    return data


def parse_sets(pairs: Sequence[str]) -> WorkerSettings:
    """``KEY=VALUE`` pairs over the defaults, validated by the processes' settings model."""
    data = _pairs(pairs)
    try:
        return settings_from(WorkerSettings, data, {})
    except SettingsError as exc:
        raise InputError("invalid --set: " + "; ".join(exc.errors)) from None


def _scenario(name: str) -> Scenario:
    path = Path(name)
    if not path.exists() and path.suffix == "" and "/" not in name:
        names = packaged_scenario_names()
        if name not in names:
            raise InputError(f"{name}: no such file, nor a packaged scenario ({', '.join(names)})")
        return packaged_scenario(name)
    try:
        return load_scenario(path)
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror or exc}") from None


def _read(path: str, limit: int, what: str) -> bytes:
    try:
        with Path(path).open("rb") as handle:
            raw = handle.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise InputError(f"{what} {path}: larger than {limit} bytes")
    return raw


def _topology_source(path: str) -> dict[str, Any]:
    raw = _read(path, _MAX_SOURCE_BYTES, "--topology-source")
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise InputError(f"--topology-source {path}: not valid YAML: {exc}".replace("\n", " ")) from None
    if not isinstance(doc, dict):
        raise InputError(f"--topology-source {path}: expected a TopologySource object")
    kind, api_version = doc.get("kind"), doc.get("apiVersion")
    if kind != kinds.TOPOLOGY_SOURCE.kind or api_version != kinds.TOPOLOGY_SOURCE.api_version:
        raise InputError(
            f"--topology-source {path}: expected apiVersion {kinds.TOPOLOGY_SOURCE.api_version} kind "
            f"{kinds.TOPOLOGY_SOURCE.kind}, found {api_version!r} {kind!r}"
        )
    if limits := level_limit_errors(doc.get("spec")):  # named with Kueue's limit, not pydantic's words
        raise InputError(f"--topology-source {path}: {format_errors(limits)}")
    try:
        TopologySource.model_validate(doc)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        raise InputError(f"--topology-source {path}: {problems}") from None
    meta = doc.setdefault("metadata", {})
    meta.setdefault("name", "plan")
    meta.setdefault("uid", f"plan-{meta['name']}")
    meta.setdefault("generation", 1)
    return doc


def source_inputs(
    args: argparse.Namespace, *, from_cluster: bool = False
) -> tuple[dict[str, Any] | None, bytes | None]:
    """``--topology-source`` and ``--snapshot``, read and checked against each other. A writing source
    needs its snapshot, except ``from_cluster`` with a configMap arm: the live ConfigMap it references
    serves it then."""
    source = _topology_source(args.topology_source) if args.topology_source else None
    snapshot = _read(args.snapshot, MAX_SNAPSHOT_BYTES, "--snapshot") if args.snapshot else None
    if snapshot is not None and source is None:
        raise InputError("--snapshot needs --topology-source (the source it is validated against)")
    if source is not None:
        spec = source["spec"]
        writing = "configMap" in spec or "webhook" in spec
        if writing and snapshot is None and not (from_cluster and "configMap" in spec):
            needed = "a webhook arm (not fetched by plan)" if from_cluster else "a configMap or webhook arm"
            raise InputError(f"--topology-source has {needed}: give its --snapshot FILE")
        if not writing and snapshot is not None:
            raise InputError("--snapshot: the --topology-source has no configMap or webhook arm to serve it")
    return source, snapshot


def load_inputs(
    args: argparse.Namespace,
) -> tuple[Scenario, WorkerSettings, dict[str, Any] | None, bytes | None]:
    """Every input of the plan, read and validated (raises :class:`InputError` or ScenarioError)."""
    settings = parse_sets(args.set or ())
    scenario = _scenario(args.scenario)
    source, snapshot = source_inputs(args)
    return scenario, settings, source, snapshot


# --- --from-cluster ----------------------------------------------------------------------------------


async def _plan_live(
    args: argparse.Namespace,
    overrides: dict[str, str],
    proposed: Mapping[str, Any] | None = None,
    snapshot: str | None = None,
) -> cluster_plan.PlanReport:
    from gpustack_worker.cli.plan.settings import plan_settings, set_error
    from gpustack_worker.cli.request_timeout import request_timeout_of
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.settings import SettingsError

    client = await Client.connect(
        args.kubeconfig,
        context=getattr(args, "context", None),
        timeout_s=request_timeout_of(args),
        user_agent="gpustack-worker-plan",
    )
    try:
        live = await cluster_plan.read_live(
            client,
            namespace=args.namespace,
            settings_configmap=args.settings_configmap,
            also=[proposed] if proposed is not None else [],
        )
    finally:
        await client.close()
    where = f"{args.namespace}/{args.settings_configmap}"
    try:
        chosen = plan_settings(live.config_maps.get(where), where, overrides)
    except SettingsError as exc:
        raise InputError(set_error(exc)) from None
    warnings = (chosen.warning,) if chosen.warning else ()
    if proposed is None:
        report = cluster_plan.plan_cluster(
            live, chosen.settings, namespace=args.namespace, settings_source=chosen.source
        )
        return dataclasses.replace(report, warnings=warnings)
    from gpustack_worker.cli.plan import topology_preview

    changed, edit = topology_preview.with_source(live, proposed)
    report = cluster_plan.plan_cluster(
        changed, chosen.settings, namespace=args.namespace, settings_source=chosen.source, snapshot=snapshot
    )
    found = topology_preview.preview(report, live, edit)
    return dataclasses.replace(report, preview=found, warnings=warnings)


def _run_from_cluster(
    args: argparse.Namespace,
    overrides: dict[str, str],
    proposed: Mapping[str, Any] | None = None,
    snapshot: str | None = None,
) -> int:
    """``plan --from-cluster`` (:mod:`gpustack_worker.cli.plan.cluster_plan`): read, plan, print; ``proposed``
    (a TopologySource file, with the ``snapshot`` it serves): preview applying it. ``2`` on bad input; a
    cluster that cannot be read (unreachable, no credentials, a read refused) is the CLI's one error line
    naming the server, exit 1 (:mod:`gpustack_worker.cli.errors`). A settings ConfigMap the controllers
    reject is planned as they run on it (:mod:`gpustack_worker.cli.plan.settings`): one warning line on
    stderr, exit 0."""
    try:
        report = asyncio.run(_plan_live(args, overrides, proposed, snapshot))
    except (InputError, PlanError) as exc:
        print(f"plan: {exc}", file=sys.stderr)
        return 2
    for warning in report.warnings:
        print(f"plan: warning: {warning}", file=sys.stderr)
    if args.output == "json":
        print(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    elif args.output == "yaml":
        doc, comments = cluster_plan.report_list(report)
        print("\n".join(comments))
        print(yaml.safe_dump(doc, sort_keys=False), end="")
    else:
        print(cluster_plan.render_text(report))
    return 0


# --- text output -------------------------------------------------------------------------------------


def _table(
    title: str, header: Sequence[str], rows: Sequence[Sequence[str]], count: int | None = None
) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = [f"{title} ({len(rows) if count is None else count})"]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    lines.extend("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)
    return lines


def _capacity(labels: Mapping[str, str]) -> str:
    return next((v for k, v in labels.items() if k.endswith(".capacity")), "")


def _quota(queue: Mapping[str, Any]) -> list[str]:
    return [
        f"{flavor.get('name')}: {res.get('name')}={res.get('nominalQuota')}"
        for group in (queue.get("spec") or {}).get("resourceGroups") or ()
        for flavor in group.get("flavors") or ()
        for res in flavor.get("resources") or ()
    ]


def render_text(plan: PlannedChain) -> str:
    """The plan as the tables a person reads."""
    lines: list[str] = []
    profiles = sorted({p for p in plan.profiles.values() if p})
    lines.append(
        f"nodes: {len(plan.profiles)} ({sum(1 for p in plan.profiles.values() if p)} managed); "
        f"profiles: {', '.join(profiles) or '-'}; topologies: {', '.join(sorted(plan.topologies)) or '-'}"
    )
    if plan.topology_source is not None:
        conds: list[dict[str, Any]] = plan.topology_source["conditions"]
        ready = next((c for c in conds if c["type"] == "Ready"), {})
        lines.append(f"topology source: Ready={ready.get('status')} ({ready.get('message', '')})")
    lines.append("")
    rows = []
    for name, body in plan.flavors.items():
        labels = body["metadata"]["labels"]
        rows.append(
            [name, labels.get(keys.TOPOLOGY_PROFILE, ""), _capacity(labels), body["spec"]["topologyName"]]
        )
    lines += _table("RESOURCE FLAVORS", ("NAME", "PROFILE", "CAPACITY", "TOPOLOGY"), rows)
    lines.append("")
    rows = []
    for name, body in plan.cluster_queues.items():
        cond = ((body.get("status") or {}).get("conditions") or [{}])[0]
        quota = _quota(body) or ["-"]
        checks = ",".join(
            c["name"] for c in (body["spec"].get("admissionChecksStrategy") or {}).get("admissionChecks", ())
        )
        rows.append(
            [
                name,
                body["spec"].get("stopPolicy", "-"),
                f"{cond.get('status')}/{cond.get('reason')}",
                checks or "-",
                quota[0],
            ]
        )
        rows.extend(["", "", "", "", q] for q in quota[1:])
    header = ("NAME", "STOP", "TOPOLOGYREADY", "CHECKS", "FLAVOR: NOMINAL QUOTA")
    lines += _table("CLUSTER QUEUES", header, rows, len(plan.cluster_queues))
    lines.append("")
    rows = []
    for name, body in plan.instance_types.items():
        spec, status = body["spec"], body.get("status") or {}
        unit = spec.get("unitResources") or {}
        if "acceleratorSummary" in status:
            view = status["acceleratorSummary"]
        elif "cpu" in status:
            cpu = status["cpu"]
            view = f"cpu {cpu['onceMaxRequest']}/{cpu['remaining']} of {cpu['capacity']}"
        else:
            view = "-"
        rows.append(
            [
                name,
                f"{unit.get('cpu')}/{unit.get('ram')}/{spec.get('localStorage')}",
                status.get("phase", "-"),
                view,
            ]
        )
    lines += _table(
        "INSTANCE TYPES", ("NAME", "UNIT CPU/RAM/STORAGE", "PHASE", "EX/SH/SL/PT (once/remaining)"), rows
    )
    lines.append("")
    rows = [[n, q] for n, q in plan.local_queues.items()]
    title = "LOCAL QUEUES (in every namespace local-queue-namespace-selector selects)"
    lines += _table(title, ("NAME", "CLUSTER QUEUE"), rows)
    if plan.refused:
        rows = [[r["kind"], r["name"], r["path"], r["rule"]] for r in plan.refused]
        lines.append("")
        lines += _table("REFUSED BY THE API SERVER (not created)", ("KIND", "NAME", "FIELD", "RULE"), rows)
    for note in plan.notes:
        lines += ["", f"note: {note}"]
    return "\n".join(lines)


def plan_list(plan: PlannedChain) -> dict[str, Any]:
    """The scenario plan as a ``v1 List`` kubectl reads: the Topologies, flavors, InstanceTypes,
    ClusterQueues, the LocalQueues (in the ``default`` namespace; every non-system one gets the same) and
    the AdmissionChecks, without ``status`` (``-o json`` has it)."""
    local = []
    for name in plan.cluster_queues:
        queue = {"metadata": {"name": name, "uid": f"plan-{name}"}}
        local.append(stamp(localqueues.local_queue_body(PLAN_NAMESPACE, queue), managers.OWNER_LOCAL_QUEUES))
    items = [
        *plan.topologies.values(),
        *plan.flavors.values(),
        *plan.instance_types.values(),
        *plan.cluster_queues.values(),
        *local,
        *admissionchecks.desired_admission_checks().values(),
    ]
    return {"apiVersion": "v1", "kind": "List", "items": [applicable(i) for i in items]}


def _check_mode(args: argparse.Namespace) -> None:
    """A scenario plan or ``--from-cluster``, and only the inputs of the one asked for."""
    if args.from_cluster:
        if args.scenario:
            raise InputError("--from-cluster plans what the cluster holds: drop SCENARIO")
    elif args.scenario is None:
        raise InputError("give a SCENARIO (file or packaged name), or --from-cluster")


def run(args: argparse.Namespace) -> int:
    """Plan and print; ``1`` when a read is refused, ``2`` on bad input."""
    try:
        _check_mode(args)
        if args.from_cluster:
            source, snapshot = source_inputs(args, from_cluster=True)
            served = snapshot.decode("utf-8", errors="replace") if snapshot is not None else None
            return _run_from_cluster(args, _pairs(args.set or ()), source, served)
    except InputError as exc:
        print(f"plan: {exc}", file=sys.stderr)
        return 2
    try:
        scenario, settings, source, snapshot = load_inputs(args)
        plan = plan_chain(scenario, settings, topology_source=source, snapshot=snapshot)
    except (InputError, ScenarioError, PlanError) as exc:
        print(f"plan: {exc}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps(plan.as_dict(), indent=2, sort_keys=True))
    elif args.output == "yaml":
        print(yaml.safe_dump(plan_list(plan), sort_keys=False), end="")
    else:
        print(render_text(plan))
    return 0
