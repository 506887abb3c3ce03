"""What each component may do in the API, as data: the one source of our RBAC.

``python -m gpustack_worker.api.rbacgen`` renders these rules into ``manifests/rbac/*.yaml`` (what the
dev cluster installs and the end-to-end tests run under) and into the chart's
``chart/templates/rbac-*.yaml``; ``tests/api/test_rbacgen.py`` fails when either is stale. Each
component gets a ServiceAccount in the system namespace and, named like it, a ClusterRole +
ClusterRoleBinding for its cluster-scoped rules and a Role + RoleBinding in each namespace it touches.

Every verb granted here is either used by the code during the end-to-end RBAC test
(``tests/api/test_rbac_cluster.py`` runs the agent and the controller as their ServiceAccounts and reads
the API server's audit log) or listed in the component's :attr:`Component.not_exercised` with the reason
it exists and when it is used. Anything else is an excess permission and fails that test; a verb the
code uses that is not granted fails it too (403 in the audit log). When a controller is added, its
rules go into its component here, and the test proves them.

A ``patch`` that creates the object (server-side apply of a new object) is authorized as ``patch`` and
``create``: the audit log records it as a ``patch`` answered 201, which the test counts as both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from gpustack_worker.api import kinds

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpustack_worker.runtime.resources import Resource

__all__ = (
    "AGENT",
    "COMPONENTS",
    "CONTROLLER",
    "EVENTS_NAMESPACE",
    "NAME_PREFIX",
    "SYSTEM",
    "TENANT_EDIT",
    "TENANT_ROLES",
    "TENANT_VIEW",
    "Component",
    "Rule",
    "TenantRole",
)

#: Stands for the system namespace: ``gpustack-system`` in ``manifests/``, ``.Values.systemNamespace`` in
#: the chart.
SYSTEM: Final = "<system>"
#: Where Events about cluster-scoped objects (Nodes, Devices) must be written: the API server requires
#: an Event's namespace to be its ``regarding`` object's, and ``default`` for cluster-scoped ones.
EVENTS_NAMESPACE: Final = "default"
#: Every name below starts with it; the chart replaces it with its ``gpustack-worker.fullname`` helper
#: (``fullnameOverride``), the manifests keep it.
NAME_PREFIX: Final = "gpustack-worker"


@dataclass(frozen=True, slots=True)
class Rule:
    """Verbs on one resource (optionally one subresource), with the reason they are granted."""

    resource: Resource
    verbs: tuple[str, ...]
    why: str
    subresource: str = ""

    @property
    def api_group(self) -> str:
        return self.resource.group

    @property
    def resource_path(self) -> str:
        """``plural`` or ``plural/subresource``, as RBAC names it."""
        plural = self.resource.plural
        return f"{plural}/{self.subresource}" if self.subresource else plural


@dataclass(frozen=True, slots=True)
class Component:
    """One process' identity and permissions."""

    #: Name of its ServiceAccount, ClusterRole, Role(s) and bindings.
    name: str
    #: Short name: the generated files are ``manifests/rbac/<key>.yaml`` and ``rbac-<key>.yaml``.
    key: str
    cluster: tuple[Rule, ...] = ()
    #: Namespace (:data:`SYSTEM`, :data:`EVENTS_NAMESPACE`, ...) → rules of a Role there.
    namespaced: Mapping[str, tuple[Rule, ...]] = field(default_factory=dict)
    #: ``(namespace or "" for cluster, apiGroup, resource_path, verb)`` → why it is granted although
    #: the end-to-end RBAC test does not exercise it.
    not_exercised: Mapping[tuple[str, str, str, str], str] = field(default_factory=dict)
    #: Same key → why the end-to-end RBAC test may or may not exercise it (it depends on timing there, e.g.
    #: whether the chain prunes a flavor of the node the test deletes): exempt from both checks.
    sometimes_exercised: Mapping[tuple[str, str, str, str], str] = field(default_factory=dict)

    def grants(self) -> set[tuple[str, str, str, str]]:
        """Every ``(namespace or "", apiGroup, resource_path, verb)`` this component is granted."""
        out = {("", r.api_group, r.resource_path, v) for r in self.cluster for v in r.verbs}
        for namespace, rules in self.namespaced.items():
            out |= {(namespace, r.api_group, r.resource_path, v) for r in rules for v in r.verbs}
        return out


