"""What ``gpustack-worker demo`` puts into its cluster and how it reads it back, as pure functions.

* the inventory of the packaged ``demo`` scenario — 2 zones × 2 racks, three nodes per rack — as the
  snapshot ConfigMap and the configMap TopologySource a platform engineer would write
  (:func:`snapshot_config_map`, :func:`topology_source`);
* the sample ModelDeployments (:func:`deployments`): ``chat`` fits (two whole H100s in one rack), and
  ``disagg`` — prefill (four T4s in one rack) and decode (two T4s in one rack) — waits for capacity: a rack
  holds two T4s, so decode reserves one rack while prefill fits none, and the joint check holds decode
  (``1 of 2``) until both can start;
* the summary (:func:`summary`): aligned plain-text tables of the topology, the nodes, the pools with their
  four-view, the flavors per topology profile, the queues with their stop policy and ``TopologyReady``,
  and every Workload admitted or pending with Kueue's (or the admission check's) words verbatim.

Nothing here does I/O: :mod:`gpustack_worker.cli.demo.command` fetches the objects and prints the text.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import yaml

from gpustack_worker.api import keys, kinds
from gpustack_worker.placement.gate3 import decode_topology_assignment

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

__all__ = (
    "DEMO_SCENARIO",
    "INVENTORY",
    "LEVELS",
    "NAMESPACE",
    "RACK_OF",
    "REGION",
    "SNAPSHOT_KEY",
    "SOURCE_NAME",
    "Observed",
    "condition",
    "deployments",
    "deployments_settled",
    "explore_commands",
    "instance_type_for",
    "snapshot_config_map",
    "summary",
    "table",
    "topology_source",
    "workload_state",
)

#: The packaged scenario the inventory below describes.
DEMO_SCENARIO: Final = "demo"
#: The namespace the sample ModelDeployments run in (the chain gives every namespace its LocalQueues).
NAMESPACE: Final = "demo"
SOURCE_NAME: Final = "demo-racks"
SNAPSHOT_KEY: Final = "snapshot.yaml"
#: The label every demo node carries: the TopologySource's node selector.
INVENTORY: Final = ("example.com/inventory", "demo")
REGION: Final = "region-1"
LEVELS: Final = (keys.PRIVATE_REGION, keys.PRIVATE_ZONE, keys.PRIVATE_RACK)
#: Node → (zone, rack): the inventory the configMap TopologySource publishes.
RACK_OF: Final[Mapping[str, tuple[str, str]]] = {
    node: (zone, rack)
    for zone, racks in {
        "zone-a": {"rack-a1": ("h100-1", "t4-1", "cpu-1"), "rack-a2": ("h100-2", "t4-2", "a100-1")},
        "zone-b": {"rack-b1": ("a100-2", "t4-3", "ascend-1"), "rack-b2": ("ascend-2", "t4-4", "cpu-2")},
    }.items()
    for rack, nodes in racks.items()
    for node in nodes
}
#: Products of the pools the sample deployments use (matched against InstanceType names).
H100: Final = "h100"
T4: Final = "t4"


# --- what the demo creates -----------------------------------------------------------------------------


def snapshot_config_map(revision: str = "inventory-1") -> dict[str, Any]:
    """The snapshot in a ConfigMap of the worker namespace: the writing arms' document, ``apiVersion``, an
    opaque ``revision`` and ``nodes`` mapping each node to its level keys and values (docs/topology.md, "The
    source contract")."""
    doc = {
        "apiVersion": keys.SNAPSHOT_API_VERSION,
        "revision": revision,
        "nodes": {
            node: {keys.PRIVATE_REGION: REGION, keys.PRIVATE_ZONE: zone, keys.PRIVATE_RACK: rack}
            for node, (zone, rack) in sorted(RACK_OF.items())
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": SOURCE_NAME, "namespace": kinds.SYSTEM_NAMESPACE},
        "data": {SNAPSHOT_KEY: yaml.safe_dump(doc, sort_keys=True)},
    }


def topology_source() -> dict[str, Any]:
    """A configMap TopologySource over the demo nodes, levels region → zone → rack."""
    return {
        "apiVersion": kinds.TOPOLOGY_SOURCE.api_version,
        "kind": kinds.TOPOLOGY_SOURCE.kind,
        "metadata": {"name": SOURCE_NAME},
        "spec": {
            "nodeSelector": {"matchLabels": {INVENTORY[0]: INVENTORY[1]}},
            "levels": list(LEVELS),
            "configMap": {
                "configMapRef": {"namespace": kinds.SYSTEM_NAMESPACE, "name": SOURCE_NAME},
                "key": SNAPSHOT_KEY,
                "maxStaleness": "10m",
            },
        },
    }


def instance_type_for(product: str, instance_types: Iterable[Mapping[str, Any]]) -> str | None:
    """The accelerated amd64 InstanceType whose name names ``product`` (e.g. ``t4``), if any."""
    for it in sorted(instance_types, key=lambda t: str(t["metadata"]["name"])):
        name = str(it["metadata"]["name"])
        words = name.split("-")
        if product in words and (it.get("spec") or {}).get("acceleratable") and name.endswith("-amd64"):
            return name
    return None


def _role(name: str, kind: str, instance_type: str, size: int) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "replicas": 1,
        "size": size,
        "instanceType": instance_type,
        "resources": {"accelerator": "1"},
        "topology": {"requiredLevel": keys.PRIVATE_RACK},
        "template": {"spec": {"containers": [{"name": "engine", "image": "registry.invalid/engine:1"}]}},
    }


def _deployment(name: str, *roles: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": kinds.MODEL_DEPLOYMENT.api_version,
        "kind": kinds.MODEL_DEPLOYMENT.kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"roles": list(roles)},
    }


