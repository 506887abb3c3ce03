"""The namespace a command uses when none is given, chosen as kubectl chooses it: the kubeconfig context's
``namespace`` (``--context``, else ``current-context``; the kubeconfig itself chosen by
:func:`~gpustack_worker.runtime.client.kubeconfig_source`, ``$KUBECONFIG`` lists merged), else — with no
kubeconfig at all, in a Pod — the service account's namespace, else ``default``.

A kubeconfig that cannot be read or names no such context gives ``default`` here: connecting fails on it
anyway, with the one-line error that says why.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.runtime.client import DEFAULT_KUBECONFIG, KubeconfigError, kubeconfig_source
from gpustack_worker.runtime.kubeconfig_check import load_kubeconfig

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("DEFAULT_NAMESPACE", "SERVICE_ACCOUNT_NAMESPACE", "context_namespace")

DEFAULT_NAMESPACE: Final = "default"
#: Where a Pod's service account namespace is mounted (client-go's in-cluster config reads it).
SERVICE_ACCOUNT_NAMESPACE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _of_context(doc: Any, context: str | None) -> str:
    if not isinstance(doc, dict):
        return DEFAULT_NAMESPACE
    name = context or doc.get("current-context") or ""
    contexts = doc.get("contexts")
    for entry in contexts if isinstance(contexts, list) else ():
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get("context")
            namespace = body.get("namespace") if isinstance(body, dict) else None
            return str(namespace) if isinstance(namespace, str) and namespace else DEFAULT_NAMESPACE
    return DEFAULT_NAMESPACE


def _in_cluster(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() or DEFAULT_NAMESPACE
    except OSError:
        return DEFAULT_NAMESPACE


def context_namespace(
    kubeconfig: str | None,
    context: str | None,
    *,
    env: Mapping[str, str] | None = None,
    service_account_namespace: str = SERVICE_ACCOUNT_NAMESPACE,
) -> str:
    """The namespace of the kubeconfig context ``--kubeconfig``/``--context`` select (see the module)."""
    try:
        source, _ = kubeconfig_source(kubeconfig, env)
    except KubeconfigError:
        return DEFAULT_NAMESPACE
    if isinstance(source, dict):
        return _of_context(source, context)
    path = os.path.expanduser(source or DEFAULT_KUBECONFIG)
    if not os.path.isfile(path):
        return _in_cluster(service_account_namespace) if source is None else DEFAULT_NAMESPACE
    doc, _problem = load_kubeconfig(path)
    return _of_context(doc, context)
