"""Files generated from code (CRDs, RBAC, webhook configurations, Kueue's configuration, the settings
reference): writing them, finding the stale ones, and the ``--check`` report every generator prints.

A generator builds ``{path: text}`` and calls :func:`write_files`, or :func:`stale` and :func:`report`
for ``--check``; the tests call :func:`stale` so a forgotten regeneration fails CI."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

__all__ = ("report", "stale", "write_files")


def write_files(outputs: Mapping[Path, str]) -> list[Path]:
    """Write every file (creating directories); returns the paths written."""
    paths = []
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def stale(outputs: Mapping[Path, str], present: Iterable[Path] = ()) -> list[str]:
    """Problems compared to a fresh generation: ``missing:`` / ``stale:`` files, and ``unexpected:`` ones
    among ``present`` (what a generator's directory holds) that it would not write."""
    problems = []
    for path, text in outputs.items():
        if not path.exists():
            problems.append(f"missing: {path}")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"stale: {path}")
    problems.extend(f"unexpected: {p}" for p in sorted(present) if p not in outputs)
    return problems


def report(problems: list[str], regenerate: str) -> int:
    """Print ``--check`` problems and how to regenerate on stderr; the exit code (1 when any)."""
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"regenerate with: {regenerate}", file=sys.stderr)
    return 1 if problems else 0
