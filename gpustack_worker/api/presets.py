"""Unit spec defaults of a derived InstanceType: GPUStack's presets, so a derived type gets the same unit.

The unit spec (unit CPU / unit RAM / local storage) is not derived from node capacity: a CPU-only pool
gets ``1 / 2Gi / 100Gi``; an accelerated pool gets a per-product preset keyed by the accelerator's
manufacturer and product name, falling back to ``4 / 16Gi / 100Gi``.

Matching, as GPUStack's preset lookup does it: the key is ``NormalizeName(product, manufacturer, 0,
false)`` (no length cap); leading marketing
token sequences (``tesla``, ``geforce`` …) are stripped repeatedly; the key's tokens (split on ``-``,
``_``, ``.``) are matched against the manufacturer's entries, at most one of which has a ``prefix`` that
is a *token* prefix of the key (so ``a10`` never matches ``a100``); inside that entry the first ``by``
token present as a whole token in the key picks the tier, else the entry's own tier applies. Raw
(``NVIDIA A10G``) and label-sanitised (``NVIDIA-A10G``) product names give the same key.

The table below is GPUStack's published per-family table restated as entries. Families it lists but no
node can reach (Intel, Kunlun, Biren: no manufacturer key in the Device Manager's table) are left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from gpustack_worker.api.normalize import normalize_name

__all__ = (
    "CPU_ONLY_UNIT",
    "FALLBACK_UNIT",
    "LOCAL_STORAGE",
    "TIERS",
    "UnitSpec",
    "preset_key",
    "preset_tier",
    "unit_spec",
)


@dataclass(frozen=True, slots=True)
class UnitSpec:
    """Per-accelerator (or per-CPU-unit) host resources of an InstanceType."""

    cpu: str
    ram: str
    local_storage: str


#: Every derived type gets this much local storage.
LOCAL_STORAGE: Final = "100Gi"
#: A CPU-only derived type is always one CPU with 2Gi (the CRD also requires unit cpu ``1``).
CPU_ONLY_UNIT: Final = UnitSpec("1", "2Gi", LOCAL_STORAGE)

#: Tier → (unit CPU, unit RAM).
TIERS: Final[dict[str, tuple[str, str]]] = {
    "fallback": ("4", "16Gi"),
    "small": ("8", "32Gi"),
    "medium": ("8", "64Gi"),
    "large": ("12", "128Gi"),
    "xlarge": ("12", "192Gi"),
}
FALLBACK_UNIT: Final = UnitSpec(*TIERS["fallback"], LOCAL_STORAGE)

#: Leading marketing token sequences stripped from the key (GPUStack's design list; the file one of its
#: versions shipped had only ``tesla`` and the current list is not published: docs/chain.md, "Choices
#: where GPUStack leaves the behaviour open"). Each is a token sequence.
_STRIP: Final = (
    ("tesla",),
    ("geforce",),
    ("instinct",),
    ("quadro",),
    ("radeon",),
    ("moore", "threads"),
    ("meta", "x"),
)
_TOKEN_SPLIT: Final = re.compile(r"[-_.]")


@dataclass(frozen=True, slots=True)
class _Entry:
    prefix: tuple[str, ...]
    tier: str
    #: Ordered (token, tier) refinements; the first token present in the key wins.
    by: tuple[tuple[str, str], ...] = ()


def _entries(tier: str, *prefixes: str) -> list[_Entry]:
    return [_Entry(tuple(_TOKEN_SPLIT.split(p)), tier) for p in prefixes]


_CAPACITY_TOKENS: Final = (("80gb", "large"), ("40gb", "medium"))

_TABLE: Final[dict[str, tuple[_Entry, ...]]] = {
    "nvidia": (
        *_entries("xlarge", "b200", "b300", "gb200", "gb300", "h100", "h200", "h800", "gh200"),
        *_entries("small", "gb10", "a30", "l4", "t4", "v100s"),
        _Entry(("a100",), "medium", _CAPACITY_TOKENS),
        _Entry(("a800",), "medium", _CAPACITY_TOKENS),
        *_entries("medium", "a10", "a10g", "l40"),
        *_entries("large", "l40s"),
        _Entry(("v100",), "small", (("32gb", "medium"),)),
        *_entries(
            "small", "rtx-pro-4500", "rtx-6000", "rtx-4000", "rtx-a6000", "rtx-a5000", "rtx-a4000", "rtx-3090"
        ),
        *_entries("medium", "rtx-4090", "rtx-4090d", "rtx-5090"),
    ),
    "ascend": (
        *_entries("medium", "310p", "310p1", "310p2", "310p3", "310p4", "310p5", "310p7"),
        *_entries("medium", "910b", "910b1", "910b2", "910b2c", "910b3", "910b4"),
        *_entries(
            "xlarge", "910-9362", "910-9363", "910-9372", "910-9381", "910-9382", "910-9391", "910-9392"
        ),
        *_entries("xlarge", "950", "950pr", "950dt"),
    ),
    "amd": (
        *_entries("xlarge", "mi300x", "mi308x", "mi325x", "mi350x", "mi355x"),
        *_entries("medium", "mi250", "mi250x"),
        *_entries("large", "mi210"),
    ),
    "cambricon": tuple(_entries("medium", "mlu370", "mlu590")),
    "hygon": (
        *_entries("small", "z100", "z100l"),
        *_entries("large", "k100", "bw100"),
        *_entries("xlarge", "bw1000"),
    ),
    "metax": (*_entries("medium", "mxc500"), *_entries("large", "mxc550", "mxc588", "mxc600")),
    "mthreads": tuple(_entries("medium", "mtt-s4000", "mtt-s5000")),
    "iluvatar": tuple(_entries("medium", "bi-v100", "bi-v150", "mr-v50", "mr-v100")),
    "thead": tuple(_entries("medium", "ppu-zw810e", "ppu-zwm890")),
}


def preset_key(manufacturer: str, product: str) -> tuple[str, ...]:
    """The product's tokens after normalisation and marketing-prefix stripping."""
    key = normalize_name(product, manufacturer.lower(), 0, False)
    tokens = tuple(t for t in _TOKEN_SPLIT.split(key) if t)
    stripped = True
    while stripped:
        stripped = False
        for seq in _STRIP:
            if len(tokens) > len(seq) and tokens[: len(seq)] == seq:
                tokens = tokens[len(seq) :]
                stripped = True
    return tokens


def preset_tier(manufacturer: str, product: str) -> str:
    """The tier name for an accelerator product (``fallback`` when nothing matches)."""
    entries = _TABLE.get(manufacturer.lower())
    if not entries:
        return "fallback"
    tokens = preset_key(manufacturer, product)
    for entry in entries:
        if tokens[: len(entry.prefix)] == entry.prefix:
            for token, tier in entry.by:
                if token in tokens:
                    return tier
            return entry.tier
    return "fallback"


def unit_spec(*, acceleratable: bool, manufacturer: str = "", product: str = "") -> UnitSpec:
    """The unit spec a derived InstanceType is created with."""
    if not acceleratable:
        return CPU_ONLY_UNIT
    cpu, ram = TIERS[preset_tier(manufacturer, product)]
    return UnitSpec(cpu, ram, LOCAL_STORAGE)
