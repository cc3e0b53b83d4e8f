"""Server-sent events and merging several request streams into one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from gateway.doors.relay import outputs
from gateway.plane.hub import Stream, Terminal
from protocol.messages import RequestOutput

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]\n\n"


def sse(obj: Any) -> bytes:
    """One `data:` event carrying OBJ as JSON."""
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


async def batched(
    streams: list[Stream], firsts: list[RequestOutput]
) -> AsyncIterator[list[tuple[int, RequestOutput | Terminal]]]:
    """Like ``merged``, but in lists: with one stream, every item already waiting comes at once
    (a client that fell behind gets them in one write; the bytes are the same)."""
    if len(streams) != 1:
        async for got in merged(streams, firsts):
            yield [got]
        return
    stream = streams[0]
    item: RequestOutput | Terminal = firsts[0]
    while True:
        batch: list[tuple[int, RequestOutput | Terminal]] = [(0, item)]
        while not _ends(item) and not stream.queue.empty():
            item = stream.queue.get_nowait()
            batch.append((0, item))
        if _ends(item):
            stream.done = True
            yield batch
            return
        yield batch
        item = await stream.queue.get()


def _ends(item: RequestOutput | Terminal) -> bool:
    return isinstance(item, Terminal) or item.finish_reason is not None


async def merged(
    streams: list[Stream], firsts: list[RequestOutput]
) -> AsyncIterator[tuple[int, RequestOutput | Terminal]]:
    """Yield (choice index, item) from every stream as items arrive, until all have ended."""
    if len(streams) == 1:
        async for item in outputs(streams[0], firsts[0]):
            yield 0, item
        return
    queue: asyncio.Queue[tuple[int, RequestOutput | Terminal | None]] = asyncio.Queue()

    async def pump(i: int) -> None:
        async for item in outputs(streams[i], firsts[i]):
            await queue.put((i, item))
        await queue.put((i, None))

    tasks = [asyncio.create_task(pump(i)) for i in range(len(streams))]
    try:
        remaining = len(streams)
        while remaining:
            i, got = await queue.get()
            if got is None:
                remaining -= 1
            else:
                yield i, got
    finally:
        for t in tasks:
            t.cancel()
