"""The fault suite's shared kit (issue 17): an undisturbed baseline, a normalized snapshot of the chain's
objects with a diff-printing comparison, and the writes per object per user from the API server's audit
log.

A fault test runs the operator stack (:func:`tests.stack.running_stack`: the node agent and the
controller's topology + chain controllers, in-process, each with its ServiceAccount's client) on
:data:`SCENARIO` on an audited control plane of its own (:func:`tests.chain.controller_procs.
audited_cluster`), injects its fault while the chain converges, waits with :func:`converged` and asserts:

**the same objects** — :func:`snapshot` of the chain's objects (:data:`CHAIN_KINDS`: ResourceFlavors,
ClusterQueues, LocalQueues, Kueue Topologies, InstanceTypes, NodeFeatures) equals the undisturbed run's
(:func:`baseline`), compared by :func:`assert_same` (prints a diff). :func:`normalize` drops what differs
between two runs of the same scenario and says nothing about the chain's decisions: ``uid``,
``resourceVersion``, ``creationTimestamp``, ``managedFields``, ``generation``, ``selfLink``, owner
references' ``uid``; in ``status``, every ``*Time``/``*Timestamp`` field and ``observedGeneration``
(which counts writes, not outcomes); conditions are sorted by type (their order is who wrote first).

**no write lost** — every object the undisturbed run wrote exists with the same content: the final
snapshot equals the baseline (a lost create is a missing key, a lost update a differing value).

**no write doubled** — defined on accepted writes: an audit-log write request (create, update, patch,
delete) answered 2xx. Requests the server refused (4xx/5xx — 409 conflicts, 429s, 503s while it starts)
or that never reached it (connection refused: the log has no line) are retries, not writes. A write is
*doubled* when it is accepted for an object that already had the content written: the chain's no-op
check did not hold (a relist after the fault re-delivered every object and the chain applied again), or
a write was repeated after its first attempt had succeeded. The audit log records no bodies, so the kit
checks it where it is exact: :func:`at_rest` takes, just before the fault, the objects that already
equal the undisturbed run's final state; they are done, and any accepted write to one of them after the
fault (:func:`rewritten`) writes content it already has — a doubled write. A fault test asserts that
list is empty. :func:`doubled_writes` also compares whole-run counts per object with the undisturbed
run's (``(run, undisturbed)`` for each object written more often); it is diagnostic, printed by tests,
not asserted: two undisturbed runs can differ by one write of an object the chain applied again from a
cache that had not yet seen its first write (a no-op on the server, and no fault involved).

The objects counted as at rest are also in the writer's informer cache (:func:`in_cache`): the Applier
skips a write its cache shows done (or its own accepted write, not yet in the cache, of the same body),
but always writes an object missing from its cache (it never suppresses a re-create), so an object the
server has and the cache not yet would be written again with no fault involved.

The chain's inputs do not change under it: :func:`running_chain` applies the scenario's Nodes and runs
the agent alone until every Node's NodeFeature is published before the controllers start.

The identities are users, not User-Agents: the in-process controllers write as
:data:`CONTROLLER_USER`, the agent as :data:`AGENT_USER` (the subprocess controllers of
:mod:`tests.chain.controller_procs` have users of their own; pass theirs to :func:`accepted_writes`).

Interface:

- ``SCENARIO``, ``TEAM``, ``CHAIN_KINDS``, ``CONTROLLER_USER``, ``AGENT_USER``, ``CONVERGE_S``
- ``normalize(obj) -> dict``; ``await snapshot(admin) -> Snapshot``; ``snapshot_key(audit_event) -> str``
- ``diff(expected, actual) -> str``; ``assert_same(expected, actual)``
- ``accepted_writes(audit, users, since=None) -> Counter[WriteKey]`` (``WriteKey`` = user, resource
  path, namespace, name; only :data:`CHAIN_KINDS`); ``refused_writes(...)`` (non-2xx answers)
- ``at_rest(before, expected) -> set[str]``; ``in_cache(stack) -> set[str]`` (what the writers' caches
  hold); ``rewritten(audit, users, since, keys) -> list[AuditEvent]``
- ``doubled_writes(run, undisturbed) -> dict[WriteKey, tuple[int, int]]`` (diagnostic)
- ``running_chain(cluster, scenario=SCENARIO, *, controller_kubeconfig=None, informer_options=None)``:
  :func:`tests.stack.running_stack` with the scenario's Nodes published first
- ``await converged(stack, expected) -> Snapshot``
- ``await kueue_current(admin) -> bool`` (Kueue's report on every queue is of the queue as it is);
  ``await caches_current(admin, informers) -> bool``; ``quiescent(controllers) -> bool``
- ``await baseline(scenario=SCENARIO) -> Baseline`` (``objects``, ``writes``): computed once per test
  session on a fresh audited control plane, then cached
- ``metric(name, **labels) -> float`` (this process' Prometheus registry); ``relists(stack, reason) ->
  int`` (the controllers' informers' successful lists for ``reason`` since they started)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import difflib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import REGISTRY

from gpustack_worker.agent.controller import Agent
from gpustack_worker.api import keys, kinds, rbac
from gpustack_worker.cli.plan.command import parse_sets
from gpustack_worker.cli.plan.planning import plan_chain
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.devcluster.audit import AuditEvent, AuditLog
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.settings import SettingsSource
from gpustack_worker.runtime.store import object_key, resource_version
from gpustack_worker.simulate.apply import apply_scenario
from gpustack_worker.simulate.load import packaged_scenario
from tests.chain.controller_procs import audited_cluster
from tests.cli.plan.test_plan_cluster import TEAM, live_view, plan_view
from tests.kit import per_run
from tests.stack import Stack, condition, eventually, running_stack

if TYPE_CHECKING:
    import datetime
    from collections.abc import AsyncIterator, Iterable, Mapping
    from pathlib import Path

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.controller import Controller
    from gpustack_worker.runtime.informer import Informer, InformerOptions

__all__ = (
    "AGENT_USER",
    "CHAIN_KINDS",
    "CONTROLLER_USER",
    "CONVERGE_S",
    "SCENARIO",
    "TEAM",
    "Baseline",
    "Snapshot",
    "WriteKey",
    "accepted_writes",
    "assert_same",
    "at_rest",
    "baseline",
    "caches_current",
    "converged",
    "diff",
    "doubled_writes",
    "in_cache",
    "kueue_current",
    "metric",
    "normalize",
    "quiescent",
    "refused_writes",
    "relists",
    "rewritten",
    "running_chain",
    "snapshot",
    "snapshot_key",
)

#: Four nodes, several pools (A100 with MIG, Hygon slices, T-Head PPU partitions, a CPU-only node).
SCENARIO: Final = "mixed-4"
#: The chain's objects (and the agent's NodeFeatures, which the chain reads).
CHAIN_KINDS: Final = (
    kinds.RESOURCE_FLAVOR,
    kinds.CLUSTER_QUEUE,
    kinds.LOCAL_QUEUE,
    kinds.TOPOLOGY,
    kinds.INSTANCE_TYPE,
    kinds.NODE_FEATURE,
)
CONTROLLER_USER: Final = f"system:serviceaccount:{kinds.SYSTEM_NAMESPACE}:{rbac.CONTROLLER.name}"
AGENT_USER: Final = f"system:serviceaccount:{kinds.SYSTEM_NAMESPACE}:{rbac.AGENT.name}"
#: A bound on polling for convergence on a loaded CI machine, never a measurement.
CONVERGE_S: Final = 300.0

#: ``"<Kind>/<namespace>/<name>"`` → the normalized object.
Snapshot = dict[str, dict[str, Any]]
#: ``(user, resource path (e.g. "clusterqueues/status"), namespace, name)``.
WriteKey = tuple[str, str, str, str]

_DROP_META: Final = frozenset(
    {"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink"}
)
_CHAIN_RESOURCES: Final = frozenset(r.plural for r in CHAIN_KINDS)


def _status_value(value: Any) -> Any:
    if isinstance(value, dict):
        out = {
            k: _status_value(v)
            for k, v in value.items()
            if not k.endswith(("Time", "Timestamp")) and k != "observedGeneration"
        }
        if isinstance(out.get("conditions"), list):  # order = who wrote first, not a decision
            out["conditions"] = sorted(out["conditions"], key=lambda c: str(c.get("type")))
        return out
    if isinstance(value, list):
        return [_status_value(v) for v in value]
    return value


def normalize(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` without what differs between two runs of the same scenario (see the module docstring)."""
    out = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _DROP_META}
    if "ownerReferences" in meta:
        meta["ownerReferences"] = [
            {k: v for k, v in ref.items() if k != "uid"} for ref in meta["ownerReferences"]
        ]
    out["metadata"] = meta
    if "status" in obj:
        out["status"] = _status_value(obj["status"])
    return out


