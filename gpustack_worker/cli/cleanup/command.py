"""``gpustack-worker cleanup [--dry-run]``: remove everything the operator owns, in a safe order.

Lists what the plan needs, hands it to :mod:`.cleaning` (the pure plan: what is ours and why, in which
order) and prints it; ``--dry-run`` stops there (only GET and LIST are sent). Otherwise each step runs
and waits (bounded by ``--timeout``) until the API server shows it done before the next one starts:

* drain — ``stopPolicy: HoldAndDrain`` on each queue Kueue reports reservations on, then wait until Kueue
  reports no Workload holding quota for the queue's new generation; on timeout, list the Workloads still
  admitted to it and stop (a queue deleted with reservations hangs in Kueue's ``resource-in-use``);
* deletes — with the object's UID as precondition (a newer object of the same name is left alone), then
  wait until the objects are gone (Kueue drops its finalizers once nothing references them);
* our fields — an empty server-side apply as our field manager (our ownership goes; a key only we owned
  goes with it, a shared one stays), or a JSON patch that tests and removes the keys only an Update entry
  of ours owns; an object that is gone meanwhile is skipped (an apply would create it);
* finalizers — the compare-and-swap JSON patch of :mod:`gpustack_worker.runtime.finalizers`.

``--kueue-config``: last, revert what ``kueue-config --merge`` changed in Kueue's ConfigMap
(``--kueue-configmap``, default ``kueue-system/kueue-manager-config``). The evidence that the changes are
ours is the record the merge left in the annotation ``worker.gpustack.ai/kueue-config-merge``: without it
the ConfigMap is left alone. The team's values come back where the key still holds ours (their original
file byte for byte when nothing changed since the merge); a key they changed since is kept and named. The
write is a PUT carrying the ``resourceVersion`` read, so a concurrent edit is refused, not overwritten;
``--dry-run`` only says what would be restored.

Exit 0 when done (or listed with ``--dry-run``), 1 when a step failed or timed out, 3 when refused because
the controller holds its Lease (``--force`` skips that check). ``-o json`` or ``-o yaml`` prints one document.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
import time
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import kinds

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence

    from gpustack_worker.cli.cleanup import cleaning
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource

__all__ = ("USER_AGENT", "run")

USER_AGENT: Final = "gpustack-worker-cleanup"
#: Exit code of a refusal (the controller still holds its Lease).
REFUSED: Final = 3
_POLL_S: Final = 0.5

_RESOURCES: Final[Mapping[str, Resource]] = {
    r.kind: r
    for r in (
        kinds.CLUSTER_QUEUE,
        kinds.RESOURCE_FLAVOR,
        kinds.TOPOLOGY,
        kinds.ADMISSION_CHECK,
        kinds.LOCAL_QUEUE,
        kinds.NODE_FEATURE,
        kinds.NODE,
        kinds.DEVICES,
        kinds.TOPOLOGY_SOURCE,
        kinds.INSTANCE_TYPE,
        kinds.LEASE,
    )
}


async def inventory(client: Client, namespace: str) -> cleaning.Inventory:
    """Everything the plan looks at (LISTs, and one GET for the Lease)."""
    from gpustack_worker.cli.cleanup import cleaning

    async def items(kind: Resource) -> list[dict[str, Any]]:
        found, _ = await client.list(kind)
        return found

    return cleaning.Inventory(
        instance_types=await items(kinds.INSTANCE_TYPE),
        cluster_queues=await items(kinds.CLUSTER_QUEUE),
        flavors=await items(kinds.RESOURCE_FLAVOR),
        topologies=await items(kinds.TOPOLOGY),
        admission_checks=await items(kinds.ADMISSION_CHECK),
        local_queues=await items(kinds.LOCAL_QUEUE),
        node_features=await items(kinds.NODE_FEATURE),
        nodes=await items(kinds.NODE),
        devices=await items(kinds.DEVICES),
        topology_sources=await items(kinds.TOPOLOGY_SOURCE),
        lease=await client.get(kinds.LEASE, kinds.WORKER_GROUP, namespace),
    )


def _uid(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("uid") or "")


class _Runner:
    def __init__(self, client: Client, timeout: float, say: Any) -> None:
        self.client = client
        self.timeout = timeout
        self.say = say
        self.done: list[str] = []
        self.skipped: list[str] = []

    async def _get(self, a: cleaning.Action) -> dict[str, Any] | None:
        obj = await self.client.get(_RESOURCES[a.kind], a.name, a.namespace or None)
        return obj if obj is not None and (not a.uid or _uid(obj) == a.uid) else None

    async def _wait(self, what: str, pending: Sequence[cleaning.Action], done: Any) -> list[str]:
        """Poll each action's object until ``done(obj)`` (None: gone); the refs still pending on timeout."""
        deadline = time.monotonic() + self.timeout
        left = list(pending)
        while left:
            left = [a for a in left if not await done(a, await self._get(a))]
            if not left or time.monotonic() >= deadline:
                break
            await asyncio.sleep(_POLL_S)
        if left:
            self.say(
                f"   timed out after {self.timeout:g}s waiting for {what}: {', '.join(a.ref for a in left)}"
            )
        return [a.ref for a in left]

    async def drain(self, actions: Sequence[cleaning.Action]) -> list[str]:
        from gpustack_worker.chain import queues
        from gpustack_worker.cli.cleanup import cleaning

        for a in actions:
            queue = await self._get(a)
            if queue is None:
                continue
            if (queue.get("spec") or {}).get("stopPolicy") != cleaning.HOLD_AND_DRAIN:
                await self.client.patch(
                    kinds.CLUSTER_QUEUE,
                    a.name,
                    {"spec": {"stopPolicy": cleaning.HOLD_AND_DRAIN}},
                    field_manager=a.manager,
                )
            self.done.append(f"drain {a.ref}")

        async def drained(_: cleaning.Action, queue: Mapping[str, Any] | None) -> bool:
            return queue is None or queues.holding_workloads(queue) == 0

        stuck = await self._wait("Kueue to report no Workload holding quota", actions, drained)
        if stuck:
            await self._report_holders({a.name for a in actions if a.ref in stuck})
        return stuck

    async def _report_holders(self, queue_names: set[str]) -> None:
        workloads, _ = await self.client.list(kinds.WORKLOAD)
        for wl in workloads:
            admission = (wl.get("status") or {}).get("admission") or {}
            if admission.get("clusterQueue") in queue_names:
                meta = wl.get("metadata") or {}
                self.say(
                    f"   still holding quota: Workload {meta.get('namespace')}/{meta.get('name')} in "
                    f"ClusterQueue {admission.get('clusterQueue')}"
                )

    async def delete(self, actions: Sequence[cleaning.Action], *, wait: bool = True) -> list[str]:
        from gpustack_worker.runtime.client import Conflict

        for a in actions:
            try:
                gone = not await self.client.delete(
                    _RESOURCES[a.kind], a.name, a.namespace or None, uid=a.uid or None
                )
            except Conflict:
                self.skipped.append(f"{a.ref}: replaced by a newer object of the same name, left alone")
                continue
            self.done.append(f"delete {a.ref}" + (" (already gone)" if gone else ""))
        return await self.wait_gone(actions) if wait else []

    async def wait_gone(self, actions: Sequence[cleaning.Action]) -> list[str]:
        async def gone(_: cleaning.Action, obj: Mapping[str, Any] | None) -> bool:
            return obj is None

        return await self._wait("the objects to be gone", actions, gone)

    async def release(self, a: cleaning.Action) -> None:
        from gpustack_worker.cli.cleanup import cleaning

        resource = _RESOURCES[a.kind]
        if await self._get(a) is None:
            self.skipped.append(f"{a.ref}: gone, nothing to release")
            return
        if a.verb is cleaning.Verb.RELEASE:
            meta: dict[str, Any] = {"name": a.name, "uid": a.uid}
            if a.namespace:
                meta["namespace"] = a.namespace
            body = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": meta}
            await self.client.apply(
                resource, body, field_manager=a.manager, subresource=a.subresource or None
            )
        else:
            ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": a.uid}]
            for path, key, value in a.values:
                pointer = f"{path}/{key.replace('~', '~0').replace('/', '~1')}"
                ops += [{"op": "test", "path": pointer, "value": value}, {"op": "remove", "path": pointer}]
            await self.client.patch(
                resource,
                a.name,
                ops,
                namespace=a.namespace or None,
                patch_type="json",
                subresource=a.subresource or None,
                field_manager=a.manager,
            )
        self.done.append(f"{a.verb.value} {a.ref} as {a.manager}")

    async def unfinalize(self, a: cleaning.Action) -> None:
        from gpustack_worker.runtime.finalizers import Finalizer

        obj = await self._get(a)
        if obj is None:
            return
        writer = Finalizer(self.client, _RESOURCES[a.kind], a.finalizer, field_manager=USER_AGENT)
        if await writer.remove(obj):
            self.done.append(f"unfinalize {a.ref} ({a.finalizer})")


