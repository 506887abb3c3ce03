"""Preflight: the team queues whose GPU limit the chain's Kueue configuration would stop enforcing.

Kueue rewrites every Workload's accelerator requests into credits (``resources.transformations``,
``strategy: Replace``: ``nvidia.com/gpu`` → ``credits.gpustack.ai/nvidia`` × 1,600,000 per card: the
transformation the chart configures and ``api/kueue_config.py`` generates), and with ``quotaCheckStrategy:
IgnoreUndeclared`` a queue admits what it does not declare. So a
ClusterQueue (or a Cohort: its ``resourceGroups`` are quota too) whose flavor holds quota in a rewritten
resource and not in its credits admits those Workloads **without a GPU limit** — a failure, printed with
the credits quota that keeps the limit: per flavor and credits resource, each of ``nominalQuota``,
``borrowingLimit`` and ``lendingLimit`` the rewritten entries all set, summed over them (``nvidia.com/gpu``
and ``nvidia.com/gpu.shared`` both become ``credits.gpustack.ai/nvidia``), times the transformation's output.

- the flavor also declares the credits resource with those limits: ``ok`` (the limit holds in credits);
  with other values: ``warn`` (a limit holds, not the one the GPU quota says — both shown in cards);
- a limit the GPU entries set and the credits entry lacks (a ``borrowingLimit`` in a cohort): ``fail``;
- a ``.sliced.units`` quota (``multiplyBy``: each Workload's credits depend on its ``.sliced`` request):
  ``fail`` without a fixed equivalent — choose a credits quota (1,600,000 per card);
- a resource no transformation rewrites: not listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, kueue_config
from gpustack_worker.cli.preflight.preflighting import SHOWN, Outcome, Result
from gpustack_worker.runtime.quantity import parse

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

__all__ = ("LIMITS", "Finding", "findings", "queue_impact")

#: The limits of a flavor's resource quota (Kueue ``ResourceQuota``), in the order they are printed.
LIMITS: Final = ("nominalQuota", "borrowingLimit", "lendingLimit")
_FIX_ELSE: Final = "or move these Workloads to GPUStack's pools (docs/operations.md, Preflight)"
#: Kueue: every flavor of a resource group lists exactly the group's ``coveredResources``.
_COVERED: Final = "(and to its resource group's coveredResources, so to every flavor of that group)"


@dataclass(frozen=True, slots=True)
class _Rewrite:
    credit: str
    #: Credits per unit of the input; ``None`` when the output is multiplied by another request.
    per: Decimal | None
    multiply_by: str = ""


def _rewrites(transformations: Iterable[Mapping[str, Any]]) -> dict[str, _Rewrite]:
    out = {}
    for t in transformations:
        (credit, per), *_ = dict(t["outputs"]).items()
        by = str(t.get("multiplyBy") or "")
        out[str(t["input"])] = _Rewrite(str(credit), None if by else parse(per), by)
    return out


@dataclass(frozen=True, slots=True)
class Finding:
    """One flavor's quota in one credits resource: what happens to it, and the quota that keeps it."""

    outcome: Outcome
    text: str
    #: The credits quota entry to add (or complete) in the flavor; empty when nothing is to add.
    add: str = ""
    flavor: str = ""
    credit: str = ""
    #: The credits limits equivalent to the rewritten quota (empty: no fixed equivalent).
    quota: Mapping[str, str] = field(default_factory=dict)


def _number(value: Decimal) -> str:
    return str(int(value)) if value == value.to_integral_value() else format(value.normalize(), "f")


def _cards(credits: Decimal) -> str:
    cards = credits / keys.UNITS_PER_ACCELERATOR
    return f"{_number(cards)} card{'' if cards == 1 else 's'}"


def _shown(entry: Mapping[str, Any]) -> str:
    limits = [f"{limit} {entry[limit]}" for limit in LIMITS[1:] if entry.get(limit) is not None]
    return f"{entry.get('name')}={entry.get('nominalQuota')}" + (f" ({', '.join(limits)})" if limits else "")


def _wanted(
    entries: Sequence[Mapping[str, Any]], rewrites: Mapping[str, _Rewrite]
) -> dict[str, Decimal] | str:
    """The credits limits equivalent to ``entries`` (all rewritten into one credits resource), or why
    there is no fixed equivalent."""
    out: dict[str, Decimal] = {}
    for limit in LIMITS:
        values = [entry.get(limit) for entry in entries]
        if limit != "nominalQuota" and any(v is None for v in values):
            continue  # a resource without this limit is unlimited there, so the sum is too
        total = Decimal(0)
        for entry, value in zip(entries, values, strict=True):
            rewrite = rewrites[str(entry.get("name"))]
            if rewrite.per is None:
                return (
                    f"{entry.get('name')} has no fixed equivalent (1 credit per unit times each Workload's "
                    f"{rewrite.multiply_by})"
                )
            amount = parse(value if value is not None else 0)
            if amount is None:
                return f"{entry.get('name')} {limit} {value!r} is not a quantity"
            total += amount * rewrite.per
        out[limit] = total
    return out


def _entry(credit: str, wanted: Mapping[str, Decimal]) -> str:
    fields = ", ".join(f"{limit}: {_number(wanted[limit])}" for limit in LIMITS if limit in wanted)
    return f"{{name: {credit}, {fields}}} ({_cards(wanted['nominalQuota'])})"


def _judge(
    flavor: str,
    credit: str,
    entries: Sequence[Mapping[str, Any]],
    declared: Mapping[str, Any] | None,
    rewrites: Mapping[str, _Rewrite],
    tense: str,
) -> Finding:
    counted = ", ".join(_shown(e) for e in entries)
    wanted = _wanted(entries, rewrites)
    if declared is None:
        lost = (
            f"flavor {flavor}: {counted} {tense}: Workloads ask {credit} instead, which this queue does "
            f"not declare, so it admits them without a GPU limit"
        )
        if isinstance(wanted, str):
            return Finding(
                Outcome.FAIL,
                f"{lost}; {wanted}",
                f"add a {credit} quota of your choosing to flavor {flavor} "
                f"({keys.UNITS_PER_ACCELERATOR} per card) {_COVERED}",
            )
        return Finding(Outcome.FAIL, lost, f"add {_entry(credit, wanted)} to flavor {flavor} {_COVERED}")
    if isinstance(wanted, str):
        return Finding(Outcome.OK, f"flavor {flavor}: {counted} is counted as {_shown(declared)}")
    missing = [limit for limit in wanted if declared.get(limit) is None]
    if missing:
        return Finding(
            Outcome.FAIL,
            f"flavor {flavor}: {counted} {tense}; {_shown(declared)} lacks {', '.join(missing)}, so that "
            f"limit is lost",
            f"set {', '.join(f'{m}: {_number(wanted[m])}' for m in missing)} on {credit} in flavor {flavor}",
        )
    have = {limit: parse(declared[limit]) for limit in wanted}
    unreadable = [f"{limit} {declared[limit]!r}" for limit, value in have.items() if value is None]
    if unreadable:
        return Finding(
            Outcome.FAIL,
            f"flavor {flavor}: {credit} {', '.join(unreadable)} is not a quantity",
            f"make {credit} in flavor {flavor} {_entry(credit, wanted)}",
        )
    differ = [
        f"{limit} {declared[limit]} ({_cards(value)}) where {counted} says {_number(wanted[limit])} "
        f"({_cards(wanted[limit])})"
        for limit, value in have.items()
        if value is not None and value != wanted[limit]
    ]
    if differ:
        return Finding(
            Outcome.WARN,
            f"flavor {flavor}: {counted} {tense}; the limit holds in {credit}, but at " + "; ".join(differ),
            f"make {credit} in flavor {flavor} {_entry(credit, wanted)} if the GPU quota is the intended one",
        )
    cards = _cards(wanted["nominalQuota"])
    return Finding(Outcome.OK, f"flavor {flavor}: {counted} is kept as {_shown(declared)} ({cards})")


