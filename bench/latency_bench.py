"""Incremental latency of the chain and the agent on a converged fleet, on the real control plane.

One run, printed as a table (never pass/fail): p50 / p99 / max per event type, each timed from the write
that injects the event (taken just before the request is sent) to the first watch event that shows the
expected result (the watch's own receipt time, not a poll). Events are injected one at a time: the next
is written only after the previous one converged (or timed out) and a short gap.

Setup (not measured): a dev cluster (etcd, kube-apiserver, Kueue, nfd-master), ``--nodes`` Nodes from
``chain_bench``'s seeded fleet with their stage-3 labels and their topology profile already in place
(``chain_bench.create_fleet(profiled=True)``: the cold start is ``chain_bench``'s subject), then
``gpustack-worker controller`` and ``gpustack-worker agent --all-nodes`` as subprocesses with the
controller's and the agent's ServiceAccounts and default settings; measured once the chain has converged
(``chain_bench.missing``) and both processes are idle.

Event types (``--events`` each):

1. **Devices → fit label**: one exclusive allocation on a free card added to (or removed from) a Node's
   ``Devices`` ledger (``/status``, as the Device Manager writes it); done when the Node carries the fit
   labels the agent's pure ``fit.desired`` gives for the new ledger.
2. **New Node → flavor capacity, queue quota**: a Node of a fleet shape created with its stage-3 labels
   and no topology profile (as it arrives once the agent and nfd-master labelled it); done when its
   flavor's ``.capacity`` label, then its ClusterQueue's ``nominalQuota``, equal what the chain's pure
   functions give for the fleet with it. Two figures per event.
3. **Profile change → queue switched**: a TopologySource (``nodeLabels`` arm, level
   ``topology.kubernetes.io/zone``) selects Nodes labelled ``bench.gpustack.ai/zoned=true``. *join*: one
   Node gets that label and a zone; its profile changes from the hostname-only one to zone → hostname, so
   it leaves its flavors for a new one-Node flavor of the new profile (and Topology) in the same pools.
   *leave*: the labels removed again; it returns, and the one-Node flavor is dropped (idle: no Workload).
   Done when every ClusterQueue whose plan changes has the expected plan; any ``Hold`` /
   ``HoldAndDrain`` seen on those queues meanwhile is counted (the spec holds a queue only for a dropped
   flavor that may be in use).
4. **Settings change → every affected object rewritten**: ``instance-type-aware-cpu-manufacturer``
   flipped in the live settings ConfigMap. It changes every accelerated flavor (the ``cpuDetail`` note is
   there only when aware) and every queue: the new grouping's queues take their plans (the first flip
   creates them), the old grouping's lose their flavors (drained, then emptied). Done when all flavors and
   all queues of both groupings are as expected.

``--json PATH`` writes ``{"bench": "latency", "nodes": N, "figures": {...}}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from gpustack_worker.agent import fit
from gpustack_worker.agent.facts import node_facts
from gpustack_worker.api import keys, kinds, rbac
from gpustack_worker.api.devices_view import devices_facts
from gpustack_worker.chain import flavors, localqueues, pools, queues
from gpustack_worker.chain.controller import COALESCE_S, DEVICES_COALESCE_S
from gpustack_worker.chain.nodes import node_hardware
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.simulate import render
from gpustack_worker.simulate.scenario import Allocation

try:
    import chain_bench as cb
except ModuleNotFoundError:  # imported as ``bench.latency_bench`` (tests/test_bench_latency.py)
    from bench import chain_bench as cb

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from gpustack_worker.runtime.resource import Resource

    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.devcluster.procs import ManagedProcess
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.simulate.scenario import NodeSpec

FIELD_MANAGER: Final = "latency-bench"
AWARE: Final = "instance-type-aware-cpu-manufacturer"
SOURCE: Final = "bench-zones"
ZONED: Final = "bench.gpustack.ai/zoned"
ZONE_VALUE: Final = "bench-zone-a"
HOLDS: Final = ("Hold", "HoldAndDrain")
#: The profile a zoned Node gets from the source (zone → hostname) and the one it has without it.
ZONED_PROFILE: Final = keys.topology_profile([keys.STANDARD_ZONE, keys.HOSTNAME])
PLAIN_PROFILE: Final = keys.topology_profile([keys.HOSTNAME])

FIT: Final = "Devices change → fit label"
NEW_FLAVOR: Final = "new Node → flavor .capacity"
NEW_QUEUE: Final = "new Node → queue quota"
JOIN: Final = "profile change (join) → queue switched"
LEAVE: Final = "profile change (leave) → queue switched"
SETTING: Final = "settings change → all rewritten"


# --- pure helpers ------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``: p99 of 100 values is the 99th
    smallest, never interpolated, so it is always a latency that was measured."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True)
class Want:
    """What the chain's pure functions give for a set of Nodes under one grouping."""

    #: Flavor name → body.
    flavors: dict[str, dict[str, Any]]
    #: Queue (= InstanceType) name → ((flavor, nominalQuota), …), or None when the plan is refused.
    plans: dict[str, tuple[tuple[str, int], ...] | None]


