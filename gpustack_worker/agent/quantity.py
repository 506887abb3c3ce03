"""Exact parsing of Kubernetes resource quantities (``"64"``, ``"3500m"``, ``"16Gi"``, ``"1e3"``).

The agent reads two kinds of quantity from ``Node.status.capacity``: the CPU count it rounds up into
``general.feature.gpustack.ai/<gKey>.count`` and the device plugin's bare ``.sliced`` / ``.partitioned``
pools that gate the counting keys. Both must be exact: ``3500m`` is 4 cores, not 3 (float rounding of
milli-values could tip a boundary), so the value is a :class:`fractions.Fraction`.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ("ceil_quantity", "parse_quantity")

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?\d+)|(?P<decimal>[numkMGTPE]?))$"
)


def parse_quantity(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity string; raises ``ValueError`` when it is not one."""
    m = _QUANTITY.match(text.strip())
    if not m:
        raise ValueError(f"not a quantity: {text!r}")
    value = Fraction(m["number"])
    if m["binary"]:
        value *= _BINARY[m["binary"]]
    elif m["exp"] is not None:
        value *= Fraction(10) ** int(m["exp"])
    else:
        value *= _DECIMAL[m["decimal"] or ""]
    return -value if m["sign"] == "-" else value


def ceil_quantity(text: str | None) -> int:
    """A quantity rounded up to a whole number; ``0`` when absent or unparsable (treated as no pool)."""
    if not text:
        return 0
    try:
        return math.ceil(parse_quantity(text))
    except ValueError:
        return 0
