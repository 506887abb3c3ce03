"""The files of ``docs/examples/`` as the tests read them: every YAML document by file, and the snapshot
each writing TopologySource publishes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gpustack_worker.api import kinds

__all__ = (
    "EXAMPLES",
    "README",
    "SNAPSHOT_FILES",
    "documents",
    "example_files",
    "listed_files",
    "objects",
    "snapshot_of",
)

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
README = EXAMPLES / "README.md"
#: Files that hold a snapshot body (what an inventory endpoint answers), not Kubernetes objects.
SNAPSHOT_FILES = ("topologysource-webhook-snapshot.yaml",)


def example_files() -> list[Path]:
    """Every example file (the README aside), sorted by name."""
    return sorted(p for p in EXAMPLES.iterdir() if p.is_file() and p.name != README.name)


def listed_files() -> set[str]:
    """The file names the README's table lists (its first column, in backticks)."""
    return set(re.findall(r"^\| `([^`]+)` \|", README.read_text(), flags=re.MULTILINE))


def documents(path: Path) -> list[dict[str, Any]]:
    """The YAML documents of ``path`` (empty ones left out)."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def objects() -> list[tuple[str, dict[str, Any]]]:
    """(file name, object) for every Kubernetes object of every example, in file order."""
    return [
        (path.name, doc)
        for path in example_files()
        if path.name not in SNAPSHOT_FILES
        for doc in documents(path)
    ]


def snapshot_of(source: dict[str, Any]) -> str:
    """The snapshot text a writing TopologySource of the examples publishes: its ConfigMap's key, or the
    snapshot file its webhook serves."""
    spec = source["spec"]
    if "configMap" in spec:
        ref, key = spec["configMap"]["configMapRef"], spec["configMap"]["key"]
        for _, doc in objects():
            meta = doc["metadata"]
            if (doc["kind"], meta["name"], meta.get("namespace")) == (
                kinds.CONFIG_MAP.kind,
                ref["name"],
                ref["namespace"],
            ):
                return str(doc["data"][key])
        raise AssertionError(f"no example ConfigMap {ref['namespace']}/{ref['name']}")
    return (EXAMPLES / SNAPSHOT_FILES[0]).read_text()