def want(nodes: Iterable[dict[str, Any]], *, aware: bool, mixed: bool) -> Want:
    """The flavors and queue plans for ``nodes`` (live objects, profile labels included); the same
    computation as ``chain_bench.expected_chain``, over Nodes instead of stage-3 objects (a refactor of
    that function could share it)."""
    hardware = [h for n in nodes if (h := node_hardware(n)) is not None]
    topologies = frozenset(keys.topology_name(h.profile) for h in hardware)
    planned = flavors.plan_flavors(hardware, mixed_on_node=mixed)
    bodies = {p.name: flavors.flavor_body(p, mixed_on_node=mixed, aware=aware) for p in planned}
    types: dict[str, dict[str, Any]] = {}
    for p in planned:
        body = pools.derived_instance_type(p, aware=aware)
        types.setdefault(body["metadata"]["name"], body)
    plans: dict[str, tuple[tuple[str, int], ...] | None] = {}
    for name, it in types.items():
        pool = pools.identity_of(it)
        labels = {**pools.schedule_labels(pool, aware=aware), keys.RESOURCE_TYPE: keys.TYPE_INSTANCE_TYPES}
        selector = pools.flavor_selector(labels)
        outcome = queues.plan_queue(
            pool, selector, list(bodies.values()), hardware, topologies, mixed_on_node=mixed
        )
        plans[name] = None if isinstance(outcome, queues.Refusal) else plan_of(outcome.groups)
    return Want(bodies, plans)


def plan_of(groups: Iterable[dict[str, Any]]) -> tuple[tuple[str, int], ...]:
    return tuple(
        (fl["name"], int(parse(str(fl["resources"][0]["nominalQuota"])) or 0))
        for group in groups
        for fl in group.get("flavors") or ()
    )


def _notes(obj: dict[str, Any]) -> dict[str, str]:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in annotations.items() if k.startswith(keys.NOTE_PREFIX)}


