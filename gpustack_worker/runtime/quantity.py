"""Kubernetes resource quantities compared by value ("64" == "64000m", "1Gi" == "1024Mi").

The API server canonicalises quantities it stores (allocatable, requests, Kueue nominal quotas), so
the value we apply and the value we read back can differ in spelling only. The apply no-op check uses
:func:`parse` to compare such strings semantically instead of issuing a write every reconcile.
Values are exact decimals, so :func:`ceil_quantity` rounds ``3500m`` up to 4 cores without a float
rounding a boundary the wrong way (the node agent publishes CPU counts and gates on device pools).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Final

__all__ = ("ceil_quantity", "parse", "same_quantity")

_RE: Final = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")
_SUFFIX: Final = {
    None: Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse(text: str) -> Decimal | None:
    """The numeric value of a quantity string, or None if it is not one."""
    match = _RE.match(text.strip())
    if match is None:
        return None
    number, exponent, suffix = match.groups()
    try:
        value = Decimal(number)
        if exponent:
            return value * (Decimal(10) ** int(exponent[1:]))
        return value * _SUFFIX[suffix]
    except (InvalidOperation, KeyError):
        return None


def same_quantity(a: str, b: str) -> bool:
    """True when both strings are quantities of equal value."""
    qa, qb = parse(a), parse(b)
    return qa is not None and qb is not None and qa == qb


def ceil_quantity(text: str | None) -> int:
    """A quantity rounded up to a whole number; ``0`` when absent, empty or not a quantity."""
    value = parse(text) if text else None
    return 0 if value is None else math.ceil(value)
