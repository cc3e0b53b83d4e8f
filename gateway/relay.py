"""Read a request's outputs from the hub and turn worker-side failures into API errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from gateway.errors import APIError, bad_request, unavailable
from gateway.hub import Hub, Stream, Terminal
from protocol.messages import RequestOutput


def error_for(out: RequestOutput | Terminal) -> APIError:
    """The API error matching a failed output or a terminal event."""
    if isinstance(out, Terminal):
        return unavailable(out.message, code=out.code)
    code = out.error_code or "internal_error"
    message = out.error or "generation failed"
    if code == "context_length_exceeded":
        return bad_request(message, param="messages", code=code)
    if code == "invalid_request_error":
        return bad_request(message)
    if code == "queue_full":
        return unavailable(f"Server is busy: {message}", retry_after=2, code=code)
    return APIError(500, message, type="server_error", code=code)


async def outputs(stream: Stream, first: RequestOutput) -> AsyncIterator[RequestOutput | Terminal]:
    """Yield FIRST, then the stream's items until its finish (or terminal) item, inclusive."""
    item: RequestOutput | Terminal = first
    while True:
        yield item
        if isinstance(item, Terminal) or item.finish_reason is not None:
            stream.done = True
            return
        item = await stream.queue.get()


async def peek_first(hub: Hub, streams: list[Stream]) -> list[RequestOutput]:
    """Wait for every stream's first output; raise its API error (aborting the rest) on failure."""
    firsts = await asyncio.gather(*(s.queue.get() for s in streams))
    ok: list[RequestOutput] = []
    for s, first in zip(streams, firsts, strict=True):
        if isinstance(first, Terminal) or first.error is not None:
            for other in streams:
                hub.abort(other)
            raise error_for(first)
        if first.finish_reason is not None:
            s.done = True
        ok.append(first)
    return ok


def abort_all(hub: Hub, streams: list[Stream]) -> None:
    """Abort every stream that has not finished (client gone, or an error elsewhere)."""
    for s in streams:
        if not s.done:
            hub.abort(s)
