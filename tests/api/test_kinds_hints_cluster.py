"""Every CRD kind's apply hints (``api/kinds.py``) say what the installed CRD's schema says.

The apply no-op check is exact only if it knows, for every field, how the server merges it (keyed list
and its keys, set, atomic map) and whether it holds a quantity. For our kinds and the Kueue / NFD kinds
that information is in the CRD the API server serves, so it is read from there and compared with the
declared hints — a schema change (a new keyed list, a quantity) fails here, not as a write on every
reconcile or a missed one. Lists and maps inside an atomic value are part of that value and need no merge
hint; quantities inside one still do (they are compared by value there too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import Client

if TYPE_CHECKING:
    from gpustack_worker.runtime.resources import Resource

pytestmark = pytest.mark.cluster
#: Part of the pattern a CRD generator puts on a ``resource.Quantity`` (int-or-string) field.
QUANTITY_SUFFIXES = "[KMGTPE]i"

HINTED: tuple[Resource, ...] = (
    kinds.RESOURCE_FLAVOR,
    kinds.CLUSTER_QUEUE,
    kinds.LOCAL_QUEUE,
    kinds.TOPOLOGY,
    kinds.ADMISSION_CHECK,
    kinds.NODE_FEATURE,
    kinds.INSTANCE_TYPE,
    kinds.DEVICES,
)


def schema_hints(schema: dict[str, Any]) -> dict[str, Any]:
    """Keyed lists, sets, atomic maps and quantity fields of a structural schema, as hint paths."""
    keyed: dict[str, tuple[str, ...]] = {}
    sets: set[str] = set()
    atomic: set[str] = set()
    quantities: set[str] = set()

    def walk(node: dict[str, Any], path: str, whole: bool) -> None:
        """``whole``: inside an atomic value (no merge hints there, but quantities still count)."""
        if node.get("x-kubernetes-int-or-string") and QUANTITY_SUFFIXES in str(node.get("pattern", "")):
            quantities.add(path)
            return
        if node.get("type") == "array":
            kind = node.get("x-kubernetes-list-type", "atomic")
            if not whole and kind == "map":
                keyed[path] = tuple(node["x-kubernetes-list-map-keys"])
            elif not whole and kind == "set":
                sets.add(path)
            walk(node.get("items") or {}, f"{path}[]", whole or kind == "atomic")
            return
        if node.get("type") == "object":
            inner = whole
            if node.get("x-kubernetes-map-type") == "atomic":
                if not whole:
                    atomic.add(path)
                inner = True
            for key, child in (node.get("properties") or {}).items():
                walk(child, f"{path}.{key}", inner)
            extra = node.get("additionalProperties")
            if isinstance(extra, dict):
                walk(extra, f"{path}.*", inner)

    for top in ("spec", "status"):
        sub = (schema.get("properties") or {}).get(top)
        if sub:
            walk(sub, top, False)
    return {"keyed": keyed, "sets": sets, "atomic": atomic, "quantities": quantities}


async def test_hints_match_the_served_crds(devcluster: Any) -> None:
    client = await Client.connect(str(devcluster.kubeconfig))
    try:
        for resource in HINTED:
            crd = await client.get(kinds.CRD, f"{resource.plural}.{resource.group}")
            assert crd is not None, resource.kind
            version = next(v for v in crd["spec"]["versions"] if v["name"] == resource.version)
            served = schema_hints(version["schema"]["openAPIV3Schema"])
            hints = resource.hints
            declared = {
                "keyed": {path: tuple(keys) for path, keys in hints.keyed.items()},
                "sets": set(hints.sets),
                "atomic": set(hints.atomic),
                "quantities": set(hints.quantities),
            }
            assert declared == served, resource.kind
    finally:
        await client.close()
