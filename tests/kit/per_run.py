"""A value computed once per test run and shared by every pytest-xdist worker: :func:`once`.

Some references cost a control plane of their own and a minute of convergence (the chain's undisturbed
run that every fault test compares with, tests/chain/fault_kit.py). Kept per process, each worker that
runs a module needing one computed it again. Here the first worker to ask computes it while holding a
lock file, and writes it (JSON) into the run's directory; the others wait for the file and read it. If
the computing worker fails, it releases the lock without a file, and the next to ask computes it itself,
so a failure is reported by every test that needed the value, never turned into a wait that times out.

The run's directory is made by the controlling process (``tests/conftest.py`` calls :func:`start_run`)
before the workers start, handed to them in the environment, and removed at the end of the run. Run
without xdist, the same process makes and removes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from tests.kit.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

__all__ = ("RUN_DIR_ENV", "end_run", "once", "start_run")

#: The environment variable naming the run's directory (inherited by xdist's workers).
RUN_DIR_ENV: Final = "GPUSTACK_TEST_RUN_DIR"


class _Run:
    made: Path | None = None


def start_run() -> None:
    """Make the run's directory, unless this process is a worker of a run that made one."""
    if os.environ.get(RUN_DIR_ENV):
        return
    _Run.made = Path(tempfile.mkdtemp(prefix="gpustack-tests-run-"))
    os.environ[RUN_DIR_ENV] = str(_Run.made)


def end_run() -> None:
    """Remove the directory :func:`start_run` made in this process (nothing in a worker)."""
    made, _Run.made = _Run.made, None
    if made is not None:
        os.environ.pop(RUN_DIR_ENV, None)
        shutil.rmtree(made, ignore_errors=True)


@contextlib.contextmanager
def _lock_file(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        yield fd
    finally:
        os.close(fd)  # closing the descriptor releases its lock


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


async def once(name: str, compute: Callable[[], Awaitable[Any]], *, within: float = 900.0) -> Any:
    """The JSON value ``compute`` returns, computed by one process of the run and read by the others.
    ``within``: how long a process waits for another's computation (a bound for a slow machine)."""
    raw = os.environ.get(RUN_DIR_ENV)
    if not raw:
        raise RuntimeError(f"{RUN_DIR_ENV} is not set: tests/conftest.py makes the run's directory")
    done = Path(raw) / f"{name}.json"
    with _lock_file(Path(raw) / f"{name}.lock") as fd:
        # Ours to compute once the lock is ours and no file is there; theirs to read once the file is.
        await eventually(lambda: done.exists() or _try_lock(fd), within=within, every=0.5)
        if done.exists():
            return json.loads(done.read_text())
        value = await compute()
        partial = done.with_suffix(".partial")
        partial.write_text(json.dumps(value))
        partial.rename(done)
        return value
