"""Preflight in the install order: is the cluster before the chart's install, or after it?

The README's order is ``preflight`` → ``plan --from-cluster`` → ``helm install``. Before the install, the
checks the chart itself satisfies — our CRDs (``crds``, ``devices-api``, a *missing* CRD in
``crd-schemas``), the system namespace, the settings ConfigMap, the webhook registration, the
ServiceAccounts' RBAC (each :attr:`~.preflighting.Result.chart`) — are reported as ``installs with the
chart``, which passes; after it they are failures like any other.

Which side the cluster is on (:func:`decide`):

- ``--before-install`` / ``--after-install`` force it;
- otherwise (automatic) it is *before* exactly when **none** of the chart's own objects exists
  (:func:`release_objects`: the two webhook configurations, the ClusterRoles and ClusterRoleBindings of
  ``api/rbac.py``'s components and the tenants' roles, and in the system namespace their ServiceAccounts,
  Roles, RoleBindings, the settings and reference Kueue ConfigMaps, the webhook Service and Secret, the
  controller Deployment and the agent DaemonSet — under the chart's default names, as the RBAC check
  assumes). One of them present is a release at least partly installed: *after*, so a half-finished
  install shows its failures instead of passing as "installs with the chart". The CRDs and the namespace
  are no evidence: both are routinely made before the install (``kubectl apply -f manifests/crds/``,
  ``kubectl create namespace``) and Helm neither owns nor deletes them.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import kinds, rbac, webhooks
from gpustack_worker.cli.preflight import preflighting
from gpustack_worker.cli.preflight.preflighting import Outcome, Result
from gpustack_worker.runtime.resources import Resource

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = (
    "Decision",
    "ReleaseObject",
    "Stage",
    "decide",
    "install_command",
    "judged",
    "payload",
    "release_objects",
    "render_text",
)


class Stage(enum.StrEnum):
    BEFORE = "before-install"
    AFTER = "after-install"


_ADMISSION: Final = "admissionregistration.k8s.io"
_RBAC: Final = "rbac.authorization.k8s.io"
VALIDATING: Final = Resource(
    _ADMISSION, "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", namespaced=False
)
MUTATING: Final = Resource(
    _ADMISSION, "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", namespaced=False
)
CLUSTER_ROLE: Final = Resource(_RBAC, "v1", "ClusterRole", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDING: Final = Resource(
    _RBAC, "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False
)
ROLE: Final = Resource(_RBAC, "v1", "Role", "roles", namespaced=True)
ROLE_BINDING: Final = Resource(_RBAC, "v1", "RoleBinding", "rolebindings", namespaced=True)
SERVICE_ACCOUNT: Final = Resource("", "v1", "ServiceAccount", "serviceaccounts", namespaced=True)
SERVICE: Final = Resource("", "v1", "Service", "services", namespaced=True)
DEPLOYMENT: Final = Resource("apps", "v1", "Deployment", "deployments", namespaced=True)
DAEMON_SET: Final = Resource("apps", "v1", "DaemonSet", "daemonsets", namespaced=True)
#: The chart's reference copy of Kueue's configuration (``chart/templates/kueue-manager-config.yaml``).
KUEUE_REFERENCE_CONFIGMAP: Final = "gpustack-kueue-manager-config"


@dataclass(frozen=True, slots=True)
class ReleaseObject:
    """One object the chart creates, under its default name."""

    resource: Resource
    name: str
    namespace: str = ""

    def describe(self) -> str:
        return f"{self.resource.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


def release_objects(*, namespace: str, settings_configmap: str) -> list[ReleaseObject]:
    """The chart's objects whose presence says an install has (at least partly) happened."""
    out = [
        ReleaseObject(VALIDATING, webhooks.VALIDATING_CONFIGURATION),
        ReleaseObject(MUTATING, webhooks.MUTATING_CONFIGURATION),
    ]
    for component in rbac.COMPONENTS:
        out += [
            ReleaseObject(CLUSTER_ROLE, component.name),
            ReleaseObject(CLUSTER_ROLE_BINDING, component.name),
            ReleaseObject(SERVICE_ACCOUNT, component.name, namespace),
            ReleaseObject(ROLE, component.name, namespace),
            ReleaseObject(ROLE_BINDING, component.name, namespace),
        ]
    out += [ReleaseObject(CLUSTER_ROLE, tenant.name) for tenant in (rbac.TENANT_VIEW, rbac.TENANT_EDIT)]
    out += [
        ReleaseObject(kinds.CONFIG_MAP, settings_configmap, namespace),
        ReleaseObject(kinds.CONFIG_MAP, KUEUE_REFERENCE_CONFIGMAP, namespace),
        ReleaseObject(SERVICE, webhooks.SERVICE_NAME, namespace),
        ReleaseObject(kinds.SECRET, webhooks.CERT_SECRET, namespace),
        ReleaseObject(DEPLOYMENT, rbac.CONTROLLER.name, namespace),
        ReleaseObject(DAEMON_SET, rbac.AGENT.name, namespace),
    ]
    return out


