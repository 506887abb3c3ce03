"""``gpustack-worker kueue-config``: Kueue's configuration for the chain, alone or merged into a team's.

Without ``--merge``: the chart's file (``chart/files/kueue-manager-config.yaml``) on stdout.

``--merge FILE`` (``-``: stdin): the team's configuration, or the ConfigMap holding it, with the keys the
chain needs laid over it (:func:`gpustack_worker.api.kueue_merge.merge`). Each change is an *add* or a
*conflict* (it replaces a value the team set, or changes what Kueue manages given their settings). A
conflict is refused unless its override is passed (``--accept KIND:NAME``, one per conflict): exit 1,
nothing on stdout, on stderr each conflict with the team's value, ours, the consequence and the flag that
accepts it. Otherwise a short table of the changes on stderr, and the merged document on stdout in the
shape it was read. A ConfigMap keeps its metadata whole (labels, annotations, ownerReferences, finalizers,
``uid`` and ``resourceVersion`` — so ``kubectl replace``/``apply`` of the output refuses if the ConfigMap
changed since it was read); ``managedFields``, ``creationTimestamp``, ``generation`` and ``selfLink`` are
dropped (server-set; managedFields sent back would overwrite the server's field ownership). What the merge
replaced and added is recorded (:mod:`gpustack_worker.api.kueue_merge_record`) in the annotation
:data:`~gpustack_worker.api.keys.KUEUE_CONFIG_MERGE_ANNOTATION` of the ConfigMap, or for a bare file in
``--record FILE`` (required unless ``--no-record``: a bare file has nowhere else to carry it). A ConfigMap's
record also keeps kubectl's ``last-applied-configuration`` annotation as it was, since ``kubectl
replace``/``apply`` of the output rewrites it with the merged ConfigMap.

``--check``: print nothing and exit 0 when nothing would change; exit 1 with the table when something
would. ``--revert FILE``: undo a recorded merge (the ConfigMap's annotation, or ``--record FILE`` for a
bare file) and print the result — the ConfigMap's last-applied annotation back too when the revert is byte
for byte; ``cleanup --kueue-config`` does it on the live ConfigMap.

Exit 0; 1 on a refused conflict, unreadable input, a missing record; 2 on a bad ``--accept``.
"""

from __future__ import annotations

import difflib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from gpustack_worker.api import keys, kinds
from gpustack_worker.api.kueue_install import CONFIG_KEY

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from gpustack_worker.api.kueue_merge import Change
    from gpustack_worker.api.kueue_merge_record import Reverted

__all__ = (
    "SERVER_SET",
    "Merged",
    "accept_names",
    "check_accepts",
    "merge_document",
    "refusal_lines",
    "revert_document",
    "run",
    "summary",
    "table_lines",
)

#: Metadata the API server sets that the merged ConfigMap does not carry back (``uid`` and
#: ``resourceVersion`` stay: they make ``kubectl replace``/``apply`` of the output refuse when the ConfigMap
#: was changed or re-created since it was read).
SERVER_SET: Final = ("managedFields", "creationTimestamp", "generation", "selfLink")
#: kubectl's record of the last ``kubectl apply`` (kubectl's own annotation key).
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"
#: The record's entry for :data:`LAST_APPLIED` as it was before the first merge (``null``: absent).
LAST_APPLIED_RECORD: Final = "lastApplied"
#: A value in the table is cut at this many characters.
_WIDTH: Final = 60
#: Exit code of a bad ``--accept`` (usage).
USAGE: Final = 2


# --- accepting conflicts -------------------------------------------------------------------------------
def accept_names() -> list[str]:
    """Every override ``--accept`` knows (whether or not it is a conflict in a given file)."""
    from gpustack_worker.api import kueue_config

    return [
        *(f"transformation:{t['input']}" for t in kueue_config.transformations()),
        *(f"gate:{g}" for g in sorted(kueue_config.FEATURE_GATES)),
        *(f"integration:{f}" for f in kueue_config.FRAMEWORKS),
        "setting:resources.quotaCheckStrategy",
        "setting:resources.excludeResourcePrefixes",
    ]


def _tokens(values: Sequence[str]) -> list[str]:
    return [t.strip() for v in values for t in v.split(",") if t.strip()]


