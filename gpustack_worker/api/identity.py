"""How a Node's CPU key (``gKey``) and an accelerator model's key (``aKey``) are built.

Byte for byte as GPUStack builds them, since other components put the same keys on the same Nodes; the
rule in prose is in docs/agent.md, "Worker NodeFeature".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpustack_worker.api import keys
from gpustack_worker.api.normalize import normalize_name

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("accelerator_key", "cpu_manufacturer", "general_key", "memory_quantity")

_KEY_BUDGET = 63


def cpu_manufacturer(labels: Mapping[str, str]) -> str:
    """Lowercased NFD ``cpu-model.vendor_id``; ``generic`` when empty or ``VendorUnknown``."""
    vendor = labels.get(keys.NFD_CPU_VENDOR, "").lower()
    return vendor if vendor and vendor != "vendorunknown" else "generic"


def general_key(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """``gKey``: the CPU manufacturer plus the normalised CPU name, else ``<family>-<id>``."""
    mfr = cpu_manufacturer(labels)
    cpu_name = annotations.get(keys.CPU_NAME_ANNOTATION, "")
    ident = ""
    if cpu_name and not cpu_name.startswith("@"):
        ident = normalize_name(cpu_name, mfr, _KEY_BUDGET - len(mfr) - 1, True)
    else:
        family = labels.get(keys.NFD_CPU_FAMILY)
        model = labels.get(keys.NFD_CPU_ID)
        if family and model:
            ident = f"{family}-{model}"
    return f"{mfr}-{ident}" if ident else mfr


def accelerator_key(manufacturer: str, product: str) -> str:
    """``aKey`` = ``<manufacturer>-<groupId>`` with the manufacturer stripped from the product name."""
    mfr = manufacturer.lower()
    group_id = normalize_name(product, mfr, _KEY_BUDGET - len(mfr) - 1, False)
    return f"{mfr}-{group_id}"


_BINARY_UNITS = (("Ti", 1024 * 1024), ("Gi", 1024), ("Mi", 1))


def memory_quantity(mib: int) -> str:
    """A MiB amount in the largest binary unit that expresses it exactly (``24576`` → ``24Gi``)."""
    for suffix, factor in _BINARY_UNITS:
        if mib and mib % factor == 0:
            return f"{mib // factor}{suffix}"
    return "0"
