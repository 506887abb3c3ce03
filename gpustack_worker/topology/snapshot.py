"""The snapshot a writing TopologySource applies: decoding and validation (docs/topology.md, "The source
contract"). Pure: no I/O, no clock.

A snapshot is one YAML (or JSON) document::

    apiVersion: topology.gpustack.ai/v1alpha1
    revision: inventory-42          # opaque, non-blank: which complete snapshot was applied, not an order
    nodes:                          # node name -> {level label key -> value}
      worker-a: {topology.gpustack.ai/region: region-a, topology.gpustack.ai/zone: zone-a}

:func:`decode` turns the bytes into a :class:`Snapshot` or raises :class:`SnapshotError`: exactly those
three fields at the top, only strings below ``nodes`` (YAML reads ``rack: 01`` as the number 1, so an
unquoted number, boolean, date or null is refused with a hint to quote it), exactly one document, at
most :data:`MAX_SNAPSHOT_BYTES`. It never lets an exception other than :class:`SnapshotError` out, and it
bounds its work on hostile input: the body size is capped, anchors/aliases (the "billion laughs"
expansion) and YAML merge keys are refused, nesting deeper than a snapshot can be is refused before
anything is built, and a key repeated in one mapping (which YAML would silently resolve to the last
one) is refused.

:func:`validate` checks the decoded snapshot against the source (its levels, its selected Nodes and
their current labels, its ``additionalWritePrefix``) and returns, per Node, the labels its NodeFeature
carries: the snapshot labels minus the standard ``topology.kubernetes.io/region|zone`` keys, which a
snapshot may only repeat as read-only parents that already match the Node. Any violation rejects the
whole snapshot; the error names the first problem (Nodes by name, levels in order) and how many more
there are, and :attr:`SnapshotError.errors` holds all of them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import yaml

from gpustack_worker.api import keys, validation
from gpustack_worker.api.crds.topology_source import FORBIDDEN_WRITE_PREFIXES
from gpustack_worker.topology.hierarchy import hierarchy_errors
from gpustack_worker.topology.levels import normalize_tiers

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = (
    "MAX_REVISION_LENGTH",
    "MAX_SNAPSHOT_BYTES",
    "MAX_YAML_DEPTH",
    "Snapshot",
    "SnapshotError",
    "decode",
    "is_writable",
    "validate",
)

#: The body size cap, shared with the webhook fetcher: 1 MiB (``1 << 20``), GPUStack's cap for a snapshot.
MAX_SNAPSHOT_BYTES: Final = 1 << 20
#: A snapshot nests three mappings deep (top, ``nodes``, a node entry); a value that is itself a mapping
#: or list is the fourth level and still gets a clear "not a string" error. Anything deeper is refused
#: while parsing, before a Python object is built, so a deeply nested document cannot exhaust the stack.
MAX_YAML_DEPTH: Final = 8
#: ``revision`` is opaque but lands in ``status.lastSuccessfulRevision`` and in condition messages, so
#: it is bounded like an annotation-sized identifier.
MAX_REVISION_LENGTH: Final = 1024

_FIELDS: Final = ("apiVersion", "revision", "nodes")
_LOADER: Final[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_KEY: Final = "<<"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A decoded snapshot: its opaque revision and, per node name, its level key → value labels."""

    revision: str
    nodes: Mapping[str, Mapping[str, str]]


class SnapshotError(ValueError):
    """A snapshot that cannot be applied. ``str(e)`` is the user-facing message (first problem and how
    many more); ``errors`` lists every problem found."""

    def __init__(self, errors: str | Sequence[str]) -> None:
        found = (errors,) if isinstance(errors, str) else tuple(errors)
        self.errors: tuple[str, ...] = found or ("invalid snapshot",)
        first = self.errors[0]
        more = len(self.errors) - 1
        super().__init__(
            f"{first} (and {more} more {'problem' if more == 1 else 'problems'})" if more else first
        )


# --- decode -----------------------------------------------------------------------------------------
def _yaml_problem(err: yaml.YAMLError) -> str:
    """One line for a YAML error: what and where, without PyYAML's multi-line source excerpt."""
    if isinstance(err, yaml.MarkedYAMLError):
        what = " ".join(p for p in (err.context, err.problem) if p) or "invalid YAML"
        mark = err.problem_mark or err.context_mark
        if mark is not None:
            return f"{what} at line {mark.line + 1}, column {mark.column + 1}"
        return what
    return " ".join(str(err).split())


