"""``--request-timeout``: the deadline of every request a command (or the agent, or the controller) sends.

kubectl's flag, with one difference: ``0`` is refused instead of meaning "no timeout". Every request here
has a deadline (the first one, ``GET /version``, included; a watch's covers its opening, then its idle limit
applies): a server that accepts and never answers must end a command with one line naming the server and
what did not happen, not leave it hanging. The value is a number of seconds (``5``, ``2.5``) or a Go
duration like kubectl's (``500ms``, ``5s``, ``1m``, ``1m30s``), greater than 0 and at most 600 s.

The default is ``$GPUSTACK_API_TIMEOUT_SECONDS`` (the ``api-timeout-seconds`` start-up setting the agent
and the controller read, docs/settings.md), else 30 s. The flag given on the command line wins over the
environment for every command, the two processes included.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import TYPE_CHECKING, Final

from gpustack_worker.runtime.defaults import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("ENV", "MAX_SECONDS", "add_request_timeout_flag", "parse_request_timeout", "request_timeout_of")

#: The environment variable the flag defaults to (the agent's and controller's start-up setting).
ENV: Final = "GPUSTACK_API_TIMEOUT_SECONDS"
#: The largest deadline (the setting's own bound).
MAX_SECONDS: Final = 600.0
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")
_NUMBER: Final = re.compile(r"\d+(?:\.\d*)?|\.\d+")


def parse_request_timeout(text: str) -> float:
    """Seconds from ``text`` (a number of seconds, or a Go duration of ``h``/``m``/``s``/``ms`` parts);
    ``argparse.ArgumentTypeError`` naming the rule otherwise (argparse prints it as the usage error)."""
    value = text.strip()
    if _NUMBER.fullmatch(value):
        seconds = float(value)
    else:
        parts = _PART.findall(value)
        if not parts or "".join(number + unit for number, unit in parts) != value:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a duration (seconds like 5 or 2.5, or 500ms, 5s, 1m, 1m30s)"
            )
        seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: every request has a deadline here; kubectl's 0 (no timeout) is not accepted "
            f"(give more than 0 and at most {MAX_SECONDS:g} s)"
        )
    if seconds > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r} is longer than the most allowed, {MAX_SECONDS:g} s")
    return seconds


def add_request_timeout_flag(p: argparse.ArgumentParser, env: Mapping[str, str] | None = None) -> None:
    """``--request-timeout`` on ``p``, defaulting to ``$GPUSTACK_API_TIMEOUT_SECONDS`` (checked by the
    same rule: argparse parses a string default as if it were given)."""
    from_env = (os.environ if env is None else env).get(ENV) or None

    def parse(text: str) -> float:
        try:
            return parse_request_timeout(text)
        except argparse.ArgumentTypeError as exc:
            if text is from_env:  # the default, not the command line: name where it came from
                raise argparse.ArgumentTypeError(f"{exc} (from ${ENV})") from None
            raise

    p.add_argument(
        "--request-timeout",
        type=parse,
        default=from_env,
        metavar="DURATION",
        help=f"the deadline of each request to the API server: seconds (5, 2.5) or 500ms, 5s, 1m; more than "
        f"0 and at most {MAX_SECONDS:g} s (default: ${ENV}, else {DEFAULT_TIMEOUT_S:g} s)",
    )


def request_timeout_of(args: argparse.Namespace, default: float = DEFAULT_TIMEOUT_S) -> float:
    """The deadline for ``Client.connect(timeout_s=...)``: ``--request-timeout`` (or its environment
    default), else ``default`` (the processes pass their start-up setting)."""
    value = getattr(args, "request_timeout", None)
    return default if value is None else float(value)
