"""Status conditions the Kubernetes way (``metav1.Condition``), as pure functions.

A condition is ``{type, status, reason, message, lastTransitionTime, observedGeneration}`` in a list
keyed by ``type``. The rules that make a converged status reconcile write nothing:

* ``lastTransitionTime`` changes only when ``status`` flips; a new reason or message keeps it;
* ``observedGeneration`` is the generation the controller acted on — it only moves when the object's
  ``metadata.generation`` does;
* a condition whose four inputs did not change is returned as the same mapping, so the result equals
  the cached list and the apply no-op check skips the write.

Time is an input (``now``), never read here: ``desired()`` stays free of clocks and the tests are exact.
:func:`merge` works on a whole list (conditions of other writers are kept, in order); :func:`for_apply`
returns only the caller's conditions — what a server-side apply of status should carry, since the list
is a map keyed by ``type`` and other managers' conditions stay theirs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

__all__ = (
    "FALSE",
    "TRUE",
    "UNKNOWN",
    "Condition",
    "find",
    "for_apply",
    "format_time",
    "is_true",
    "merge",
    "remove",
    "set_condition",
)

TRUE: Final = "True"
FALSE: Final = "False"
UNKNOWN: Final = "Unknown"
Status = Literal["True", "False", "Unknown"]
_STATUSES: Final = frozenset({TRUE, FALSE, UNKNOWN})
#: metav1.Condition validation: reason is CamelCase-ish, ≤ 1024; type a qualified name ≤ 316; message ≤ 32768.
_REASON: Final = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_TYPE: Final = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                          r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")  # fmt: skip
_MESSAGE_MAX: Final = 32768


@dataclass(frozen=True, slots=True)
class Condition:
    """What a controller wants one condition to say (no time: that is decided by :func:`merge`)."""

    type: str
    status: Status
    reason: str
    message: str = ""
    observed_generation: int | None = None

    def __post_init__(self) -> None:
        if not _TYPE.match(self.type) or len(self.type) > 316:
            raise ValueError(f"condition type {self.type!r} is not a qualified name")
        if self.status not in _STATUSES:
            raise ValueError(f"condition status {self.status!r} is not True, False or Unknown")
        if not _REASON.match(self.reason) or len(self.reason) > 1024:
            raise ValueError(f"condition reason {self.reason!r} must be CamelCase ([A-Za-z][A-Za-z0-9_,:]*)")
        if self.observed_generation is not None and self.observed_generation < 0:
            raise ValueError("observedGeneration must not be negative")


def format_time(now: datetime) -> str:
    """RFC 3339 in UTC at second precision, as ``metav1.Time`` serialises."""
    if now.tzinfo is None:
        raise ValueError("condition times must be timezone-aware")
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _message(text: str) -> str:
    return text if len(text) <= _MESSAGE_MAX else text[: _MESSAGE_MAX - 3] + "..."


def _render(want: Condition, previous: Mapping[str, Any] | None, now: str) -> Mapping[str, Any]:
    """The condition dict for ``want`` given what is on the object now."""
    message = _message(want.message)
    if previous is not None and previous.get("status") == want.status:
        transition = previous.get("lastTransitionTime") or now
    else:
        transition = now
    out: dict[str, Any] = {
        "type": want.type,
        "status": want.status,
        "reason": want.reason,
        "message": message,
        "lastTransitionTime": transition,
    }
    if want.observed_generation is not None:
        out["observedGeneration"] = want.observed_generation
    if previous is not None and _same(previous, out):
        return previous  # unchanged: keep the very mapping, so the list compares equal
    return out


def _same(previous: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    keys = ("type", "status", "reason", "message", "lastTransitionTime", "observedGeneration")
    return all(previous.get(k, "" if k == "message" else None) == new.get(k) for k in keys)


def _index(conditions: Iterable[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in conditions or () if isinstance(c, Mapping) and c.get("type")}


def find(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    """The condition of ``type_`` (None when absent)."""
    return _index(conditions).get(type_)


def is_true(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> bool:
    """True when the condition of ``type_`` exists with status True."""
    found = find(conditions, type_)
    return found is not None and found.get("status") == TRUE


def merge(
    conditions: Sequence[Mapping[str, Any]] | None, wanted: Iterable[Condition], *, now: datetime
) -> list[Mapping[str, Any]]:
    """``conditions`` with every ``wanted`` condition set: existing order kept, new types appended.

    Conditions of types not in ``wanted`` (other writers', or ones this controller no longer sets)
    are kept as they are; use :func:`remove` to drop one.
    """
    stamp = format_time(now)
    want = _unique(wanted)
    out: list[Mapping[str, Any]] = []
    seen: set[str] = set()
    for cond in conditions or ():
        if not isinstance(cond, Mapping):
            continue
        ctype = str(cond.get("type") or "")
        if ctype in want and ctype not in seen:
            out.append(_render(want[ctype], cond, stamp))
            seen.add(ctype)
        elif ctype not in want:
            out.append(cond)
    out.extend(_render(w, None, stamp) for t, w in want.items() if t not in seen)
    return out


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None, wanted: Condition, *, now: datetime
) -> list[Mapping[str, Any]]:
    """:func:`merge` for one condition."""
    return merge(conditions, (wanted,), now=now)


def remove(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> list[Mapping[str, Any]]:
    """``conditions`` without the condition of ``type_``."""
    return [c for c in conditions or () if isinstance(c, Mapping) and c.get("type") != type_]


def for_apply(
    current: Sequence[Mapping[str, Any]] | None, wanted: Iterable[Condition], *, now: datetime
) -> list[Mapping[str, Any]]:
    """Only the ``wanted`` conditions, rendered against ``current`` (the cached object's list).

    This is the ``status.conditions`` of a server-side apply body: the caller owns exactly these
    types, ``lastTransitionTime`` and ``observedGeneration`` are carried over unchanged when nothing
    flipped, so applying it to a converged object is a no-op. Order follows ``wanted``.
    """
    stamp = format_time(now)
    have = _index(current)
    return [_render(w, have.get(t), stamp) for t, w in _unique(wanted).items()]


def _unique(wanted: Iterable[Condition]) -> dict[str, Condition]:
    out: dict[str, Condition] = {}
    for cond in wanted:
        if cond.type in out:
            raise ValueError(f"condition {cond.type!r} given twice")
        out[cond.type] = cond
    return out
