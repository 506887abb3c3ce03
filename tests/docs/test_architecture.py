"""docs/architecture.md cannot drift: its rooms table is tests/test_layering.py's, and its module map lists
every package of gpustack_worker/ and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_layering import ALLOWED, PACKAGE

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _table(name: str) -> dict[str, str]:
    """The rows of the table between ``<!-- NAME: begin -->`` and ``<!-- NAME: end -->``: first cell →
    second, backticks removed, header and rule rows skipped."""
    text = DOC.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {name}: begin -->\n(.*?)<!-- {name}: end -->", text, re.S)
    assert match, f"no {name} table in {DOC.name}"
    rows: dict[str, str] = {}
    for line in match.group(1).splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1]
    return rows


def _allowed(cell: str) -> set[str]:
    return set() if cell == "nothing of ours" else {c.strip().strip("`") for c in cell.split(",")}


def test_the_rooms_table_is_the_layering_tests() -> None:
    assert {room: _allowed(cell) for room, cell in _table("rooms").items()} == ALLOWED


def test_the_module_map_lists_every_package() -> None:
    on_disk = {
        path.parent.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("__init__.py")
        if path.parent != PACKAGE
    }
    assert set(_table("packages")) == on_disk


@pytest.mark.parametrize(
    ("cell", "rooms"), [("nothing of ours", set()), ("`api`, `runtime`", {"api", "runtime"})]
)
def test_how_a_cell_is_read(cell: str, rooms: set[str]) -> None:
    assert _allowed(cell) == rooms
