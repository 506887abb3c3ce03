"""Put a shared control plane back to its baseline between test modules.

The session's control plane serves every module that needs nothing special of it; a module whose test
reads every Node (the chain builds pools from all of them) starts from the baseline instead of a
control plane of its own. :func:`snapshot` records every object the API server serves right after start
(found through discovery, so a kind nobody listed is not forgotten); :func:`reset` deletes everything
made since and restores what was changed:

- **Made since**: deleted (Background propagation). One still there after its delete because of a
  finalizer (Kueue's on queues and flavors, ours on InstanceTypes and ModelDeployments, Kueue's on Pods)
  has its finalizers dropped: nothing that would act on them needs to. Workload kinds go first, then
  what they refer to, webhook configurations before anything a webhook might refuse to delete, and
  namespaces last — finalized through ``/finalize`` (the dev cluster runs no namespace controller, which
  would otherwise finish a namespace's deletion).
- **Changed since** (a CRD's schema patched, the settings ConfigMap written, a baseline Node labelled):
  replaced with the baseline's content, its status too where the kind has one that tests write (Nodes).
- **Deleted since**: created again from the baseline's content.

Churning kinds are left alone (:data:`_CHURN`): Events, Leases (the scheduler's and Kueue's leader
election), Endpoints and EndpointSlices (the API server's own). :func:`leftovers` is the check that a
reset left nothing behind; ``tests/kit/test_reset_cluster.py`` runs it after a module-sized mess.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from tests.kit.waiting import eventually_sync

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    import httpx

    from gpustack_worker.devcluster.bootstrap import ApiBootstrap

__all__ = ("Baseline", "Resource", "leftovers", "reset", "snapshot")

#: Resources never reset: they churn on their own, or hold nothing a test leaves behind.
_CHURN: Final = frozenset(
    {
        ("", "events"),
        ("events.k8s.io", "events"),
        ("coordination.k8s.io", "leases"),
        ("", "endpoints"),
        ("discovery.k8s.io", "endpointslices"),
        ("", "componentstatuses"),
    }
)
#: Deleted first (they hold on to what follows), in this order; everything else after them; namespaces last.
_FIRST: Final = (
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
    ("", "pods"),
    ("kueue.x-k8s.io", "workloads"),
    ("worker.gpustack.ai", "modeldeployments"),
    ("kueue.x-k8s.io", "localqueues"),
    ("kueue.x-k8s.io", "clusterqueues"),
    ("kueue.x-k8s.io", "cohorts"),
)
_NAMESPACES: Final = ("", "namespaces")
_CRDS: Final = ("apiextensions.k8s.io", "customresourcedefinitions")
#: Metadata the server writes: never compared, never sent back.
_SERVER_META: Final = (
    "resourceVersion",
    "managedFields",
    "generation",
    "uid",
    "creationTimestamp",
    "selfLink",
)
#: Background propagation, and no grace period: a bound Pod would otherwise wait for a kubelet (none runs
#: here) to confirm it stopped, and stay Terminating.
_BACKGROUND: Final = {
    "kind": "DeleteOptions",
    "apiVersion": "v1",
    "propagationPolicy": "Background",
    "gracePeriodSeconds": 0,
}
#: Kinds whose status tests write and a reset restores (the agent's counting capacities on a Node).
_STATUS_RESTORED: Final = frozenset({("", "nodes")})


@dataclass(frozen=True)
class Resource:
    """One listable, deletable resource the API server serves (preferred version of its group)."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    def collection(self, namespace: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        return f"{base}/namespaces/{namespace}/{self.plural}" if namespace else f"{base}/{self.plural}"

    def item(self, obj: Mapping[str, Any]) -> str:
        meta = obj["metadata"]
        return f"{self.collection(meta.get('namespace') if self.namespaced else None)}/{meta['name']}"


#: (group, plural, namespace, name) → the object as stored at the baseline.
Baseline = dict[tuple[str, str, str, str], dict[str, Any]]


def _call(api: ApiBootstrap, method: str, path: str, body: Mapping[str, Any] | None = None) -> httpx.Response:
    """One request, retried while the API server's priority and fairness answers 429 (it says when to
    come back: Retry-After); a reset sends a few hundred requests in a burst."""
    for _ in range(60):
        merge = method == "MERGE"
        resp = api.merge_patch(path, body or {}) if merge else api.request(method, path, body)
        if resp.status_code != 429:
            return resp
        time.sleep(float(resp.headers.get("Retry-After") or 1))
    return resp


def resources(api: ApiBootstrap) -> list[Resource]:
    """Every resource served that can be listed and deleted (no subresources), via discovery."""
    versions = [("", "v1")]
    groups = _call(api, "GET", "/apis").json().get("groups") or []
    versions += [(g["name"], g["preferredVersion"]["version"]) for g in groups]
    out: list[Resource] = []
    for group, version in versions:
        path = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        resp = _call(api, "GET", path)
        if not resp.is_success:  # a group going away (its last CRD deleted) is not served any more
            continue
        for r in resp.json().get("resources") or []:
            verbs = set(r.get("verbs") or ())
            if "/" in r["name"] or not {"list", "delete"} <= verbs or (group, r["name"]) in _CHURN:
                continue
            out.append(Resource(group, version, r["name"], bool(r.get("namespaced")), str(r["kind"])))
    return out