def findings(
    obj: Mapping[str, Any], *, configured: bool, transformations: Iterable[Mapping[str, Any]] | None = None
) -> list[Finding]:
    """Per flavor and credits resource of ``obj`` (a ClusterQueue or a Cohort) whose quota counts a
    resource the transformations (default: ours, :func:`kueue_config.transformations`) rewrite.
    ``configured``: Kueue already runs with them (the change has happened)."""
    rewrites = _rewrites(kueue_config.transformations() if transformations is None else transformations)
    tense = "no longer counts" if configured else "would stop counting"
    quota: dict[tuple[str, str], Mapping[str, Any]] = {}
    rewritten: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for group in (obj.get("spec") or {}).get("resourceGroups") or ():
        for flavor in group.get("flavors") or ():
            name = str(flavor.get("name"))
            for res in flavor.get("resources") or ():
                quota[(name, str(res.get("name")))] = res
                rewrite = rewrites.get(str(res.get("name")))
                if rewrite is not None:
                    rewritten.setdefault((name, rewrite.credit), []).append(res)
    out = []
    for (flavor, credit), entries in rewritten.items():
        found = _judge(flavor, credit, entries, quota.get((flavor, credit)), rewrites, tense)
        wanted = _wanted(entries, rewrites)
        equivalent = {} if isinstance(wanted, str) else {k: _number(v) for k, v in wanted.items()}
        out.append(replace(found, flavor=flavor, credit=credit, quota=equivalent))
    return out


_RANK: Final = {Outcome.OK: 0, Outcome.WARN: 1, Outcome.FAIL: 2}


def _result(check: str, found: Sequence[Finding]) -> Result:
    outcome = max((f.outcome for f in found), key=_RANK.__getitem__)
    texts = [f.text for f in found]
    adds = [f.add for f in found if f.add]
    items = tuple(f"{f.text} — fix: {f.add}" if f.add else f.text for f in found)
    if len(found) > SHOWN:
        shown = "; ".join(texts[:SHOWN])
        detail = f"{len(found)} flavor quotas: {shown}; +{len(found) - SHOWN} more (--verbose or -o json)"
    else:
        detail = "; ".join(texts)
    fix = ""
    if adds:
        listed = "; ".join(adds) if len(adds) <= SHOWN else f"{len(adds)} changes, listed with --verbose"
        fix = f"{listed}, {_FIX_ELSE}" if outcome is Outcome.FAIL else listed
    return Result(check, outcome, detail, fix, items=items)


def queue_impact(
    queues: Sequence[Mapping[str, Any]],
    cohorts: Sequence[Mapping[str, Any]] = (),
    *,
    configured: bool,
    transformations: Iterable[Mapping[str, Any]] | None = None,
) -> list[Result]:
    """One result per ClusterQueue (``clusterqueue:<name>``) and Cohort (``cohort:<name>``) with quota in a
    rewritten resource, worst finding first decides; one ``clusterqueues`` ok row when there is none."""
    listed = list(transformations) if transformations is not None else None
    out = []
    for kind, objects in (("clusterqueue", queues), ("cohort", cohorts)):
        for obj in sorted(objects, key=lambda o: str((o.get("metadata") or {}).get("name"))):
            found = findings(obj, configured=configured, transformations=listed)
            if found:
                name = str((obj.get("metadata") or {}).get("name"))
                out.append(_result(f"{kind}:{name}", found))
    if not out:
        out.append(
            Result(
                "clusterqueues",
                Outcome.OK,
                "no ClusterQueue or Cohort counts a resource the transformations rewrite",
            )
        )
    return out
