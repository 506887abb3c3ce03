"""Lay the chain's required Kueue configuration over a team's existing one, and say what changes.

Kueue has one configuration per cluster, read at start-up. Next to an existing Kueue the chain cannot
bring its own: it needs a handful of keys set in the team's file, and everything else (their
integrations, their transformations of other resources, their ports, waitForPodsReady, fair sharing,
...) must stay as it is. :func:`required_changes` is the one predicate "does this configuration give the
chain what it needs" — ``preflight`` fails when it is non-empty, ``kueue-config --merge`` applies it:

- ``resources.transformations``: every entry of :func:`~gpustack_worker.api.kueue_config.transformations`
  present as ours (same input, strategy, multiplyBy, outputs); the team's entries for other inputs stay;
  an entry of theirs for one of our inputs is replaced (Kueue allows one per input);
- ``resources.quotaCheckStrategy: IgnoreUndeclared`` (Kueue's default is ``BlockUndeclared``);
- ``integrations.frameworks`` includes ours (``batch/job``, ``pod``); theirs are kept (Kueue's default
  when the list is empty is ``batch/job`` alone, so an empty list counts as that);
- every gate of :data:`~gpustack_worker.api.kueue_config.FEATURE_GATES` at our value, judged by its
  effective value (the file's, else Kueue v0.19's default) — in ``featureGates``, or in the
  ``--feature-gates`` flag when Kueue is started with it (Kueue refuses both at once);
- ``managedJobsNamespaceSelector`` does not select the worker's system namespace (Kueue's default selects
  it): their selector gets one more ``NotIn`` value (or requirement), so it only ever narrows;
- ``resources.excludeResourcePrefixes`` removed: Kueue refuses it together with ``IgnoreUndeclared``
  (``pkg/config/validation.go``, ``validateQuotaCheckStrategy``).

Each :class:`Change` is an *add* (a key the team does not set, or a selector narrowed to leave the system
namespace alone) or a *conflict* (:attr:`Change.accept` non-empty): it replaces a value the team set —
their transformation of one of our inputs, a gate they set (in the file or the flag) to the other value,
an explicit ``quotaCheckStrategy``, their ``excludeResourcePrefixes`` — or adds an integration that
changes what Kueue manages given their ``manageJobsWithoutQueueName: true`` (Kueue's Pod webhook and job
reconciler then take every Pod / Job without a queue name in the namespaces the selector selects,
``pkg/controller/jobs/pod/pod_webhook.go``, ``jobframework/reconciler.go``). ``kueue-config --merge``
refuses a conflict unless each of its override names is passed with ``--accept``.

Pure: no I/O; the input is never modified.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import kinds, kueue_config, kueue_install
from gpustack_worker.runtime.quantity import same_quantity

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = (
    "ACCEPT_KINDS",
    "DEFAULT_FRAMEWORKS",
    "DEFAULT_QUOTA_CHECK",
    "KUEUE_GATE_DEFAULTS",
    "NAMESPACE_NAME_LABEL",
    "Change",
    "format_gate_flag",
    "gate_flag_values",
    "merge",
    "required_changes",
    "selects_namespace",
)

#: Kueue v0.19.2's defaults (``pkg/features/kube_features.go``) of the gates the chain sets: an absent
#: gate has this value. ``TASBalancedPlacement`` and ``TASRespectNodeAffinityPreferred`` are alpha (off).
KUEUE_GATE_DEFAULTS: Final[dict[str, bool]] = {
    "AssignQueueLabelsForPods": True,
    "QuotaCheckStrategy": True,
    "TASBalancedPlacement": False,
    "TASRespectNodeAffinityPreferred": False,
    "TopologyAwareScheduling": True,
}
#: Kueue's ``integrations.frameworks`` when the list is empty (``apis/config/v1beta2/defaults.go``).
DEFAULT_FRAMEWORKS: Final[tuple[str, ...]] = ("batch/job",)
#: Kueue's ``resources.quotaCheckStrategy`` when unset.
DEFAULT_QUOTA_CHECK: Final = "BlockUndeclared"
#: The label every Namespace carries with its own name (set by the API server).
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"


#: The kinds of ``--accept KIND:NAME`` override, and what NAME is.
ACCEPT_KINDS: Final[dict[str, str]] = {
    "transformation": "an input resource the team transforms otherwise",
    "gate": "a feature gate the team set to the other value",
    "integration": "a framework added while manageJobsWithoutQueueName is true",
    "setting": "a key the team set (resources.quotaCheckStrategy, resources.excludeResourcePrefixes)",
}


@dataclass(frozen=True, slots=True)
class Change:
    """One key the chain needs changed: where, what it was (``None``: unset), what it becomes, why.

    ``accept``: the overrides (``KIND:NAME``) that must be passed for it — empty for an add (a key the
    team does not set), one or more for a conflict (a value the team set, or a consequence for what
    Kueue manages); ``why`` then says the consequence in a few words."""

    path: str
    was: Any
    now: Any
    why: str
    accept: tuple[str, ...] = ()

    @property
    def conflict(self) -> bool:
        return bool(self.accept)

    def describe(self) -> str:
        return f"{self.path}: {_show(self.was)} -> {_show(self.now)} ({self.why})"


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value).lower() if isinstance(value, bool) else str(value)


def gate_flag_values(flag: str) -> dict[str, bool]:
    """``--feature-gates=A=true,B=false`` (the value) as a mapping; malformed parts raise ValueError."""
    out: dict[str, bool] = {}
    for part in (p.strip() for p in flag.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep or value.strip().lower() not in ("true", "false") or not name.strip():
            raise ValueError(f"--feature-gates: expected NAME=true|false, got {part!r}")
        out[name.strip()] = value.strip().lower() == "true"
    return out


def format_gate_flag(gates: Mapping[str, bool]) -> str:
    """The ``--feature-gates`` value for ``gates`` (sorted)."""
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items()))


def _requirement_matches(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op = str(req.get("key") or ""), str(req.get("operator") or "")
    values = [str(v) for v in req.get("values") or ()]
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError(f"label selector: unknown operator {op!r}")


def selects_namespace(
    selector: Mapping[str, Any] | None,
    namespace: str,
    *,
    kueue_namespace: str = kueue_install.KUEUE_NAMESPACE,
) -> bool:
    """Whether a ``metav1.LabelSelector`` selects the Namespace ``namespace`` by its name label (``None``
    stands for Kueue's default selector, which excludes only ``kube-system`` and Kueue's namespace)."""
    if selector is None:
        return namespace not in ("kube-system", kueue_namespace)
    labels = {NAMESPACE_NAME_LABEL: namespace}
    match = selector.get("matchLabels") or {}
    if any(labels.get(str(k)) != str(v) for k, v in match.items()):
        return False
    return all(_requirement_matches(r, labels) for r in selector.get("matchExpressions") or ())


def _excluding(selector: Mapping[str, Any] | None, namespace: str, kueue_namespace: str) -> dict[str, Any]:
    """``selector`` narrowed so it no longer selects ``namespace`` (Kueue's default spelled out first)."""
    if selector is None:
        return {
            "matchExpressions": [
                {
                    "key": NAMESPACE_NAME_LABEL,
                    "operator": "NotIn",
                    "values": ["kube-system", kueue_namespace, namespace],
                }
            ]
        }
    out = copy.deepcopy(dict(selector))
    exprs = out.setdefault("matchExpressions", [])
    for req in exprs:
        if req.get("key") == NAMESPACE_NAME_LABEL and req.get("operator") == "NotIn":
            req["values"] = [*(req.get("values") or []), namespace]
            return out
    exprs.append({"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": [namespace]})
    return out


def _same_transformation(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> bool:
    if str(theirs.get("strategy") or "") != ours["strategy"]:
        return False
    if str(theirs.get("multiplyBy") or "") != str(ours.get("multiplyBy") or ""):
        return False
    outputs = theirs.get("outputs") or {}
    if set(outputs) != set(ours["outputs"]):
        return False
    return all(same_quantity(outputs[k], v) for k, v in ours["outputs"].items())


def _framework_changes(config: Mapping[str, Any]) -> list[Change]:
    """``integrations.frameworks`` with ours added; a conflict per framework added while
    ``manageJobsWithoutQueueName: true`` (Kueue then manages every Pod / Job without a queue name in the
    namespaces ``managedJobsNamespaceSelector`` selects)."""
    listed = (config.get("integrations") or {}).get("frameworks")
    frameworks = list(listed or DEFAULT_FRAMEWORKS)
    missing = [f for f in kueue_config.FRAMEWORKS if f not in frameworks]
    if not missing:
        return []
    if config.get("manageJobsWithoutQueueName") is True:
        selector = config.get("managedJobsNamespaceSelector")
        where = (
            "every namespace but kube-system and Kueue's"
            if selector is None
            else f"the namespaces {_show(selector)} selects"
        )
        what = " and ".join("every Pod" if f == "pod" else f"every {f.rsplit('/', 1)[-1]}" for f in missing)
        why = (
            f"with manageJobsWithoutQueueName: true Kueue would manage {what} without a queue name in {where}"
        )
        accept = tuple(f"integration:{f}" for f in missing)
    else:
        why, accept = f"adds {', '.join(missing)} (role replicas are Kueue pod groups)", ()
    return [Change("integrations.frameworks", listed, sorted({*frameworks, *missing}), why, accept)]


def _gate_changes(config: Mapping[str, Any], gate_flags: Mapping[str, bool] | None) -> list[Change]:
    """Our gates by their effective value; a gate the team set to the other value is a conflict."""
    in_file = config.get("featureGates")
    if gate_flags is not None and in_file is not None:
        raise ValueError(
            "featureGates is set in the file and Kueue is started with --feature-gates: Kueue refuses both "
            '("feature gates for CLI and configuration cannot both specified"); keep one'
        )
    gates: Mapping[str, Any] = gate_flags if gate_flags is not None else (in_file or {})
    wrong = {
        name: value
        for name, value in kueue_config.FEATURE_GATES.items()
        if bool(gates.get(name, KUEUE_GATE_DEFAULTS.get(name, False))) != value
    }
    if not wrong:
        return []
    set_otherwise = tuple(f"gate:{name}" for name in sorted(wrong) if name in gates)
    why_set = "process-wide: placement changes for every team's topology-aware queues"
    if gate_flags is not None:
        return [
            Change(
                "--feature-gates",
                format_gate_flag(gates) or None,
                format_gate_flag({**gates, **wrong}),
                f"sets {', '.join(sorted(wrong))}" + (f"; {why_set}" if set_otherwise else ""),
                set_otherwise,
            )
        ]
    return [
        Change(
            f"featureGates.{name}",
            gates.get(name),
            value,
            why_set if name in gates else "the chain's topology-aware queues",
            (f"gate:{name}",) if name in gates else (),
        )
        for name, value in sorted(wrong.items())
    ]


def required_changes(
    config: Mapping[str, Any],
    *,
    gate_flags: Mapping[str, bool] | None = None,
    system_namespace: str = kinds.SYSTEM_NAMESPACE,
) -> list[Change]:
    """What ``config`` (Kueue's ``Configuration`` document) lacks for the chain, in document order.

    ``gate_flags``: the gates of Kueue's ``--feature-gates`` flag when it is started with one (then the
    file's ``featureGates`` is not read for them, and the change is to the flag).
    """
    changes: list[Change] = []
    resources = config.get("resources") or {}
    theirs = {str(t.get("input")): t for t in resources.get("transformations") or () if isinstance(t, dict)}
    for ours in kueue_config.transformations():
        current = theirs.get(ours["input"])
        if current is None:
            changes.append(
                Change(
                    f"resources.transformations[{ours['input']}]",
                    None,
                    ours,
                    "Workloads are charged in credits",
                )
            )
        elif not _same_transformation(current, ours):
            changes.append(
                Change(
                    f"resources.transformations[{ours['input']}]",
                    current,
                    ours,
                    f"their entry goes: every Workload asking {ours['input']} is charged credits instead",
                    (f"transformation:{ours['input']}",),
                )
            )
    strategy = resources.get("quotaCheckStrategy")
    if (strategy or DEFAULT_QUOTA_CHECK) != "IgnoreUndeclared":
        changes.append(
            Change(
                "resources.quotaCheckStrategy",
                strategy,
                "IgnoreUndeclared",
                "every queue then admits resources it does not declare"
                if strategy is not None
                else "a queue covering only cpu or only credits must not reject what it does not declare",
                ("setting:resources.quotaCheckStrategy",) if strategy is not None else (),
            )
        )
    excluded = resources.get("excludeResourcePrefixes")
    if excluded:
        changes.append(
            Change(
                "resources.excludeResourcePrefixes",
                excluded,
                None,
                "Kueue refuses it with IgnoreUndeclared: the excluded resources count in quotas again",
                ("setting:resources.excludeResourcePrefixes",),
            )
        )
    changes.extend(_framework_changes(config))
    changes.extend(_gate_changes(config, gate_flags))
    selector = config.get("managedJobsNamespaceSelector")
    kueue_namespace = str(config.get("namespace") or kueue_install.KUEUE_NAMESPACE)
    if selects_namespace(selector, system_namespace, kueue_namespace=kueue_namespace):
        changes.append(
            Change(
                "managedJobsNamespaceSelector",
                selector,
                _excluding(selector, system_namespace, kueue_namespace),
                f"Kueue must never gate the worker's own Pods in {system_namespace}",
            )
        )
    return changes


def merge(
    config: Mapping[str, Any],
    *,
    gate_flags: Mapping[str, bool] | None = None,
    system_namespace: str = kinds.SYSTEM_NAMESPACE,
) -> tuple[dict[str, Any], list[Change]]:
    """``config`` with :func:`required_changes` applied, and those changes (empty: nothing to do).

    A change to ``--feature-gates`` is reported but not written (it is a flag of Kueue's Deployment, not
    a key of the file). Applying the result's changes again yields none (idempotent).
    """
    changes = required_changes(config, gate_flags=gate_flags, system_namespace=system_namespace)
    out = copy.deepcopy(dict(config))
    for change in changes:
        if change.path.startswith("resources.transformations["):
            resources = out.setdefault("resources", {})
            entries = [
                t for t in resources.get("transformations") or () if t.get("input") != change.now["input"]
            ]
            resources["transformations"] = sorted(
                [*entries, copy.deepcopy(change.now)], key=lambda t: str(t.get("input"))
            )
        elif change.path == "resources.quotaCheckStrategy":
            out.setdefault("resources", {})["quotaCheckStrategy"] = change.now
        elif change.path == "resources.excludeResourcePrefixes":
            out.setdefault("resources", {}).pop("excludeResourcePrefixes", None)
        elif change.path == "integrations.frameworks":
            out.setdefault("integrations", {})["frameworks"] = list(change.now)
        elif change.path.startswith("featureGates."):
            out.setdefault("featureGates", {})[change.path.split(".", 1)[1]] = change.now
        elif change.path == "managedJobsNamespaceSelector":
            out["managedJobsNamespaceSelector"] = change.now
    return out, changes
