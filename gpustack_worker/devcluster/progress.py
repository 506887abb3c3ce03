"""A progress line for the long Go builds of the local control plane.

A cold build compiles a few thousand packages (kube-apiserver alone is most of them) and takes about
twenty minutes on two cores; without a word it looks hung. While ``go`` runs, :class:`BuildProgress`
keeps one line up to date — the component, the elapsed time and what go is doing, e.g.::

    building kube-apiserver v1.35.0  4m12s  compiled 812 of at most 2310 packages: k8s.io/apiserver/pkg/server

On a terminal it is rewritten in place on stderr about once a second (``\\r`` and erase-to-end); when
stderr is a file or a pipe (CI logs) a full line is written every :data:`PERIODIC_SECONDS` instead, so
a log stays readable and still shows the build moving.

What go is doing comes from its own output: ``go get`` prints ``go: downloading MODULE VERSION`` per
module fetched, ``go build -v`` prints each package as it compiles it (packages already in go's build
cache are not printed, so the total is an upper bound: every package the binary depends on, from
``go list -deps``), and the last package printed is the main package, after which go links.

The text is a pure function of the state (:func:`describe`); the clock and the stream are injectable.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("PERIODIC_SECONDS", "TICK_SECONDS", "BuildProgress", "GoState", "describe", "format_elapsed")

#: Refresh interval of the in-place line on a terminal: the elapsed time visibly ticks.
TICK_SECONDS = 1.0
#: Interval between full progress lines when stderr is not a terminal: often enough that a CI log shows
#: the build moving, rarely enough that twenty minutes stay a screenful (about 40 lines).
PERIODIC_SECONDS = 30.0
#: The longest package path shown (the line must fit a terminal).
MAX_SHOWN = 60

_DOWNLOADING = "go: downloading "


def format_elapsed(seconds: float) -> str:
    """``7s``, ``4m12s``, ``1h02m``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


@dataclass(slots=True)
class GoState:
    """What go's output has told so far for one component."""

    #: ``resolving`` (go get), ``listing`` (go list -deps), ``compiling`` (go build -v), ``linking``.
    phase: str = "resolving"
    downloaded: int = 0
    compiled: int = 0
    #: Packages in the binary's dependency graph (``None`` until go list has answered).
    total: int | None = None
    last: str = ""
    main_package: str = ""

    def feed(self, line: str) -> None:
        """One line of go's output (stderr and stdout merged)."""
        line = line.strip()
        if not line:
            return
        if line.startswith(_DOWNLOADING):
            self.downloaded += 1
            self.last = line[len(_DOWNLOADING) :]
        elif self.phase in ("compiling", "linking") and " " not in line:
            self.compiled += 1
            self.last = line
            if line == self.main_package:
                self.phase = "linking"


def describe(name: str, version: str, elapsed: float, state: GoState) -> str:
    """The progress line for ``state`` after ``elapsed`` seconds."""
    head = f"building {name} {version}  {format_elapsed(elapsed)}  "
    last = state.last if len(state.last) <= MAX_SHOWN else "…" + state.last[-(MAX_SHOWN - 1) :]
    if state.phase == "resolving":
        body = f"resolving modules ({state.downloaded} downloaded)"
        if state.last:
            body += f": {last}"
    elif state.phase == "listing":
        body = "listing packages"
    elif state.phase == "linking":
        body = f"linking (compiled {state.compiled} packages)"
    else:
        of = f" of at most {state.total}" if state.total is not None else ""
        body = f"compiled {state.compiled}{of} packages"
        if state.last:
            body += f": {last}"
    return head + body


@dataclass
class BuildProgress:
    """Keeps the progress line of one component's build up to date until :meth:`close`.

    Use as a context manager around the go commands; :meth:`feed` takes go's output lines and
    :meth:`phase` moves on to the next command."""

    name: str
    version: str
    main_package: str
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    clock: Callable[[], float] = time.monotonic
    #: ``None``: decide from ``stream.isatty()``.
    live: bool | None = None
    state: GoState = field(init=False)
    _started: float = field(init=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _stop: threading.Event = field(init=False, default_factory=threading.Event)
    _thread: threading.Thread | None = field(init=False, default=None)
    _shown: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.state = GoState(main_package=self.main_package)
        self._started = self.clock()
        if self.live is None:
            isatty = getattr(self.stream, "isatty", None)
            self.live = bool(isatty and isatty())

    def __enter__(self) -> BuildProgress:
        self._thread = threading.Thread(target=self._run, name=f"progress-{self.name}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def feed(self, line: str) -> None:
        with self._lock:
            self.state.feed(line)

    def phase(self, phase: str, total: int | None = None) -> None:
        with self._lock:
            self.state.phase = phase
            if total is not None:
                self.state.total = total
            self.state.last = ""

    def text(self) -> str:
        with self._lock:
            return describe(self.name, self.version, self.clock() - self._started, self.state)

    def show(self) -> None:
        """Write the line now (in place on a terminal, as a new line otherwise)."""
        text = self.text()
        if self.live:
            self.stream.write("\r" + text + "\x1b[K")
            self._shown = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Stop updating; on a terminal, erase the line so the next message starts clean."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.live and self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False

    def _run(self) -> None:
        interval = TICK_SECONDS if self.live else PERIODIC_SECONDS
        while not self._stop.wait(interval):
            self.show()
