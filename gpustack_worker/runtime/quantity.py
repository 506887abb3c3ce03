"""Kubernetes resource quantities compared by value ("64" == "64000m", "1Gi" == "1024Mi").

The API server canonicalises quantities it stores (allocatable, requests, Kueue nominal quotas), so
the value we apply and the value we read back can differ in spelling only. The apply no-op check uses
:func:`parse` to compare such strings semantically instead of issuing a write every reconcile.
Values are exact decimals, so :func:`ceil_quantity` rounds ``3500m`` up to 4 cores without a float
rounding a boundary the wrong way (the node agent publishes CPU counts and gates on device pools).

Parsing never raises. Whatever it cannot read is ``None`` — text that is not a quantity, a value of
another type, and a quantity whose magnitude lies outside ``10^±64`` (far beyond any value a
Kubernetes field means: int64 ends below ``10^19``). The API server stores such values verbatim (a Node
``status.capacity.cpu`` of ``1e1000000`` comes back as ``10e999999``), so a reader must expect them;
evaluating one exactly would need a million-digit number.
"""

from __future__ import annotations

import math
import re
from decimal import Context, Decimal, DecimalException, Overflow, Subnormal, Underflow
from decimal import InvalidOperation as _Invalid
from typing import Final

__all__ = ("LIMIT_EXPONENT", "ceil_quantity", "format_integer", "parse", "same_quantity")

#: Magnitudes outside ``10^-LIMIT_EXPONENT .. 10^LIMIT_EXPONENT`` read as "not a quantity".
LIMIT_EXPONENT: Final = 64

_RE: Final = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")
#: Decimal suffixes as powers of ten.
_SUFFIX: Final[dict[str | None, int]] = {
    None: 0,
    "n": -9,
    "u": -6,
    "m": -3,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
#: Exact enough for every mantissa a real quantity has; out-of-range results trap instead of rounding.
_CONTEXT: Final = Context(
    prec=100,
    Emax=LIMIT_EXPONENT,
    Emin=-LIMIT_EXPONENT,
    traps=[_Invalid, Overflow, Underflow, Subnormal],
)


def parse(text: object) -> Decimal | None:
    """The numeric value of a quantity (string, or an int the server returned bare), or None if it is
    not one or is out of range (see the module docstring). Never raises."""
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text) if abs(text) < 10**LIMIT_EXPONENT else ""
    if not isinstance(text, str):
        return None
    match = _RE.match(text.strip())
    if match is None:
        return None
    number, exponent, suffix = match.groups()
    try:
        sign, digits, places = Decimal(number).as_tuple()
        if not any(digits):
            return Decimal(0)
        if exponent:
            power = exponent[1:].lstrip("+-")
            if len(power) > 6:  # |exponent| ≥ 10^6: out of range whatever the mantissa
                return None
            shift = int(exponent[1:])
        else:
            shift = _SUFFIX.get(suffix, 0)
        if not isinstance(places, int):  # pragma: no cover - the pattern admits no NaN/Infinity
            return None
        significant = tuple(_strip_leading_zeros(digits))
        exact = Decimal((sign, significant, places + shift))
        if abs(exact.adjusted()) > LIMIT_EXPONENT:
            return None
        if suffix in _BINARY:
            exact = _CONTEXT.multiply(exact, Decimal(2 ** _BINARY[suffix]))
        # Through the context: an out-of-range result traps instead of rounding.
        return _CONTEXT.plus(exact)
    except (DecimalException, ValueError):
        return None


def _strip_leading_zeros(digits: tuple[int, ...]) -> list[int]:
    out = list(digits)
    while len(out) > 1 and out[0] == 0:
        out.pop(0)
    return out


def same_quantity(a: object, b: object) -> bool:
    """True when both are quantities of equal value."""
    qa, qb = parse(a), parse(b)
    return qa is not None and qb is not None and qa == qb


def ceil_quantity(text: object) -> int:
    """A quantity rounded up to a whole number; ``0`` when absent, empty, not a quantity or out of range."""
    value = parse(text) if text else None
    return 0 if value is None else math.ceil(value)


_DECIMAL_SUFFIXES: Final = ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"))


def format_integer(value: int) -> str:
    """An integer in the API server's canonical decimal form (``1600000`` → ``1600k``, ``16000000`` →
    ``16M``, ``8`` → ``8``): writing it this way makes a desired value equal to the stored text, so an
    atomic value holding it (a ClusterQueue's resource groups) is never rewritten just to re-spell it."""
    if value == 0:
        return "0"
    for exponent, suffix in _DECIMAL_SUFFIXES:
        if value % 10**exponent == 0:
            return f"{value // 10**exponent}{suffix}"
    return str(value)
