"""One table per benchmark from one run per size, with how each figure grows with the fleet.

Every benchmark run with ``--json PATH`` writes one file::

    {"bench": "<name>", "nodes": N, "figures": {"<figure name>": value, ...}}

(``value`` a number, or a string for what has no number: a verdict, a "not converged"). This module
reads a directory of them (``python bench/summary.py DIR``) and prints, per bench, one Markdown table:
one row per figure, one column per size (``1k``, ``5k``, ``20k``), and the figure's growth from the
smallest to the largest size. The growth is the exponent ``k`` of the least-squares fit of
``value ~ nodes^k`` over every size measured (log-log), and the factor per node between the smallest and
the largest size: ``(v_large / v_small) / (n_large / n_small)``. ``k ≈ 1`` (``x1.0 per node``) is linear,
``k ≈ 0`` constant (a rate or a ratio that holds), ``k > 1`` worse than linear. Figures that are zero or
negative anywhere have no exponent (a zero is printed as constant when it is zero everywhere).

``python bench/summary.py run [--sizes ...] [--out DIR] [--only ...] [--quiet S]`` (what ``nox -s bench``
calls) runs each benchmark once per size as its own process with ``--nodes N --json DIR/<bench>-N.json``
and then prints the tables from DIR. ``--sizes 1000,5000`` sets the sizes of every sized benchmark;
``--sizes chain=1000,5000,20000`` those of one (repeatable). Defaults are what issue 18 asks: :data:`SIZES`.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

#: Benchmark name → default sizes (Nodes), in the order they run. ``runtime`` and ``relist`` have no
#: cluster; the others start a dev cluster per run.
SIZES: Final[dict[str, tuple[int, ...]]] = {
    "runtime": (5_000,),
    "relist": (5_000, 20_000),
    "simulate": (5_000,),
    "agent": (1_000,),
    "latency": (1_000,),
    "write": (2_000,),
    "chain": (1_000, 5_000, 20_000),
}
#: Within this distance of 1 (or 0) an exponent reads as linear (or constant): one run per size on a
#: shared machine moves a figure by tens of percent, which at a 20x size span is about ±0.1 in k.
TOLERANCE: Final = 0.1

Value = float | int | str | None


# --- the file each benchmark writes ------------------------------------------------------------------


def write_json(path: str | Path, bench: str, nodes: int, figures: dict[str, Value]) -> None:
    """Write one run's figures (``--json PATH`` of every benchmark)."""
    doc = {"bench": bench, "nodes": nodes, "figures": figures}
    Path(path).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))


def load(directory: Path) -> dict[str, dict[int, dict[str, Value]]]:
    """bench → nodes → figures, from every ``*.json`` in ``directory`` that has the format."""
    runs: dict[str, dict[int, dict[str, Value]]] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            doc = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            print(f"{path}: not JSON ({exc}); skipped", file=sys.stderr)
            continue
        if not isinstance(doc, dict) or not {"bench", "nodes", "figures"} <= doc.keys():
            print(f"{path}: not a benchmark figures file; skipped", file=sys.stderr)
            continue
        runs.setdefault(str(doc["bench"]), {})[int(doc["nodes"])] = dict(doc["figures"])
    return runs


# --- growth ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Growth:
    """How a figure grows over the sizes measured."""

    #: ``k`` of ``value ~ nodes^k`` (least squares on log-log); None where undefined.
    exponent: float | None
    #: (v_large / v_small) / (n_large / n_small); None where undefined.
    per_node: float | None
    #: "decreasing", "constant", "sublinear", "linear", "superlinear", or "-" (not enough to say).
    verdict: str


def growth(points: list[tuple[int, float]]) -> Growth:
    """The growth of a figure measured at ``(nodes, value)`` points (at least two distinct sizes)."""
    points = sorted(points)
    sizes = {n for n, _ in points}
    if len(sizes) < 2:
        return Growth(None, None, "-")
    if all(v == 0 for _, v in points):
        return Growth(0.0, 0.0, "constant")
    if any(v <= 0 for _, v in points) or any(n <= 0 for n in sizes):
        return Growth(None, None, "-")
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(v) for _, v in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    k = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    (n0, v0), (n1, v1) = points[0], points[-1]
    per_node = (v1 / v0) / (n1 / n0)
    return Growth(k, per_node, _verdict(k))


def _verdict(k: float) -> str:
    edge = TOLERANCE + 1e-9  # 1.1 - 1 is 0.10000000000000009 in floating point
    if abs(k) <= edge:
        return "constant"
    if abs(k - 1) <= edge:
        return "linear"
    if k < 0:
        return "decreasing"
    return "sublinear" if k < 1 else "superlinear"


# --- the table ---------------------------------------------------------------------------------------


def size_label(nodes: int) -> str:
    """1000 → ``1k``, 1500 → ``1.5k``, 20000 → ``20k``, 500 → ``500``."""
    if nodes >= 1000 and nodes % 100 == 0:
        return f"{nodes / 1000:g}k"
    return str(nodes)


