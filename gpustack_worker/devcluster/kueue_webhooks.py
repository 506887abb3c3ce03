"""Kueue's own admission webhooks, registered in the local control plane by URL.

In a cluster, Kueue's webhooks sit behind the ``kueue-webhook-service`` Service and every ClusterQueue,
ResourceFlavor, Cohort, Workload (and Pod/Job of a managed namespace) is defaulted and validated by them.
Here there is no Service network: Kueue serves its webhooks on 127.0.0.1 (``webhook.host/port/certDir`` of its
configuration, with the dev cluster's serving certificate, valid for 127.0.0.1), and this module registers
Kueue's upstream ``MutatingWebhookConfiguration`` and ``ValidatingWebhookConfiguration``
(``config/components/webhook/manifests.yaml`` of the pinned Kueue module) rewritten as ``config/default`` and
Kueue's Helm chart install them, except for how the API server reaches them:

* names: ``kueue-mutating-webhook-configuration`` / ``kueue-validating-webhook-configuration`` (Kueue's
  ``namePrefix``; never a ``gpustack-worker-*`` name, which the chain's own webhooks will use);
* ``clientConfig``: ``url: https://127.0.0.1:<port><path>`` and the dev cluster CA as ``caBundle``, instead of
  the Service reference;
* every webhook of a job integration (anything outside ``kueue.x-k8s.io``, Pods included) gets the
  ``managedJobsNamespaceSelector`` of Kueue's configuration as its ``namespaceSelector`` — upstream's
  kustomize patch and Helm chart do the same (ours: not ``kube-system``, Kueue's namespace or the worker's
  ``gpustack-system``; :func:`~gpustack_worker.api.kueue_config.managed_jobs_namespace_selector`); Pods
  without a queue name in other namespaces are passed through untouched by Kueue itself
  (``manageJobsWithoutQueueName: false``);
* the Pod, Deployment and StatefulSet webhooks are ``failurePolicy: Ignore`` when their integration is not
  enabled (as Kueue's Helm chart renders them); every other webhook keeps upstream's ``Fail``.

Ordering: Kueue answers ``/readyz`` only once its webhook server listens; the harness registers the
configurations after that and then waits (:func:`served`, polled) until the API server really calls
both — a dry-run ClusterQueue comes back with Kueue's finalizer (mutating) and an invalid one is refused
with Kueue's message (validating) — so the dev cluster counts as started only when Kueue's validation is
in force.
"""

from __future__ import annotations

import base64
import copy
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.devcluster import build, versions
from gpustack_worker.devcluster.bootstrap import load_yaml_documents

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap

__all__ = (
    "KUEUE_FINALIZER",
    "NAME_PREFIX",
    "UPSTREAM_MANIFESTS",
    "probe",
    "register",
    "served",
    "upstream_documents",
    "webhook_configurations",
)

#: Kueue's webhook manifests inside its Go module.
UPSTREAM_MANIFESTS: Final = "config/components/webhook/manifests.yaml"
#: ``config/default``'s kustomize ``namePrefix`` (the Helm chart's ``kueue.fullname`` is ``kueue`` too).
NAME_PREFIX: Final = "kueue-"
KUEUE_GROUP: Final = "kueue.x-k8s.io"
#: Added by Kueue's mutating ClusterQueue and ResourceFlavor webhooks on create.
KUEUE_FINALIZER: Final = "kueue.x-k8s.io/resource-in-use"
#: Webhooks on built-in kinds whose ``failurePolicy`` follows the integration (Kueue's Helm chart rule).
_BUILTIN_FRAMEWORKS: Final[dict[tuple[str, str], str]] = {
    ("", "pods"): "pod",
    ("apps", "deployments"): "deployment",
    ("apps", "statefulsets"): "statefulset",
}
_KINDS: Final = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}
_ADMISSION_API: Final = "/apis/admissionregistration.k8s.io/v1"
_PROBE_NAME: Final = "devcluster-kueue-webhook-probe"


def upstream_documents() -> list[dict[str, Any]]:
    """The two webhook configurations of the pinned Kueue module, as upstream writes them."""
    path: Path = build.module_dir("sigs.k8s.io/kueue", versions.KUEUE) / UPSTREAM_MANIFESTS
    return [d for d in load_yaml_documents([path]) if d.get("kind") in _KINDS]