async def execute(client: Client, p: cleaning.Plan, *, wait_s: float, say: Any) -> dict[str, Any]:
    """Run ``p``'s steps in order; stop at the first step that does not finish. Returns the outcome."""
    from gpustack_worker.cli.cleanup import cleaning

    run = _Runner(client, wait_s, say)
    stuck: list[str] = []
    for step in cleaning.Step:
        actions = [a for a in p.actions if a.step is step]
        if not actions:
            continue
        say(f"{step.value} ({len(actions)})")
        if step is cleaning.Step.DRAIN:
            stuck = await run.drain(actions)
        elif step is cleaning.Step.FIELDS:
            for a in actions:
                await run.release(a)
        elif step is cleaning.Step.INSTANCE_TYPES:
            # deleted now, gone once the next step releases our finalizer
            await run.delete(actions, wait=False)
        elif step is cleaning.Step.FINALIZERS:
            for a in actions:
                await run.unfinalize(a)
            deleted = [a for a in p.actions if a.step is cleaning.Step.INSTANCE_TYPES]
            stuck = await run.wait_gone(deleted)
        else:
            stuck = await run.delete(actions)
        if stuck:
            break
    return {"done": run.done, "skipped": run.skipped, "stuck": stuck, "complete": not stuck}


async def revert_kueue_config(client: Client, ref: str, *, dry_run: bool, say: Any) -> bool:
    """Revert the recorded ``kueue-config --merge`` of the ConfigMap ``ref`` (``NAMESPACE/NAME``); False
    when the write was refused (the ConfigMap changed meanwhile)."""
    from gpustack_worker.cli.kueue_config import command as kueue_config_cmd
    from gpustack_worker.runtime.client import Conflict

    namespace, _, name = ref.partition("/")
    cm = await client.get(kinds.CONFIG_MAP, name, namespace)
    if cm is None:
        say(f"kueue-config: no ConfigMap {ref}: nothing to revert")
        return True
    try:
        body, _, reverted = kueue_config_cmd.revert_document(cm, "")
    except ValueError as exc:
        say(f"kueue-config: ConfigMap {ref} left alone: {exc}")
        return True
    verb = "would revert" if dry_run else "revert"
    say(f"kueue-config: {verb} ConfigMap {ref}: {kueue_config_cmd.summary(reverted)}")
    for line in reverted.kept:
        say(f"   kept: {line}")
    if dry_run:
        return True
    try:
        await client.replace(kinds.CONFIG_MAP, body)
    except Conflict as exc:
        say(f"kueue-config: ConfigMap {ref} changed meanwhile, nothing written ({exc}); run cleanup again")
        return False
    say(
        f"kueue-config: restart Kueue so it reads it: kubectl -n {namespace} rollout restart "
        "deployment/kueue-controller-manager"
    )
    return True


