"""Kueue's quota messages in cards, as a person reads them (issue 29 item 8: ``38400k > 25600k`` is
``24 cards > 16 cards``).

The chain's queues count accelerators in credits (``credits.gpustack.ai/<mfr>``,
:data:`~gpustack_worker.api.keys.UNITS_PER_ACCELERATOR` per card), so Kueue's messages about them speak
credits. :func:`in_cards` rewrites the two quota reasons Kueue's flavor assigner writes
(``pkg/scheduler/flavorassigner/flavorassigner.go`` ``fitsResourceQuota``, v0.19.2) for a credits resource
with the card counts first and the credits in parentheses; any other text, and those reasons for other
resources, stay as they are. :func:`cards` is one amount in cards.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

from gpustack_worker.api import keys
from gpustack_worker.runtime.quantity import parse

__all__ = ("cards", "in_cards", "quota_in_cards")

_RESOURCE: Final = rf"(?P<res>{re.escape(keys.CREDITS_PREFIX)}[A-Za-z0-9._-]+)"
#: ``insufficient quota for R in flavor F, previously considered podsets requests (A) + current podset
#: request (B) > maximum capacity (C)`` — the request can never fit the queue.
_EXCEEDS: Final = re.compile(
    rf"insufficient quota for {_RESOURCE} in flavor (?P<flavor>[^\s,]+), previously considered podsets "
    r"requests \((?P<prev>[^()]*)\) \+ current podset request \((?P<req>[^()]*)\) > maximum capacity "
    r"\((?P<max>[^()]*)\)"
)
#: ``insufficient unused quota for R in flavor F, N more needed`` — it fits once others release quota.
_UNUSED: Final = re.compile(
    rf"insufficient unused quota for {_RESOURCE} in flavor (?P<flavor>[^\s,]+), (?P<more>\S+) more needed"
)
_CENT: Final = Decimal("0.01")


def cards(credits: str) -> str | None:
    """``credits`` (a quantity) in cards — ``24 cards``, ``1 card``, ``2.5 cards``, ``<0.01 cards`` — or
    None when it is not a quantity."""
    value = parse(credits)
    if value is None:
        return None
    count = value / keys.UNITS_PER_ACCELERATOR
    if count == count.to_integral_value():
        whole = int(count)
        return f"{whole} card" if whole == 1 else f"{whole} cards"
    rounded = count.quantize(_CENT)
    if rounded == 0:
        return "<0.01 cards"
    return f"{rounded.normalize():f} cards"


def quota_in_cards(resource: str, quantity: str) -> str:
    """``resource quantity`` of a queue's quota, with the cards it is worth for a credits resource."""
    worth = cards(quantity) if resource.startswith(keys.CREDITS_PREFIX) else None
    return f"{resource} {quantity}" + (f" ({worth})" if worth else "")


def _exceeds(m: re.Match[str]) -> str:
    amounts = [cards(m[g]) for g in ("prev", "req", "max")]
    if any(a is None for a in amounts):
        return m[0]
    prev, req, most = amounts
    return (
        f"insufficient quota for {m['res']} in flavor {m['flavor']}: previously considered podsets {prev} + "
        f"this podset {req} > at most {most} (credits: {m['prev']} + {m['req']} > {m['max']})"
    )


def _unused(m: re.Match[str]) -> str:
    more = cards(m["more"])
    if more is None:
        return m[0]
    return (
        f"insufficient unused quota for {m['res']} in flavor {m['flavor']}: {more} more needed "
        f"(credits: {m['more']})"
    )


def in_cards(message: str) -> str:
    """``message`` with Kueue's credits quota reasons told in cards (credits in parentheses); the same
    text when it has none."""
    return _UNUSED.sub(_unused, _EXCEEDS.sub(_exceeds, message))
