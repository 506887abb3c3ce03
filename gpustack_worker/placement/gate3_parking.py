"""Gate 3's parking: a request that can never fit as the fleet stands stops cycling (pure; docs/admission.md
"Gate 3: a request that never fits").

Gate 3 answers ``Retry`` when the cards of the nodes Kueue assigned are short; Kueue then evicts the
Workload, resets the check to ``Pending`` (counting the entry's ``retryCount`` up: Kueue's own count of
this check's retries) and places it again. When a role asks more than any node of its pool has free
(:func:`~gpustack_worker.placement.gate3.shortfalls`), that cycle can never end by itself: every retry
costs an eviction, a requeue and a reservation of quota and a topology domain nobody else can use
meanwhile. So, the joint check's parking applied to Gate 3:

* **while retrying** (``retryCount`` below the bound): the ``Retry`` verdict is written as ever, its
  message extended by the shortfall, and the Workload carries :data:`RECORD` — the shortfall's message
  (every such role, the largest fit and its node) and the flavors each PodSet was placed on — which the
  ModelDeployment's ``Placeable=False/NeverFits`` condition relays (:mod:`.deployments`);
* **park** (``retryCount`` reached the bound, ``node-devices-never-fits-retries``, and it still falls
  short): no verdict; the record says so and ``spec.active=false`` is written (the joint check's switch):
  Kueue evicts the Workload (``Deactivated``) and frees its quota and domain; it stays inactive;
* **resume**: a Workload Gate 3 parked (the record on an inactive Workload) is judged against the fleet
  again whenever a Node or a ``Devices`` ledger changes, with the flavors the record names; once every role
  fits some node of its pool (a node joined, a ledger freed cards) it is reactivated and the record
  dropped; Kueue queues it again and Gate 3 judges it as any other. While it still falls short, only the
  record's message follows the fleet (a new largest fit);
* **fits** (a ``Ready`` verdict, or a ``Retry`` whose roles all fit some node — fragmentation, room still
  promised to others): the record is dropped.

Kueue's ``retryCount`` counts every ``Retry`` of this check on the Workload, also the earlier ones that
were not a shortfall: a Workload that has been retried that often parks at its first shortfall (and a
resumed one, which keeps its count, at once when it falls short again: one reservation, no cycle).
Nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

import orjson

from gpustack_worker.api import keys
from gpustack_worker.placement.gate3 import RETRY, Shortfall, Verdict

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = (
    "NEVER_FITTING_STATES",
    "RECORD",
    "Action",
    "Decision",
    "Record",
    "decide_judged",
    "decide_parked",
    "is_parked",
    "never_fitting_state",
    "read_record",
    "retry_count",
    "with_shortfall",
)

#: Gate 3's annotation on a Workload that falls short of the fleet (JSON ``{"message", "flavors"}``).
#: Gate 3's own key (its field manager owns it); it lives here, with its only writer and reader.
RECORD: Final = "worker.gpustack.ai/never-fits"
_MESSAGE_MAX: Final = 4096


class Action(StrEnum):
    """What Gate 3 does besides (or instead of) a verdict."""

    VERDICT = "Verdict"
    """Write the verdict; keep :attr:`Decision.record` on the Workload (drop it when None)."""
    PARK = "Park"
    """No verdict: write the record and ``spec.active=false``."""
    STAY_PARKED = "StayParked"
    """A parked Workload still falls short: keep it inactive, the record's message updated."""
    RESUME = "Resume"
    """A parked Workload fits now: ``spec.active=true`` and drop the record."""


@dataclass(frozen=True, slots=True)
class Record:
    """What :data:`RECORD` holds."""

    message: str
    #: PodSet name → the flavors it was placed on (the pool judged while parked, when no admission is left).
    flavors: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def encode(self) -> str:
        body = {"message": self.message, "flavors": {k: list(v) for k, v in sorted(self.flavors.items())}}
        return orjson.dumps(body).decode()


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    record: Record | None


