"""A watch stream's body split into its lines, as bytes: one JSON event per line.

The API server writes each watch event as one JSON document followed by a newline; JSON text never
holds a raw newline (inside strings it is escaped), so every ``\\n`` ends an event. Splitting the bytes
ourselves and handing each line to ``orjson.loads`` as bytes skips httpx's text layer (an incremental
UTF-8 decode of the whole stream, then a line decoder over ``str`` that also splits on ``\\r`` and
Unicode line breaks a JSON stream never has between events) — a cost paid for every event of every
informer. A line may arrive over several chunks (an object larger than a read); its parts are kept and
joined once, not re-concatenated per chunk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ("byte_lines",)


async def byte_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The non-blank lines of ``chunks`` without their ``\\n`` (a last line without one included)."""
    parts: list[bytes] = []
    async for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if parts:
                parts.append(chunk[start:end])
                line = b"".join(parts)
                parts.clear()
            else:
                line = chunk[start:end]
            start = end + 1
            if line.strip():
                yield line
        if start < len(chunk):
            parts.append(chunk[start:])
    line = b"".join(parts)
    if line.strip():
        yield line