def check_accepts(values: Sequence[str]) -> list[str]:
    """One error line per ``--accept`` value that names no override, with the closest known one."""
    from gpustack_worker.api.kueue_merge import ACCEPT_KINDS

    known = accept_names()
    errors = []
    for token in _tokens(values):
        if token in known:
            continue
        kind, colon, _ = token.partition(":")
        close = difflib.get_close_matches(token, known, n=1, cutoff=0.5)
        if not close and colon and kind not in ACCEPT_KINDS:
            close = [
                f"{k}:NAME" for k in difflib.get_close_matches(kind, list(ACCEPT_KINDS), n=1, cutoff=0.6)
            ]
        kinds_hint = f"; expected KIND:NAME, KIND one of {', '.join(ACCEPT_KINDS)}"
        hint = f"; did you mean {close[0]!r}?" if close else kinds_hint
        errors.append(f"--accept {token!r}: no such override{hint}")
    return errors


# --- summaries -----------------------------------------------------------------------------------------
def _brief(value: Any) -> str:
    """A value in a few words: a transformation as ``outputs (strategy)``, anything else compact."""
    if value is None:
        return "unset"
    if isinstance(value, dict) and "input" in value:
        outputs = ",".join(f"{k}={v}" for k, v in sorted((value.get("outputs") or {}).items()))
        extra = f" x {value['multiplyBy']}" if value.get("multiplyBy") else ""
        return f"{outputs or 'no outputs'}{extra} ({value.get('strategy') or 'Retain'})"
    if isinstance(value, bool):
        return str(value).lower()
    if not isinstance(value, dict | list):
        return str(value)  # a flag value is shown whole: it is what the operator sets
    shown = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return shown if len(shown) <= _WIDTH else shown[: _WIDTH - 3] + "..."