_SETTINGS_EVENTS: Final = "a Warning Event on the settings ConfigMap when a revision is rejected"
_SETTINGS_EVENTS_LEADER: Final = (
    "Events on the settings ConfigMap: a Warning when a revision is rejected, a Normal SettingsApplied when "
    "a later one is accepted"
)

AGENT: Final = Component(
    name=f"{NAME_PREFIX}-agent",
    key="agent",
    cluster=(
        Rule(
            kinds.NODE,
            ("list", "watch", "patch"),
            "informer of its Node(s); server-side apply of the fit/identity labels, annotations and taints",
        ),
        Rule(kinds.NODE, ("patch",), "server-side apply of the counting capacities", subresource="status"),
        Rule(kinds.DEVICES, ("list", "watch"), "informer of its node's Devices (the Device Manager's)"),
    ),
    namespaced={
        SYSTEM: (
            Rule(
                kinds.NODE_FEATURE,
                ("list", "watch", "create", "patch", "delete"),
                "its nodes' NodeFeatures: informer, server-side apply (create on first apply), removal once "
                "the Node is gone",
            ),
            Rule(kinds.CONFIG_MAP, ("list", "watch"), "the live settings ConfigMap"),
            Rule(kinds.EVENT, ("create",), _SETTINGS_EVENTS),
        ),
        EVENTS_NAMESPACE: (
            Rule(
                kinds.EVENT,
                ("create", "patch"),
                "Warning Events about its Nodes and Devices (invalid input, a rejected apply), "
                "de-duplicated into series",
            ),
        ),
    },
    not_exercised={
        (EVENTS_NAMESPACE, kinds.EVENT.group, kinds.EVENT.plural, "patch"): (
            "an Event series is patched only when the same warning recurs (its count) after the first "
            "was written; the agent reports a finding once while it persists"
        ),
    },
)

_PRUNE: Final = (
    "pruning: deleted (UID precondition) only when the chain no longer wants an object it created — "
    "a pool's last node left, a profile changed, a queue went away; the RBAC test deletes a node, and "
    "whether that prunes a flavor depends on what the chain had built for it by then"
)

_REREAD: Final = (
    "a finalizer's compare-and-swap re-reads the object once when another writer changed the list between "
    "our read and our patch (422): whether that race happens in a run is up to timing"
)