def deployments(h100: str, t4: str) -> list[dict[str, Any]]:
    """``chat`` (fits: one replica of two Pods, one whole H100 each, in one rack) and ``disagg`` (waits:
    prefill needs four T4s in one rack, a rack has two; decode needs two)."""
    return [
        _deployment("chat", _role("server", "Server", h100, 2)),
        _deployment("disagg", _role("prefill", "Prefill", t4, 4), _role("decode", "Decode", t4, 2)),
    ]


# --- reading it back --------------------------------------------------------------------------------------


def condition(obj: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any]:
    """The ``status.conditions`` entry of ``type_`` (empty when absent)."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def _status(obj: Mapping[str, Any] | None, type_: str) -> str:
    return str(condition(obj, type_).get("status", "?"))


def _roles(md: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {str(r.get("name")): r for r in ((md or {}).get("status") or {}).get("roles") or ()}


def _queues_counted(o: Observed) -> bool:
    """Every queue's admitted/reserving/pending counts agree with the Workloads (Kueue updates them a
    moment after the Workloads themselves)."""
    for q in o.queues:
        name, status = _name(q), q.get("status") or {}
        mine = [
            w
            for w in o.workloads
            if (w.get("spec") or {}).get("queueName") == keys.local_queue_name(name)
            or ((w.get("status") or {}).get("admission") or {}).get("clusterQueue") == name
        ]
        reserved = [w for w in mine if _status(w, "QuotaReserved") == "True"]
        counts = (
            sum(1 for w in reserved if _status(w, "Admitted") == "True"),
            len(reserved),
            len(mine) - len(reserved),
        )
        got = tuple(
            int(status.get(k, 0)) for k in ("admittedWorkloads", "reservingWorkloads", "pendingWorkloads")
        )
        if counts != got:
            return False
    return True


def deployments_settled(o: Observed) -> bool:
    """``chat`` has its replica admitted and its Pods bound; ``disagg`` has both roles held with their
    reasons: prefill with Kueue's message, decode with the joint check's ``1 of 2``; every queue's counts
    agree with the Workloads."""
    by_name = {_name(md): md for md in o.deployments}
    chat_md, disagg_md = by_name.get("chat"), by_name.get("disagg")
    if chat_md is None or disagg_md is None:
        return False
    chat, disagg = _roles(chat_md), _roles(disagg_md)
    if (chat.get("server") or {}).get("admittedReplicas") != 1:
        return False
    uid = chat_md["metadata"].get("uid")
    chat_pods = [p for p in o.pods if _labels(p).get(keys.MODEL_DEPLOYMENT_UID) == uid]
    if not chat_pods or not all(p["spec"].get("nodeName") for p in chat_pods):
        return False
    prefill, decode = disagg.get("prefill") or {}, disagg.get("decode") or {}
    if not prefill.get("message") or "1 of 2" not in str(decode.get("message", "")):
        return False
    return _queues_counted(o)


def _check_entries(wl: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((wl.get("status") or {}).get("admissionChecks") or ())


def workload_state(wl: Mapping[str, Any]) -> tuple[str, str]:
    """(state, reason): ``Admitted``; ``Reserved`` with the first check not Ready (its state and message);
    ``Pending`` with Kueue's ``QuotaReserved`` message verbatim."""
    if _status(wl, "Admitted") == "True":
        return "Admitted", ""
    if _status(wl, "QuotaReserved") == "True":
        for entry in _check_entries(wl):
            if entry.get("state") != "Ready":
                return "Reserved", f"{entry.get('name')} {entry.get('state')}: {entry.get('message', '')}"
        return "Reserved", ""
    quota = condition(wl, "QuotaReserved")
    return "Pending", str(quota.get("message") or quota.get("reason") or "not yet seen by Kueue")


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """Aligned columns, two spaces apart; the last column is never padded (long messages stay whole)."""
    cells = [list(headers), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers) - 1)]
    return [
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]).rstrip()
        for row in cells
    ]


