"""What ``kueue-config --merge`` changed in a team's Kueue configuration, and how to put it back.

The record is a JSON document, kept where the team can see it: on the ConfigMap the merge rewrote, in the
annotation :data:`~gpustack_worker.api.keys.KUEUE_CONFIG_MERGE_ANNOTATION`; for a bare Configuration
file, in the file named by ``--record`` (a file has no metadata to carry it, and Helm's
``--set-file`` takes only the configuration). It holds:

- ``keys``: per changed key (``resources.transformations[<input>]``, ``resources.quotaCheckStrategy``,
  ``resources.excludeResourcePrefixes``, ``integrations.frameworks``, ``featureGates.<gate>``,
  ``managedJobsNamespaceSelector``, ``--feature-gates``) the team's value (``was``, ``null``: unset) and
  ours (``now``);
- ``absent``: the sections (``resources``, ``integrations``, ``featureGates``) and the list
  ``resources.transformations`` the team's file did not have;
- ``original``: the team's file, byte for byte, and ``mergedSha256``: the digest of the file the merge
  produced.

:func:`revert` puts it back: when the file is still exactly what the merge produced, the team's original
text (byte for byte); otherwise key by key — a key whose value is still ours gets the team's value back
(or goes, when they had none), a key the team changed since is left as it is and reported. A gate in
Kueue's ``--feature-gates`` flag is not in the file: it is reported with the flag's old value.

Pure: no I/O.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import yaml

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from gpustack_worker.api.kueue_merge import Change

__all__ = ("RECORD_VERSION", "Reverted", "dump_config", "parse", "record_of", "revert", "sha256", "value_at")

RECORD_VERSION: Final = 1
#: The sections and lists a merge may create (a revert removes them again when the team had none).
_CONTAINERS: Final = ("featureGates", "integrations", "resources", "resources.transformations")
#: ``<dotted.path>[<input>]``: a list item matched by its ``input`` (an input may hold dots itself).
_ITEM: Final = re.compile(r"^(?P<list>[^\[]+)\[(?P<key>.+)\]$")
FLAG_PATH: Final = "--feature-gates"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def dump_config(config: Mapping[str, Any]) -> str:
    """The text the merge writes for a Configuration (sorted keys, block style)."""
    return yaml.safe_dump(dict(config), sort_keys=True, default_flow_style=False, width=110)


def _parts(path: str) -> tuple[list[str], str | None]:
    """``path``'s dotted keys, and the ``input`` of the list item it ends in (None: a plain key)."""
    item = _ITEM.match(path)
    if item:
        return item["list"].split("."), item["key"]
    return path.split("."), None


def value_at(config: Mapping[str, Any], path: str) -> Any:
    """The value at a record path (None: unset)."""
    parts, key = _parts(path)
    node: Any = config
    for part in parts:
        node = node.get(part) if isinstance(node, dict) else None
    if key is None:
        return node
    return next((e for e in node or () if isinstance(e, dict) and str(e.get("input")) == key), None)


def _set(config: dict[str, Any], path: str, value: Any) -> None:
    """Set (``value`` not None) or remove the key at ``path``; a list item is matched by ``input``."""
    parts, key = _parts(path)
    node = config
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            if value is None:
                return
            node[part] = {}
        node = node[part]
    last = parts[-1]
    if key is not None:
        if value is None and not isinstance(node.get(last), list):
            return
        entries = [
            e for e in node.get(last) or () if not (isinstance(e, dict) and str(e.get("input")) == key)
        ]
        if value is not None:
            entries = sorted([*entries, copy.deepcopy(value)], key=lambda e: str(e.get("input")))
        node[last] = entries
    elif value is None:
        node.pop(last, None)
    else:
        node[last] = copy.deepcopy(value)


def record_of(
    original_text: str,
    original: Mapping[str, Any],
    merged: Mapping[str, Any],
    changes: Sequence[Change],
    merged_text: str,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The record of one merge (``previous``: the record of an earlier merge of the same file, combined:
    the team's value of a key stays the one before our first change, unless they changed it since)."""
    keys: dict[str, dict[str, Any]] = {}
    exact = True
    if previous is not None:
        keys = {str(k["path"]): dict(k) for k in previous.get("keys") or ()}
        exact = previous.get("mergedSha256") == sha256(original_text) and previous.get("original") is not None
    for change in changes:
        if change.path == FLAG_PATH:
            was, now = change.was, change.now
        else:
            was, now = value_at(original, change.path), value_at(merged, change.path)
        earlier = keys.get(change.path)
        if earlier is not None and earlier.get("now") == was:
            was = earlier.get("was")
        keys[change.path] = {"path": change.path, "was": was, "now": now}
    absent = sorted(c for c in _CONTAINERS if value_at(original, c) is None)
    if previous is not None:
        absent = sorted({*absent, *(previous.get("absent") or ())} & set(_CONTAINERS))
    return {
        "version": RECORD_VERSION,
        "keys": [keys[p] for p in sorted(keys)],
        "absent": absent,
        "original": original_text if previous is None else (previous.get("original") if exact else None),
        "mergedSha256": sha256(merged_text),
    }


def parse(text: str) -> dict[str, Any]:
    """A record from its JSON text; ValueError when it is not one."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a kueue-config merge record (JSON): {exc}") from exc
    if (
        not isinstance(doc, dict)
        or doc.get("version") != RECORD_VERSION
        or not isinstance(doc.get("keys"), list)
    ):
        raise ValueError(f"not a kueue-config merge record (version {RECORD_VERSION} with keys)")
    return doc


@dataclass(frozen=True, slots=True)
class Reverted:
    """The reverted file, and what happened to each recorded key."""

    text: str
    #: the original text came back byte for byte
    exact: bool
    restored: tuple[str, ...]
    #: ``path: why`` of each key left as it is
    kept: tuple[str, ...]


def _show(value: Any) -> str:
    return "unset" if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"))


def revert(current_text: str, record: Mapping[str, Any]) -> Reverted:
    """``current_text`` (the file as it is now) with the recorded changes undone where still ours."""
    entries = [k for k in record.get("keys") or () if isinstance(k, dict)]
    flag_notes = tuple(
        f"{FLAG_PATH}: not in the file: set Kueue's flag back to {_show(k.get('was'))} yourself"
        for k in entries
        if k.get("path") == FLAG_PATH
    )
    in_file = [k for k in entries if k.get("path") != FLAG_PATH]
    original = record.get("original")
    if isinstance(original, str) and sha256(current_text) == record.get("mergedSha256"):
        return Reverted(original, True, tuple(str(k["path"]) for k in in_file), flag_notes)
    config = yaml.safe_load(current_text)
    if not isinstance(config, dict):
        raise ValueError("the current configuration is not a YAML mapping")
    restored: list[str] = []
    kept: list[str] = list(flag_notes)
    for k in in_file:
        path = str(k["path"])
        current = value_at(config, path)
        if current == k.get("now"):
            _set(config, path, k.get("was"))
            restored.append(path)
        else:
            kept.append(
                f"{path}: changed since the merge (now {_show(current)}, ours was "
                f"{_show(k.get('now'))}): left as is"
            )
    for container in sorted(record.get("absent") or (), key=lambda c: -c.count(".")):
        if container in _CONTAINERS and value_at(config, container) in ({}, [], None):
            _set(config, container, None)
    return Reverted(dump_config(config), False, tuple(restored), tuple(kept))