def cell(value: Value) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool | str):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def growth_cell(g: Growth) -> str:
    if g.exponent is None or g.per_node is None:
        return g.verdict
    return f"x{g.per_node:.2f} per node (n^{g.exponent:.2f}, {g.verdict})"


def table(bench: str, runs: dict[int, dict[str, Value]]) -> list[str]:
    """The Markdown lines of one bench's table: figures in first-seen order, sizes ascending."""
    sizes = sorted(runs)
    names: dict[str, None] = {}
    for n in sizes:
        names.update(dict.fromkeys(runs[n]))
    span = f"{size_label(sizes[0])} → {size_label(sizes[-1])}"
    head = [f"{bench} figure", *(size_label(n) for n in sizes)]
    if len(sizes) > 1:
        head.append(f"growth {span}")
    rows = [head]
    for name in names:
        values = [runs[n].get(name) for n in sizes]
        row = [name, *(cell(v) for v in values)]
        if len(sizes) > 1:
            numbers = [
                (n, float(v))
                for n, v in zip(sizes, values, strict=True)
                if isinstance(v, int | float) and not isinstance(v, bool)
            ]
            row.append(growth_cell(growth(numbers)))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return lines


def print_tables(directory: Path) -> int:
    runs = load(directory)
    if not runs:
        print(f"no benchmark figures in {directory}")
        return 1
    order = [b for b in SIZES if b in runs] + sorted(b for b in runs if b not in SIZES)
    for bench in order:
        print()
        print("\n".join(table(bench, runs[bench])))
    return 0


# --- running the benchmarks --------------------------------------------------------------------------


def parse_sizes(specs: list[str], only: list[str] | None = None) -> dict[str, tuple[int, ...]]:
    """The sizes per bench: :data:`SIZES`, overridden by ``N,N`` (every bench) or ``bench=N,N`` specs in
    order, restricted to ``only`` (bench names) when given."""
    plan = dict(SIZES)
    for spec in specs:
        target, _, numbers = spec.rpartition("=")
        try:
            sizes = tuple(int(s) for s in numbers.split(",") if s.strip())
        except ValueError:
            raise ValueError(f"--sizes {spec!r}: sizes are whole numbers separated by commas") from None
        if not sizes or any(s <= 0 for s in sizes):
            raise ValueError(f"--sizes {spec!r}: give at least one positive size")
        if target and target not in SIZES:
            raise ValueError(f"--sizes {spec!r}: no bench {target!r} (one of {', '.join(SIZES)})")
        for bench in [target] if target else list(plan):
            plan[bench] = sizes
    if only is not None:
        unknown = set(only) - set(SIZES)
        if unknown:
            raise ValueError(f"--only: no bench {', '.join(sorted(unknown))} (one of {', '.join(SIZES)})")
        plan = {b: s for b, s in plan.items() if b in only}
    return plan


def command(bench: str, nodes: int, out: Path, quiet: float | None) -> list[str]:
    """The command line of one run."""
    script = Path(__file__).resolve().parent / f"{bench}_bench.py"
    argv = [sys.executable, str(script), "--nodes", str(nodes), "--json", str(out / f"{bench}-{nodes}.json")]
    if bench == "chain" and quiet is not None:
        argv += ["--quiet", f"{quiet:g}"]
    return argv


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="summary.py run", description="run every benchmark per size")
    parser.add_argument(
        "--sizes",
        action="append",
        default=[],
        metavar="[BENCH=]N,N",
        help=f"sizes (repeatable); defaults: {', '.join(f'{b}={s}' for b, s in SIZES.items())}",
    )
    parser.add_argument("--only", default=None, help="comma-separated benches to run (default: all)")
    parser.add_argument("--out", default=None, help="directory for the JSON files (default: a new temp dir)")
    parser.add_argument("--quiet", type=float, default=None, help="chain_bench's quiet period, s")
    args = parser.parse_args(argv)
    try:
        plan = parse_sizes(args.sizes, args.only.split(",") if args.only else None)
    except ValueError as exc:
        parser.error(str(exc))
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-"))
    out.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    for bench, sizes in plan.items():
        for nodes in sizes:
            cmd = command(bench, nodes, out, args.quiet)
            if not Path(cmd[1]).exists():
                print(f"== {bench} ({nodes} Nodes): {cmd[1]} does not exist; skipped", flush=True)
                failed.append(f"{bench}-{nodes} (no script)")
                continue
            print(f"== {bench} ({nodes} Nodes): {' '.join(cmd[1:])}", flush=True)
            start = time.monotonic()
            code = subprocess.run(cmd, check=False).returncode
            took = time.monotonic() - start
            print(f"== {bench} ({nodes} Nodes): exit {code} after {took:.0f} s", flush=True)
            if code != 0:
                failed.append(f"{bench}-{nodes} (exit {code})")
    print(f"\nfigures in {out}")
    print_tables(out)
    if failed:
        print(f"\nruns that failed: {', '.join(failed)}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        return run(argv[1:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("directory", help="a directory of benchmark figure files (*.json)")
    args = parser.parse_args(argv)
    return print_tables(Path(args.directory))


if __name__ == "__main__":
    sys.exit(main())
