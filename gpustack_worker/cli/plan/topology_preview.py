"""``plan --from-cluster --topology-source FILE [--snapshot FILE]``: what applying a TopologySource would do
to the live pools, before it is applied.

The source in FILE is put where ``kubectl apply`` would put it (:func:`with_source`): a live source of the
same name is **changed** (its uid, finalizers and status kept — the NodeFeatures it owns keep their names,
its staleness clock its time — and its generation moved on when the spec differs), any other name is
**added**. The cluster so changed is planned exactly as ``plan --from-cluster`` plans the live one
(:func:`~gpustack_worker.cli.plan.cluster_plan.plan_cluster`: the controllers' own decisions —
``sources.decide`` for the source, the profile assigner, the flavor pass, ``queues.decide`` for each
ClusterQueue's migration), with ``--snapshot`` as what the source serves (else, for a configMap arm, the
live ConfigMap it references). :func:`preview` then reads that plan's changes — no rule of its own — into
what a person asks before applying: which Nodes' profile label changes (from → to, how many, a few
names), which flavors appear and disappear, each ClusterQueue's migration (``HoldAndDrain`` and
"dropping N flavor(s) that may be in use", or in place) and the source's decided ``Ready`` condition with
the selected Nodes its snapshot does not describe.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, kinds
from gpustack_worker.cli.plan.cluster_plan import FieldChange, LiveCluster, label_diff
from gpustack_worker.topology.sources import listed

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from gpustack_worker.cli.plan.cluster_plan import Change, DecidedSource, PlanReport

__all__ = ("QueueMigration", "SourceEdit", "TopologyPreview", "preview", "spec_diff", "with_source")

#: The Node label path whose changes are the profile changes.
_PROFILE_PATH: Final = f"metadata.labels[{keys.TOPOLOGY_PROFILE}]"
#: How a Node without a profile label is shown.
_NONE: Final = "(none)"


@dataclass(frozen=True, slots=True)
class SourceEdit:
    """What applying the file does to the TopologySource itself: ``create`` (no live source of that name),
    ``change`` (the spec fields that differ) or ``unchanged``."""

    name: str
    action: str
    fields: tuple[FieldChange, ...] = ()


@dataclass(frozen=True, slots=True)
class QueueMigration:
    """One ClusterQueue the change reaches: its stop policy as it would end (``None``: not changed) and its
    ``TopologyReady`` condition as the queue controller decides it."""

    name: str
    stop_policy: tuple[Any, Any] | None
    status: str
    reason: str
    message: str

    def line(self) -> str:
        stop = (
            f"stopPolicy {self.stop_policy[0] or '(absent)'} -> {self.stop_policy[1] or '(absent)'}; "
            if (self.stop_policy)
            else ""
        )
        return f"ClusterQueue {self.name}: {stop}TopologyReady={self.status}/{self.reason}: {self.message}"


@dataclass(frozen=True, slots=True)
class TopologyPreview:
    """What applying the source would do, read from the plan of the cluster with it applied."""

    edit: SourceEdit
    source: DecidedSource | None
    #: (profile before, profile after) → the Nodes whose label changes so ("(none)": no label).
    profiles: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    flavors_added: list[str] = field(default_factory=list)
    flavors_removed: list[str] = field(default_factory=list)
    #: Flavors deleted and created again under the same name (an immutable field changed).
    flavors_replaced: list[str] = field(default_factory=list)
    queues: list[QueueMigration] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        src = self.source
        return {
            "source": {
                "name": self.edit.name,
                "action": self.edit.action,
                "fields": [f.as_dict() for f in self.edit.fields],
                **(_decided(src) if src is not None else {}),
            },
            "profiles": [
                {"from": a, "to": b, "count": len(nodes), "nodes": nodes}
                for (a, b), nodes in sorted(self.profiles.items())
            ],
            "flavors": {
                "added": self.flavors_added,
                "removed": self.flavors_removed,
                "replaced": self.flavors_replaced,
            },
            "clusterQueues": [
                {
                    "name": q.name,
                    **(
                        {"stopPolicy": {"live": q.stop_policy[0], "desired": q.stop_policy[1]}}
                        if q.stop_policy
                        else {}
                    ),
                    "topologyReady": {"status": q.status, "reason": q.reason, "message": q.message},
                }
                for q in self.queues
            ],
        }

    def lines(self) -> list[str]:
        """The preview as a person reads it, above the plan's changes."""
        e = self.edit
        head = f"topology source {e.name}: {e.action}"
        out = [head + (":" if e.fields else "")]
        out += [f"      {f.path}: {_shown(f.live)} -> {_shown(f.desired)}" for f in e.fields]
        if self.source is not None:
            status, reason, message = self.source.ready
            out.append(f"  Ready={status}/{reason}: {message}")
        if not self.profiles:
            out.append("  profiles: no Node's profile changes")
        for (before, after), nodes in sorted(self.profiles.items()):
            out.append(f"  profile {before} -> {after}: {len(nodes)} node(s) ({listed(nodes)})")
        for what, names in (
            ("appear", self.flavors_added),
            ("disappear", self.flavors_removed),
            ("are replaced", self.flavors_replaced),
        ):
            if names:
                out.append(f"  flavors that {what} ({len(names)}): {', '.join(names)}")
        out += [f"  {q.line()}" for q in self.queues]
        if not self.queues:
            out.append("  queues: no ClusterQueue changes")
        return out


