"""``explain workload|modeldeployment [NS/]NAME [-n NS]`` (issue 29 item 8): how the reference and ``-n``
combine, as kubectl's ``-n`` does, and the parser takes ``-n``/``--namespace``."""

from __future__ import annotations

import pytest

from gpustack_worker.cli import main
from gpustack_worker.cli.explain.command import resolve


def _context() -> str:
    return "ctx-ns"


def _never() -> str:
    raise AssertionError("the context's namespace is read only when nothing names one")


#: (reference, -n, resolved or the error's words)
CASES: list[tuple[str, str | None, tuple[str, str] | str]] = [
    ("disagg", None, ("ctx-ns", "disagg")),
    ("disagg", "team", ("team", "disagg")),
    ("team/disagg", None, ("team", "disagg")),
    ("team/disagg", "team", ("team", "disagg")),
    ("team/disagg", "other", "names namespace team, -n names other"),
    ("a/b/c", None, "expected NAME or NS/NAME"),
    ("/disagg", None, "expected NAME or NS/NAME"),
    ("team/", None, "expected NAME or NS/NAME"),
    ("", "team", "expected NAME or NS/NAME"),
    ("disagg", "", "-n: the namespace is empty"),
]


@pytest.mark.parametrize(("ref", "namespace", "expected"), CASES)
def test_resolve(ref: str, namespace: str | None, expected: tuple[str, str] | str) -> None:
    default = _context if expected == ("ctx-ns", ref) else _never
    got = resolve(ref, namespace, default)
    if isinstance(expected, tuple):
        assert got == expected
    else:
        assert isinstance(got, str) and expected in got


@pytest.mark.parametrize("flag", ["-n", "--namespace"])
def test_the_parser_takes_the_namespace_flag(flag: str) -> None:
    args = main.build_parser().parse_args(["explain", "md", "disagg", flag, "team"])
    assert (args.kind, args.name, args.namespace) == ("md", "disagg", "team")
    assert main.build_parser().parse_args(["explain", "md", "disagg"]).namespace is None