def _scan(text: str) -> None:
    """Walk the YAML events once, refusing what would make building the document unbounded or ambiguous:
    more than one document, aliases, merge keys, repeated keys and nesting beyond :data:`MAX_YAML_DEPTH`."""
    documents = 0
    # one entry per open collection: for a mapping the keys seen so far and whether a key comes next
    stack: list[tuple[set[str], list[bool]] | None] = []
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                line = event.start_mark.line + 1 if event.start_mark is not None else "?"
                raise SnapshotError(
                    [f"the snapshot must be exactly one YAML document; a second one starts at line {line}"]
                )
            continue
        if isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            stack.pop()
            continue
        if not isinstance(event, yaml.NodeEvent):
            continue
        if isinstance(event, yaml.AliasEvent) or event.anchor is not None:
            name = event.anchor
            raise SnapshotError([f"YAML anchors and aliases are not supported (found &{name} / *{name})"])
        top = stack[-1] if stack else None
        if top is not None:
            seen, expect_key = top
            if expect_key[0] and isinstance(event, yaml.ScalarEvent):
                key = event.value
                if key == _MERGE_KEY and event.implicit[0]:
                    raise SnapshotError(["YAML merge keys (<<) are not supported; write every field out"])
                if key in seen:
                    raise SnapshotError(
                        [f"key {key!r} is repeated in one mapping (YAML keeps only the last)"]
                    )
                seen.add(key)
            expect_key[0] = not expect_key[0]
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_YAML_DEPTH:
                raise SnapshotError([f"the snapshot nests deeper than {MAX_YAML_DEPTH} levels"])
            stack.append((set(), [True]) if isinstance(event, yaml.MappingStartEvent) else None)
    if documents == 0:
        raise SnapshotError(["the snapshot is empty"])


def _kind(value: object) -> str:
    """How a non-string YAML value reads in an error message."""
    if value is None:
        return "null (empty)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, dt.date):
        return f"a date ({value.isoformat()})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple | set | frozenset):
        return "a list"
    return f"a {type(value).__name__}"


def _quote_hint(value: object) -> str:
    if isinstance(value, bool | int | float | dt.date) or value is None:
        return '; quote it in the snapshot so YAML keeps the text as written (e.g. rack: "01")'
    return ""


def _nodes(raw: object) -> tuple[dict[str, dict[str, str]], list[str]]:
    errors: list[str] = []
    nodes: dict[str, dict[str, str]] = {}
    if raw is None:
        return nodes, ["nodes is null; write nodes: {} for an inventory that describes no node"]
    if not isinstance(raw, dict):
        return nodes, [f"nodes must be a mapping of node name to labels, not {_kind(raw)}"]
    for name, entry in raw.items():
        if not isinstance(name, str) or not name:
            errors.append(
                f"node name {name!r} must be a non-empty string, not {_kind(name)}{_quote_hint(name)}"
            )
            continue
        if not isinstance(entry, dict):
            errors.append(
                f"node {name}: must be a mapping of level key to value, not {_kind(entry)}"
                + ("; write {} for a node without levels" if entry is None else "")
            )
            continue
        labels: dict[str, str] = {}
        for key, value in entry.items():
            if not isinstance(key, str):
                errors.append(
                    f"node {name}: key {key!r} must be a string, not {_kind(key)}{_quote_hint(key)}"
                )
            elif not isinstance(value, str):
                errors.append(
                    f"node {name}: value of {key} must be a string, not {_kind(value)}{_quote_hint(value)}"
                )
            else:
                labels[key] = value
        nodes[name] = labels
    return nodes, errors


def decode(raw: bytes | str) -> Snapshot:
    """Parse one snapshot document (YAML, or JSON as YAML); :class:`SnapshotError` on anything else."""
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", "surrogatepass"))
    if size > MAX_SNAPSHOT_BYTES:
        raise SnapshotError([f"the snapshot is {size} bytes, more than the {MAX_SNAPSHOT_BYTES} allowed"])
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise SnapshotError(
                [f"the snapshot is not UTF-8 text (invalid byte at offset {err.start})"]
            ) from None
    else:
        text = raw
    try:
        _scan(text)
        document: object = yaml.load(text, Loader=_LOADER)  # safe loader; _scan vetted the events
    except SnapshotError:
        raise
    except yaml.YAMLError as err:
        raise SnapshotError([f"the snapshot is not valid YAML or JSON: {_yaml_problem(err)}"]) from None
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as err:
        # a scalar that matches a YAML type but does not convert, e.g. the date 2024-02-30
        raise SnapshotError([f"the snapshot has a value YAML cannot read: {err}"]) from None
    if not isinstance(document, dict):
        raise SnapshotError(
            [f"the snapshot must be a mapping with {', '.join(_FIELDS)}, not {_kind(document)}"]
        )

    errors: list[str] = []
    unknown = sorted(str(k) for k in document if k not in _FIELDS)
    if unknown:
        errors.append(f"unknown field(s) {', '.join(unknown)}: a snapshot has only {', '.join(_FIELDS)}")
    missing = [f for f in _FIELDS if f not in document]
    if missing:
        errors.append(f"missing field(s) {', '.join(missing)}")
    api_version = document.get("apiVersion")
    if "apiVersion" in document and api_version != keys.SNAPSHOT_API_VERSION:
        errors.append(f"apiVersion is {api_version!r}; it must be {keys.SNAPSHOT_API_VERSION}")
    revision = document.get("revision")
    if "revision" in document:
        if not isinstance(revision, str):
            errors.append(f"revision must be a string, not {_kind(revision)}{_quote_hint(revision)}")
        elif not revision.strip():
            errors.append("revision must not be blank")
        elif len(revision) > MAX_REVISION_LENGTH:
            errors.append(f"revision is {len(revision)} characters, more than {MAX_REVISION_LENGTH}")
    nodes: dict[str, dict[str, str]] = {}
    if "nodes" in document:
        nodes, node_errors = _nodes(document["nodes"])
        errors.extend(node_errors)
    if errors:
        raise SnapshotError(errors)
    assert isinstance(revision, str)
    return Snapshot(revision=revision, nodes=nodes)


