"""``metav1.LabelSelector`` in its JSON form: validation and matching, as Kubernetes does them.

The rules are apimachinery's ``LabelSelectorAsSelector`` / ``labels.NewRequirement`` (and the API
server's ``ValidateLabelSelector``):

* ``matchLabels`` — a map of label key (a qualified name) to label value; each entry is an equality
  requirement;
* ``matchExpressions`` — a list of ``{key, operator, values}``: ``In`` / ``NotIn`` need at least one
  value, ``Exists`` / ``DoesNotExist`` none; every value is a valid label value;
* all requirements are ANDed; ``{}`` (no requirement) selects everything; ``None`` (no selector at all)
  selects nothing — ``LabelSelectorAsSelector(nil)`` is ``labels.Nothing()``.

Matching follows ``labels.Requirement.Matches``: ``In`` needs the key with a listed value, ``NotIn``
matches a missing key or an unlisted value, ``Exists`` / ``DoesNotExist`` look at the key only.

An invalid selector matches nothing (Kubernetes refuses to build one). :func:`compile_selector` parses
once and returns a cheap predicate — use it when the same selector is matched against many label sets
(the reconciler matches every Node against every source); :func:`matches` is the one-shot form.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias

from gpustack_worker.api import validation
from gpustack_worker.topology.field_error import FieldError, child, index, key

__all__ = ("OPERATORS", "Predicate", "compile_selector", "matches", "selector_errors")

#: The operators of a ``LabelSelectorRequirement``.
OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")
_WITH_VALUES: Final = frozenset({"In", "NotIn"})

#: A compiled selector: labels → selected.
Predicate: TypeAlias = Callable[[Mapping[str, str]], bool]


def _is_str_list(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str | bytes)
        and all(isinstance(v, str) for v in value)
    )


def _match_labels_errors(labels: Any, path: str) -> list[FieldError]:
    if labels is None:
        return []
    if not isinstance(labels, Mapping):
        return [FieldError(path, "must be a map of label keys to label values")]
    errors: list[FieldError] = []
    for k, v in labels.items():
        at = key(path, str(k))
        if not isinstance(k, str):
            errors.append(FieldError(at, "key must be a string"))
            continue
        errors.extend(
            FieldError(at, f"key {k!r} is not a valid label key: {m}") for m in validation.qualified_name(k)
        )
        if not isinstance(v, str):
            errors.append(FieldError(at, "value must be a string"))
        else:
            errors.extend(
                FieldError(at, f"value {v!r} is not a valid label value: {m}")
                for m in validation.label_value(v)
            )
    return errors


def _requirement_errors(req: Any, path: str) -> list[FieldError]:
    if not isinstance(req, Mapping):
        return [FieldError(path, "must be an object with key, operator and values")]
    errors: list[FieldError] = []
    k = req.get("key")
    if k is None or k == "":
        errors.append(FieldError(child(path, "key"), "required"))
    elif not isinstance(k, str):
        errors.append(FieldError(child(path, "key"), "must be a string"))
    else:
        errors.extend(
            FieldError(child(path, "key"), f"{k!r} is not a valid label key: {m}")
            for m in validation.qualified_name(k)
        )
    op = req.get("operator")
    values = req.get("values")
    values_path = child(path, "values")
    if values is not None and not _is_str_list(values):
        errors.append(FieldError(values_path, "must be a list of strings"))
        values = None
    count = len(values) if values is not None else 0
    if op is None or op == "":
        errors.append(FieldError(child(path, "operator"), f"required: one of {', '.join(OPERATORS)}"))
    elif op not in OPERATORS:
        errors.append(
            FieldError(
                child(path, "operator"), f"{op!r} is not a valid operator: one of {', '.join(OPERATORS)}"
            )
        )
    elif op in _WITH_VALUES and count == 0:
        errors.append(FieldError(values_path, f"must have at least one value for operator {op}"))
    elif op not in _WITH_VALUES and count:
        errors.append(FieldError(values_path, f"must be empty for operator {op}"))
    for i, v in enumerate(values or ()):
        errors.extend(
            FieldError(index(values_path, i), f"{v!r} is not a valid label value: {m}")
            for m in validation.label_value(v)
        )
    return errors


def selector_errors(sel: Mapping[str, Any] | None, path: str) -> list[FieldError]:
    """Every problem of ``sel`` as a label selector, each named by its field path under ``path``.

    ``None`` (no selector) is not an error here — whether one is required is the caller's rule.
    """
    if sel is None:
        return []
    if not isinstance(sel, Mapping):
        return [
            FieldError(
                path, "must be a label selector object (matchLabels, matchExpressions); {} selects all"
            )
        ]
    errors = _match_labels_errors(sel.get("matchLabels"), child(path, "matchLabels"))
    exprs = sel.get("matchExpressions")
    exprs_path = child(path, "matchExpressions")
    if exprs is not None:
        if not isinstance(exprs, Sequence) or isinstance(exprs, str | bytes):
            errors.append(FieldError(exprs_path, "must be a list of requirements"))
        else:
            for i, req in enumerate(exprs):
                errors.extend(_requirement_errors(req, index(exprs_path, i)))
    unknown = sorted(str(k) for k in sel if k not in ("matchLabels", "matchExpressions"))
    if unknown:
        errors.append(FieldError(path, f"unknown field(s): {', '.join(unknown)}"))
    return errors


def _nothing(_: Mapping[str, str]) -> bool:
    return False


def _everything(_: Mapping[str, str]) -> bool:
    return True


def compile_selector(sel: Mapping[str, Any] | None) -> Predicate:
    """A predicate over a label map: ``{}`` → everything, ``None`` or an invalid selector → nothing."""
    if sel is None or selector_errors(sel, "selector"):
        return _nothing
    equal = tuple((str(k), str(v)) for k, v in (sel.get("matchLabels") or {}).items())
    exprs = tuple(
        (str(r["operator"]), str(r["key"]), frozenset(r.get("values") or ()))
        for r in (sel.get("matchExpressions") or ())
    )
    if not equal and not exprs:
        return _everything
    missing = object()

    def predicate(labels: Mapping[str, str]) -> bool:
        for k, v in equal:
            if labels.get(k, missing) != v:
                return False
        for op, k, values in exprs:
            have = labels.get(k, missing)
            if op == "In":
                if have is missing or have not in values:
                    return False
            elif op == "NotIn":
                if have is not missing and have in values:
                    return False
            elif op == "Exists":
                if have is missing:
                    return False
            elif have is not missing:  # DoesNotExist
                return False
        return True

    return predicate


def matches(sel: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``sel`` selects an object with ``labels`` (one-shot; see :func:`compile_selector`)."""
    return compile_selector(sel)(labels)
