"""The few API calls the harness makes before any operator code runs: CRDs, namespaces, the nfd-master Node,
our RBAC (ServiceAccounts, roles, bindings) and ServiceAccount tokens.

A small synchronous HTTP client on purpose: the harness is used from synchronous pytest fixtures and from
the ``devcluster up`` supervisor, and it must work before (and independently of) the runtime it tests.
"""

from __future__ import annotations

import ssl
import time
from typing import TYPE_CHECKING, Any

import httpx
import yaml

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

__all__ = ("ApiBootstrap",)


class ApiBootstrap:
    """Admin-token HTTP access to a freshly started kube-apiserver."""

    def __init__(self, server: str, ca_cert: Path, token: str) -> None:
        ctx = ssl.create_default_context(cafile=str(ca_cert))
        self._http = httpx.Client(
            base_url=server, verify=ctx, headers={"Authorization": f"Bearer {token}"}, timeout=30.0
        )

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> httpx.Response:
        return self._http.request(method, path, json=body)

    def get(self, path: str) -> dict[str, Any] | None:
        """The object (or list) at ``path``; None when it does not exist (404); any other non-2xx raises."""
        response = self.request("GET", path)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        found: dict[str, Any] = response.json()
        return found

    def merge_patch(self, path: str, body: Mapping[str, Any]) -> httpx.Response:
        """A JSON merge patch of the object at ``path`` (the response is returned as it is)."""
        return self._http.patch(
            path, json=dict(body), headers={"Content-Type": "application/merge-patch+json"}
        )

    def create(self, path: str, body: Mapping[str, Any]) -> None:
        """POST ``body``; an existing object (409) is fine, anything else non-2xx raises."""
        resp = self.request("POST", path, body)
        if resp.status_code not in (200, 201, 202, 409):
            name = body.get("metadata", {}).get("name")
            raise RuntimeError(f"creating {path} {name}: HTTP {resp.status_code}: {resp.text[:500]}")

    def install_crds(self, documents: Iterable[Mapping[str, Any]], timeout: float = 60.0) -> list[str]:
        """Create every CustomResourceDefinition and wait until all report Established."""
        names: list[str] = []
        for doc in documents:
            if doc.get("kind") != "CustomResourceDefinition":
                continue
            self.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
            names.append(doc["metadata"]["name"])
        deadline = time.monotonic() + timeout
        pending = set(names)
        while pending and time.monotonic() < deadline:
            for name in sorted(pending):
                resp = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                conds = (resp.json().get("status") or {}).get("conditions") or [] if resp.is_success else []
                if any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
                    pending.discard(name)
            if pending:
                time.sleep(0.2)
        if pending:
            raise RuntimeError(f"CRDs not Established after {timeout:.0f}s: {sorted(pending)}")
        return names

    def ensure_namespace(self, name: str) -> None:
        self.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )

    def create_node(self, node: Mapping[str, Any]) -> None:
        """Create a Node with its status in one POST (the Node strategy accepts status on create)."""
        self.create("/api/v1/nodes", node)

    def create_object(self, doc: Mapping[str, Any]) -> None:
        """Create one object of a kind in :data:`_COLLECTIONS` (an existing one is left as it is)."""
        kind = str(doc.get("kind"))
        try:
            prefix, plural, namespaced = _COLLECTIONS[kind]
        except KeyError:
            raise ValueError(f"the harness does not create {kind} objects") from None
        namespace = (doc.get("metadata") or {}).get("namespace")
        if namespaced and not namespace:
            raise ValueError(f"{kind} {doc.get('metadata', {}).get('name')} has no namespace")
        path = f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"
        self.create(path, doc)

    def request_token(self, name: str, namespace: str, expiration_seconds: int) -> str:
        """A bound token of ServiceAccount ``namespace/name`` from the TokenRequest API."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds},
        }
        resp = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body)
        if resp.status_code not in (200, 201):
            raise RuntimeError(
                f"TokenRequest for {namespace}/{name}: HTTP {resp.status_code}: {resp.text[:500]}"
            )
        token: str = resp.json()["status"]["token"]
        return token


_RBAC = "/apis/rbac.authorization.k8s.io/v1"
#: kind -> (API prefix, plural, namespaced) for :meth:`ApiBootstrap.create_object`.
_COLLECTIONS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ClusterRole": (_RBAC, "clusterroles", False),
    "ClusterRoleBinding": (_RBAC, "clusterrolebindings", False),
    "Role": (_RBAC, "roles", True),
    "RoleBinding": (_RBAC, "rolebindings", True),
}


def load_yaml_documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every non-empty YAML document in ``paths``, in order."""
    docs: list[dict[str, Any]] = []
    for path in paths:
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs
