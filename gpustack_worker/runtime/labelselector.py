"""Label selectors in Kubernetes' string syntax (``kubectl get -l``, apimachinery ``labels.Parse``).

A selector is requirements joined by commas, all of which must hold (an empty selector selects
everything):

- ``key`` / ``!key`` — the label exists / does not;
- ``key=value``, ``key==value``, ``key!=value`` (``!=`` also selects objects without the label);
- ``key in (v1,v2)``, ``key notin (v1,v2)`` (``notin`` also selects objects without the label);
- ``key>N``, ``key<N`` — the label's value is an integer greater / less than ``N``.

Keys are qualified names with an optional DNS-subdomain prefix, values label values (63 characters at
most, alphanumeric at both ends, ``-_.`` inside, or empty) — a malformed selector is refused with a
message naming the offending part, as the API server refuses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, cast

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("LabelSelector", "SelectorError", "parse_selector")

Operator = Literal["exists", "!", "=", "!=", "in", "notin", ">", "<"]

_NAME: Final = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PREFIX: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE: Final = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_INTEGER: Final = re.compile(r"^-?[0-9]+$")
#: One requirement: key, then an operator and its operand (a set for in / notin), or nothing.
_REQUIREMENT: Final = re.compile(
    r"""^\s*(?P<neg>!)?\s*(?P<key>[^\s!=<>(),]+)\s*
        (?:(?P<op>==|=|!=|<|>|\bnotin\b|\bin\b)\s*(?P<operand>\([^()]*\)|[^\s(),]*)\s*)?$""",
    re.VERBOSE,
)


class SelectorError(ValueError):
    """A label selector that does not parse."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key, "")
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        if self.op in ("=", "in"):
            return has and value in self.values
        if self.op in ("!=", "notin"):
            return not has or value not in self.values
        if not has or not _INTEGER.match(value):
            return False
        return int(value) > int(self.values[0]) if self.op == ">" else int(value) < int(self.values[0])


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """Parsed requirements; :meth:`matches` is their conjunction."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)

    @property
    def everything(self) -> bool:
        return not self.requirements


def _check_key(key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix)):
        raise SelectorError(f"invalid label key {key!r}: the prefix must be a DNS subdomain")
    if not _NAME.match(name):
        raise SelectorError(
            f"invalid label key {key!r}: the name must be 63 characters at most, alphanumeric at both ends "
            "with '-', '_' or '.' inside"
        )


def _check_value(value: str, key: str) -> None:
    if not _VALUE.match(value):
        raise SelectorError(
            f"invalid value {value!r} for {key!r}: 63 characters at most, alphanumeric at both ends with "
            "'-', '_' or '.' inside, or empty"
        )


def _split(text: str) -> list[str]:
    """The requirements of ``text``: commas separate them except inside a parenthesised set."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in {text!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise SelectorError(f"unbalanced '(' in {text!r}")
    parts.append("".join(current))
    return parts


def _requirement(part: str) -> Requirement:
    found = _REQUIREMENT.match(part)
    if found is None:
        raise SelectorError(f"cannot parse requirement {part.strip()!r}")
    key, op, operand = found["key"], found["op"], found["operand"]
    _check_key(key)
    if found["neg"]:
        if op is not None:
            raise SelectorError(f"'!' takes a key alone: {part.strip()!r}")
        return Requirement(key, "!")
    if op is None:
        return Requirement(key, "exists")
    if op in ("in", "notin"):
        if not (operand.startswith("(") and operand.endswith(")")):
            raise SelectorError(f"{op!r} needs a parenthesised set of values: {part.strip()!r}")
        values = tuple(v.strip() for v in operand[1:-1].split(","))
        for value in values:
            _check_value(value, key)
        return Requirement(key, cast("Operator", op), tuple(sorted(set(values))))
    if operand.startswith("("):
        raise SelectorError(f"{op!r} takes one value, not a set: {part.strip()!r}")
    if op in ("<", ">"):
        if not _INTEGER.match(operand):
            raise SelectorError(f"{op!r} needs an integer: {part.strip()!r}")
        return Requirement(key, cast("Operator", op), (operand,))
    _check_value(operand, key)
    return Requirement(key, "=" if op == "==" else cast("Operator", op), (operand,))


def parse_selector(text: str) -> LabelSelector:
    """Parse ``text`` (raises :class:`SelectorError` naming what is wrong). Whitespace-only selects all."""
    if not text.strip():
        return LabelSelector()
    parts = _split(text)
    if any(not p.strip() for p in parts):
        raise SelectorError(f"empty requirement in {text!r}")
    return LabelSelector(tuple(_requirement(p) for p in parts))