def install_command(namespace: str) -> str:
    return f"helm install gpustack-worker ./chart -n {namespace} --create-namespace"


@dataclass(frozen=True, slots=True)
class Decision:
    """Which side of the install the checks are judged on, and why."""

    stage: Stage
    #: ``True``: ``--before-install``/``--after-install`` chose it.
    forced: bool
    #: The chart's objects found (:meth:`ReleaseObject.describe`).
    present: tuple[str, ...]
    #: How many were looked for.
    looked_for: int

    def describe(self) -> str:
        found = len(self.present)
        some = ", ".join(self.present[: preflighting.SHOWN]) + (
            f", +{found - preflighting.SHOWN} more" if found > preflighting.SHOWN else ""
        )
        if self.forced:
            seen = f"{found} of the chart's {self.looked_for} objects exist" if found else "none exists"
            return f"{self.stage.value} (--{self.stage.value}; {seen})"
        if self.stage is Stage.BEFORE:
            return f"{self.stage.value} (automatic: none of the chart's {self.looked_for} objects exists)"
        if found == self.looked_for:
            return f"{self.stage.value} (automatic: all {found} of the chart's objects exist)"
        return (
            f"{self.stage.value} (automatic: {found} of the chart's {self.looked_for} objects exist "
            f"({some}): a partial install is judged as installed — finish it with helm upgrade, or "
            "helm uninstall and start again)"
        )


def decide(present: Sequence[str], *, looked_for: int, forced: Stage | None) -> Decision:
    """``forced`` when given; else before the install exactly when no object of the chart exists."""
    if forced is not None:
        return Decision(forced, True, tuple(present), looked_for)
    return Decision(Stage.AFTER if present else Stage.BEFORE, False, tuple(present), looked_for)


def judged(results: Sequence[Result], decision: Decision) -> list[Result]:
    """Before the install, a failure the chart repairs is ``installs with the chart`` (its fix is the
    install itself, said once below the table); after it, every result stands."""
    if decision.stage is Stage.AFTER:
        return list(results)
    return [
        dataclasses.replace(r, outcome=Outcome.INSTALLS, fix="")
        if r.outcome is Outcome.FAIL and r.chart
        else r
        for r in results
    ]


def render_text(results: Sequence[Result], decision: Decision, *, namespace: str, verbose: bool) -> str:
    """The stage line, the table, and (when some check installs with the chart) what to run next."""
    text = f"install stage: {decision.describe()}\n" + preflighting.render_text(results, verbose=verbose)
    installs = sum(r.outcome is Outcome.INSTALLS for r in results)
    if installs:
        text += (
            f"{installs} check(s) install with the chart: {install_command(namespace)}, then run preflight "
            "again (it judges them as installed once any of the chart's objects exists)\n"
        )
    return text


def payload(results: Sequence[Result], decision: Decision) -> dict[str, Any]:
    """:func:`preflighting.payload` plus ``stage``: ``{stage, forced, present, lookedFor}``."""
    return {
        **preflighting.payload(results),
        "stage": {
            "stage": decision.stage.value,
            "forced": decision.forced,
            "present": list(decision.present),
            "lookedFor": decision.looked_for,
        },
    }
