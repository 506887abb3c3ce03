"""The client's one retry policy (``Client._send``): the first attempt runs before any retry machinery, a
retriable failure hands over to tenacity with that attempt counted — attempts, waits and the deadline are
those of one loop (issue 28: the hand-over saves ~30 µs of every request, and must change nothing else)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pytest

from gpustack_worker.api import kinds
from gpustack_worker.runtime.client import ApiError, Client, NotFound

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

_CONNECT = httpx.ConnectError("refused")


@dataclass
class _Auth:
    server: str = "https://scripted.invalid:6443"


class ScriptedApi:
    """``call_api`` answering each request with the next entry of ``script``: a status (with an optional
    ``Retry-After``), or an exception to raise; ``first_takes`` seconds pass during the first."""

    def __init__(self, script: list[int | tuple[int, str] | Exception], first_takes: float = 0.0) -> None:
        self.script = list(script)
        self.calls = 0
        self.first_takes = first_takes
        self.auth = _Auth()

    @contextlib.asynccontextmanager
    async def call_api(self, method: str = "GET", **kwargs: Any) -> AsyncIterator[httpx.Response]:
        self.calls += 1
        if self.calls == 1 and self.first_takes:
            await asyncio.to_thread(time.sleep, self.first_takes)  # asyncio.sleep is recorded, not slept
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        status, retry_after = step if isinstance(step, tuple) else (step, "")
        headers = {"Content-Type": "application/json"}
        if retry_after:
            headers["Retry-After"] = retry_after
        body = {"kind": "Status", "code": status} if status >= 400 else {"metadata": {"name": "x"}}
        yield httpx.Response(status, content=orjson.dumps(body), headers=headers)

    async def reauthenticate(self) -> None:
        return None


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """tenacity's waits, recorded instead of slept (it looks ``asyncio.sleep`` up at each wait)."""
    waited: list[float] = []
    real_sleep = asyncio.sleep

    async def record(seconds: float, *args: Any) -> Any:
        waited.append(seconds)
        return await real_sleep(0, *args)

    monkeypatch.setattr(asyncio, "sleep", record)
    return waited


BODY = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns"}}


@pytest.mark.parametrize(
    ("script", "max_attempts", "calls", "waits", "raised"),
    [
        pytest.param([200], 3, 1, [], None, id="first-attempt-succeeds"),
        pytest.param([503, 200], 3, 2, [0.2], None, id="5xx-retried-once"),
        pytest.param([503, 500, 200], 3, 3, [0.2, 0.4], None, id="backoff-doubles"),
        pytest.param([503, 503, 503, 200], 3, 3, [0.2, 0.4], ApiError, id="attempts-bounded"),
        pytest.param([503], 1, 1, [], ApiError, id="one-attempt-only"),
        pytest.param([404, 200], 3, 1, [], NotFound, id="4xx-not-retried"),
        pytest.param([(429, "2"), 200], 3, 2, [2.0], None, id="retry-after-honoured"),
        pytest.param([_CONNECT, 200], 3, 2, [0.2], None, id="connection-error-retried"),
        pytest.param([_CONNECT, _CONNECT], 2, 2, [0.2], httpx.ConnectError, id="connection-error-bounded"),
        pytest.param([ValueError("bug"), 200], 3, 1, [], ValueError, id="other-errors-not-retried"),
    ],
)
async def test_attempts_and_waits_are_those_of_one_retry_loop(
    sleeps: list[float],
    script: list[int | tuple[int, str] | Exception],
    max_attempts: int,
    calls: int,
    waits: list[float],
    raised: type[BaseException] | None,
) -> None:
    api = ScriptedApi(script)
    client = Client(api, max_attempts=max_attempts)
    if raised is None:
        assert await client.apply(kinds.CONFIG_MAP, BODY, field_manager="t") == {"metadata": {"name": "x"}}
    else:
        with pytest.raises(raised):
            await client.apply(kinds.CONFIG_MAP, BODY, field_manager="t")
    assert api.calls == calls
    assert sleeps == waits


async def test_the_first_attempts_time_counts_against_the_retry_deadline(sleeps: list[float]) -> None:
    """A first attempt that alone outlasts the deadline is not retried: the deadline covers every attempt
    from the first, not only those after the hand-over."""
    api = ScriptedApi([503, 200], first_takes=0.05)
    client = Client(api, max_attempts=5, retry_deadline_s=0.03)
    with pytest.raises(ApiError):
        await client.apply(kinds.CONFIG_MAP, BODY, field_manager="t")
    assert api.calls == 1
    assert sleeps == []
