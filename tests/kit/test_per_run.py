"""``per_run.once``: one computation per run, whoever asks; a failed one is computed again by the next."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.kit import per_run
from tests.kit.waiting import eventually, has_run


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(per_run.RUN_DIR_ENV, str(tmp_path))
    return tmp_path


async def test_the_second_asker_waits_for_the_first_and_reads_its_value(run_dir: Path) -> None:
    release = asyncio.Event()
    calls: list[str] = []

    async def compute(who: str) -> dict[str, object]:
        calls.append(who)
        await release.wait()
        return {"by": who, "items": [1, 2]}

    first = asyncio.create_task(per_run.once("value", lambda: compute("first")))
    await eventually(lambda: calls == ["first"], every=0)
    # Separate open file descriptions: the second asker's lock conflicts as another process's would.
    second = asyncio.create_task(per_run.once("value", lambda: compute("second")))
    await has_run(second)  # its first look found the lock held and no value: it waits
    assert not second.done()
    release.set()
    assert await first == await second == {"by": "first", "items": [1, 2]}
    assert calls == ["first"]
    assert await per_run.once("value", lambda: compute("third")) == {"by": "first", "items": [1, 2]}


async def test_a_failed_computation_leaves_no_value_and_the_next_asker_computes(run_dir: Path) -> None:
    async def broken() -> object:
        raise RuntimeError("no cluster")

    async def works() -> object:
        return [3]

    with pytest.raises(RuntimeError, match="no cluster"):
        await per_run.once("value", broken)
    assert not (run_dir / "value.json").exists()
    assert await per_run.once("value", works) == [3]


def test_workers_use_the_directory_the_controlling_process_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(per_run.RUN_DIR_ENV, raising=False)
    monkeypatch.setattr(per_run._Run, "made", None)  # this session's own directory is left alone
    per_run.start_run()
    made = os.environ[per_run.RUN_DIR_ENV]
    per_run.start_run()  # a worker: the variable is inherited, nothing is made
    assert os.environ[per_run.RUN_DIR_ENV] == made
    per_run.end_run()
    assert per_run.RUN_DIR_ENV not in os.environ
    assert not Path(made).exists()
