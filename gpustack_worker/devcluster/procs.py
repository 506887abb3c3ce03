"""Child processes that cannot outlive their owner.

Every component runs in its own process group (so a stop reaches anything it forked) with
``PR_SET_PDEATHSIG`` = SIGKILL (so the kernel kills it if the owning Python process dies without
cleaning up, e.g. ``kill -9`` of pytest). Output goes to a per-component log file whose tail is quoted
when a component fails to become ready.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import ssl
    from collections.abc import Callable, Sequence

__all__ = ("ManagedProcess", "StartupError", "free_port", "http_ok", "spawn", "wait_until")

_PR_SET_PDEATHSIG = 1


def http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    """``GET url`` answers 200 (a component's health endpoint; over TLS verified with ``ctx``)."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


class StartupError(RuntimeError):
    """A component exited or did not become ready in time; the message quotes its log."""


def spawn(
    registry: dict[str, ManagedProcess],
    key: str,
    argv: Sequence[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    *,
    name: str | None = None,
) -> ManagedProcess:
    """Start ``argv`` logging to ``log_path`` and keep it in ``registry`` under ``key`` (its owner stops
    what it holds); ``name`` is how it is named in messages (default: ``key``)."""
    proc = ManagedProcess(name or key, argv, log_path, env)
    proc.start()
    registry[key] = proc
    return proc


#: Ports handed out are taken from here: below the kernel's ephemeral range (32768 and up by default)
#: and below Kubernetes' NodePort range (30000-32767).
_PORTS: Final = range(20000, 30000)
_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now, for a process started next to listen on.

    Never one of the kernel's ephemeral ports: one of those, free when picked, can become the source port
    of any outgoing connection on the machine before the process binds it (a test run holds thousands;
    seen as ``address already in use`` in a cold CI run). Below that range only another listener can take
    it; this process never hands out the same port twice."""
    low = _ephemeral_low()
    candidates = [p for p in _PORTS if p < low and p not in _handed_out]
    random.shuffle(candidates)
    for port in candidates[:200]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # nothing free below: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.2) -> bool:
    """Poll ``check`` until it is true or ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()


@dataclass
class ManagedProcess:
    """One started component."""

    name: str
    argv: Sequence[str]
    log_path: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                list(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, check: Callable[[], bool], timeout: float) -> None:
        """Block until ``check`` passes; :class:`StartupError` with the log tail if it exits or times out."""

        def ready_or_dead() -> bool:
            return not self.alive() or check()

        wait_until(ready_or_dead, timeout)
        if not self.alive():
            code = self.popen.returncode if self.popen else None
            raise StartupError(f"{self.name} exited with code {code} during start-up:\n{self.log_tail()}")
        if not check():
            raise StartupError(f"{self.name} not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left after ``grace`` seconds."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()