# --- validate ---------------------------------------------------------------------------------------
def _effective_prefix(write_prefix: str | None) -> str | None:
    """``additionalWritePrefix`` as a key prefix ending in ``/``; ``None`` if unset or reserved (a source
    that predates the admission rule must not open a reserved domain)."""
    if not write_prefix:
        return None
    prefix = write_prefix if write_prefix.endswith("/") else f"{write_prefix}/"
    domain = prefix[:-1]
    if any(domain == d or domain.endswith(f".{d}") for d in FORBIDDEN_WRITE_PREFIXES):
        return None
    return prefix


def is_writable(key: str, write_prefix: str | None) -> bool:
    """A snapshot may publish ``key``: ``topology.gpustack.ai/*`` except the generated profile key, or a
    key under the source's (non-reserved) ``additionalWritePrefix``."""
    if key.startswith(keys.TOPOLOGY_PREFIX):
        return key != keys.TOPOLOGY_PROFILE
    prefix = _effective_prefix(write_prefix)
    return prefix is not None and key.startswith(prefix)


def _writable_list(write_prefix: str | None) -> str:
    prefix = _effective_prefix(write_prefix)
    allowed = f"{keys.TOPOLOGY_PREFIX}* except {keys.TOPOLOGY_PROFILE}"
    return f"{allowed}, or {prefix}*" if prefix else allowed


def _entry_errors(
    node: str,
    entry: Mapping[str, str],
    *,
    order: Mapping[str, int],
    node_labels: Mapping[str, str],
    write_prefix: str | None,
) -> list[str]:
    errors: list[str] = []
    # declared levels in hierarchy order, then the undeclared keys by name
    for key in sorted(entry, key=lambda k: (order.get(k, len(order)), k)):
        value = entry[key]
        where = f"node {node}: {key}={value}"
        standard = key in keys.STANDARD_TOPOLOGY_KEYS
        if not standard and not validation.is_qualified_name(key):
            errors.append(
                f"{where}: the key is not a valid label key ({'; '.join(validation.qualified_name(key))})"
            )
        elif key == keys.TOPOLOGY_PROFILE:
            errors.append(
                f"{where}: {keys.TOPOLOGY_PROFILE} is generated by the worker and cannot be published"
            )
        elif not standard and not is_writable(key, write_prefix):
            errors.append(
                f"{where}: a snapshot may not publish this key "
                f"(writable: {_writable_list(write_prefix)}; {', '.join(keys.STANDARD_TOPOLOGY_KEYS)} "
                "may only repeat the Node's value)"
            )
        elif key not in order:
            errors.append(f"{where}: {key} is not one of the source's levels")
        elif not value:
            errors.append(f"node {node}: {key} has an empty value")
        elif problems := validation.label_value(value):
            errors.append(f"{where}: not a valid label value ({'; '.join(problems)})")
        elif standard and node_labels.get(key) != value:
            have = node_labels.get(key)
            errors.append(
                f"{where}: the Node "
                + (f"has {key}={have}" if have is not None else f"has no {key} label")
                + f"; a snapshot may only repeat a standard {key} value the Node already carries"
            )
    return errors


def validate(
    snapshot: Snapshot,
    *,
    levels: Sequence[str],
    selected: Mapping[str, Mapping[str, str]],
    write_prefix: str | None,
) -> dict[str, dict[str, str]]:
    """The NodeFeature ``spec.labels`` per Node (snapshot labels minus standard region/zone; Nodes left
    with none omitted), or :class:`SnapshotError` rejecting the whole snapshot.

    ``levels`` is the source's ``spec.levels``; ``selected`` maps every Node the source's nodeSelector
    selects to its current labels; ``write_prefix`` is ``spec.additionalWritePrefix``.
    """
    ordered = normalize_tiers(levels)
    order = {key: i for i, key in enumerate(ordered)}
    errors: list[str] = []
    checked: dict[str, dict[str, str]] = {}
    for node in sorted(snapshot.nodes):
        entry = snapshot.nodes[node]
        node_labels = selected.get(node)
        if node_labels is None:
            errors.append(f"node {node}: not selected by this source's nodeSelector (or no such Node exists)")
            continue
        entry_errors = _entry_errors(
            node, entry, order=order, node_labels=node_labels, write_prefix=write_prefix
        )
        errors.extend(entry_errors)
        if not entry_errors:
            checked[node] = dict(entry)
    errors.extend(hierarchy_errors(ordered, checked))
    if errors:
        raise SnapshotError(errors)
    result: dict[str, dict[str, str]] = {}
    for node, entry in checked.items():
        labels = {k: v for k, v in entry.items() if k not in keys.STANDARD_TOPOLOGY_KEYS}
        if labels:
            result[node] = labels
    return result
