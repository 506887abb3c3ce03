"""The build progress line: go's output in, one line out (a fake clock, a string stream)."""

from __future__ import annotations

import io

import pytest

from gpustack_worker.devcluster.progress import BuildProgress, GoState, describe, format_elapsed

MAIN = "k8s.io/kubernetes/cmd/kube-apiserver"


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (59.9, "59s"), (61, "1m01s"), (3725, "1h02m")])
def test_format_elapsed(seconds: float, text: str) -> None:
    assert format_elapsed(seconds) == text


def test_the_state_follows_go_through_its_phases() -> None:
    state = GoState(main_package=MAIN)
    for line in ("go: downloading k8s.io/api v0.35.4\n", "go: downloading sigs.k8s.io/yaml v1.6.0\n", "\n"):
        state.feed(line)
    assert (state.phase, state.downloaded, state.last) == ("resolving", 2, "sigs.k8s.io/yaml v1.6.0")
    assert describe("kube-apiserver", "v1.35.4", 75, state) == (
        "building kube-apiserver v1.35.4  1m15s  resolving modules (2 downloaded): sigs.k8s.io/yaml v1.6.0"
    )
    state.phase, state.last = "listing", ""
    assert describe("kube-apiserver", "v1.35.4", 80, state).endswith("  listing packages")
    state.phase, state.total = "compiling", 2310
    for line in ("internal/goarch", "k8s.io/apiserver/pkg/server", "# some error output"):
        state.feed(line)
    assert state.compiled == 2  # go's other lines (they have spaces) are not packages
    assert describe("kube-apiserver", "v1.35.4", 252, state) == (
        "building kube-apiserver v1.35.4  4m12s  compiled 2 of at most 2310 packages: "
        "k8s.io/apiserver/pkg/server"
    )
    state.feed(MAIN)
    assert state.phase == "linking"
    assert describe("kube-apiserver", "v1.35.4", 900, state).endswith("linking (compiled 3 packages)")


def test_a_long_package_path_is_cut_from_the_left() -> None:
    state = GoState(phase="compiling", last="example.com/" + "x" * 100)
    line = describe("c", "v1", 1, state)
    assert line.endswith("x" * 59) and "…" in line


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_on_a_terminal_the_line_is_rewritten_in_place_and_erased_at_the_end() -> None:
    out, clock = io.StringIO(), Clock()
    progress = BuildProgress(
        "etcd", "v3.6.16", "go.etcd.io/etcd/server/v3", stream=out, clock=clock, live=True
    )
    progress.feed("go: downloading go.etcd.io/etcd/api/v3 v3.6.16")
    clock.now += 5
    progress.show()
    progress.phase("compiling", total=581)
    progress.feed("go.etcd.io/etcd/api/v3/version")
    clock.now += 60
    progress.show()
    progress.close()
    assert out.getvalue() == (
        "\rbuilding etcd v3.6.16  5s  resolving modules (1 downloaded): go.etcd.io/etcd/api/v3 v3.6.16\x1b[K"
        "\rbuilding etcd v3.6.16  1m05s  compiled 1 of at most 581 packages: go.etcd.io/etcd/api/v3/version"
        "\x1b[K\r\x1b[K"
    )


def test_elsewhere_it_writes_whole_lines_and_nothing_at_the_end() -> None:
    out, clock = io.StringIO(), Clock()
    progress = BuildProgress("etcd", "v3.6.16", "x", stream=out, clock=clock)
    assert progress.live is False  # a StringIO is not a terminal
    clock.now += 30
    progress.show()
    progress.close()
    assert out.getvalue() == "building etcd v3.6.16  30s  resolving modules (0 downloaded)\n"


def test_as_a_context_manager_it_stops_its_ticker() -> None:
    out = io.StringIO()
    with BuildProgress("etcd", "v3.6.16", "x", stream=out, live=True) as progress:
        assert progress._thread is not None and progress._thread.is_alive()
        thread = progress._thread
    assert not thread.is_alive()