CONTROLLER: Final = Component(
    name=f"{NAME_PREFIX}-controller",
    key="controller",
    cluster=(
        Rule(kinds.NODE, ("list", "watch", "patch"), "chain informer; apply of the profile label"),
        Rule(
            kinds.DEVICES,
            ("list", "watch", "patch"),
            "InstanceType status views read the ledgers; the profile label is mirrored onto each",
        ),
        Rule(
            kinds.TOPOLOGY_SOURCE,
            ("get", "list", "watch", "patch"),
            "TopologySource informer; its finalizer (JSON patch; a failed test re-reads the object once)",
        ),
        Rule(kinds.TOPOLOGY_SOURCE, ("patch",), "status: conditions, revision, counts", subresource="status"),
        Rule(kinds.NAMESPACE, ("list", "watch"), "a LocalQueue per selected namespace"),
        Rule(
            kinds.RESOURCE_FLAVOR,
            ("list", "watch", "create", "patch", "delete"),
            "capacity flavors: apply (create on first apply), replace on an immutable change, prune",
        ),
        Rule(
            kinds.TOPOLOGY,
            ("list", "watch", "create", "patch", "delete"),
            "the Kueue Topology of each profile: server-side apply, prune once unreferenced",
        ),
        Rule(
            kinds.CLUSTER_QUEUE,
            ("list", "watch", "create", "patch", "delete"),
            "one queue per InstanceType: server-side apply, HoldAndDrain patch, teardown delete",
        ),
        Rule(kinds.CLUSTER_QUEUE, ("patch",), "the TopologyReady condition", subresource="status"),
        Rule(
            kinds.INSTANCE_TYPE,
            ("get", "list", "watch", "create", "patch"),
            "create-only authoring; finalizer (a failed JSON-patch test re-reads the object once) and the "
            "sticky inactive backfill",
        ),
        Rule(kinds.INSTANCE_TYPE, ("patch",), "status: phase, entrance, views", subresource="status"),
        Rule(
            kinds.LOCAL_QUEUE,
            ("list", "watch", "create", "patch", "delete"),
            "LocalQueues in every namespace: server-side apply, prune with their queue",
        ),
        Rule(kinds.ADMISSION_CHECK, ("list", "watch", "create", "patch"), "the two AdmissionChecks"),
        Rule(
            kinds.ADMISSION_CHECK,
            ("patch",),
            "each check's controller marks its AdmissionCheck Active",
            subresource="status",
        ),
        Rule(
            kinds.MODEL_DEPLOYMENT,
            ("list", "watch"),
            "ModelDeployment informer: role replicas as pod groups, the joint check's sets",
        ),
        Rule(
            kinds.MODEL_DEPLOYMENT,
            ("patch",),
            "status: role replicas and Kueue's message; the joint check's QuotaReserved condition and hold",
            subresource="status",
        ),
        Rule(
            kinds.MODEL_DEPLOYMENT,
            ("update",),
            "controller ownerReferences with blockOwnerDeletion on the Pods (clusters that enforce the "
            "OwnerReferencesPermissionEnforcement admission plugin check update on finalizers)",
            subresource="finalizers",
        ),
        Rule(
            kinds.POD,
            ("list", "watch", "create", "delete"),
            "role replica Pods (create-only: Pods are immutable), deleted when a replica goes or its "
            "render changes; Gate 3 reads the Pods bound to a node",
        ),
        Rule(
            kinds.WORKLOAD,
            ("list", "watch", "patch"),
            "the pod groups' Workloads: status messages, the joint set, Gate 3's inflight accounting; the "
            "joint check parks a set (spec.active=false: Kueue releases its quota) and retries it",
        ),
        Rule(
            kinds.WORKLOAD,
            ("patch",),
            "the joint check's and Gate 3's admissionChecks entries (server-side apply)",
            subresource="status",
        ),
        Rule(
            kinds.EVENT,
            ("create",),
            "Warning Events on a ModelDeployment in its namespace: a role that does not render (once per "
            "generation), a set the joint check parks",
        ),
        Rule(kinds.NODE_MODEL_STORE, ("list", "watch"), "node-delivered model placement: who holds a digest"),
        Rule(kinds.CSI_NODE, ("list", "watch"), "node-delivered placement: who mounts the model driver"),
    ),
    sometimes_exercised={
        ("", kinds.RESOURCE_FLAVOR.group, kinds.RESOURCE_FLAVOR.plural, "delete"): _PRUNE,
        ("", kinds.TOPOLOGY.group, kinds.TOPOLOGY.plural, "delete"): _PRUNE,
        ("", kinds.LOCAL_QUEUE.group, kinds.LOCAL_QUEUE.plural, "delete"): _PRUNE,
        ("", kinds.INSTANCE_TYPE.group, kinds.INSTANCE_TYPE.plural, "get"): _REREAD,
        ("", kinds.TOPOLOGY_SOURCE.group, kinds.TOPOLOGY_SOURCE.plural, "get"): _REREAD,
    },
    not_exercised={
        ("", kinds.CLUSTER_QUEUE.group, kinds.CLUSTER_QUEUE.plural, "delete"): (
            "InstanceType teardown deletes its queue; the RBAC test deletes no InstanceType"
        ),
        ("", kinds.MODEL_DEPLOYMENT.group, f"{kinds.MODEL_DEPLOYMENT.plural}/finalizers", "update"): (
            "authorizes blockOwnerDeletion on the role Pods where OwnerReferencesPermissionEnforcement runs; "
            "the local control plane does not enable that plugin, so no request is made for it"
        ),
        ("", kinds.POD.group, kinds.POD.plural, "delete"): (
            "a replica scaled away or re-rendered; tests/placement cover it in the pure plan (no kubelet "
            "and no garbage collector run locally, so the RBAC test creates no ModelDeployment to shrink)"
        ),
        ("", kinds.WORKLOAD.group, kinds.WORKLOAD.plural, "patch"): (
            "only a set parked after 30 minutes (or retried) is written; the RBAC test waits for none — "
            "tests/placement/test_joint_cluster.py parks and retries one under this role"
        ),
        (SYSTEM, kinds.NODE_FEATURE.group, kinds.NODE_FEATURE.plural, "update"): (
            "a topology NodeFeature someone edited by adding a key is replaced as a whole (server-side apply "
            "cannot remove another manager's key); tests/topology/test_topology_cluster.py repairs one"
        ),
    },
    namespaced={
        SYSTEM: (
            Rule(kinds.LEASE, ("get", "create", "update"), "leader election on the Lease"),
            Rule(
                kinds.CONFIG_MAP,
                ("list", "watch"),
                "the live settings ConfigMap; TopologySource snapshots and webhook CA bundles",
            ),
            Rule(kinds.SECRET, ("list", "watch"), "TopologySource webhook credentials (token, client cert)"),
            Rule(
                kinds.NODE_FEATURE,
                ("list", "watch", "create", "patch", "update", "delete"),
                "a writing TopologySource's NodeFeatures: apply (create on first apply), replace an edited "
                "one as a whole (a key another manager added), delete on omission, conflict, expiry",
            ),
            Rule(kinds.EVENT, ("create",), _SETTINGS_EVENTS_LEADER),
        ),
    },
)