async def snapshot(admin: Client) -> Snapshot:
    """Every object of :data:`CHAIN_KINDS`, normalized, by ``"<Kind>/<namespace>/<name>"``."""
    out: Snapshot = {}
    for resource in CHAIN_KINDS:
        items, _ = await admin.list(resource)
        for obj in items:
            meta = obj.get("metadata") or {}
            out[f"{resource.kind}/{meta.get('namespace', '')}/{meta.get('name', '')}"] = normalize(obj)
    return out


def diff(expected: Snapshot, actual: Snapshot) -> str:
    """A readable difference: missing and unexpected objects, then a unified diff of each that differs."""
    lines = [f"missing:    {key}" for key in sorted(expected.keys() - actual.keys())]
    lines.extend(f"unexpected: {key}" for key in sorted(actual.keys() - expected.keys()))
    for key in sorted(expected.keys() & actual.keys()):
        if expected[key] != actual[key]:
            a = json.dumps(expected[key], indent=1, sort_keys=True, default=str).splitlines()
            b = json.dumps(actual[key], indent=1, sort_keys=True, default=str).splitlines()
            lines.append(f"differs:    {key}")
            lines.extend("  " + ln for ln in difflib.unified_diff(a, b, "baseline", "run", lineterm="", n=2))
    return "\n".join(lines)