def flavor_matches(live: dict[str, Any] | None, body: dict[str, Any]) -> bool:
    """The live flavor carries the body's labels, exactly its notes and its selector, and is not deleting."""
    if live is None or (live.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (
        cb._contains(live["metadata"].get("labels"), body["metadata"]["labels"])
        and _notes(live) == _notes(body)
        and (live.get("spec") or {}).get("nodeLabels") == body["spec"]["nodeLabels"]
    )


def flavor_gone(live: dict[str, Any] | None) -> bool:
    return live is None or bool((live.get("metadata") or {}).get("deletionTimestamp"))


def queue_plan(live: dict[str, Any] | None) -> tuple[tuple[str, int], ...] | None:
    if live is None:
        return None
    return plan_of((live.get("spec") or {}).get("resourceGroups") or ())


def stop_policy(live: dict[str, Any] | None) -> str:
    return str(((live or {}).get("spec") or {}).get("stopPolicy") or "None")


@dataclass(frozen=True)
class Change:
    """What an event must change: flavors to match (or be gone) and queues to plan (or empty)."""

    flavors: dict[str, dict[str, Any]]
    gone: frozenset[str]
    plans: dict[str, tuple[tuple[str, int], ...]]
    #: Queues that must end with no flavor (their grouping is not the current one).
    emptied: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return not (self.flavors or self.gone or self.plans or self.emptied)


def change(before: Want, after: Want, *, emptied: Iterable[str] = ()) -> Change:
    """The objects whose desired state differs between ``before`` and ``after``."""
    return Change(
        flavors={n: b for n, b in after.flavors.items() if before.flavors.get(n) != b},
        gone=frozenset(set(before.flavors) - set(after.flavors)),
        plans={n: p for n, p in after.plans.items() if p is not None and before.plans.get(n) != p},
        emptied=frozenset(emptied),
    )


# --- watch mirrors -----------------------------------------------------------------------------------


@dataclass
class Waiter:
    kinds: frozenset[str]
    check: Callable[[], bool]
    future: asyncio.Future[float]


class Hub:
    """Mirrors of a few kinds, kept by their own watches; a waiter's check runs on every event of its
    kinds, and its future gets the receipt time (``time.monotonic()``) of the first event that satisfies
    it."""

    def __init__(self) -> None:
        self.mirrors: dict[str, Mirror] = {}
        self.waiters: list[Waiter] = []

    def notify(self, kind: str, stamp: float) -> None:
        for w in list(self.waiters):
            if kind in w.kinds and not w.future.done() and w.check():
                w.future.set_result(stamp)

    def waiter(self, kinds_: Iterable[str], check: Callable[[], bool]) -> Waiter:
        w = Waiter(frozenset(kinds_), check, asyncio.get_running_loop().create_future())
        self.waiters.append(w)
        return w

    def drop(self, *waiters: Waiter) -> None:
        for w in waiters:
            with contextlib.suppress(ValueError):
                self.waiters.remove(w)
            if not w.future.done():
                w.future.cancel()

    def __getitem__(self, kind: str) -> dict[str, dict[str, Any]]:
        return self.mirrors[kind].objs


class Mirror:
    def __init__(self, hub: Hub, client: Client, resource: Resource) -> None:
        self.hub, self.client, self.resource = hub, client, resource
        self.kind = resource.kind
        self.objs: dict[str, dict[str, Any]] = {}
        self.rv = ""
        self.task: asyncio.Task[None] | None = None
        #: (receipt time, name, summary) of every event, when traced (``--trace``).
        self.history: list[tuple[float, str, str]] | None = None
        hub.mirrors[self.kind] = self

    async def start(self) -> None:
        await self._list()
        self.task = asyncio.create_task(self._run())

    async def _list(self) -> None:
        items, self.rv = await self.client.list(self.resource)
        self.objs = {o["metadata"]["name"]: o for o in items}

    async def _run(self) -> None:
        while True:
            try:
                events = self.client.watch(self.resource, resource_version=self.rv, timeout_seconds=300)
                async for event in events:
                    stamp = time.monotonic()
                    obj = event.get("object") or {}
                    meta = obj.get("metadata") or {}
                    if meta.get("resourceVersion"):
                        self.rv = meta["resourceVersion"]
                    if event.get("type") == "BOOKMARK":
                        continue
                    if event.get("type") == "DELETED":
                        self.objs.pop(meta.get("name", ""), None)
                    else:
                        self.objs[meta.get("name", "")] = obj
                    if self.history is not None:
                        self.history.append((stamp, meta.get("name", ""), _summary(event)))
                    self.hub.notify(self.kind, stamp)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a closed or expired watch: relist and go on
                print(f"  [watch {self.kind}] {type(exc).__name__}: {exc}; relisting")
                await asyncio.sleep(0.5)
                with contextlib.suppress(Exception):
                    await self._list()
                    self.hub.notify(self.kind, time.monotonic())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task


# --- measuring one event -----------------------------------------------------------------------------


@dataclass
class Results:
    latencies: dict[str, list[float]] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)
    holds: dict[str, int] = field(default_factory=dict)

    def add(self, what: str, seconds: float) -> None:
        self.latencies.setdefault(what, []).append(seconds)

    def fail(self, what: str, why: str) -> None:
        self.failures.setdefault(what, []).append(why)
        print(f"  NOT CONVERGED {what}: {why}")


