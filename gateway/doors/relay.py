"""Read a request's outputs from the hub and turn worker-side failures into API errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

from gateway.edge.errors import APIError, bad_request, unavailable
from gateway.plane.hub import Hub, Stream, Terminal
from protocol.messages import RequestOutput, Work


def error_for(out: RequestOutput | Terminal) -> APIError:
    """The API error matching a failed output or a terminal event."""
    if isinstance(out, Terminal):
        return unavailable(out.message, code=out.code)
    code = out.error_code or "internal_error"
    message = out.error or "generation failed"
    if code == "context_length_exceeded":
        return bad_request(message, param="messages", code=code)
    if code == "invalid_request_error":
        return bad_request(message, param=out.error_param)
    if code == "payload_too_large":
        return APIError(413, message, param=out.error_param, code=code)
    if code == "invalid_grammar":  # the worker could not compile the response format's schema
        param = "tools" if "tool_calls" in message else "response_format"  # a forced call
        return bad_request(message, param=param, code="invalid_response_format")
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


def submit_all(hub: Hub, alias: str, jobs: Sequence[Work], tenant: str = "") -> list[Stream]:
    """Submit every job (TENANT's: within its share, gateway/plane/tenants.py); if one cannot be
    sent, abort those already sent and raise its error."""
    hub.admit(alias, tenant, len(jobs))
    streams: list[Stream] = []
    try:
        for job in jobs:
            streams.append(hub.submit(alias, job, tenant))
    except BaseException:
        abort_all(hub, streams)
        raise
    return streams


# a job whose submit (its encoding: a 7 MiB body of 250k tiny messages takes 20 ms) held the
# event loop this long lets the loop run before the next job of the same request is submitted
YIELD_AFTER_S = 0.002


async def submit_spaced(hub: Hub, alias: str, jobs: Sequence[Work],
                        tenant: str = "") -> list[Stream]:
    """submit_all for the N choices of one request: after a job that took the event loop more
    than YIELD_AFTER_S to encode and send, other requests (and /livez) run before the next (n=16
    such jobs held the loop for 320 ms at once)."""
    hub.admit(alias, tenant, len(jobs))
    streams: list[Stream] = []
    try:
        for job in jobs:
            started = time.perf_counter()
            streams.append(hub.submit(alias, job, tenant))
            if time.perf_counter() - started > YIELD_AFTER_S and len(streams) < len(jobs):
                await asyncio.sleep(0)
    except BaseException:
        abort_all(hub, streams)
        raise
    return streams


async def peek_first(hub: Hub, streams: list[Stream]) -> list[RequestOutput]:
    """Every stream's first output; the first error that arrives is raised at once, the rest
    aborted (it does not wait for the other choices first)."""
    gets = {asyncio.ensure_future(s.queue.get()): i for i, s in enumerate(streams)}
    firsts: list[RequestOutput | None] = [None] * len(streams)
    try:
        pending = set(gets)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                first = task.result()
                if isinstance(first, Terminal) or first.error is not None:
                    abort_all(hub, streams)
                    raise error_for(first)
                firsts[gets[task]] = first
    finally:
        for task in gets:
            task.cancel()
    ok: list[RequestOutput] = []
    for s, out in zip(streams, firsts, strict=True):
        assert out is not None
        if out.finish_reason is not None:
            s.done = True
        ok.append(out)
    return ok


def abort_all(hub: Hub, streams: list[Stream]) -> None:
    """Abort every stream that has not finished (client gone, or an error elsewhere)."""
    for s in streams:
        if not s.done:
            hub.abort(s)