def assert_same(expected: Snapshot, actual: Snapshot) -> None:
    """Fail with :func:`diff` unless the two snapshots are equal."""
    if expected != actual:
        msg = "the chain's objects differ from the undisturbed run:\n" + diff(expected, actual)
        raise AssertionError(msg)


def _writes(
    audit: AuditLog, users: Iterable[str], since: datetime.datetime | None, *, accepted: bool
) -> collections.Counter[WriteKey]:
    wanted = frozenset(users)
    out: collections.Counter[WriteKey] = collections.Counter()
    for e in audit.writes(since=since):
        if e.username not in wanted or e.resource not in _CHAIN_RESOURCES:
            continue
        ok = e.code is not None and 200 <= e.code < 300
        if ok is accepted:
            out[(e.username, e.resource_path, e.namespace, e.name)] += 1
    return out


def accepted_writes(
    audit: AuditLog, users: Iterable[str], since: datetime.datetime | None = None
) -> collections.Counter[WriteKey]:
    """The writes of :data:`CHAIN_KINDS` objects by ``users`` the server accepted (2xx), per object."""
    return _writes(audit, users, since, accepted=True)


def refused_writes(
    audit: AuditLog, users: Iterable[str], since: datetime.datetime | None = None
) -> collections.Counter[WriteKey]:
    """The same writes answered with anything but 2xx (retried by the client, never counted as writes)."""
    return _writes(audit, users, since, accepted=False)


def doubled_writes(
    run: Mapping[WriteKey, int], undisturbed: Mapping[WriteKey, int]
) -> dict[WriteKey, tuple[int, int]]:
    """Every object a user wrote more often in ``run`` than in the undisturbed run: ``(run, undisturbed)``."""
    return {k: (n, undisturbed.get(k, 0)) for k, n in sorted(run.items()) if n > undisturbed.get(k, 0)}


_KIND_OF: Final = {r.plural: r.kind for r in CHAIN_KINDS}


def snapshot_key(write: AuditEvent) -> str:
    """The :data:`Snapshot` key of the object an audit-log request wrote."""
    return f"{_KIND_OF.get(write.resource, write.resource)}/{write.namespace}/{write.name}"


