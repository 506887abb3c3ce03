"""The InstanceTypeFlavor catalog: a read-only view over the operator's ResourceFlavors.

In GPUStack's own operator the catalog is a list-only kind served by its aggregated API server, with no
object and no controller behind it: it is recomputed from the flavors' ``note.gpustack.ai/*``
annotations on every read. Our design serves CRDs directly and has no aggregated API layer, so the
catalog is the same view computed on read — :func:`catalog` here, printed by ``gpustack-worker catalog``
(``-o json`` for machines). A CRD with a controller writing it would add a second copy of the flavors'
data that could be stale, which the catalog by construction never is.

One entry per distinct pool, de-duplicated and sorted by name, grouped like InstanceTypes by
``instance-type-aware-cpu-manufacturer`` but without os/arch: ``gpustack--generic`` /
``gpustack--<aKey>`` (aware=false), ``gpustack--<gKey>`` / ``gpustack--<gKey>--<aKey>`` (aware=true).

A catalog name is not what a ModelDeployment's ``instanceType`` names: that is the pool *with* os/arch,
so each entry also lists ``instanceTypes``, the InstanceType names its flavors' pools get — spelled by the
chain's own :meth:`~gpustack_worker.chain.pools.PoolIdentity.name` (``keys.pool_name``), never rebuilt here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpustack_worker.api import keys, manufacturers
from gpustack_worker.chain.pools import GENERIC, PoolIdentity

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ("catalog", "instance_type_name")


def _note(flavor: Mapping[str, Any], name: str) -> str:
    notes: Mapping[str, str] = (flavor.get("metadata") or {}).get("annotations") or {}
    return str(notes.get(f"{keys.NOTE_PREFIX}{name}", ""))


def _entry(flavor: Mapping[str, Any], *, aware: bool) -> dict[str, Any]:
    accelerated = _note(flavor, "acceleratable") == "true"
    g_key = _note(flavor, "generalGroup")
    if accelerated:
        a_key = _note(flavor, "acceleratorGroup")
        mfr = manufacturers.get(_note(flavor, "manufacturer"))
        spec = {
            "acceleratorGroup": a_key,
            "acceleratable": True,
            "manufacturer": _note(flavor, "manufacturer"),
            "product": _note(flavor, "product"),
            "family": _note(flavor, "family"),
            "memory": _note(flavor, "memory"),
            "cores": _note(flavor, "cores"),
            "sliceable": bool(mfr and mfr.logical_slices),
            "generalGroup": g_key if aware else "",
        }
        name = keys.catalog_name(a_key, g_key, aware=aware)
    else:
        group = g_key if aware else GENERIC
        spec = {
            "acceleratorGroup": "",
            "acceleratable": False,
            "manufacturer": _note(flavor, "manufacturer") if aware else GENERIC,
            "product": _note(flavor, "product") if aware else "",
            "family": _note(flavor, "family") if aware else "",
            "memory": "",
            "cores": "",
            "sliceable": False,
            "generalGroup": group,
        }
        name = keys.catalog_name(g_key=group, aware=aware)
    # Empty strings are left out (``acceleratable`` and ``sliceable`` are always serialized).
    return {
        "name": name,
        "spec": {k: v for k, v in spec.items() if v != "" or isinstance(v, bool)},
    }


def instance_type_name(flavor: Mapping[str, Any], *, aware: bool) -> str:
    """The InstanceType (and ClusterQueue) name of the pool an operator flavor feeds under the grouping
    ``aware``: the identity the chain gives the flavor's plan (:func:`~.pools.pool_of`), read back from the
    flavor's labels (os, arch) and notes (groups)."""
    labels: Mapping[str, str] = (flavor.get("metadata") or {}).get("labels") or {}
    accelerated = _note(flavor, "acceleratable") == "true"
    return PoolIdentity(
        acceleratable=accelerated,
        accelerator_group=_note(flavor, "acceleratorGroup") if accelerated else "",
        general_group=_note(flavor, "generalGroup") if aware else GENERIC,
        os=str(labels.get(keys.OS, "")),
        arch=str(labels.get(keys.ARCH, "")),
        aware=aware,
    ).name


def catalog(flavors: Iterable[Mapping[str, Any]], *, aware: bool) -> list[dict[str, Any]]:
    """The catalog entries of the operator's live flavors (first flavor of a pool by name wins), each with
    the ``instanceTypes`` its flavors' pools are named (every os/arch the pool spans)."""
    entries: dict[str, dict[str, Any]] = {}
    types: dict[str, set[str]] = {}
    ordered = sorted(flavors, key=lambda f: str((f.get("metadata") or {}).get("name", "")))
    for flavor in ordered:
        meta = flavor.get("metadata") or {}
        labels: Mapping[str, str] = meta.get("labels") or {}
        if labels.get(keys.RESOURCE_TYPE) != keys.TYPE_NODES or meta.get("deletionTimestamp"):
            continue
        entry = _entry(flavor, aware=aware)
        entries.setdefault(entry["name"], entry)
        types.setdefault(entry["name"], set()).add(instance_type_name(flavor, aware=aware))
    return [{**entries[n], "instanceTypes": sorted(types[n])} for n in sorted(entries)]