async def measure(
    hub: Hub,
    results: Results,
    write: Callable[[], Any],
    goals: Sequence[tuple[str, Iterable[str], Callable[[], bool], Callable[[], str]]],
    limit: float,
) -> float:
    """Register each goal (name, kinds, check, what is missing), verify none holds yet, issue ``write``
    and record each goal's latency from just before the write to its first satisfying watch event."""
    waiters = []
    for name, kinds_, check, _ in goals:
        if check():
            results.fail(name, "the expected state held before the write (event skipped)")
            return time.monotonic()
        waiters.append(hub.waiter(kinds_, check))
    try:
        start = time.monotonic()
        await write()
        done, _ = await asyncio.wait([w.future for w in waiters], timeout=limit)
        for (name, _, _, missing), w in zip(goals, waiters, strict=True):
            if w.future in done:
                results.add(name, w.future.result() - start)
            else:
                results.fail(name, f"after {limit:.0f} s: {missing()}")
    finally:
        hub.drop(*waiters)
    return start


def change_check(hub: Hub, c: Change, *, part: str, holds: list[str] | None = None) -> Callable[[], bool]:
    """``part`` "flavors" or "queues"; a queue check also collects Holds seen on the planned queues."""

    def flavors_done() -> bool:
        live = hub["ResourceFlavor"]
        return all(flavor_matches(live.get(n), b) for n, b in c.flavors.items()) and all(
            flavor_gone(live.get(n)) for n in c.gone
        )

    def queues_done() -> bool:
        live = hub["ClusterQueue"]
        ok = True
        for name, plan in c.plans.items():
            q = live.get(name)
            policy = stop_policy(q)
            if holds is not None and policy in HOLDS and (name, policy) not in holds:
                holds.append(f"{name}: {policy}")
            if queue_plan(q) != plan or policy in HOLDS:
                ok = False
        return ok and all(not queue_plan(live.get(n)) for n in c.emptied)

    return flavors_done if part == "flavors" else queues_done


def change_missing(hub: Hub, c: Change) -> Callable[[], str]:
    def missing() -> str:
        fl, cq = hub["ResourceFlavor"], hub["ClusterQueue"]
        out = [f"flavor {n}" for n, b in c.flavors.items() if not flavor_matches(fl.get(n), b)]
        out += [f"flavor {n} still live" for n in c.gone if not flavor_gone(fl.get(n))]
        out += [
            f"queue {n} plan {queue_plan(cq.get(n))} stop {stop_policy(cq.get(n))} want {p}"
            for n, p in c.plans.items()
            if queue_plan(cq.get(n)) != p or stop_policy(cq.get(n)) in HOLDS
        ]
        out += [f"queue {n} not emptied" for n in c.emptied if queue_plan(cq.get(n))]
        return "; ".join(out[:4]) + (f" (+{len(out) - 4} more)" if len(out) > 4 else "")

    return missing


# --- the events --------------------------------------------------------------------------------------


def _summary(event: dict[str, Any]) -> str:
    """A ClusterQueue watch event in one line: stop policy, migration phase, flavors, Kueue's Active."""
    obj = event.get("object") or {}
    meta = obj.get("metadata") or {}
    phase = (meta.get("annotations") or {}).get(keys.MIGRATION_PHASE, "-")
    active = next(
        (c for c in (obj.get("status") or {}).get("conditions") or () if c.get("type") == "Active"), {}
    )
    return (
        f"{event.get('type')} gen {meta.get('generation')} stop {stop_policy(obj)} phase {phase} "
        f"flavors {len(queue_plan(obj) or ())} Active={active.get('status')}/{active.get('reason')}"
        f"@{active.get('observedGeneration')}"
    )


def _fit_labels(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if fit.is_fit_label(k)}


def toggled(spec: NodeSpec, card: int) -> NodeSpec:
    """``spec`` with an exclusive allocation on ``card`` of its first accelerator added or removed."""
    acc = spec.accelerators[0]
    allocs = [a for a in acc.allocations if a.card != card]
    if len(allocs) == len(acc.allocations):
        allocs.append(Allocation(card=card, mode="exclusive"))
    accs = [acc.model_copy(update={"allocations": allocs}), *spec.accelerators[1:]]
    return spec.model_copy(update={"accelerators": accs})