def at_rest(before: Snapshot, expected: Snapshot) -> set[str]:
    """The objects of ``before`` that already equal ``expected`` (done: a later write of one is doubled)."""
    return {k for k, v in before.items() if expected.get(k) == v}


def in_cache(stack: Stack) -> set[str]:
    """The :data:`Snapshot` keys of the objects the controllers' and the agent's informers hold now."""
    agent = stack.agent
    out = set()
    for informer in (*stack.registry.informers, agent.nodes, agent.devices, agent.features):
        kind = informer.resource.kind
        for obj in informer.store.list():
            meta = obj.get("metadata") or {}
            out.add(f"{kind}/{meta.get('namespace', '')}/{meta.get('name', '')}")
    return out


def rewritten(
    audit: AuditLog, users: Iterable[str], since: datetime.datetime, keys_at_rest: set[str]
) -> list[AuditEvent]:
    """The accepted writes by ``users`` received at or after ``since`` of an object in ``keys_at_rest``."""
    wanted = frozenset(users)
    return [
        e
        for e in audit.writes(since=since)
        if e.username in wanted
        and e.code is not None
        and 200 <= e.code < 300
        and e.resource in _CHAIN_RESOURCES
        and snapshot_key(e) in keys_at_rest
    ]


# --- at rest: positive signals that nobody has anything left to write -------------------------------


def quiescent(controllers: Iterable[Controller]) -> bool:
    """Every queue empty: no key pending, delayed (a coalescing window, a requeue, a retry) or in flight."""
    return all(
        len(c.queue) == 0 and not c.queue.processing and c.queue.delayed == 0 for c in controllers
    )


async def caches_current(admin: Client, informers: Iterable[Informer]) -> bool:
    """Every informer holds what the server holds in its scope (the same objects, at the same
    resourceVersions): its controllers have been handed every change there is. With :func:`quiescent`
    after it, they have also acted on all of it."""
    for informer in informers:
        items, _ = await admin.list(
            informer.resource,
            namespace=informer.namespace,
            label_selector=informer.label_selector,
            field_selector=informer.field_selector,
        )
        live = {object_key(o): resource_version(o) for o in items}
        cached = {object_key(o): resource_version(o) for o in informer.store.list()}
        if live != cached:
            return False
    return True


def _spec_flavors(cq: Mapping[str, Any]) -> list[str]:
    groups = (cq.get("spec") or {}).get("resourceGroups") or ()
    return sorted(str(f.get("name")) for g in groups for f in g.get("flavors") or ())


def _reported_flavors(queue: Mapping[str, Any]) -> list[str]:
    return sorted(str(f.get("name")) for f in (queue.get("status") or {}).get("flavorsReservation") or ())


def _holding(workloads: Iterable[Mapping[str, Any]], condition_type: str) -> collections.Counter[str]:
    """Workloads whose ``condition_type`` condition is True, per ClusterQueue and per
    ``<namespace>/<LocalQueue>``."""
    out: collections.Counter[str] = collections.Counter()
    for wl in workloads:
        if condition(wl, condition_type).get("status") != "True":
            continue
        out[str(((wl.get("status") or {}).get("admission") or {}).get("clusterQueue"))] += 1
        out[f"{wl['metadata'].get('namespace')}/{(wl.get('spec') or {}).get('queueName')}"] += 1
    return out


