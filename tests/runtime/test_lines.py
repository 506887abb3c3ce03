"""``byte_lines``: a watch body split into its lines however the bytes are cut into chunks."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gpustack_worker.runtime.lines import byte_lines

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

EVENTS = [
    {"type": "ADDED", "object": {"metadata": {"name": "n1", "annotations": {"a": "line\nbreak \u2028 \r"}}}},
    {"type": "MODIFIED", "object": {"metadata": {"name": "ünïcode-名前"}, "data": {"x": "y" * 300}}},
    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
]
BODY = b"".join(orjson.dumps(e) + b"\n" for e in EVENTS)


async def _chunks(data: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    last = 0
    for cut in sorted(set(cuts)):
        yield data[last:cut]
        last = cut
    yield data[last:]


async def _lines(data: bytes, cuts: list[int]) -> list[bytes]:
    return [line async for line in byte_lines(_chunks(data, cuts))]


@given(st.lists(st.integers(min_value=0, max_value=len(BODY)), max_size=40))
async def test_the_events_come_out_whole_wherever_the_chunks_are_cut(cuts: list[int]) -> None:
    lines = await _lines(BODY, cuts)
    assert [orjson.loads(line) for line in lines] == EVENTS


async def test_one_chunk_per_byte_and_one_chunk_for_all() -> None:
    assert await _lines(BODY, list(range(len(BODY)))) == BODY.split(b"\n")[:-1]
    assert await _lines(BODY, []) == BODY.split(b"\n")[:-1]


async def test_blank_lines_are_skipped_and_a_last_line_without_newline_is_kept() -> None:
    data = b"\n\n" + orjson.dumps(EVENTS[0]) + b"\n  \n\n" + orjson.dumps(EVENTS[2])
    lines = await _lines(data, [1, 5, len(data) - 3])
    assert [orjson.loads(line) for line in lines] == [EVENTS[0], EVENTS[2]]
    assert await _lines(b"", []) == []
    assert await _lines(b"\n \n", [1]) == []