def _targets(webhook: Mapping[str, Any]) -> set[tuple[str, str]]:
    return {
        (str(group), str(resource).split("/", 1)[0])
        for rule in webhook.get("rules") or ()
        for group in rule.get("apiGroups") or ()
        for resource in rule.get("resources") or ()
    }


def webhook_configurations(
    upstream: Iterable[Mapping[str, Any]], *, base_url: str, ca_bundle: bytes, config: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Upstream's webhook configurations, rewritten to call Kueue at ``base_url`` (see the module docstring).

    ``config`` is Kueue's ``Configuration`` (its ``integrations.frameworks`` and
    ``managedJobsNamespaceSelector``). Pure: no I/O.
    """
    frameworks = set((config.get("integrations") or {}).get("frameworks") or ())
    selector = config.get("managedJobsNamespaceSelector")
    if selector is None:
        raise ValueError("Kueue's configuration has no managedJobsNamespaceSelector")
    ca = base64.b64encode(ca_bundle).decode()
    out: list[dict[str, Any]] = []
    for doc in upstream:
        if doc.get("kind") not in _KINDS:
            continue
        new = copy.deepcopy(dict(doc))
        meta = new.setdefault("metadata", {})
        meta["name"] = NAME_PREFIX + str(meta["name"])
        meta.setdefault("labels", {})["app.kubernetes.io/name"] = "kueue"
        for webhook in new.get("webhooks") or ():
            path = (webhook.get("clientConfig") or {}).get("service", {}).get("path")
            if not path:
                raise ValueError(f"webhook {webhook.get('name')} has no service path in Kueue's manifests")
            webhook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": ca}
            targets = _targets(webhook)
            if any(group != KUEUE_GROUP for group, _ in targets):
                webhook["namespaceSelector"] = copy.deepcopy(selector)
            gated = {_BUILTIN_FRAMEWORKS[t] for t in targets if t in _BUILTIN_FRAMEWORKS}
            if gated and not gated & frameworks:
                webhook["failurePolicy"] = "Ignore"
        out.append(new)
    return out


def register(api: ApiBootstrap, documents: Iterable[Mapping[str, Any]]) -> list[str]:
    """Create each webhook configuration, or replace an existing one of the same name; returns the names."""
    names = []
    for doc in documents:
        collection = f"{_ADMISSION_API}/{_KINDS[str(doc['kind'])]}"
        name = str(doc["metadata"]["name"])
        resp = api.request("POST", collection, doc)
        if resp.status_code == 409:
            current = api.request("GET", f"{collection}/{name}")
            current.raise_for_status()
            body = copy.deepcopy(dict(doc))
            body["metadata"]["resourceVersion"] = current.json()["metadata"]["resourceVersion"]
            resp = api.request("PUT", f"{collection}/{name}", body)
        if not resp.is_success:
            raise RuntimeError(
                f"registering {doc['kind']} {name}: HTTP {resp.status_code}: {resp.text[:500]}"
            )
        names.append(name)
    return names


def _probe_queue(resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": _PROBE_NAME},
        "spec": {
            "resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [{"name": _PROBE_NAME, "resources": resources}]}
            ]
        },
    }


def probe(api: ApiBootstrap) -> tuple[bool, bool]:
    """Whether the API server calls Kueue's (mutating, validating) webhooks right now.

    Two dry-run ClusterQueue creates, nothing stored: a valid one must come back with Kueue's finalizer, and
    one whose quota names another resource than its ``coveredResources`` (a rule only Kueue's webhook
    checks; the CRD schema checks only the count) must be refused by ``vclusterqueue.kb.io``.
    """
    path = f"/apis/{KUEUE_GROUP}/v1beta2/clusterqueues?dryRun=All"
    good = api.request("POST", path, _probe_queue([{"name": "cpu", "nominalQuota": "1"}]))
    mutating = good.is_success and KUEUE_FINALIZER in (
        good.json().get("metadata", {}).get("finalizers") or ()
    )
    bad = api.request("POST", path, _probe_queue([{"name": "memory", "nominalQuota": "1"}]))
    validating = not bad.is_success and "vclusterqueue.kb.io" in bad.text and "coveredResources" in bad.text
    return mutating, validating


def served(api: ApiBootstrap) -> bool:
    """One readiness check for a poll loop: True once both kinds of Kueue webhook are in force."""
    return all(probe(api))
