"""``gpustack-worker catalog``: the InstanceTypeFlavor catalog, computed on read from the live flavors.

Grouped by the ``instance-type-aware-cpu-manufacturer`` setting in force (read from the settings
ConfigMap, else the ``GPUSTACK_*`` environment and defaults). ``-o text|json|yaml`` (:mod:`.output`).

The text table has one row per InstanceType name (what a ModelDeployment role's ``instanceType`` names;
an entry spans one per os/arch), its catalog entry last. ``memory`` is the spec's quantity (the largest
binary unit that states the card's MiB exactly, ``81559Mi``); the text adds it in Gi to one decimal when
it is not a whole number of Gi (``81559Mi (79.6Gi)``), so cards compare at a glance. JSON and YAML are
the entries unchanged.
A server that cannot be reached or refuses a read fails the command with one line
(:mod:`.errors`, through ``main``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpustack_worker.api import keys, kinds
from gpustack_worker.chain.catalog import catalog
from gpustack_worker.cli.output import emit
from gpustack_worker.cli.request_timeout import request_timeout_of
from gpustack_worker.cli.settings import WorkerSettings
from gpustack_worker.runtime.client import Client
from gpustack_worker.runtime.quantity import parse
from gpustack_worker.runtime.settings import SettingsError, settings_from

if TYPE_CHECKING:
    import argparse

__all__ = ("memory_text", "render_text", "run")

_SPEC_COLUMNS = ("acceleratable", "manufacturer", "product", "memory", "sliceable", "generalGroup")
_COLUMNS = ("instanceType", *_SPEC_COLUMNS, "catalog")
_GI = 1 << 30


async def run(args: argparse.Namespace) -> int:
    client = await Client.connect(
        args.kubeconfig,
        context=getattr(args, "context", None),
        timeout_s=request_timeout_of(args),
        user_agent="gpustack-worker-catalog",
    )
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
    emit(entries, args.output, render_text)
    return 0


def memory_text(quantity: str) -> str:
    """A card's memory for people: the spec's quantity, plus its value in Gi (one decimal) when it is not a
    whole number of Gi; what does not parse is shown as it is."""
    value = parse(quantity)
    if value is None or not quantity.endswith("i") or value % _GI == 0:
        return quantity
    return f"{quantity} ({value / _GI:.1f}Gi)"


def _cell(entry: dict[str, Any], column: str) -> str:
    value = entry["spec"].get(column, "")
    return memory_text(str(value)) if column == "memory" and value else str(value)


def render_text(entries: list[dict[str, Any]]) -> str:
    """The catalog as a table, one InstanceType name a row."""
    rows = [
        [str(name), *(_cell(e, c) for c in _SPEC_COLUMNS), str(e["name"])]
        for e in entries
        for name in e.get("instanceTypes") or [""]
    ]
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(_COLUMNS)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(_COLUMNS, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines) + "\n"
