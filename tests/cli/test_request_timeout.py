"""``--request-timeout``'s value: seconds or a Go duration, more than 0 and at most 600 s; the flag, else
``$GPUSTACK_API_TIMEOUT_SECONDS``, else the client's default."""

from __future__ import annotations

import argparse
import re

import pytest

from gpustack_worker.cli import main
from gpustack_worker.cli.request_timeout import ENV, parse_request_timeout, request_timeout_of
from gpustack_worker.runtime.defaults import DEFAULT_TIMEOUT_S


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5", 5.0),
        ("2.5", 2.5),
        (".5", 0.5),
        ("500ms", 0.5),
        ("5s", 5.0),
        ("1m", 60.0),
        ("1m30s", 90.0),
        ("1.5m", 90.0),
        ("0.1h", 360.0),
        (" 10s ", 10.0),
        ("600", 600.0),
        ("10m", 600.0),
    ],
)
def test_a_deadline_is_seconds_or_a_go_duration(text: str, seconds: float) -> None:
    assert parse_request_timeout(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0", "kubectl's 0 (no timeout) is not accepted"),
        ("0s", "kubectl's 0 (no timeout) is not accepted"),
        ("0ms", "kubectl's 0 (no timeout) is not accepted"),
        ("-5", "is not a duration"),
        ("", "is not a duration"),
        ("5x", "is not a duration"),
        ("s", "is not a duration"),
        ("5s5", "is not a duration"),
        ("1e3", "is not a duration"),
        ("nan", "is not a duration"),
        ("inf", "is not a duration"),
        ("600.001", "is longer than the most allowed, 600 s"),
        ("1h", "is longer than the most allowed, 600 s"),
    ],
)
def test_a_bad_deadline_names_the_rule(text: str, why: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(why)):
        parse_request_timeout(text)


@pytest.mark.parametrize(
    "argv",
    [
        ["preflight"],
        ["catalog"],
        ["explain", "node", "n"],
        ["cleanup"],
        ["plan", "--from-cluster"],
        ["simulate", "apply", "x.yaml"],
        ["controller"],
        ["agent", "--all-nodes"],
    ],
    ids=lambda argv: argv[0],
)
def test_every_command_that_talks_to_a_server_takes_the_flag_and_the_environment(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert request_timeout_of(main.build_parser().parse_args(argv)) == DEFAULT_TIMEOUT_S
    assert request_timeout_of(main.build_parser().parse_args([*argv, "--request-timeout", "2s"])) == 2.0
    monkeypatch.setenv(ENV, "7")
    assert request_timeout_of(main.build_parser().parse_args(argv)) == 7.0
    assert request_timeout_of(main.build_parser().parse_args([*argv, "--request-timeout", "3"])) == 3.0


def test_a_namespace_without_the_flag_gets_the_default() -> None:
    """Commands' ``run`` called with a bare namespace (tests do) keep the client's default."""
    assert request_timeout_of(argparse.Namespace()) == DEFAULT_TIMEOUT_S
    assert request_timeout_of(argparse.Namespace(), default=12.0) == 12.0