async def kueue_current(admin: Client) -> bool:
    """Kueue's report on every ClusterQueue and LocalQueue is of the queue as it is now, so Kueue has
    nothing left to write there: the ``Active`` condition observed the queue's generation (a LocalQueue's
    also agrees with its ClusterQueue's), the flavors it reports are the ClusterQueue's spec flavors, and
    the reserving and admitted counts are those of the Workloads that exist."""
    queues, _ = await admin.list(kinds.CLUSTER_QUEUE)
    local_queues, _ = await admin.list(kinds.LOCAL_QUEUE)
    workloads, _ = await admin.list(kinds.WORKLOAD)
    reserving, admitted = _holding(workloads, "QuotaReserved"), _holding(workloads, "Admitted")
    by_name = {q["metadata"]["name"]: q for q in queues}

    def reports(queue: Mapping[str, Any], key: str, flavors: list[str]) -> bool:
        status = queue.get("status") or {}
        return (
            condition(queue, "Active").get("observedGeneration") == queue["metadata"].get("generation")
            and _reported_flavors(queue) == flavors
            and int(status.get("reservingWorkloads") or 0) == reserving[key]
            and int(status.get("admittedWorkloads") or 0) == admitted[key]
        )

    for cq in queues:
        if not reports(cq, cq["metadata"]["name"], _spec_flavors(cq)):
            return False
    for lq in local_queues:
        meta = lq["metadata"]
        cq = by_name.get(str((lq.get("spec") or {}).get("clusterQueue")))
        key = f"{meta.get('namespace')}/{meta['name']}"
        if cq is None:
            if condition(lq, "Active").get("status") != "False":
                return False
            continue
        agrees = condition(lq, "Active").get("status") == condition(cq, "Active").get("status")
        if not agrees or not reports(lq, key, _spec_flavors(cq)):
            return False
    return True


# --- running and converging ------------------------------------------------------------------------


def _node_names(scenario: str) -> list[str]:
    return [n.name for n in packaged_scenario(scenario).nodes]


def _agent_parts(agent: Agent) -> tuple[tuple[Controller, ...], tuple[Informer, ...]]:
    return (agent.nodefeature, agent.capacity, agent.fit), (agent.nodes, agent.devices, agent.features)


async def _projected(admin: Client, nodes: set[str]) -> bool:
    """Every Node has its worker NodeFeature, and carries the labels of each of its NodeFeatures
    (nfd-master's projection, which the agent and the chain read)."""
    features, _ = await admin.list(kinds.NODE_FEATURE)
    wanted: dict[str, dict[str, str]] = {}
    published = set()
    for feature in features:
        node = str((feature["metadata"].get("labels") or {}).get(keys.NFD_NODE_NAME))
        wanted.setdefault(node, {}).update((feature.get("spec") or {}).get("labels") or {})
        if feature["metadata"]["name"] == keys.worker_nodefeature_name(node):
            published.add(node)
    if not published >= nodes:
        return False
    for name in nodes:
        node = await admin.get(kinds.NODE, name)
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        if any(labels.get(k) != v for k, v in wanted.get(name, {}).items()):
            return False
    return True


async def _publish(cluster: DevCluster, scenario: str) -> None:
    """Apply ``scenario``'s Nodes and run the agent alone until it is at rest: every Node has its
    NodeFeature and nfd-master's projection of it, the agent's caches hold what the server holds, and
    no key is pending, delayed or in flight (it has acted on everything and has nothing left to write)."""
    admin = await Client.connect(str(cluster.kubeconfig), user_agent="fault-kit")
    agent_client = await Client.connect(str(cluster.service_account_kubeconfig(rbac.AGENT.name)))
    agent = Agent(agent_client, SettingsSource(agent_client, model=WorkerSettings, env={}), node_name=None)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    nodes = set(_node_names(scenario))
    controllers, informers = _agent_parts(agent)

    async def done() -> bool:
        return (
            await _projected(admin, nodes)
            and await caches_current(admin, informers)
            and quiescent(controllers)
        )

    try:
        await apply_scenario(admin, packaged_scenario(scenario))
        await eventually(done, within=CONVERGE_S, every=1.0)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
        for client in (agent_client, admin):
            await client.close()


@contextlib.asynccontextmanager
async def running_chain(
    cluster: DevCluster,
    scenario: str = SCENARIO,
    *,
    controller_kubeconfig: Path | None = None,
    informer_options: InformerOptions | None = None,
) -> AsyncIterator[Stack]:
    """:func:`tests.stack.running_stack` on ``scenario`` with namespace :data:`TEAM`, once the Nodes are
    applied and the agent alone has published their NodeFeatures (so the chain's inputs no longer change
    while it converges). ``controller_kubeconfig``: the controller's user through another address;
    ``informer_options``: the controllers' reflector tunables."""
    await _publish(cluster, scenario)
    async with running_stack(
        cluster,
        scenario,
        namespaces=(TEAM,),
        controller_kubeconfig=controller_kubeconfig,
        informer_options=informer_options,
    ) as stack:
        yield stack


