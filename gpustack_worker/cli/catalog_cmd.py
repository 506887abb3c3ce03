"""``gpustack-worker catalog``: the InstanceTypeFlavor catalog, computed on read from the live flavors.

Grouped by the ``instance-type-aware-cpu-manufacturer`` setting in force (read from the settings
ConfigMap, else the ``GPUSTACK_*`` environment and defaults). Plain text by default, ``-o json``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain.catalog import catalog
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.settings import SettingsError, settings_from

if TYPE_CHECKING:
    import argparse

__all__ = ("run",)

_COLUMNS = ("name", "acceleratable", "manufacturer", "product", "memory", "sliceable", "generalGroup")


async def run(args: argparse.Namespace) -> int:
    client = await Client.connect(args.kubeconfig, user_agent="gpustack-worker-catalog")
    try:
        cm = await client.get(kinds.CONFIG_MAP, args.settings_configmap, args.namespace)
        try:
            settings = settings_from(WorkerSettings, (cm or {}).get("data") or {})
        except SettingsError:
            settings = settings_from(WorkerSettings, None)  # the controller keeps the last good; so do we
        items, _ = await client.list(
            kinds.RESOURCE_FLAVOR, label_selector=f"{keys.RESOURCE_TYPE}={keys.TYPE_NODES}"
        )
    finally:
        await client.close()
    entries = catalog(items, aware=settings.instance_type_aware_cpu_manufacturer)
    if args.output == "json":
        print(json.dumps(entries, indent=2, sort_keys=True))
        return 0
    rows = [[str(e["name"])] + [str(e["spec"].get(c, "")) for c in _COLUMNS[1:]] for e in entries]
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(_COLUMNS)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(_COLUMNS, widths, strict=True)))
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    return 0