def _cut(text: str) -> str:
    return text if len(text) <= _MESSAGE_MAX else text[: _MESSAGE_MAX - 3] + "..."


def read_record(wl: Mapping[str, Any]) -> Record | None:
    """The Workload's :data:`RECORD` (None when absent or unreadable)."""
    raw = ((wl.get("metadata") or {}).get("annotations") or {}).get(RECORD)
    if not isinstance(raw, str):
        return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("message"), str):
        return None
    flavors = body.get("flavors") if isinstance(body.get("flavors"), dict) else {}
    return Record(
        str(body["message"]),
        {
            str(k): tuple(str(f) for f in v)
            for k, v in (flavors or {}).items()
            if isinstance(v, list) and all(isinstance(f, str) for f in v)
        },
    )


def retry_count(wl: Mapping[str, Any]) -> int:
    """Kueue's ``retryCount`` of this check's entry: how often a ``Retry`` of it evicted the Workload."""
    for entry in (wl.get("status") or {}).get("admissionChecks") or ():
        if entry.get("name") == keys.NODE_DEVICES_CHECK:
            count = entry.get("retryCount")
            return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0
    return 0


def is_parked(wl: Mapping[str, Any]) -> bool:
    """Gate 3 parked it: the record is on it and it is inactive."""
    return (wl.get("spec") or {}).get("active") is False and read_record(wl) is not None


def never_fitting_state(wl: Mapping[str, Any]) -> tuple[str] | None:
    """``gpustack_workloads_never_fitting``'s label for a Workload: ``("parked",)`` when Gate 3 parked it,
    ``("retrying",)`` while it carries the record and is still active, None when Gate 3 found no shortfall."""
    if read_record(wl) is None:
        return None
    return ("parked",) if is_parked(wl) else ("retrying",)


#: The states :func:`never_fitting_state` reports, exported at zero when no Workload is in them.
NEVER_FITTING_STATES: Final = (("retrying",), ("parked",))


def _message(found: Sequence[Shortfall]) -> str:
    return "; ".join(s.describe() for s in found)


def _parked_message(found: Sequence[Shortfall], tries: int) -> str:
    return _cut(
        f"{_message(found)}; Gate 3 stopped retrying after {tries} retries: the Workload is deactivated "
        "until a node of its pool has room (a node joins, a ledger frees cards)"
    )


def decide_judged(
    wl: Mapping[str, Any],
    verdict: Verdict,
    found: Sequence[Shortfall],
    flavors: Mapping[str, tuple[str, ...]],
    bound: int,
) -> Decision:
    """For a Workload Gate 3 judges now (it holds a reservation and the check is ``Pending``): ``verdict``
    is :func:`~gpustack_worker.placement.gate3.judge`'s, ``found`` the shortfalls, ``flavors`` the flavors
    each PodSet was placed on, ``bound`` the retries before parking."""
    if verdict.state != RETRY or not found:
        return Decision(Action.VERDICT, None)
    tries = retry_count(wl)
    if tries >= bound:
        return Decision(Action.PARK, Record(_parked_message(found, tries), dict(flavors)))
    message = f"{_message(found)}; Gate 3 retry {tries + 1} of {bound} before it stops retrying"
    return Decision(Action.VERDICT, Record(_cut(message), dict(flavors)))


def decide_parked(wl: Mapping[str, Any], found: Sequence[Shortfall]) -> Decision:
    """For a Workload Gate 3 parked (:func:`is_parked`): ``found`` = the shortfalls against the record's
    flavors as the fleet stands now."""
    record = read_record(wl)
    if record is None or not found:
        return Decision(Action.RESUME, None)
    return Decision(Action.STAY_PARKED, Record(_parked_message(found, retry_count(wl)), record.flavors))


def with_shortfall(verdict: Verdict, record: Record | None) -> Verdict:
    """The ``Retry`` verdict with the record's message appended (what Kueue's eviction message shows)."""
    if record is None or verdict.state != RETRY:
        return verdict
    return Verdict(RETRY, _cut(f"{verdict.message}; {record.message}"))