@dataclass(frozen=True, slots=True)
class Observed:
    """The objects the summary is made of, as the API server returned them."""

    nodes: Sequence[Mapping[str, Any]] = ()
    sources: Sequence[Mapping[str, Any]] = ()
    topologies: Sequence[Mapping[str, Any]] = ()
    instance_types: Sequence[Mapping[str, Any]] = ()
    flavors: Sequence[Mapping[str, Any]] = ()
    queues: Sequence[Mapping[str, Any]] = ()
    deployments: Sequence[Mapping[str, Any]] = ()
    workloads: Sequence[Mapping[str, Any]] = ()
    pods: Sequence[Mapping[str, Any]] = ()
    extra: Mapping[str, str] = field(default_factory=dict)


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return obj["metadata"].get("labels") or {}


def _short(level: str) -> str:
    """``topology.gpustack.ai/rack`` → ``rack``; ``kubernetes.io/hostname`` → ``hostname``."""
    return level.rsplit("/", 1)[-1]


def _accelerators(node: Mapping[str, Any]) -> str:
    labels = _labels(node)
    product = next((v for k, v in sorted(labels.items()) if k.endswith(".product")), "")
    count = next((v for k, v in sorted(labels.items()) if k.endswith(".count")), "")
    return f"{count} x {product}" if product and count else "-"


def _nodes_table(o: Observed) -> list[str]:
    rows = []
    for node in sorted(o.nodes, key=_name):
        labels = _labels(node)
        rows.append(
            (
                _name(node),
                labels.get(keys.PRIVATE_ZONE, "-"),
                labels.get(keys.PRIVATE_RACK, "-"),
                _accelerators(node),
            )
        )
    return table(("NODE", "ZONE", "RACK", "ACCELERATORS"), rows)


def _sources_table(o: Observed) -> list[str]:
    rows = []
    for src in sorted(o.sources, key=_name):
        status = src.get("status") or {}
        ready = condition(src, "Ready")
        rows.append(
            (
                _name(src),
                " > ".join(_short(level) for level in (src.get("spec") or {}).get("levels") or ()),
                status.get("sourceKind", "-"),
                status.get("lastSuccessfulRevision", "-"),
                status.get("selectedNodes", "-"),
                f"{ready.get('status', '?')} {ready.get('reason', '')}".strip(),
                ready.get("message", ""),
            )
        )
    return table(("TOPOLOGYSOURCE", "LEVELS", "KIND", "REVISION", "NODES", "READY", "MESSAGE"), rows)


