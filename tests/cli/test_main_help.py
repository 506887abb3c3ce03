"""Every command and every flag of every command says what it is for (issue 29 item 8: ``catalog
--settings-configmap`` said nothing): the test walks the whole parser, sub-commands included."""

from __future__ import annotations

import argparse

from gpustack_worker.cli import main


def _walk(parser: argparse.ArgumentParser, path: str = "gpustack-worker") -> list[str]:
    """``path: what`` for every command or argument below ``parser`` that has no help."""
    missing: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helped = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not (helped.get(name) or "").strip():
                    missing.append(f"{path} {name}: the command has no help")
                missing.extend(_walk(sub, f"{path} {name}"))
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if not (action.help or "").strip():
            missing.append(f"{path}: {'/'.join(action.option_strings) or action.dest} has no help")
    return missing


def test_every_flag_of_every_command_has_help() -> None:
    assert _walk(main.build_parser()) == []


def test_the_walk_finds_a_flag_without_help() -> None:
    """The walk itself can fail: a flag without help, two levels down, is found and named."""
    parser = argparse.ArgumentParser(prog="p")
    sub = parser.add_subparsers().add_parser("outer", help="h").add_subparsers().add_parser("inner", help="h")
    sub.add_argument("--bare")
    sub.add_argument("kept", help="x")
    assert _walk(parser, "p") == ["p outer inner: --bare has no help"]
