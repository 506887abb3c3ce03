"""The user-facing documents stand alone: ``README.md``, ``docs/`` and the chart's ``NOTES.txt`` cite no
section of a document outside the repository, and every repository path they name in backticks exists.
The code stands alone too: no comment or docstring under ``gpustack_worker/`` cites such a document.

The specification the product was built from is not shipped; a "see reference §5.3" in the runbook is a
dead end for the platform team reading it, and in a docstring for the next person changing the code, so
the fact itself is written in place (or in a document under ``docs/`` the comment points to)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "gpustack_worker"
DOCUMENTS = sorted(
    [REPO / "README.md", REPO / "chart" / "templates" / "NOTES.txt", *REPO.glob("docs/**/*.md")]
)

#: Every module of the package, held to the same rule as the documents.
SOURCES = sorted(PACKAGE.rglob("*.py"))

#: What a citation of an outside document looks like: a section sign, an appendix, the spec's files or
#: the shared directory it lives in.
CITATION = re.compile(
    r"§|\bAppendix [A-Z]\b|\breference\.md\b|scheduling-chain\.md|topology-aware-scheduling\.txt"
    r"|\.\./shared/|shared/(?:spec|notes|roadmap)"
)
#: A path of this repository in backticks: from the top (``tests/…``) or inside the package
#: (``chain/steps.py``), as the documents write them.
TOP_LEVEL = ("gpustack_worker", "tests", "bench", "chart", "manifests", "docs", ".ci")
PATH = re.compile(r"`((?:[A-Za-z0-9_.\-]+/)+[A-Za-z0-9_.\-]*)`")


def _lines(path: Path) -> list[tuple[int, str]]:
    return list(enumerate(path.read_text(encoding="utf-8").splitlines(), 1))


def _exists(reference: str) -> bool:
    reference = reference.rstrip("/.")
    first = reference.split("/", 1)[0]
    if first in TOP_LEVEL:
        return (REPO / reference).exists() or any(REPO.glob(reference))
    if (PACKAGE / first).is_dir():
        module, _, attribute = reference.rpartition(".")
        # ``runtime/quantity.parse``: a name in a module, as the documents point at functions
        return (PACKAGE / reference).exists() or (bool(attribute) and (PACKAGE / f"{module}.py").is_file())
    return True  # not one of ours (an upstream path, a URL piece): not checked


def test_the_documents_are_found() -> None:
    names = {p.relative_to(REPO).as_posix() for p in DOCUMENTS}
    assert {"README.md", "docs/operations.md", "docs/chart.md", "chart/templates/NOTES.txt"} <= names


def test_the_modules_are_found() -> None:
    names = {p.relative_to(REPO).as_posix() for p in SOURCES}
    assert {"gpustack_worker/api/keys.py", "gpustack_worker/chain/queues.py"} <= names


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_citation_of_a_document_outside_the_repository(path: Path) -> None:
    found = _citations(path)
    assert not found, "\n".join(found)


def _citations(path: Path) -> list[str]:
    return [f"{n}: {line.strip()}" for n, line in _lines(path) if CITATION.search(line)]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_citation_of_a_document_outside_the_repository_in_the_code(path: Path) -> None:
    found = _citations(path)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_repository_path_named_exists(path: Path) -> None:
    missing = [f"{n}: {ref}" for n, line in _lines(path) for ref in PATH.findall(line) if not _exists(ref)]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize(
    ("line", "cited"),
    [
        ("the fit pin sorts first (reference §5.3)", True),
        ("see Appendix C for the presets", True),
        ("as ../shared/spec/scheduling-chain.md says", True),
        ("the four-view (exclusive/shared/sliced/partitioned)", False),
        ("a shared card", False),
    ],
)
def test_what_counts_as_a_citation(line: str, cited: bool) -> None:
    assert bool(CITATION.search(line)) is cited


@pytest.mark.parametrize(
    ("reference", "exists"),
    [
        ("tests/docs/test_standalone.py", True),
        ("chain/steps.py", True),
        ("tests/runtime/test_agent_support.py", False),
        ("chain/topologies.py", False),
        ("runtime/quantity.parse", True),
        ("runtime/quantity_x.parse", False),
        ("cmd/kueue/main.go", True),  # upstream Kueue's, not checked
    ],
)
def test_what_counts_as_a_missing_path(reference: str, exists: bool) -> None:
    assert _exists(reference) is exists