def _pools_table(o: Observed) -> list[str]:
    rows = []
    for it in sorted(o.instance_types, key=_name):
        status = it.get("status") or {}
        cpu = status.get("cpu") or {}
        rows.append(
            (
                _name(it),
                status.get("phase", "-"),
                status.get("acceleratorSummary") or "-",
                f"{cpu['onceMaxRequest']}/{cpu.get('remaining', '-')}" if cpu.get("onceMaxRequest") else "-",
                status.get("entrance") or "-",
            )
        )
    return table(
        ("POOL (InstanceType)", "PHASE", "EX/SH/SL/PT", "CPU once/left", "LOCALQUEUE (entrance)"), rows
    )


def _flavor_queues(queues: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    out = {}
    for q in queues:
        for group in (q.get("spec") or {}).get("resourceGroups") or ():
            for flavor in group.get("flavors") or ():
                out[str(flavor.get("name"))] = _name(q)
    return out


def _selected_nodes(flavor: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    wanted = ((flavor.get("spec") or {}).get("nodeLabels") or {}).items()
    return sorted(_name(n) for n in nodes if all(_labels(n).get(k) == v for k, v in wanted))


def _flavors_table(o: Observed) -> list[str]:
    """One block per topology profile (its Kueue Topology and levels), the profile's flavors below."""
    levels = {
        _name(t): [str(lv.get("nodeLabel")) for lv in (t.get("spec") or {}).get("levels") or ()]
        for t in o.topologies
    }
    queue_of = _flavor_queues(o.queues)
    by_topology: dict[str, list[Mapping[str, Any]]] = {}
    for flavor in o.flavors:
        by_topology.setdefault(str((flavor.get("spec") or {}).get("topologyName") or ""), []).append(flavor)
    out: list[str] = []
    for topology, flavors in sorted(by_topology.items()):
        if topology:
            profile = topology.removeprefix("gpustack-")
            path = " > ".join(_short(lv) for lv in levels.get(topology, ())) or "?"
            out.append(f"profile {profile}: {path} (Kueue Topology {topology})")
        else:
            out.append("no topology profile (no Kueue Topology)")
        rows = [
            (_name(f), queue_of.get(_name(f), "-"), ",".join(_selected_nodes(f, o.nodes)) or "-")
            for f in sorted(flavors, key=_name)
        ]
        out += ["  " + line for line in table(("FLAVOR", "QUEUE", "NODES"), rows)]
    return out


def _queues_table(o: Observed) -> list[str]:
    rows = []
    for q in sorted(o.queues, key=_name):
        spec, status = q.get("spec") or {}, q.get("status") or {}
        checks = ((spec.get("admissionChecksStrategy") or {}).get("admissionChecks")) or ()
        topo = condition(q, keys.TOPOLOGY_READY)
        rows.append(
            (
                _name(q),
                spec.get("stopPolicy", "None"),
                _status(q, "Active"),
                f"{topo.get('status', '?')} {topo.get('reason', '')}".strip(),
                status.get("admittedWorkloads", 0),
                status.get("reservingWorkloads", 0),
                status.get("pendingWorkloads", 0),
                ",".join(str(c.get("name")).removeprefix("gpustack-") for c in checks) or "-",
            )
        )
    return table(
        (
            "QUEUE (ClusterQueue)",
            "STOP POLICY",
            "ACTIVE",
            "TOPOLOGYREADY",
            "ADMITTED",
            "RESERVING",
            "PENDING",
            "CHECKS",
        ),
        rows,
    )


def _deployments_table(o: Observed) -> list[str]:
    rows = []
    for md in sorted(o.deployments, key=_name):
        for role in (md.get("spec") or {}).get("roles") or ():
            got = _roles(md).get(str(role["name"])) or {}
            rows.append(
                (
                    f"{md['metadata'].get('namespace')}/{_name(md)}",
                    role["name"],
                    f"{role.get('replicas', 1)} x {role.get('size', 1)}",
                    f"{got.get('admittedReplicas', 0)}/{role.get('replicas', 1)}",
                    got.get("message", ""),
                )
            )
    return table(("MODELDEPLOYMENT", "ROLE", "REPLICAS x PODS", "ADMITTED", "STATUS MESSAGE"), rows)


def _placed_on(wl: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> str:
    """Where Kueue's topology assignment puts the Workload's Pods (``t4-1 x2``), and whether
    kube-scheduler has bound them there yet (``bound``) or only the quota is reserved (``reserved``)."""
    hosts: Counter[str] = Counter()
    for psa in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or ():
        if not psa.get("topologyAssignment"):
            continue
        try:
            levels, domains = decode_topology_assignment(psa["topologyAssignment"])
        except ValueError:
            return "?"
        for domain in domains:
            values = dict(zip(levels, domain.values, strict=True))
            hosts[values.get(keys.HOSTNAME) or "/".join(domain.values)] += domain.pods
    if not hosts:
        return "-"
    mine = [p for p in pods if _labels(p).get(keys.POD_GROUP_NAME) == _name(wl)]
    bound = bool(mine) and all(p["spec"].get("nodeName") for p in mine)
    where = ",".join(f"{host} x{count}" for host, count in sorted(hosts.items()))
    return f"{where} ({'bound' if bound else 'reserved'})"


def _workloads_table(o: Observed) -> list[str]:
    md_of = {str(md["metadata"].get("uid")): _name(md) for md in o.deployments}
    role_of: dict[str, str] = {}
    for pod in o.pods:
        labels = _labels(pod)
        group = labels.get(keys.POD_GROUP_NAME)
        if group:
            md = md_of.get(labels.get(keys.MODEL_DEPLOYMENT_UID, ""), "?")
            role_of[group] = f"{md}/{labels.get(keys.MODEL_DEPLOYMENT_ROLE, '?')}"
    rows = []
    for wl in sorted(o.workloads, key=lambda w: (role_of.get(_name(w), "~"), _name(w))):
        state, reason = workload_state(wl)
        rows.append(
            (
                _name(wl),
                role_of.get(_name(wl), "-"),
                state,
                _placed_on(wl, o.pods),
                reason,
            )
        )
    return table(("WORKLOAD", "DEPLOYMENT/ROLE", "STATE", "PLACED ON", "WHY (Kueue / admission check)"), rows)


def summary(o: Observed) -> str:
    """Every table, each under a title."""
    sections = [
        ("Topology", _sources_table(o)),
        ("Nodes", _nodes_table(o)),
        ("Pools, with their four-view (exclusive/shared/sliced/partitioned)", _pools_table(o)),
        ("Flavors per topology profile", _flavors_table(o)),
        ("Queues", _queues_table(o)),
        ("ModelDeployments", _deployments_table(o)),
        ("Workloads", _workloads_table(o)),
    ]
    out: list[str] = []
    for title, lines in sections:
        out += ["", f"== {title}", *lines]
    if o.extra:
        out += ["", *(f"{k}: {v}" for k, v in o.extra.items())]
    return "\n".join(out).lstrip("\n")


def explore_commands(kubeconfig: str) -> list[str]:
    """How to look around the running demo cluster."""
    levels = ",".join((keys.PRIVATE_ZONE, keys.PRIVATE_RACK, keys.TOPOLOGY_PROFILE))
    return [
        f"export KUBECONFIG={kubeconfig}",
        "kubectl get topologysources",
        f"kubectl get nodes -L {levels}",
        "kubectl get instancetypes",
        "kubectl get resourceflavors,topologies.kueue.x-k8s.io",
        "kubectl get clusterqueues",
        f"kubectl -n {NAMESPACE} get modeldeployments,workloads",
        "gpustack-worker explain node t4-1",
        f"gpustack-worker explain modeldeployment {NAMESPACE}/disagg",
        f"gpustack-worker explain modeldeployment {NAMESPACE}/chat",
    ]
