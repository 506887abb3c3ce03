"""Saying what was wrong: one log line, one metric increment and one Warning Event per new finding.

Every reconcile of a node runs all the checks (:func:`gpustack_worker.agent.validate.check`), whichever
output it converges, so the three controllers see the same set of findings for a node. The
:class:`Reporter` remembers that set per node and reports only findings that were not in it: a value
that stays wrong yields one Event however often the node is reconciled; once it is fixed it is
forgotten, so the same mistake made again is reported again. The Event goes on the object the value
was read from (the ``Devices`` or the Node) and its note names the field, the value, the rule and what
the agent publishes instead. The :class:`~gpustack_worker.runtime.events.EventRecorder` behind it
de-duplicates once more (its series window) and never raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol

import structlog
from prometheus_client import Counter

from gpustack_worker.api import kinds

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from gpustack_worker.api.devices_check import Finding

__all__ = ("ACTION_APPLY", "ACTION_VALIDATE", "INVALID_INPUTS", "EventSink", "Reporter", "reference")

_log = structlog.get_logger("gpustack_worker.agent")

#: Event ``action`` of a finding (the agent was checking what it read) and of a rejected apply.
ACTION_VALIDATE: Final = "Validate"
ACTION_APPLY: Final = "Apply"

INVALID_INPUTS: Final = Counter(
    "gpustack_agent_invalid_inputs_total",
    "Values the node agent found breaking a rule (each counted once while it stays wrong), by object "
    "kind and Event reason.",
    ("kind", "reason"),
)


class EventSink(Protocol):
    """What the agent needs of :class:`~gpustack_worker.runtime.events.EventRecorder`."""

    def warning(self, regarding: Mapping[str, Any], *, reason: str, action: str, note: str) -> None: ...


def reference(kind: str, name: str, uid: str = "") -> dict[str, Any]:
    """A minimal object for an Event's ``regarding`` (cached projections may lack apiVersion/kind)."""
    resource = kinds.DEVICES if kind == kinds.DEVICES.kind else kinds.NODE
    meta = {"name": name, "uid": uid} if uid else {"name": name}
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": meta}


class Reporter:
    """Reports each finding of a node once while it persists."""

    def __init__(self, events: EventSink | None) -> None:
        self.events = events
        self._seen: dict[str, frozenset[tuple[str, str, str, str]]] = {}
        #: Findings reported (new ones only), for tests.
        self.reported: list[Finding] = []

    def report(self, node: str, findings: Iterable[Finding], uids: Mapping[str, str]) -> None:
        """Report the findings of ``node`` not already reported; ``uids`` maps kind → object uid."""
        current = {f.identity: f for f in findings}
        before = self._seen.get(node, frozenset())
        for identity, finding in current.items():
            if identity in before:
                continue
            self.reported.append(finding)
            INVALID_INPUTS.labels(kind=finding.kind, reason=finding.reason).inc()
            _log.warning(
                "invalid input",
                node=node,
                kind=finding.kind,
                field=finding.path,
                value=finding.value,
                rule=finding.rule,
                effect=finding.effect(),
                reason=finding.reason,
            )
            if self.events is not None:
                self.events.warning(
                    reference(finding.kind, node, uids.get(finding.kind, "")),
                    reason=finding.reason,
                    action=ACTION_VALIDATE,
                    note=finding.note(),
                )
        if current:
            self._seen[node] = frozenset(current)
        else:
            self._seen.pop(node, None)

    def forget(self, node: str) -> None:
        """The node is gone."""
        self._seen.pop(node, None)

    def warn(self, regarding: Mapping[str, Any], *, reason: str, action: str, note: str) -> None:
        """A one-off Warning (the caller de-duplicates)."""
        _log.warning(note, reason=reason, action=action)
        if self.events is not None:
            self.events.warning(regarding, reason=reason, action=action, note=note)
