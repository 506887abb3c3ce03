"""``gpustack-worker explain``: read what a diagnosis needs, hand it to :mod:`.explaining`, print it.

``explain node NAME``, ``explain workload [NS/]NAME``, ``explain modeldeployment [NS/]NAME [--role ROLE]``;
``-n/--namespace`` as kubectl's: a NAME without ``NS/`` is looked up there, by default in the kubeconfig
context's namespace, else ``default`` (:mod:`.kube_namespace`).
``-o text|json|yaml`` (:mod:`.output`). Read-only: only GET and LIST, as whoever the kubeconfig names.
Exit 0 when the object exists, 1 when it does not (or the API server refuses a read: one line from
:mod:`.errors`, through ``main``), 2 on bad usage.
The parser is built on every ``gpustack-worker`` run, so the heavy imports wait until ``explain`` runs.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from gpustack_worker.api import keys, kinds

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Mapping

    from gpustack_worker.cli.explain import explaining
    from gpustack_worker.runtime.client import Client
    from gpustack_worker.runtime.resources import Resource

__all__ = ("run",)


def _split(ref: str) -> tuple[str, str] | None:
    ns, sep, name = ref.partition("/")
    return (ns, name) if sep and ns and name and "/" not in name else None


def resolve(ref: str, namespace: str | None, default: Callable[[], str]) -> tuple[str, str] | str:
    """``(namespace, name)`` of a namespaced NAME or NS/NAME, or the usage error. ``namespace`` is ``-n``
    (None: not given); ``default()`` is asked only when neither names one. NS/NAME and a different ``-n``
    contradict each other: an error, not a guess."""
    if "/" in ref:
        parts = _split(ref)
        if parts is None:
            return f"expected NAME or NS/NAME, got {ref!r}"
        if namespace is not None and namespace != parts[0]:
            return f"{ref!r} names namespace {parts[0]}, -n names {namespace}: give one"
        return parts
    if not ref:
        return "expected NAME or NS/NAME, got ''"
    if namespace == "":
        return "-n: the namespace is empty"
    return (namespace if namespace is not None else default(), ref)


class _Reader:
    """GETs remembered for one command (a deployment's groups share their queues)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._seen: dict[tuple[str, str, str], dict[str, Any] | None] = {}
        self._flavors: list[dict[str, Any]] | None = None

    async def get(self, kind: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        key = (kind.plural, namespace or "", name)
        if key not in self._seen:
            self._seen[key] = await self.client.get(kind, name, namespace) if name else None
        return self._seen[key]

    async def flavors(self) -> list[dict[str, Any]]:
        if self._flavors is None:
            self._flavors, _ = await self.client.list(kinds.RESOURCE_FLAVOR)
        return self._flavors

    async def workload(self, namespace: str, name: str) -> explaining.WorkloadExplanation:
        from gpustack_worker.cli.explain import explaining

        wl = await self.get(kinds.WORKLOAD, name, namespace)
        if wl is None:
            return explaining.explain_workload(None, namespace=namespace, name=name)
        queue_name = str((wl.get("spec") or {}).get("queueName") or "")
        lq = await self.get(kinds.LOCAL_QUEUE, queue_name, namespace)
        admission = (wl.get("status") or {}).get("admission") or {}
        cq_name = str(
            ((lq or {}).get("spec") or {}).get("clusterQueue") or admission.get("clusterQueue") or ""
        )
        cq = await self.get(kinds.CLUSTER_QUEUE, cq_name)
        nodes = []
        for host in _assigned_hosts(wl):
            node = await self.get(kinds.NODE, host)
            if node is not None:
                nodes.append(node)
        return explaining.explain_workload(
            wl, local_queue=lq, cluster_queue=cq, flavors=await self.flavors(), nodes=nodes
        )


def _assigned_hosts(wl: Mapping[str, Any]) -> list[str]:
    """Hostnames a Workload's topology assignments name (to show their value of the requested level)."""
    from gpustack_worker.placement.gate3 import decode_topology_assignment

    hosts: set[str] = set()
    for psa in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or ():
        if not psa.get("topologyAssignment"):
            continue
        try:
            levels, domains = decode_topology_assignment(psa["topologyAssignment"])
        except (ValueError, TypeError):
            continue
        if keys.HOSTNAME in levels:
            at = levels.index(keys.HOSTNAME)
            hosts.update(d.values[at] for d in domains)
    return sorted(hosts)


async def explain(client: Client, kind: str, ref: str, roles: list[str]) -> explaining.Explanation:
    """Read and explain one object (``kind`` is one of node / workload / modeldeployment; ``ref`` is NAME
    for a node, NS/NAME otherwise)."""
    from gpustack_worker.cli.explain import explaining

    reader = _Reader(client)
    if kind == "node":
        node = await client.get(kinds.NODE, ref)
        if node is None:
            return explaining.explain_node(None, name=ref)
        features, _ = await client.list(kinds.NODE_FEATURE, label_selector=f"{keys.NFD_NODE_NAME}={ref}")
        queues, _ = await client.list(kinds.CLUSTER_QUEUE)
        types, _ = await client.list(kinds.INSTANCE_TYPE)
        local_queues, _ = await client.list(kinds.LOCAL_QUEUE)
        return explaining.explain_node(
            node,
            node_features=features,
            flavors=await reader.flavors(),
            cluster_queues=queues,
            instance_types=types,
            local_queues=local_queues,
        )
    parts = _split(ref)
    assert parts is not None  # checked by run()
    namespace, name = parts
    if kind == "workload":
        return await reader.workload(namespace, name)
    md = await client.get(kinds.MODEL_DEPLOYMENT, name, namespace)
    if md is None:
        return explaining.explain_deployment(None, namespace=namespace, name=name)
    uid = str((md.get("metadata") or {}).get("uid") or "")
    pods, _ = await client.list(
        kinds.POD, namespace=namespace, label_selector=f"{keys.MODEL_DEPLOYMENT_UID}={uid}"
    )
    groups = sorted(
        {
            str(((p.get("metadata") or {}).get("labels") or {}).get(keys.POD_GROUP_NAME) or "")
            for p in pods
            if not roles
            or ((p.get("metadata") or {}).get("labels") or {}).get(keys.MODEL_DEPLOYMENT_ROLE) in roles
        }
        - {""}
    )
    workloads = {group: await reader.workload(namespace, group) for group in groups}
    return explaining.explain_deployment(md, pods=pods, workloads=workloads, roles=roles)


async def run(args: argparse.Namespace) -> int:
    from gpustack_worker.cli.explain import explaining
    from gpustack_worker.cli.kube_namespace import context_namespace
    from gpustack_worker.cli.output import emit
    from gpustack_worker.cli.request_timeout import request_timeout_of
    from gpustack_worker.runtime.client import Client

    kind = {"md": "modeldeployment", "wl": "workload"}.get(args.kind, args.kind)
    ref = args.name
    if kind != "node":
        resolved = resolve(
            args.name,
            getattr(args, "namespace", None),
            lambda: context_namespace(args.kubeconfig, getattr(args, "context", None)),
        )
        if isinstance(resolved, str):
            print(f"explain {kind}: {resolved}", file=sys.stderr)
            return 2
        ref = "/".join(resolved)
    if args.role and kind != "modeldeployment":
        print("explain: --role applies to modeldeployment only", file=sys.stderr)
        return 2
    client = await Client.connect(
        args.kubeconfig,
        context=getattr(args, "context", None),
        timeout_s=request_timeout_of(args),
        user_agent="gpustack-worker-explain",
    )
    try:
        result = await explain(client, kind, ref, list(args.role))
    finally:
        await client.close()
    emit(result, args.output, explaining.render_text)
    return 0 if result.exists else 1
