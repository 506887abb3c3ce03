"""tests/kit/waiting: values returned, awaitables awaited, the last value named on a miss."""

from __future__ import annotations

import pytest

from tests.kit.waiting import eventually, eventually_sync


async def test_eventually_returns_the_first_truthy_value_of_a_sync_check() -> None:
    seen = iter([0, None, "", {"ready": True}])
    assert await eventually(lambda: next(seen), every=0) == {"ready": True}


async def test_eventually_awaits_an_async_check() -> None:
    calls = iter([False, 7])

    async def check() -> object:
        return next(calls)

    assert await eventually(check, every=0) == 7


async def test_eventually_names_the_last_value_when_it_gives_up() -> None:
    with pytest.raises(AssertionError, match=r"within 0\.0s; last value: \[\]"):
        await eventually(list, within=0.0, every=0)


def test_eventually_sync_returns_the_accepted_value_and_names_the_last_one_on_a_miss() -> None:
    values = iter([1, 2, 3])
    assert eventually_sync(lambda: next(values), lambda v: v >= 2, every=0) == 2
    assert eventually_sync(lambda: "x", within=0.0) == "x"
    with pytest.raises(AssertionError, match="last value: 'Pending'"):
        eventually_sync(lambda: "Pending", lambda v: v == "Running", within=0.0)