async def fit_events(
    admin: Client, hub: Hub, results: Results, specs: dict[str, NodeSpec], args: Any
) -> None:
    rng = random.Random(args.seed + 1)
    candidates = sorted(
        n
        for n, s in specs.items()
        if s.accelerators and not s.accelerators[0].partitioning and s.accelerators[0].count > 0
    )
    done = 0
    attempts = 0
    while done < args.events and attempts < args.events * 5:
        attempts += 1
        name = rng.choice(candidates)
        spec = specs[name]
        node = hub["Node"].get(name)
        if node is None:
            continue
        new = toggled(spec, rng.randrange(spec.accelerators[0].count))
        devices = render.render_devices(new, node["metadata"]["uid"])
        ledger = render.render_devices_status(new)
        if devices is None or ledger is None:
            continue
        full = {**devices, "status": ledger["status"]}
        expected = fit.desired(node_facts(node), devices_facts(full), manual=False)
        if expected == _fit_labels(node["metadata"].get("labels") or {}):
            continue  # this toggle does not change a fit label (e.g. sliced cards); pick another

        def check(name: str = name, expected: dict[str, str] = expected) -> bool:
            live = hub["Node"].get(name)
            return live is not None and _fit_labels(live["metadata"].get("labels") or {}) == expected

        def missing(name: str = name, expected: dict[str, str] = expected) -> str:
            live = _fit_labels(hub["Node"].get(name, {}).get("metadata", {}).get("labels") or {})
            return f"{name}: fit labels {live}, want {expected}"

        async def write(ledger: dict[str, Any] = ledger) -> None:
            await admin.apply(
                kinds.DEVICES, ledger, field_manager=render.FIELD_MANAGER, force=True, subresource="status"
            )

        await measure(hub, results, write, [(FIT, ("Node",), check, missing)], args.timeout)
        specs[name] = new
        done += 1
        await asyncio.sleep(args.gap)


def _settings_now(hub: Hub, settings: WorkerSettings) -> tuple[bool, bool]:
    return settings.instance_type_aware_cpu_manufacturer, settings.instance_type_mixed_on_node


async def new_node_events(admin: Client, hub: Hub, results: Results, state: State, args: Any) -> None:
    extra = cb.fleet(args.events, args.seed + 2)
    for i, spec in enumerate(extra):
        spec = spec.model_copy(update={"name": f"bench-new-{i:05d}"})
        obj = cb.stage3(spec)
        nodes = list(hub["Node"].values())
        before = want(nodes, aware=state.aware, mixed=state.mixed)
        after = want([*nodes, cb.with_profile(obj.node)], aware=state.aware, mixed=state.mixed)
        c = change(before, after)
        # Only the flavors' .capacity matter for the first figure: the node joins exactly its own.
        flavors_c = Change(c.flavors, frozenset(), {})
        queues_c = Change({}, frozenset(), c.plans)

        async def write(body: dict[str, Any] = obj.node) -> None:
            await admin.create(kinds.NODE, body)

        await measure(
            hub,
            results,
            write,
            [
                (NEW_FLAVOR, ("ResourceFlavor",), change_check(hub, flavors_c, part="flavors"),
                 change_missing(hub, flavors_c)),
                (NEW_QUEUE, ("ClusterQueue",), change_check(hub, queues_c, part="queues"),
                 change_missing(hub, queues_c)),
            ],
            args.timeout,
        )  # fmt: skip
        await asyncio.sleep(args.gap)


def _relabelled(node: dict[str, Any], joined: bool) -> dict[str, Any]:
    labels = dict(node["metadata"].get("labels") or {})
    if joined:
        labels.update({ZONED: "true", keys.STANDARD_ZONE: ZONE_VALUE, keys.TOPOLOGY_PROFILE: ZONED_PROFILE})
    else:
        for k in (ZONED, keys.STANDARD_ZONE):
            labels.pop(k, None)
        labels[keys.TOPOLOGY_PROFILE] = PLAIN_PROFILE
    return {**node, "metadata": {**node["metadata"], "labels": labels}}


def zone_source() -> dict[str, Any]:
    return {
        "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
        "kind": "TopologySource",
        "metadata": {"name": SOURCE},
        "spec": {
            "nodeSelector": {"matchLabels": {ZONED: "true"}},
            "levels": [keys.STANDARD_ZONE],
            "nodeLabels": {},
        },
    }


