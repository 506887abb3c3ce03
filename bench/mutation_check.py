"""Does the suite still catch what it caught? Six small mutations of the product, each run against the
tests of two revisions (``nox -s mutations``; issue 30's "strength kept" check).

For each revision a git worktree is made, the product line is mutated there, the package's tests run
(offline and cluster tests alike, on the revision's own kit), and the failing test ids are collected from
pytest's JUnit XML. A test that already fails without the mutation is not counted as catching it.
The product under test is each revision's own, so a mutation must apply to both (it names one exact
line that both revisions hold). Never pass/fail: it prints a table and writes JSON.

    python bench/mutation_check.py --before e918a7f --after HEAD --work /tmp/mut --out mut.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mutation:
    """One exact replacement in one product file, and the test package that should catch it."""

    name: str
    path: str
    old: str
    new: str
    scope: str


MUTATIONS = (
    Mutation(
        "capacity: a pool's state comparison flipped",
        "gpustack_worker/agent/capacity.py",
        'if tally.sliced_cards and pool_state(node, keys.sliced_resource(base)) != "absent":',
        'if tally.sliced_cards and pool_state(node, keys.sliced_resource(base)) == "absent":',
        "tests/agent",
    ),
    Mutation(
        "keys: a key of exactly the limit is shortened (off by one)",
        "gpustack_worker/api/keys.py",
        "    if len(whole.encode()) <= limit:\n        return whole",
        "    if len(whole.encode()) < limit:\n        return whole",
        "tests/api",
    ),
    Mutation(
        "queues: the stop policy branch dropped (a draining queue is never held)",
        "gpustack_worker/chain/queues.py",
        '    if stop_policy is not None:\n        spec["stopPolicy"] = stop_policy',
        "    pass",
        "tests/chain",
    ),
    Mutation(
        "gate3: one card short still fits an exclusive claim (off by one)",
        "gpustack_worker/placement/gate3.py",
        "if len(free) < claim.cards:",
        "if len(free) < claim.cards - 1:",
        "tests/placement",
    ),
    Mutation(
        "apply: the owned-fields branch of the no-op check dropped (a release is never written)",
        "gpustack_worker/runtime/apply.py",
        "    if owned != wanted:\n        return False\n",
        "",
        "tests/runtime",
    ),
    Mutation(
        "levels: the tier run's order comparison flipped",
        "gpustack_worker/topology/levels.py",
        "reversed(run) if first < last else run",
        "reversed(run) if first > last else run",
        "tests/topology",
    ),
)


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def worktree(repo: Path, rev: str, where: Path) -> Path:
    """A detached worktree of ``rev`` at ``where`` (made once, reused)."""
    if not where.exists():
        _git("worktree", "add", "--detach", str(where), rev, cwd=repo)
    return where


#: pytest's marker expression when only the offline tests run (``--offline``), else None.
MARKERS: list[str] = []


def failing(tree: Path, scope: str, label: str, workers: str) -> set[str]:
    """The ids of the tests in ``scope`` that fail (or error) in ``tree`` as it is now."""
    report = tree / f".mutation-{label}.xml"
    env = {**os.environ, "PYTHONPATH": str(tree), "CI": "true"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers, "--dist=loadfile"]
    cmd += [*MARKERS, f"--junitxml={report}", *scope.split()]
    subprocess.run(cmd, cwd=tree, env=env, capture_output=True, check=False)
    if not report.exists():
        raise SystemExit(f"{tree}: pytest wrote no report for {scope} ({label})")
    out: set[str] = set()
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            out.add(f"{case.get('classname')}::{case.get('name')}")
    return out


def mutate(tree: Path, m: Mutation) -> None:
    """Apply ``m`` in ``tree`` (exactly one occurrence)."""
    target = tree / m.path
    text = target.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"{tree}: {m.path} holds {text.count(m.old)} copies of the line to mutate")
    target.write_text(text.replace(m.old, m.new))


def modules_of(tree: Path, ids: set[str]) -> list[str]:
    """The test modules (paths) that hold the test ids (JUnit's dotted classname, a class maybe last)."""
    out: set[str] = set()
    for test_id in ids:
        classname, _, name = test_id.partition("::")
        # a module that failed as a whole (collection, a module fixture) has no classname: its name is it
        parts = (classname or name).split(".")
        for end in range(len(parts), 0, -1):
            path = Path(*parts[:end]).with_suffix(".py")
            if (tree / path).is_file():
                out.add(str(path))
                break
    return sorted(out)


def check(tree: Path, m: Mutation, workers: str, index: int) -> dict[str, list[str]]:
    """The tests that fail with ``m`` applied and pass without it (their modules re-run unmutated)."""
    mutate(tree, m)
    try:
        failed = failing(tree, m.scope, f"{index}-mut", workers)
    finally:
        _git("checkout", "--", m.path, cwd=tree)
    modules = modules_of(tree, failed)
    without = failing(tree, " ".join(modules), f"{index}-base", workers) & failed if modules else set()
    return {"caught": sorted(failed - without), "failing_without": sorted(without)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="e918a7f")
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--work", type=Path, required=True, help="where the two worktrees go")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", default="4")
    parser.add_argument("--only", default="", help="comma-separated mutation numbers (1-6)")
    parser.add_argument(
        "--side",
        choices=("before", "after"),
        default=None,
        help="run one revision only (two processes at once)",
    )
    parser.add_argument("--offline", action="store_true", help="only the tests that need no control plane")
    args = parser.parse_args()
    if args.offline:
        MARKERS.extend(["-m", "not cluster"])
    repo = Path(_git("rev-parse", "--show-toplevel"))
    chosen = [i for i in range(len(MUTATIONS)) if not args.only or str(i + 1) in args.only.split(",")]
    results: dict[str, dict[str, dict[str, list[str]]]] = {}
    sides = [(side, rev) for side, rev in (("before", args.before), ("after", args.after))]
    for side, rev in [s for s in sides if args.side in (None, s[0])]:
        tree = worktree(repo, _git("rev-parse", rev, cwd=repo), args.work / side)
        for i in chosen:
            m = MUTATIONS[i]
            results.setdefault(m.name, {})[side] = check(tree, m, args.workers, i)
            args.out.write_text(json.dumps(results, indent=2))
    print(f"{'mutation':<80} {'before':>6} {'after':>6}")
    for name, row in results.items():
        before = row.get("before", {}).get("caught", [])
        after = row.get("after", {}).get("caught", [])
        print(f"{name:<80} {len(before):>6} {len(after):>6}")


if __name__ == "__main__":
    main()