async def converged(stack: Stack, expected: Snapshot, *, within: float = CONVERGE_S) -> Snapshot:
    """Wait until every controller is idle and the chain's objects equal ``expected``; the snapshot. On
    timeout, fail with the diff against the last snapshot seen."""
    last: Snapshot = {}

    async def same() -> bool:
        nonlocal last
        if not stack.idle():
            return False
        last = await snapshot(stack.admin)
        return last == expected and stack.idle()

    try:
        await eventually(same, within=within, every=1.0)
    except AssertionError:
        assert_same(expected, last)
        raise
    return last


@dataclass(frozen=True)
class Baseline:
    """The undisturbed run of a scenario: its final objects, and its accepted writes per object per user."""

    scenario: str
    objects: Snapshot
    writes: collections.Counter[WriteKey]


_BASELINES: dict[str, Baseline] = {}


async def _settled(stack: Stack, scenario: str) -> Snapshot | None:
    """The chain equal to ``plan`` (plan == live, tests/cli/plan/test_plan_cluster.py) and at rest: every
    cache of the stack holds what the server holds and every queue is empty with nothing delayed or in
    flight (the controllers and the agent have acted on every change there is), and Kueue's report on
    every queue is current (it has nothing left to write either); the snapshot."""
    plan = plan_chain(packaged_scenario(scenario), parse_sets([]), checks_active=False)
    controllers, informers = _agent_parts(stack.agent)
    controllers += tuple(stack.controllers)
    informers += tuple(stack.registry.informers)
    if not quiescent(controllers):
        return None
    if await live_view(stack.admin, _node_names(scenario)) != plan_view(plan):
        return None
    if not await kueue_current(stack.admin) or not await caches_current(stack.admin, informers):
        return None
    found = await snapshot(stack.admin)
    # Still at rest after the reads: nothing arrived meanwhile that a controller took up.
    return found if quiescent(controllers) and await caches_current(stack.admin, informers) else None


async def baseline(scenario: str = SCENARIO) -> Baseline:
    """The undisturbed run of ``scenario`` (:func:`running_chain` on a fresh audited control plane, until
    the chain equals ``plan`` and is at rest), once per test run: computed by the first worker that asks
    (tests/kit/per_run.py), read by the others."""
    cached = _BASELINES.get(scenario)
    if cached is None:
        shared = await per_run.once(f"baseline-{scenario}", lambda: _undisturbed(scenario))
        writes: collections.Counter[WriteKey] = collections.Counter(
            {(user, path, ns, name): count for (user, path, ns, name), count in shared["writes"]}
        )
        cached = _BASELINES[scenario] = Baseline(scenario, shared["objects"], writes)
    return cached


async def _undisturbed(scenario: str) -> dict[str, Any]:
    """:func:`baseline`'s run, as JSON: the settled objects and the accepted writes as ``[key, count]``."""
    with audited_cluster(f"baseline-{scenario}") as cluster:
        assert cluster.audit_log is not None
        audit = AuditLog(cluster.audit_log)
        async with running_chain(cluster, scenario) as stack:
            objects = await eventually(lambda: _settled(stack, scenario), within=CONVERGE_S, every=1.0)
            writes = accepted_writes(audit, (CONTROLLER_USER, AGENT_USER))
    assert objects is not None
    return {"objects": objects, "writes": [[list(key), count] for key, count in writes.items()]}


# --- what the process reports ----------------------------------------------------------------------


def metric(name: str, **labels: str) -> float:
    """The sum of this process' samples of ``name`` whose labels include ``labels`` (0 when none)."""
    total = 0.0
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def relists(stack: Stack, reason: str) -> int:
    """Successful lists with ``reason`` (``initial``, ``gone``, ``error``) by the controllers' informers."""
    return sum(i.relists_by_reason[reason] for i in stack.registry.informers)