#: Every component, in the order the files are generated.
COMPONENTS: Final = (AGENT, CONTROLLER)


@dataclass(frozen=True, slots=True)
class TenantRole:
    """A ClusterRole for the people who use the worker, not a process: it grants nothing by itself and is
    aggregated into Kubernetes' user-facing roles (``view``/``edit``/``admin``) through the
    ``rbac.authorization.k8s.io/aggregate-to-<role>`` labels, so a RoleBinding to ``edit`` in a namespace
    lets a tenant manage ModelDeployments there. Not part of the audit-log test (no process uses it)."""

    name: str
    key: str
    #: The user-facing roles it is aggregated into.
    aggregate_to: tuple[str, ...]
    rules: tuple[Rule, ...]


#: Read a namespace's ModelDeployments and their status (``view``, and so ``edit`` and ``admin``).
TENANT_VIEW: Final = TenantRole(
    name=f"{NAME_PREFIX}-view",
    key="view",
    aggregate_to=("view", "edit", "admin"),
    rules=(
        Rule(kinds.MODEL_DEPLOYMENT, ("get", "list", "watch"), "tenants read their model deployments"),
        Rule(
            kinds.MODEL_DEPLOYMENT,
            ("get",),
            "and their progress (roles' replicas, the joint check's hold)",
            subresource="status",
        ),
    ),
)
#: Create, change and delete them (``edit`` and ``admin``); the status stays the controller's.
TENANT_EDIT: Final = TenantRole(
    name=f"{NAME_PREFIX}-edit",
    key="edit",
    aggregate_to=("edit", "admin"),
    rules=(
        Rule(
            kinds.MODEL_DEPLOYMENT,
            ("create", "update", "patch", "delete", "deletecollection"),
            "tenants deploy, scale, retry (annotation) and remove their models",
        ),
    ),
)
#: Every tenant role, in the order they are generated (one file: ``tenants.yaml``, ``rbac-tenants.yaml``).
TENANT_ROLES: Final = (TENANT_VIEW, TENANT_EDIT)
