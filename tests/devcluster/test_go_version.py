"""The Go toolchain check before the first build: ``go version``'s output is read and anything older than
:data:`build.MIN_GO` (1.26) fails at once with one clear line, instead of deep inside a module build."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_worker.devcluster import build
from tests.kit.properties import examples

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(
    ("output", "version"),
    [
        ("go version go1.26.8 linux/amd64", (1, 26, 8)),
        ("go version go1.26 linux/amd64", (1, 26, 0)),
        ("go version go1.26rc1 linux/arm64", (1, 26, 0)),
        ("go version go1.25.4 darwin/arm64", (1, 25, 4)),
        ("go version go1.9.7 linux/amd64", (1, 9, 7)),
        ("go version devel go1.27-3b2a1c0 Tue Jan 6 12:00:00 2027 +0000 linux/amd64", (1, 27, 0)),
        ("go version go2.0.1 linux/amd64", (2, 0, 1)),
        ("", None),
        ("bash: go: command not found", None),
    ],
)
def test_parse_go_version(output: str, version: tuple[int, int, int] | None) -> None:
    assert build.parse_go_version(output) == version


@pytest.mark.parametrize(
    "output", ["go version go1.26.0 linux/amd64", "go version go1.26 linux/amd64", "go version go1.30.2 x/y"]
)
def test_new_enough_go_is_accepted(output: str) -> None:
    build.check_go_version(output)


def test_go_1_25_is_refused_naming_both_versions() -> None:
    with pytest.raises(build.BuildError) as err:
        build.check_go_version("go version go1.25.9 linux/amd64\n")
    assert str(err.value) == (
        "Go 1.26 or newer is needed to build the control plane; `go version` says "
        "'go version go1.25.9 linux/amd64'. Install Go 1.26+ and put it first on PATH."
    )


def test_unreadable_version_is_refused() -> None:
    with pytest.raises(build.BuildError, match="cannot read a Go version"):
        build.check_go_version("something else")


@settings(max_examples=examples(300))
@given(major=st.integers(0, 3), minor=st.integers(0, 60), patch=st.integers(0, 30), rc=st.booleans())
def test_accepted_exactly_when_at_least_the_minimum(major: int, minor: int, patch: int, rc: bool) -> None:
    text = f"go version go{major}.{minor}{'rc1' if rc else f'.{patch}'} linux/amd64"
    ok = (major, minor) >= build.MIN_GO
    if ok:
        build.check_go_version(text)
    else:
        with pytest.raises(build.BuildError):
            build.check_go_version(text)


def test_a_build_with_an_old_go_stops_before_go_runs_anything_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``go`` on PATH is a script that says 1.25 and records every other command: the build stops at the
    version check, with the check's message, and no other go command ran."""
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "go"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = version ]; then echo "go version go1.25.4 linux/amd64"; exit 0; fi\n'
        f'echo "$@" >> {calls}\n'
        "exit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "cache"))
    component = build.Component(
        "probe", "v0.0.1", "example.com/probe/cmd", "example.com/probe", lambda: "", lambda: ""
    )
    with pytest.raises(build.BuildError, match=r"Go 1\.26 or newer is needed"):
        build.ensure_binary(component, log=lambda _msg: None)
    assert not calls.exists()