async def profile_events(admin: Client, hub: Hub, results: Results, state: State, args: Any) -> None:
    rng = random.Random(args.seed + 3)
    names = rng.sample(sorted(n for n in hub["Node"] if n.startswith("bench-0")), args.events)
    for name in names:
        for joined, what in ((True, JOIN), (False, LEAVE)):
            nodes = dict(hub["Node"])
            before = want(nodes.values(), aware=state.aware, mixed=state.mixed)
            nodes[name] = _relabelled(nodes[name], joined)
            after = want(nodes.values(), aware=state.aware, mixed=state.mixed)
            c = change(before, after)
            holds: list[str] = []
            patch = (
                {"metadata": {"labels": {ZONED: "true", keys.STANDARD_ZONE: ZONE_VALUE}}}
                if joined
                else {"metadata": {"labels": {ZONED: None, keys.STANDARD_ZONE: None}}}
            )

            async def write(patch: dict[str, Any] = patch, name: str = name) -> None:
                await admin.patch(kinds.NODE, name, patch)

            check = change_check(hub, c, part="queues", holds=holds)
            goal = (what, ("ClusterQueue",), check, change_missing(hub, c))
            await measure(hub, results, write, [goal], args.timeout)
            if holds:
                results.holds[what] = results.holds.get(what, 0) + 1
                print(f"  HOLD seen during {what} of {name}: {holds}")
            await asyncio.sleep(args.gap)


async def set_setting(admin: Client, key: str, value: str) -> None:
    from gpustack_worker.runtime.settings import DEFAULT_CONFIGMAP

    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": DEFAULT_CONFIGMAP, "namespace": kinds.SYSTEM_NAMESPACE},
        "data": {key: value},
    }
    await admin.apply(kinds.CONFIG_MAP, body, field_manager=FIELD_MANAGER, force=True)


async def settings_events(admin: Client, hub: Hub, results: Results, state: State, args: Any) -> None:
    for _ in range(args.events):
        nodes = list(hub["Node"].values())
        now = want(nodes, aware=state.aware, mixed=state.mixed)
        flipped = want(nodes, aware=not state.aware, mixed=state.mixed)
        # Every object of the new grouping is compared in full (not only those that differ: the first
        # flip creates the new grouping's queues), and the old grouping's queues must be emptied.
        empty = Want({}, {})
        c = change(empty, flipped, emptied=set(now.plans) - set(flipped.plans))
        c = Change(c.flavors, frozenset(set(now.flavors) - set(flipped.flavors)), c.plans, c.emptied)
        value = "false" if state.aware else "true"

        async def write(value: str = value) -> None:
            await set_setting(admin, AWARE, value)

        history = hub.mirrors["ClusterQueue"].history
        if history is not None:
            history.clear()
        start = await measure(
            hub,
            results,
            write,
            [
                (SETTING, ("ResourceFlavor", "ClusterQueue"),
                 lambda c=c: change_check(hub, c, part="flavors")() and change_check(hub, c, part="queues")(),
                 change_missing(hub, c)),
            ],
            args.timeout,
        )  # fmt: skip
        state.aware = not state.aware
        took = results.latencies.get(SETTING, [0.0])[-1]
        print(
            f"  aware={value}: {len(c.flavors)} flavors, {len(c.gone)} gone, {len(c.plans)} queues planned, "
            f"{len(c.emptied)} emptied; last converged in {took:.2f} s"
        )
        if history is not None:
            shown = {sorted(c.emptied)[0], sorted(c.plans)[0]} if c.emptied and c.plans else set()
            for stamp, name, summary in history:
                if name in shown:
                    print(f"    +{stamp - start:6.2f} s {name}: {summary}")
        await asyncio.sleep(args.gap)


# --- the run -----------------------------------------------------------------------------------------


@dataclass
class State:
    aware: bool
    mixed: bool


async def label_profiles(admin: Client, objs: Sequence[cb.NodeObjects]) -> None:
    """Each Node's hostname-only profile under the topology controller's field manager, as a previous
    controller run leaves it (``chain_bench.create_fleet(profiled=True)`` does this too, but imports the
    field manager from its old module)."""
    from gpustack_worker.topology.managers import NODE_TOPOLOGY

    gate = asyncio.Semaphore(cb.SETUP_CONCURRENCY)

    async def one(node: dict[str, Any]) -> None:
        meta = {"name": node["metadata"]["name"], "labels": {keys.TOPOLOGY_PROFILE: cb._profile(node)}}
        async with gate:
            body = {"apiVersion": "v1", "kind": "Node", "metadata": meta}
            await admin.apply(kinds.NODE, body, field_manager=NODE_TOPOLOGY)

    await asyncio.gather(*(one(o.node) for o in objs))