def _print_document(text: str, fmt: str) -> None:
    """The JSON document ``text`` as it is (``-o json``) or as YAML (``-o yaml``, :mod:`.output`)."""
    from gpustack_worker.cli.output import emit

    if fmt == "json":
        print(text, end="")
    else:
        emit(json.loads(text), fmt, str)


async def run(args: argparse.Namespace) -> int:
    from gpustack_worker.cli.cleanup import cleaning
    from gpustack_worker.cli.request_timeout import request_timeout_of
    from gpustack_worker.runtime.client import Client

    json_out = args.output != "text"  # json or yaml: one document on stdout, progress on stderr

    def say(line: str) -> None:
        print(line, file=sys.stderr if json_out else sys.stdout, flush=True)

    client = await Client.connect(
        args.kubeconfig,
        context=getattr(args, "context", None),
        timeout_s=request_timeout_of(args),
        user_agent=USER_AGENT,
    )
    try:
        inv = await inventory(client, args.namespace)  # a refused read: the CLI's one error line
        p = cleaning.plan(inv, now=datetime.datetime.now(datetime.UTC), namespace=args.namespace)
        if args.dry_run or (p.refusal and not args.force):
            if json_out:
                _print_document(cleaning.to_json(p, dry_run=args.dry_run), args.output)
            else:
                print(cleaning.render_text(p, dry_run=True), end="")
            if p.refusal and not args.force:
                print(f"cleanup: refused: {p.refusal}", file=sys.stderr)
                return REFUSED
            if args.kueue_config:
                await revert_kueue_config(client, args.kueue_configmap, dry_run=True, say=say)
            return 0
        if not json_out:
            print(cleaning.render_text(p, dry_run=False), end="")
        outcome = await execute(client, p, wait_s=args.timeout, say=say)  # refused: the one error line
        if outcome["complete"] and args.kueue_config:
            reverted = await revert_kueue_config(client, args.kueue_configmap, dry_run=False, say=say)
            outcome = {**outcome, "complete": reverted, "stuck": [] if reverted else [args.kueue_configmap]}
    finally:
        await client.close()
    if json_out:
        _print_document(cleaning.to_json(p, dry_run=False, outcome=outcome), args.output)
    else:
        print(
            "cleanup complete" if outcome["complete"] else f"cleanup stopped: {len(outcome['stuck'])} pending"
        )
        for line in outcome["skipped"]:
            print(f"   skipped: {line}")
    return 0 if outcome["complete"] else 1