def _decided(src: DecidedSource) -> dict[str, Any]:
    status, reason, message = src.ready
    return {
        "ready": {"status": status, "reason": reason, "message": message},
        "selectedNodes": src.decision.status.get("selectedNodes"),
        "undescribedNodes": list(src.decision.undescribed),
    }


def _shown(value: Any) -> str:
    return "(absent)" if value is None else json.dumps(value, sort_keys=True)


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _flat(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key in sorted(value):
            text = str(key)
            _flat(value[key], f"{path}[{text}]" if "." in text or "/" in text else f"{path}.{text}", out)
    else:
        out[path] = value


def spec_diff(live: Mapping[str, Any], desired: Mapping[str, Any]) -> list[FieldChange]:
    """Every spec field that differs between two TopologySources, added, changed or removed — ``kubectl
    apply`` of the file replaces the spec it manages, so a field the file drops is a change too (an arm
    switched: the old one removed, the new one added). Lists are compared whole."""
    have: dict[str, Any] = {}
    want: dict[str, Any] = {}
    _flat(live.get("spec") or {}, "spec", have)
    _flat(desired.get("spec") or {}, "spec", want)
    return [
        FieldChange(path, have.get(path), want.get(path))
        for path in sorted({*have, *want})
        if have.get(path) != want.get(path)
    ]


def with_source(live: LiveCluster, doc: Mapping[str, Any]) -> tuple[LiveCluster, SourceEdit]:
    """``live`` with the TopologySource ``doc`` applied, and what that does to the source itself."""
    name = str(_meta(doc).get("name", ""))
    found = next((s for s in live.topology_sources if str(_meta(s).get("name", "")) == name), None)
    proposed = copy.deepcopy(dict(doc))
    if found is None:
        edit = SourceEdit(name, "create")
        kept = list(live.topology_sources)
    else:
        fields = spec_diff(found, proposed)
        edit = SourceEdit(name, "change" if fields else "unchanged", tuple(fields))
        meta = dict(_meta(found))
        if fields:
            meta["generation"] = int(meta.get("generation") or 0) + 1
        proposed["metadata"] = meta
        if "status" in found:
            proposed["status"] = copy.deepcopy(found["status"])
        kept = [s for s in live.topology_sources if s is not found]
    changed = LiveCluster(
        **{f: getattr(live, f) for f in LiveCluster.__dataclass_fields__ if f != "topology_sources"},
        topology_sources=[*kept, proposed],
    )
    return changed, edit


def _profile_moves(changes: Sequence[Change], live: LiveCluster) -> dict[tuple[str, str], list[str]]:
    labels = {str(_meta(n).get("name")): dict(_meta(n).get("labels") or {}) for n in live.nodes}
    out: dict[tuple[str, str], list[str]] = {}
    for c in changes:
        if c.kind != kinds.NODE.kind:
            continue
        for f in label_diff(c.body["metadata"]["labels"], labels.get(c.name, {})):
            if f.path == _PROFILE_PATH:
                out.setdefault((f.live or _NONE, f.desired or _NONE), []).append(c.name)
    return {k: sorted(v) for k, v in out.items()}


def _queue_moves(changes: Sequence[Change]) -> list[QueueMigration]:
    """Each changed ClusterQueue as its last write leaves it (the step that follows wins)."""
    last: dict[str, Change] = {}
    stops: dict[str, tuple[Any, Any]] = {}
    for c in changes:
        if c.kind != kinds.CLUSTER_QUEUE.kind or c.action == "delete":
            continue
        last[c.name] = c
        for f in c.fields:
            if f.path == "spec.stopPolicy":
                stops[c.name] = (stops.get(c.name, (f.live, None))[0], f.desired)
    out = []
    for name, c in sorted(last.items()):
        listed_conds: Sequence[Mapping[str, Any]] = (c.body.get("status") or {}).get("conditions") or ()
        cond: Mapping[str, Any] = next((x for x in listed_conds if x.get("type") == keys.TOPOLOGY_READY), {})
        stop = stops.get(name)
        out.append(
            QueueMigration(
                name,
                stop if stop is not None and stop[0] != stop[1] else None,
                str(cond.get("status", "-")),
                str(cond.get("reason", "-")),
                str(cond.get("message", "no TopologyReady change")),
            )
        )
    return out


def preview(report: PlanReport, live: LiveCluster, edit: SourceEdit) -> TopologyPreview:
    """What ``report`` — the plan of ``live`` with the source applied — does, as a preview of that source."""
    flavors = kinds.RESOURCE_FLAVOR.kind
    src = report.desired.source
    return TopologyPreview(
        edit=edit,
        source=src if src is not None and src.name == edit.name else None,
        profiles=_profile_moves(report.changes, live),
        flavors_added=sorted(c.name for c in report.changes if c.kind == flavors and c.action == "create"),
        flavors_removed=sorted(c.name for c in report.changes if c.kind == flavors and c.action == "delete"),
        flavors_replaced=sorted(
            c.name for c in report.changes if c.kind == flavors and c.action == "replace"
        ),
        queues=_queue_moves(report.changes),
    )
