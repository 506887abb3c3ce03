"""Deep-frozen, interned copies of API objects: what the cache hands to reconcilers.

Reconcilers get cached objects without a deep copy, so those objects must be immutable: a
reconciler that mutated one would silently corrupt every other reader. ``freeze`` turns JSON
dicts into :class:`FrozenDict` (a ``dict`` subclass whose mutators raise, so reads, ``orjson`` and
``==`` work unchanged) and lists into tuples, and interns every string key and short string value:
label keys, label values, condition types and quantities repeat across thousands of Nodes, and
sharing them is most of what keeps a cached Node under a few KiB (a bench GPU Node: ~4 KiB cached, against
~58 KiB decoded; docs/reliability.md, "Relist memory").
"""

from __future__ import annotations

import sys
from typing import Any, Final, NoReturn

__all__ = ("EMPTY", "FrozenDict", "freeze", "thaw")


class FrozenDict(dict[str, Any]):
    """A read-only ``dict``. Same memory as a dict (no ``__dict__``), hashable by identity only."""

    __slots__ = ()

    def _readonly(self, *_: Any, **__: Any) -> NoReturn:
        raise TypeError("cached objects are immutable; copy with thaw() before changing them")

    __setitem__ = _readonly
    __delitem__ = _readonly
    clear = _readonly
    pop = _readonly
    popitem = _readonly
    setdefault = _readonly
    update = _readonly
    __ior__ = _readonly

    def __hash__(self) -> int:  # type: ignore[override]
        return id(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))


_s = sys.intern  # interned strings are mortal: freed with their last reference


#: The one empty frozen mapping (managedFields trees are mostly ``{}`` leaves).
EMPTY: Final = FrozenDict()


def freeze(value: Any) -> Any:
    """Return a deep-frozen copy of a JSON value (dicts → FrozenDict, lists → tuples, strings interned)."""
    if isinstance(value, FrozenDict | tuple):
        return value  # already frozen (JSON never yields tuples): share, do not copy
    if isinstance(value, dict):
        if not value:
            return EMPTY
        return FrozenDict({_s(k): freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    if isinstance(value, str):
        return _s(value)
    return value


def thaw(value: Any) -> Any:
    """Return a mutable deep copy (plain dicts and lists) of a frozen value."""
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value
