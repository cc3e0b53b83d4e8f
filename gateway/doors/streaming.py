"""Server-sent events and merging several request streams into one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import StreamingResponse

from gateway.doors.relay import outputs
from gateway.edge.bodybudget import release_body
from gateway.plane.hub import Stream, Terminal
from protocol.messages import RequestOutput

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]\n\n"
R = TypeVar("R", bound=msgspec.Struct)


def sse(obj: Any) -> bytes:
    """One `data:` event carrying OBJ as JSON."""
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


def slim_stream(request: Request, req: R, events: Callable[[R], AsyncIterator[bytes]],
                **dropped: Any) -> StreamingResponse:
    """An SSE answer of EVENTS(REQ without its DROPPED fields), REQUEST's body charge given back."""
    body = events(msgspec.structs.replace(req, **dropped))
    release_body(request.scope)
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


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