def start_agent(cluster: DevCluster, kubeconfig: Path) -> ManagedProcess:
    from gpustack_worker.devcluster.procs import ManagedProcess

    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")}
    argv = [sys.executable, "-m", "gpustack_worker", "agent", "--all-nodes", f"--kubeconfig={kubeconfig}",
            "--metrics-bind=127.0.0.1:0"]  # fmt: skip
    proc = ManagedProcess("agent", argv, cluster.dir / "logs" / "agent.log", env)
    proc.start()
    cluster.procs["agent"] = proc
    return proc


async def run(args: Any, directory: Path, results: Results) -> dict[str, Any]:
    from gpustack_worker.devcluster.cluster import DevCluster
    from gpustack_worker.runtime.client import Client

    settings = WorkerSettings()
    t = time.perf_counter()
    specs = cb.fleet(args.nodes, args.seed)
    objs = [cb.stage3(s) for s in specs]
    exp = cb.expected_chain(objs, settings, profiled=True)
    print(f"fleet: {args.nodes} nodes, {len(exp.flavors)} flavors, {len(exp.types)} queues expected "
          f"({time.perf_counter() - t:.1f} s)")  # fmt: skip
    cluster = DevCluster(directory, log=lambda m: print(f"  [devcluster] {m}"))
    cluster.start()
    admin = await Client.connect(str(cluster.kubeconfig))
    hub = Hub()
    info: dict[str, Any] = {}
    try:
        for ns in cb.TEAM_NAMESPACES:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            await admin.create(kinds.NAMESPACE, body)
        t = time.perf_counter()
        await cb.create_fleet(admin, objs)
        await label_profiles(admin, objs)
        print(f"setup: fleet created in {time.perf_counter() - t:.1f} s")
        exp.namespaces = sorted(
            n["metadata"]["name"]
            for n in (await admin.list(kinds.NAMESPACE))[0]
            if not localqueues.is_system_namespace(n["metadata"]["name"], kinds.SYSTEM_NAMESPACE)
        )
        controller = cb.start_controller(cluster, cluster.service_account_kubeconfig(rbac.CONTROLLER.name))
        t = time.perf_counter()
        left: dict[str, int] = {"?": 1}
        while left and time.perf_counter() - t < 900:
            if not controller.alive():
                raise SystemExit(f"controller exited:\n{controller.log_tail()}")
            await asyncio.sleep(1.0)
            left = await cb.missing(admin, exp)
        if left:
            raise SystemExit(f"the chain did not converge in 900 s: {left}")
        print(f"setup: chain converged {time.perf_counter() - t:.1f} s after the controller started")
        agent = start_agent(cluster, cluster.service_account_kubeconfig(rbac.AGENT.name))
        await asyncio.sleep(5.0)
        assert agent.pid is not None and controller.pid is not None
        if not agent.alive():
            raise SystemExit(f"agent exited:\n{agent.log_tail()}")
        waited = await cb.wait_idle(agent.pid, window=5.0)
        await cb.wait_idle(controller.pid, window=5.0)
        print(f"setup: agent --all-nodes idle {waited + 5:.0f} s after start")
        await admin.apply(kinds.TOPOLOGY_SOURCE, zone_source(), field_manager=FIELD_MANAGER, force=True)
        for resource in (kinds.NODE, kinds.RESOURCE_FLAVOR, kinds.CLUSTER_QUEUE):
            await Mirror(hub, admin, resource).start()
        if args.trace:
            hub.mirrors["ClusterQueue"].history = []
        state = State(*_settings_now(hub, settings))
        phases = {
            "fit": lambda: fit_events(admin, hub, results, {s.name: s for s in specs}, args),
            "new-node": lambda: new_node_events(admin, hub, results, state, args),
            "profile": lambda: profile_events(admin, hub, results, state, args),
            "settings": lambda: settings_events(admin, hub, results, state, args),
        }
        address = cb.log_field(controller.log_path, "serving health and metrics", "address")
        for phase in args.only or list(phases):
            t = time.perf_counter()
            print(f"phase {phase}: {args.events} events")
            stats = cb.reconcile_stats(address) if address else {}
            await phases[phase]()
            print(f"phase {phase}: done in {time.perf_counter() - t:.0f} s; load {os.getloadavg()[0]:.1f}")
            table(results)  # partial results, in case the run is cut short
            after = cb.reconcile_stats(address) if address else {}
            for ctl, (runs, busy) in after.items():
                runs0, busy0 = stats.get(ctl, (0.0, 0.0))
                if runs > runs0:
                    print(
                        f"  {ctl}: {runs - runs0:.0f} reconciles, {busy - busy0:.1f} s inside them "
                        f"({(busy - busy0) / (runs - runs0) * 1000:.0f} ms each)"
                    )
            for proc in (controller, agent):
                if not proc.alive():
                    raise SystemExit(f"{proc.name} exited:\n{proc.log_tail()}")
        info["load"] = os.getloadavg()[0]
    finally:
        for m in hub.mirrors.values():
            await m.stop()
        await admin.close()
        cluster.stop()
    return info


