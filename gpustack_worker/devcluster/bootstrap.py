"""The few API calls the harness makes before any operator code runs: CRDs, namespaces, the nfd-master Node.

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


def load_yaml_documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every non-empty YAML document in ``paths``, in order."""
    docs: list[dict[str, Any]] = []
    for path in paths:
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs
