"""Two processes building the same component share one build (issue 17, defect 9).

Every test builds a tiny local Go module (one main package, standard library only) with the real ``go``,
into a temporary ``$GPUSTACK_WORKER_CACHE`` — never into the real cache — with ``GOPROXY=off``, so nothing
is fetched. ``go`` on ``PATH`` is a wrapper that appends a line to a counter file for every ``go build``
and then runs the real toolchain: the count of real builds comes from go's side, not from our log.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

from gpustack_worker.devcluster import build
from tests.kit.waiting import eventually_sync

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="needs the Go toolchain")

GREETING = "hello from the shared cache"
#: How long a subprocess may take to reach the lock or to finish a one-package build (a loaded 2-core box).
PATIENCE = 120.0

# A child process: builds the tiny component (argv: the module's directory, the greeting) and prints every
# log line ``ensure_binary`` gives it.
CHILD = textwrap.dedent(
    """
    import sys
    from gpustack_worker.devcluster import build

    source, greeting = sys.argv[1:]
    component = build.Component(
        "hello",
        "v0.0.0",
        "example.local/hello/cmd/hello",
        "example.local/hello",
        lambda: f"module local/hello-build\\n\\ngo 1.25.0\\n\\nreplace example.local/hello => {source}\\n",
        lambda: f"-s -w -X 'main.greeting={greeting}'",
    )
    print("path", build.ensure_binary(component, lambda line: print(line, flush=True)), flush=True)
    """
)


def _component(source: Path) -> build.Component:
    """The same component as the child's."""
    return build.Component(
        "hello",
        "v0.0.0",
        "example.local/hello/cmd/hello",
        "example.local/hello",
        lambda: f"module local/hello-build\n\ngo 1.25.0\n\nreplace example.local/hello => {source}\n",
        lambda: f"-s -w -X 'main.greeting={GREETING}'",
    )


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """The tiny module: ``example.local/hello/cmd/hello`` prints ``main.greeting`` (set by -ldflags -X)."""
    root = tmp_path / "src"
    (root / "cmd" / "hello").mkdir(parents=True)
    (root / "go.mod").write_text("module example.local/hello\n\ngo 1.25.0\n")
    (root / "cmd" / "hello" / "main.go").write_text(
        'package main\n\nimport "fmt"\n\nvar greeting = "unset"\n\nfunc main() { fmt.Println(greeting) }\n'
    )
    return root


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A temporary cache, no network, and ``go`` counting its builds into ``<tmp>/go-builds``."""
    real_go = shutil.which("go")
    assert real_go is not None
    wrapper = tmp_path / "wrapper"
    wrapper.mkdir()
    (wrapper / "go").write_text(
        f'#!/bin/sh\n[ "$1" = build ] && echo "$$" >> {tmp_path / "go-builds"}\nexec {real_go} "$@"\n'
    )
    (wrapper / "go").chmod(0o755)
    values = {
        build.CACHE_ENV: str(tmp_path / "cache"),
        "GOPROXY": "off",
        "PATH": f"{wrapper}{os.pathsep}{os.environ['PATH']}",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return dict(os.environ)


def _go_builds(tmp_path: Path) -> int:
    counter = tmp_path / "go-builds"
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def test_two_concurrent_builds_build_once_and_both_get_the_binary(
    tmp_path: Path, source: Path, env: dict[str, str]
) -> None:
    component = _component(source)
    component.binary.parent.mkdir(parents=True)
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    # The test holds the component's lock while both processes start, so both certainly meet a build in
    # progress: neither may build (or write anything next to the binary) until the lock is free.
    with build.lock_path(component).open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        procs = []
        for log in logs:
            with log.open("w") as out:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-c", CHILD, str(source), GREETING],
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
        # both processes wait for the lock
        eventually_sync(
            lambda: all("waiting for another process building hello" in log.read_text() for log in logs),
            within=PATIENCE,
            every=0.05,
        )
        assert sorted(p.name for p in component.binary.parent.iterdir()) == ["hello.lock"]
        fcntl.flock(held, fcntl.LOCK_UN)
    for proc in procs:
        assert proc.wait(timeout=PATIENCE) == 0
    outputs = [log.read_text() for log in logs]

    # exactly one go build ran; the other process waited for it and reused its binary
    assert _go_builds(tmp_path) == 1
    assert sum("building hello v0.0.0 from" in out for out in outputs) == 1
    assert sum("reusing hello v0.0.0 built by another process" in out for out in outputs) == 1
    assert all(f"path {component.binary}" in out for out in outputs)
    # the binary works, and nothing but it and its lock file is left next to it
    ran = subprocess.run([str(component.binary)], capture_output=True, text=True, check=True)
    assert ran.stdout == GREETING + "\n"
    assert sorted(p.name for p in component.binary.parent.iterdir()) == ["hello", "hello.lock"]


def test_a_killed_build_neither_blocks_nor_litters_the_next(
    tmp_path: Path, source: Path, env: dict[str, str]
) -> None:
    component = _component(source)
    component.binary.parent.mkdir(parents=True)
    # what a SIGKILLed build leaves: its private output directory, half written, and a lock it held
    leftover = component.binary.parent / ".building-killed"
    leftover.mkdir()
    (leftover / "hello").write_bytes(b"\x7fELF half")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, signal, sys\n"
            "f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True)\n"
            "signal.pause()",  # holds the lock until killed
            str(build.lock_path(component)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == "locked\n"
    holder.kill()
    holder.wait()
    holder.stdout.close()

    lines: list[str] = []
    assert build.ensure_binary(component, lines.append) == component.binary
    assert _go_builds(tmp_path) == 1
    assert not any("waiting" in line for line in lines)  # the kernel freed the dead holder's lock
    assert sorted(p.name for p in component.binary.parent.iterdir()) == ["hello", "hello.lock"]
    assert subprocess.run([str(component.binary)], capture_output=True, text=True, check=True).stdout == (
        GREETING + "\n"
    )
    # cached now: no second build, no log line
    lines.clear()
    assert build.ensure_binary(component, lines.append) == component.binary
    assert (_go_builds(tmp_path), lines) == (1, [])


def test_a_failed_build_leaves_nothing_and_frees_the_lock(
    tmp_path: Path, source: Path, env: dict[str, str]
) -> None:
    (source / "cmd" / "hello" / "main.go").write_text("package main\n\nfunc main() { undefined() }\n")
    component = _component(source)
    for _ in range(2):  # the second attempt is not blocked by the first one's lock
        with pytest.raises(build.BuildError, match="undefined"):
            build.ensure_binary(component, lambda line: None)
    assert _go_builds(tmp_path) == 2
    assert sorted(p.name for p in component.binary.parent.iterdir()) == ["hello.lock"]
