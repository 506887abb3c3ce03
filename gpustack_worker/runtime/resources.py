"""What the runtime needs to address one kind of object on the API server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ("CONFIG_MAP", "EVENT", "LEASE", "Resource")


@dataclass(frozen=True, slots=True)
class Resource:
    """A served kind: group/version, kind, plural and scope.

    The runtime never discovers kinds at run time (kr8s' discovery cache is slow and can go stale);
    every kind the project touches is declared once in :mod:`gpustack_worker.api.kinds`.
    """

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """``group/version``, or just ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def collection_path(self, namespace: str | None = None) -> str:
        """URL path of the collection (all namespaces when ``namespace`` is None)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"

    def object_path(self, name: str, namespace: str | None = None, subresource: str | None = None) -> str:
        """URL path of one object, optionally of one of its subresources (``status``)."""
        if self.namespaced and not namespace:
            raise ValueError(f"{self.kind} is namespaced: a namespace is required for {name!r}")
        path = f"{self.collection_path(namespace)}/{name}"
        return f"{path}/{subresource}" if subresource else path

    def key(self, name: str, namespace: str | None = None) -> str:
        """The cache/workqueue key of one object: ``namespace/name`` or ``name``."""
        return f"{namespace}/{name}" if self.namespaced and namespace else name


# The built-in kinds the runtime itself uses (settings, Events, leader election). The rest of the project
# declares its kinds in ``gpustack_worker.api.kinds``, which re-exports these.
CONFIG_MAP: Final = Resource("", "v1", "ConfigMap", "configmaps", namespaced=True)
EVENT: Final = Resource("events.k8s.io", "v1", "Event", "events", namespaced=True)
LEASE: Final = Resource("coordination.k8s.io", "v1", "Lease", "leases", namespaced=True)