def table_lines(changes: Sequence[Change]) -> list[str]:
    """The changes as a short table: adds of transformations in one row, every other change in its own."""
    rows: list[tuple[str, str, str, str]] = []
    added = [c for c in changes if c.path.startswith("resources.transformations[") and not c.conflict]
    if added:
        inputs = [str(c.now["input"]) for c in added]
        shown = ", ".join(inputs[:3]) + (f", +{len(inputs) - 3} more" if len(inputs) > 3 else "")
        rows.append(("add", f"resources.transformations ({len(added)})", "unset", f"-> credits: {shown}"))
    for c in changes:
        if c in added:
            continue
        verdict = "conflict" if c.conflict else "add"
        rows.append((verdict, c.path, _brief(c.was), _brief(c.now)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    head = ("CHANGE", "KEY", "TEAM'S VALUE", "OURS")
    widths = [max(w, len(h)) for w, h in zip(widths, head, strict=False)]
    return [
        "  ".join(f"{col:<{w}}" for col, w in zip(row[:3], widths, strict=False)) + "  " + row[3]
        for row in (head, *rows)
    ]


def refusal_lines(conflicts: Sequence[Change]) -> list[str]:
    """The refusal: each conflict with the team's value, ours, the consequence and its ``--accept``."""
    needed = [t for c in conflicts for t in c.accept]
    lines = [f"refused: {len(needed)} conflict(s) with the team's configuration; nothing written"]
    for c in conflicts:
        lines.append(f"  {c.path}: theirs {_brief(c.was)}, ours {_brief(c.now)}")
        lines.append(f"    {c.why}")
        lines.append(f"    accept: {' '.join(f'--accept {t}' for t in c.accept)}")
    return lines


# --- merge and revert ----------------------------------------------------------------------------------
@dataclass(slots=True)
class Merged:
    """The result of a merge: the document to print, its text, the changes, and the record (if any)."""

    document: Any
    text: str
    changes: list[Change]
    record: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def _dump(doc: Any) -> str:
    import yaml

    return str(yaml.dump(doc, Dumper=_dumper(), sort_keys=True, default_flow_style=False, width=110))


def _annotations(doc: Any) -> dict[str, Any]:
    return dict(((doc.get("metadata") or {}).get("annotations")) or {})


def _configuration(doc: Any) -> dict[str, Any]:
    from gpustack_worker.api import kueue_config

    if not isinstance(doc, dict):
        raise ValueError("expected a Kueue Configuration (YAML mapping) or a ConfigMap holding one")
    if doc.get("apiVersion") != kueue_config.CONFIG_API_VERSION or doc.get("kind") != "Configuration":
        hint = (
            " (a v1beta1 file cannot carry resources.quotaCheckStrategy, which the chain needs: "
            "rewrite it as v1beta2 — same keys, integrations.podOptions.namespaceSelector becomes "
            "managedJobsNamespaceSelector — and merge that)"
            if doc.get("apiVersion") == "config.kueue.x-k8s.io/v1beta1"
            else ""
        )
        raise ValueError(
            f"expected apiVersion {kueue_config.CONFIG_API_VERSION}, kind Configuration; got "
            f"{doc.get('apiVersion')!r}, {doc.get('kind')!r}{hint}"
        )
    return doc


def _inner_text(doc: dict[str, Any]) -> str:
    text = (doc.get("data") or {}).get(CONFIG_KEY)
    if not text:
        raise ValueError(f"the ConfigMap has no data key {CONFIG_KEY!r}")
    return str(text)


def merge_document(
    doc: Any,
    *,
    text: str = "",
    feature_gates: str | None = None,
    system_namespace: str = kinds.SYSTEM_NAMESPACE,
    previous_record: dict[str, Any] | None = None,
) -> Merged:
    """The merged document (a Configuration, or a ConfigMap holding one), its text and the changes.

    ``text``: the bare file as read (recorded byte for byte); ``previous_record``: the record of an earlier
    merge of a bare file. ValueError when ``doc`` is neither (or the gate flag / a record is malformed)."""
    import yaml

    from gpustack_worker.api import kueue_merge, kueue_merge_record

    flags = kueue_merge.gate_flag_values(feature_gates) if feature_gates is not None else None
    notes: list[str] = []
    if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
        inner_text = _inner_text(doc)
        annotations = _annotations(doc)
        previous = annotations.get(keys.KUEUE_CONFIG_MERGE_ANNOTATION)
        inner = _configuration(yaml.safe_load(inner_text))
        merged, changes = kueue_merge.merge(inner, gate_flags=flags, system_namespace=system_namespace)
        meta = {k: v for k, v in (doc.get("metadata") or {}).items() if k not in SERVER_SET}
        out = {k: v for k, v in doc.items() if k != "metadata"}
        record = None
        if changes:
            merged_text = kueue_merge_record.dump_config(merged)
            earlier = kueue_merge_record.parse(str(previous)) if previous else None
            record = kueue_merge_record.record_of(inner_text, inner, merged, changes, merged_text, earlier)
            # kubectl's last-applied annotation as it was before our first merge: ``kubectl replace`` or
            # ``apply`` of our output rewrites it with the merged ConfigMap, and a byte-for-byte revert puts
            # it back too (a key-by-key one leaves it: the team has applied since).
            if earlier is None:
                record[LAST_APPLIED_RECORD] = annotations.get(LAST_APPLIED)
            elif record.get("original") is not None and LAST_APPLIED_RECORD in earlier:
                record[LAST_APPLIED_RECORD] = earlier[LAST_APPLIED_RECORD]
            annotations[keys.KUEUE_CONFIG_MERGE_ANNOTATION] = json.dumps(record, sort_keys=True)
            meta["annotations"] = annotations
            out["data"] = {**doc["data"], CONFIG_KEY: merged_text}
        out["metadata"] = meta
        document: Any = out
    else:
        config = _configuration(doc)
        document, changes = kueue_merge.merge(config, gate_flags=flags, system_namespace=system_namespace)
        record = None
        if changes:
            record = kueue_merge_record.record_of(
                text, config, document, changes, _dump(document), previous_record
            )
    if any(c.path == "--feature-gates" for c in changes):
        notes.append("Kueue's Deployment: set the --feature-gates flag to the value above (not in the file)")
    return Merged(document, _dump(document), changes, record, notes)


def revert_document(doc: Any, text: str, record_text: str | None = None) -> tuple[Any, str, Reverted]:
    """Undo the recorded merge: ``(document, its text, what happened)``. A ConfigMap's record is its
    annotation (removed with the revert); a bare file's is ``record_text``. ValueError without a record."""
    import yaml

    from gpustack_worker.api import kueue_merge_record

    if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
        annotations = _annotations(doc)
        raw = annotations.pop(keys.KUEUE_CONFIG_MERGE_ANNOTATION, None)
        if raw is None:
            raise ValueError(
                f"the ConfigMap carries no {keys.KUEUE_CONFIG_MERGE_ANNOTATION} annotation: "
                "no merge to revert"
            )
        record = kueue_merge_record.parse(str(raw))
        reverted = kueue_merge_record.revert(_inner_text(doc), record)
        if reverted.exact and LAST_APPLIED_RECORD in record:
            last_applied = record[LAST_APPLIED_RECORD]
            if last_applied is None:
                annotations.pop(LAST_APPLIED, None)
            else:
                annotations[LAST_APPLIED] = str(last_applied)
        meta = {k: v for k, v in (doc.get("metadata") or {}).items() if k not in SERVER_SET}
        if annotations:
            meta["annotations"] = annotations
        else:
            meta.pop("annotations", None)
        out = {**doc, "metadata": meta, "data": {**doc["data"], CONFIG_KEY: reverted.text}}
        return out, _dump(out), reverted
    if record_text is None:
        raise ValueError("a bare Configuration: pass the merge's --record FILE")
    _configuration(yaml.safe_load(text))
    reverted = kueue_merge_record.revert(text, kueue_merge_record.parse(record_text))
    return yaml.safe_load(reverted.text), reverted.text, reverted


def summary(reverted: Reverted) -> str:
    """One line: how the revert went and which keys came back (transformations counted)."""
    how = "the team's original file, byte for byte" if reverted.exact else "key by key"
    transformations = [p for p in reverted.restored if p.startswith("resources.transformations[")]
    others = [p for p in reverted.restored if p not in transformations]
    shown = [*([f"resources.transformations ({len(transformations)})"] if transformations else []), *others]
    return f"reverted ({how}): {', '.join(shown) or 'nothing'}"


def _read(name: str) -> str:
    return sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")


def _say(line: str) -> None:
    print(f"kueue-config: {line}", file=sys.stderr)


def _run_revert(args: argparse.Namespace) -> int:
    import yaml

    try:
        text = _read(args.revert)
        record_text = Path(args.record).read_text(encoding="utf-8") if args.record else None
        _, out, reverted = revert_document(yaml.safe_load(text), text, record_text)
    except (OSError, yaml.YAMLError, ValueError) as exc:
        print(f"kueue-config --revert {args.revert}: {exc}", file=sys.stderr)
        return 1
    _say(summary(reverted))
    for line in reverted.kept:
        _say(f"kept: {line}")
    print(out, end="")
    return 0


def run(args: argparse.Namespace) -> int:
    import yaml

    from gpustack_worker.api import kueue_config, kueue_merge_record

    if args.revert is not None:
        return _run_revert(args)
    if args.merge is None:
        if args.check:
            print("kueue-config: --check needs --merge FILE", file=sys.stderr)
            return USAGE
        print(kueue_config.render(), end="")
        return 0
    bad = check_accepts(args.accept)
    if bad:
        for line in bad:
            print(f"kueue-config: {line}", file=sys.stderr)
        return USAGE
    accepted = set(_tokens(args.accept))
    try:
        text = _read(args.merge)
        doc = yaml.safe_load(text)
        bare = not (isinstance(doc, dict) and doc.get("kind") == "ConfigMap")
        previous = None
        if bare and args.record and Path(args.record).exists():
            previous = kueue_merge_record.parse(Path(args.record).read_text(encoding="utf-8"))
        merged = merge_document(
            doc,
            text=text,
            feature_gates=args.feature_gates,
            system_namespace=args.namespace,
            previous_record=previous,
        )
    except (OSError, yaml.YAMLError, ValueError) as exc:
        print(f"kueue-config --merge {args.merge}: {exc}", file=sys.stderr)
        return 1
    if args.check:
        if merged.changes:
            _say(f"{len(merged.changes)} change(s) would be made:")
            for line in table_lines(merged.changes):
                print(f"  {line}", file=sys.stderr)
            return 1
        return 0
    if not merged.changes:
        _say("nothing to change: the configuration already gives the chain what it needs")
        print(merged.text, end="")
        return 0
    refused = [c for c in merged.changes if any(t not in accepted for t in c.accept)]
    if refused:
        for line in refusal_lines(refused):
            _say(line)
        every = sorted({t for c in refused for t in c.accept})
        _say(f"to accept them all: {' '.join(f'--accept {t}' for t in every)}")
        return 1
    if bare and args.record is None and not args.no_record:
        _say(
            "a bare Configuration has no metadata to keep what the merge replaces: pass --record FILE "
            "(revert: kueue-config --revert merged.yaml --record FILE), or --no-record; a ConfigMap "
            "records it in its annotation " + keys.KUEUE_CONFIG_MERGE_ANNOTATION
        )
        return 1
    _say(f"{len(merged.changes)} change(s):")
    for line in table_lines(merged.changes):
        print(f"  {line}", file=sys.stderr)
    for note in merged.notes:
        _say(note)
    if bare and args.record is not None and merged.record is not None:
        try:
            Path(args.record).write_text(json.dumps(merged.record, indent=2, sort_keys=True) + "\n")
        except OSError as exc:
            print(f"kueue-config --record {args.record}: {exc}", file=sys.stderr)
            return 1
        _say(f"recorded what it replaced in {args.record}")
    elif not bare:
        _say(f"recorded what it replaced in the annotation {keys.KUEUE_CONFIG_MERGE_ANNOTATION}")
    print(merged.text, end="")
    return 0


def _dumper() -> Any:
    """A YAML dumper writing multi-line strings (a ConfigMap's embedded file) as literal blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return Dumper
