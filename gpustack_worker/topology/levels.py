"""A Node's ordered topology levels and the profile they hash to (docs/topology.md, "The profile rule").

Pure functions, no I/O: the profile assigner feeds them the one Ready source's ``spec.levels`` and the
Node's labels, and writes the result.

* :func:`normalize_tiers` puts contiguous Topograph fabric tiers coarsest first (Topograph numbers its
  tiers from the leaf switch up, so a higher ``tier-<N>`` is coarser);
* :func:`populated_prefix` keeps the longest prefix the Node fills in (a missing finer suffix is valid;
  a child without its parent ends the prefix there);
* :func:`profile_levels` chains both and appends ``kubernetes.io/hostname``, which always closes a
  hierarchy; with no source (``None`` or ``()``) the hierarchy is the hostname alone;
* :func:`profile_of` is the ``fnv64-<16hex>`` the levels hash to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from gpustack_worker.api import keys

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = (
    "HOSTNAME_ONLY_LEVELS",
    "HOSTNAME_ONLY_PROFILE",
    "normalize_tiers",
    "populated_prefix",
    "profile_levels",
    "profile_of",
    "tier_number",
)

#: The hierarchy of a Node no single Ready source describes.
HOSTNAME_ONLY_LEVELS: Final[tuple[str, ...]] = (keys.HOSTNAME,)


def profile_of(levels: Sequence[str]) -> str:
    """``fnv64-<16hex>`` of the ordered level keys joined with NUL (``topology.gpustack.ai/profile``)."""
    return keys.topology_profile(tuple(levels))


#: ``fnv64-87bf574bea2a4f23``: the default profile.
HOSTNAME_ONLY_PROFILE: Final[str] = profile_of(HOSTNAME_ONLY_LEVELS)


def tier_number(key: str) -> int | None:
    """``N`` of a Topograph fabric tier key ``fabric.topograph.run/tier-<N>`` (decimal), else ``None``."""
    if not key.startswith(keys.TOPOGRAPH_TIER_PREFIX):
        return None
    digits = key[len(keys.TOPOGRAPH_TIER_PREFIX) :]
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    return int(digits)


def normalize_tiers(levels: Sequence[str]) -> tuple[str, ...]:
    """Reverse every contiguous run of Topograph tier keys that starts with a smaller ``N`` than it ends
    with, so ``tier-1, tier-2`` becomes ``tier-2, tier-1``; every other key keeps its place."""
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            first, last = tier_number(run[0]), tier_number(run[-1])
            assert first is not None and last is not None  # a run holds tier keys only
            out.extend(reversed(run) if first < last else run)
            run.clear()

    for key in levels:
        if tier_number(key) is None:
            flush()
            out.append(key)
        else:
            run.append(key)
    flush()
    return tuple(out)


def populated_prefix(levels: Sequence[str], labels: Mapping[str, str]) -> tuple[str, ...]:
    """The longest prefix of ``levels`` (already normalised) whose values are all non-empty in ``labels``."""
    prefix: list[str] = []
    for key in levels:
        if not labels.get(key):
            break
        prefix.append(key)
    return tuple(prefix)


def profile_levels(levels: Sequence[str] | None, labels: Mapping[str, str]) -> tuple[str, ...]:
    """A Node's hierarchy: the source's levels normalised, cut to the prefix the Node populates, then
    ``kubernetes.io/hostname``. ``None`` or ``()`` (no single Ready source) gives the hostname alone."""
    if not levels:
        return HOSTNAME_ONLY_LEVELS
    return (*populated_prefix(normalize_tiers(levels), labels), keys.HOSTNAME)
