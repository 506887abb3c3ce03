"""Text algorithms shared with the rest of GPUStack: name normalisation, label-value sanitising, FNV-1a.

These are part of the contract with other components (the Device Manager, GPUStack's own operator):
an accelerator key or CPU key built here must be byte-identical to theirs, so the rules follow theirs
exactly, including their quirks (prefix stripping happens only at the exact moment the buffer equals
the prefix, so a brand written as two words, like ``Meta X``, is never stripped).
"""

from __future__ import annotations

import re

__all__ = ("fnv64a_hex", "normalize_name", "sanitize_label_value", "strip_cpu_cruft")

_SEPARATORS = frozenset("-_.")
_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1

_TRADEMARKS = re.compile(r"\((?:R|r|TM|tm)\)")
_LEADING_WORD = re.compile(r"^(?:Genuine |\d+(?:st|nd|rd|th) Gen )")
_TRAILING_CORES = re.compile(r" \d+-Cores?$", re.IGNORECASE)


def fnv64a_hex(data: bytes | str) -> str:
    """FNV-1a 64 over ``data`` rendered as 16 zero-padded lowercase hex digits.

    Each byte is xor-ed into the hash, which is then multiplied by the FNV prime modulo 2**64, starting
    from the FNV offset basis: the standard algorithm, which GPUStack's names and profiles hash with.
    """
    raw = data.encode() if isinstance(data, str) else data
    h = _FNV64_OFFSET
    for byte in raw:
        h ^= byte
        h = (h * _FNV64_PRIME) & _MASK64
    return f"{h:016x}"


def strip_cpu_cruft(name: str) -> str:
    """Step 1 of NormalizeName for CPU names: drop clock suffixes, trademarks and marketing words."""
    cut = name.split(" @ ", 1)[0]
    cut = _TRADEMARKS.sub("", cut)
    while True:
        shorter = _LEADING_WORD.sub("", cut, count=1)
        if shorter == cut:
            break
        cut = shorter
    cut = cut.strip()
    if cut.endswith(" CPU"):
        cut = cut[: -len(" CPU")]
    if cut.endswith(" Processor"):
        cut = cut[: -len(" Processor")]
    return _TRAILING_CORES.sub("", cut)


def normalize_name(name: str, prefix: str, max_length: int, strip_cruft: bool) -> str:
    """GPUStack's ``NormalizeName(name, prefix, maxLength, stripCruft)``, which its keys are built with.

    Lowercases ``A-Z``, keeps ``a-z0-9``, turns spaces into ``-``, keeps ``-_.`` only after a
    non-separator, drops everything else, clears the buffer at the moment it equals ``prefix``
    (case-insensitively), stops at ``max_length`` and drops one trailing separator.
    """
    if strip_cruft:
        name = strip_cpu_cruft(name)
    if max_length <= 0:
        max_length = len(name)
    lowered_prefix = prefix.lower()
    buf: list[str] = []
    for ch in name:
        if len(buf) >= max_length:
            break
        if "A" <= ch <= "Z":
            ch = ch.lower()
        elif ch == " ":
            ch = "-"
        if ch in _SEPARATORS:
            if not buf or buf[-1] in _SEPARATORS:
                continue
        elif not ("a" <= ch <= "z" or "0" <= ch <= "9"):
            continue
        buf.append(ch)
        if prefix and len(buf) == len(prefix) and "".join(buf).lower() == lowered_prefix:
            buf.clear()
    if buf and buf[-1] in _SEPARATORS:
        buf.pop()
    return "".join(buf)


def sanitize_label_value(value: str) -> str:
    """``kubemeta.SanitizeLabelValue``: a label-safe rendering that keeps case.

    ``NVIDIA A10G`` → ``NVIDIA-A10G``.
    """
    buf: list[str] = []
    for ch in value:
        if len(buf) >= 63:
            break
        if ch == " ":
            ch = "-"
        if ch in _SEPARATORS:
            if not buf or buf[-1] in _SEPARATORS:
                continue
        elif not ch.isascii() or not ch.isalnum():
            continue
        buf.append(ch)
    if buf and buf[-1] in _SEPARATORS:
        buf.pop()
    return "".join(buf)