def _objects(api: ApiBootstrap, resource: Resource) -> Iterator[dict[str, Any]]:
    resp = _call(api, "GET", resource.collection())
    if resp.status_code == 404:  # its CRD was deleted since discovery
        return
    resp.raise_for_status()
    yield from resp.json().get("items") or []


def _key(resource: Resource, obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return (resource.group, resource.plural, str(meta.get("namespace") or ""), str(meta["name"]))


def snapshot(api: ApiBootstrap) -> Baseline:
    """Every object served now (but the churning kinds), by key."""
    return {_key(r, o): o for r in resources(api) for o in _objects(api, r)}


def _content(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a test can change and a reset restores: everything but server-written metadata and status."""
    out = {k: copy.deepcopy(v) for k, v in obj.items() if k != "status"}
    meta = out.get("metadata") or {}
    out["metadata"] = {k: v for k, v in meta.items() if k not in _SERVER_META}
    return out


def _ordered(found: Iterable[Resource]) -> list[Resource]:
    by_key = {r.key: r for r in found}
    first = [by_key[k] for k in _FIRST if k in by_key]
    last = [by_key[_NAMESPACES]] if _NAMESPACES in by_key else []
    return [*first, *(r for r in by_key.values() if r not in first and r not in last), *last]


def _delete(api: ApiBootstrap, resource: Resource, obj: Mapping[str, Any]) -> None:
    path = resource.item(obj)
    _call(api, "DELETE", path, _BACKGROUND)
    if resource.key == _NAMESPACES:
        _finalize_namespace(api, str(obj["metadata"]["name"]))
        return
    still = _call(api, "GET", path)
    if still.is_success and (still.json().get("metadata") or {}).get("finalizers"):
        _call(api, "MERGE", path, {"metadata": {"finalizers": None}})


def _finalize_namespace(api: ApiBootstrap, name: str) -> None:
    """What the namespace controller would do last: drop the ``kubernetes`` finalizer, so it goes."""
    resp = _call(api, "GET", f"/api/v1/namespaces/{name}")
    if not resp.is_success:
        return
    ns = resp.json()
    ns.setdefault("spec", {})["finalizers"] = []
    _call(api, "PUT", f"/api/v1/namespaces/{name}/finalize", ns)


def _restore(api: ApiBootstrap, resource: Resource, live: Mapping[str, Any], base: Mapping[str, Any]) -> None:
    path = resource.item(live)
    if _content(live) != _content(base):
        body = _content(base)
        body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
        if "status" in live:
            body["status"] = live["status"]
        resp = _call(api, "PUT", path, body)
        resp.raise_for_status()
        live = resp.json()
    if resource.key in _STATUS_RESTORED and live.get("status") != base.get("status"):
        body = copy.deepcopy(dict(live))
        body["status"] = copy.deepcopy(base.get("status"))
        _call(api, "PUT", f"{path}/status", body).raise_for_status()


def reset(api: ApiBootstrap, baseline: Baseline) -> None:
    """Delete what was made since ``baseline``, restore what was changed and what was deleted (see the
    module docstring)."""
    served = _ordered(resources(api))
    seen: set[tuple[str, str, str, str]] = set()
    for resource in served:
        for obj in list(_objects(api, resource)):
            key = _key(resource, obj)
            base = baseline.get(key)
            if base is None:
                _delete(api, resource, obj)
            elif (obj.get("metadata") or {}).get("deletionTimestamp"):
                # A baseline object a test deleted that is still going (a CRD waits until its objects are
                # gone, which this loop deletes; its own finalizer is the API server's cleanup and stays):
                # made again below, once it is gone.
                continue
            else:
                seen.add(key)
                _restore(api, resource, obj, base)
    # Baseline objects a test deleted come back, namespaces first (what was inside them follows).
    by_key = {r.key: r for r in served}
    for key in sorted(baseline.keys() - seen, key=lambda k: (k[:2] != _NAMESPACES, k)):
        resource = by_key.get(key[:2])
        if resource is None:  # its kind is not served any more (a CRD deleted): not the reset's to redo
            continue
        _recreate(api, resource, baseline[key])


def _recreate(api: ApiBootstrap, resource: Resource, base: Mapping[str, Any]) -> None:
    """Create ``base`` again once any object of its name still being deleted is gone; a CRD is waited
    for until the API server serves it (Established), as the cluster's start-up waited."""
    body = {"apiVersion": resource.api_version, "kind": resource.kind, **_content(base)}
    eventually_sync(lambda: _call(api, "GET", resource.item(base)).status_code == 404, within=120)
    if resource.key == _CRDS:
        api.install_crds([body])
        return
    namespace = base["metadata"].get("namespace") if resource.namespaced else None
    _call(api, "POST", resource.collection(namespace), body).raise_for_status()


def leftovers(api: ApiBootstrap, baseline: Baseline) -> list[str]:
    """What differs from ``baseline`` now: objects made since, changed or gone (empty: back to baseline)."""
    now = snapshot(api)
    out = [f"made since: {'/'.join(k)}" for k in sorted(now.keys() - baseline.keys())]
    out += [f"gone: {'/'.join(k)}" for k in sorted(baseline.keys() - now.keys())]
    for key in sorted(now.keys() & baseline.keys()):
        if _content(now[key]) != _content(baseline[key]):
            out.append(f"changed: {'/'.join(key)}")
        elif (key[0], key[1]) in _STATUS_RESTORED and now[key].get("status") != baseline[key].get("status"):
            out.append(f"status changed: {'/'.join(key)}")
    return out
