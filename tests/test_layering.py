"""Imports point one way: cli → controllers/tools → api → runtime, and controllers never import each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gpustack_worker"
CONTROLLERS = ("agent", "chain", "topology", "placement", "devcluster", "simulate")
#: What each layer may import from the package (besides itself).
ALLOWED: dict[str, set[str]] = {
    "runtime": set(),
    "api": {"runtime"},
    **{c: {"api", "runtime"} for c in CONTROLLERS},
    "cli": {"api", "runtime", *CONTROLLERS},
}


def _layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else "cli"  # top-level modules (__main__) sit with the CLI


def _imported_layers(path: Path) -> set[tuple[str, int]]:
    found: set[tuple[str, int]] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "gpustack_worker" and len(parts) > 1:
                found.add((parts[1], node.lineno))
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PACKAGE)) for p in MODULES])
def test_imports_point_downwards(path: Path) -> None:
    layer = _layer(path)
    allowed = ALLOWED[layer] | {layer}
    bad = sorted(
        f"line {line}: gpustack_worker.{target}"
        for target, line in _imported_layers(path)
        if target not in allowed
    )
    assert not bad, f"{path.relative_to(PACKAGE)} ({layer}) may import only {sorted(allowed)}: {bad}"


def test_every_layer_is_known() -> None:
    layers = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert layers <= set(ALLOWED), f"unclassified packages: {sorted(layers - set(ALLOWED))}"