def table(results: Results) -> dict[str, float]:
    """Print the table of what was measured so far; returns the figures."""
    rows = [FIT, NEW_FLAVOR, NEW_QUEUE, JOIN, LEAVE, SETTING]
    figures: dict[str, float] = {}
    print()
    print(f"| {'event':40s} | count | failed |   p50 s |   p99 s |   max s |")
    print(f"|{'-' * 42}|-------|--------|---------|---------|---------|")
    for what in rows:
        values = results.latencies.get(what, [])
        failed = len(results.failures.get(what, []))
        if not values and not failed:
            continue
        figures[f"{what} count"] = len(values)
        figures[f"{what} not converged"] = failed
        if values:
            p50, p99, top = percentile(values, 50), percentile(values, 99), max(values)
            figures[f"{what} p50 s"] = round(p50, 3)
            figures[f"{what} p99 s"] = round(p99, 3)
            figures[f"{what} max s"] = round(top, 3)
            print(f"| {what:40s} | {len(values):5d} | {failed:6d} | {p50:7.2f} | {p99:7.2f} | {top:7.2f} |")
        else:
            print(f"| {what:40s} | {0:5d} | {failed:6d} |       - |       - |       - |")
    print()
    return figures


def report(args: Any, results: Results, info: dict[str, Any]) -> dict[str, float]:
    settings = WorkerSettings()
    figures = table(results)
    print(
        f"settings shaping them: fit-label-coalesce-seconds={settings.fit_label_coalesce_seconds:g}, "
        f"chain-settle-seconds={settings.chain_settle_seconds:g}, chain Node-label/flavor coalescing "
        f"{COALESCE_S:g} s (chain/controller.py COALESCE_S), Devices coalescing {DEVICES_COALESCE_S:g} s, "
        f"controller-workers={settings.controller_workers}, all-nodes-workers={settings.all_nodes_workers}"
    )
    for what, n in results.holds.items():
        print(f"holds seen on a switched queue during '{what}': {n} event(s)")
    print(
        f"events spaced: each written {args.gap:g} s after the previous one converged; "
        f"load average at the end {info.get('load', 0):.1f} (2 cores, shared)"
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000, help="fleet size (default: %(default)s)")
    parser.add_argument("--events", type=int, default=100, help="events per type (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="fleet RNG seed (default: %(default)s)")
    parser.add_argument("--gap", type=float, default=0.5, help="s between events (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=120.0, help="per-event limit (default: %(default)s)")
    parser.add_argument(
        "--only", action="append", choices=("fit", "new-node", "profile", "settings"), help="run only these"
    )
    parser.add_argument(
        "--trace", action="store_true", help="print two queues' watch events for each settings flip"
    )
    parser.add_argument("--dir", default=None, help="keep the cluster state and logs here")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    results = Results()
    with contextlib.ExitStack() as stack:
        if args.dir:
            directory = Path(args.dir)
            directory.mkdir(parents=True, exist_ok=True)
        else:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="latency-bench-")))
        info = asyncio.run(run(args, directory, results))
    figures = report(args, results, info)
    if args.json:
        doc = {"bench": "latency", "nodes": args.nodes, "figures": figures}
        Path(args.json).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
