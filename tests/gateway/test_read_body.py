"""read_body on a real Starlette Request fed by a scripted ASGI receive: size, time, depth,
integers; and peek_first failing fast. No server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest
from starlette.requests import Request

from gateway.doors.relay import peek_first
from gateway.edge.errors import APIError, read_body, read_raw
from gateway.openai.schemas import ChatCompletionRequest
from gateway.plane.state import Stream, Terminal
from protocol.messages import RequestOutput

GOOD = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


def request(chunks: list[bytes], *, length: int | None = None, delay: float = 0.0,
            disconnect: bool = False) -> Request:
    """A Request whose body arrives as CHUNKS (chunked unless LENGTH is given)."""
    headers = [(b"content-type", b"application/json")]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    pending = list(chunks)

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(delay)
        if disconnect and not pending:
            return {"type": "http.disconnect"}
        body = pending.pop(0) if pending else b""
        return {"type": "http.request", "body": body, "more_body": bool(pending) or disconnect}

    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers,
             "query_string": b""}
    return Request(scope, receive)


async def fails(work: Awaitable[Any]) -> APIError:
    with pytest.raises(APIError) as info:
        await work
    return info.value


async def test_good_body() -> None:
    req = await read_body(request([GOOD[:10], GOOD[10:]]), ChatCompletionRequest)
    assert req.messages[0].content == "hi"


async def test_declared_length_over_the_limit_is_413_before_reading() -> None:
    err = await fails(read_raw(request([], length=10_000), limit=1000))
    assert err.status == 413 and err.code == "request_too_large"
    assert err.headers["Connection"] == "close"  # the rest of the upload is not read
    req = request([])
    req.scope["headers"].append((b"content-length", b"9" * 5000))
    assert (await fails(read_raw(req))).status == 413


async def test_chunked_body_is_counted_as_it_arrives() -> None:
    err = await fails(read_raw(request([b"x" * 600, b"x" * 600, b"x" * 600]), limit=1000))
    assert err.status == 413
    assert await read_raw(request([b"x" * 500, b"x" * 500]), limit=1000) == b"x" * 1000


async def test_a_lying_content_length_does_not_help() -> None:
    err = await fails(read_raw(request([b"x" * 600, b"x" * 600], length=10), limit=1000))
    assert err.status == 413


async def test_bad_content_length() -> None:
    req = request([b"{}"])
    req.scope["headers"].append((b"content-length", b"-5"))
    assert (await fails(read_raw(req))).status == 400


async def test_slow_body_is_408() -> None:
    err = await fails(read_raw(request([b"x"] * 100, delay=0.05), timeout=0.3))
    assert err.status == 408 and err.code == "request_timeout"


async def test_client_gone_mid_body_is_499() -> None:
    err = await fails(read_raw(request([b"{"], disconnect=True)))
    assert err.status == 499


@pytest.mark.parametrize("body,code", [
    (GOOD[:-1] + b', "x": ' + b"[" * 1000 + b"]" * 1000 + b"}", "json_too_deep"),
    (GOOD[:-1] + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "json_too_deep"),
    (GOOD[:-1] + b', "seed": 18446744073709551616}', "integer_out_of_range"),
    (GOOD[:-1] + b', "x": {"y": -9223372036854775809}}', "integer_out_of_range"),
    (b"{not json", "invalid_json"),
    (GOOD[:-1] + b', "n": 99}', "invalid_value"),
])
async def test_bad_bodies_are_400(body: bytes, code: str) -> None:
    err = await fails(read_body(request([body]), ChatCompletionRequest))
    assert err.status == 400 and err.code == code


# ---- peek_first ------------------------------------------------------------------------------


class FakeHub:
    """Records aborts; the only part of Hub that peek_first uses."""

    def __init__(self) -> None:
        self.aborted: list[str] = []

    def abort(self, stream: Stream) -> None:
        self.aborted.append(stream.request_id)


def streams(n: int) -> list[Stream]:
    return [Stream(f"r{i}", "a", "boot") for i in range(n)]


async def test_peek_first_returns_every_first_output() -> None:
    hub, ss = FakeHub(), streams(3)
    for i, s in enumerate(ss):
        s.queue.put_nowait(RequestOutput(request_id=s.request_id, text=str(i),
                                         finish_reason="stop" if i == 2 else None))
    firsts = await peek_first(hub, ss)  # type: ignore[arg-type]
    assert [f.text for f in firsts] == ["0", "1", "2"]
    assert [s.done for s in ss] == [False, False, True] and hub.aborted == []


@pytest.mark.parametrize("failure", [
    RequestOutput(request_id="r2", error="bad", error_code="invalid_request_error"),
    Terminal("worker died"),
])
async def test_peek_first_raises_the_first_error_without_waiting_for_the_others(
        failure: Any) -> None:
    hub, ss = FakeHub(), streams(4)
    ss[0].queue.put_nowait(RequestOutput(request_id="r0", text="ok"))
    ss[2].queue.put_nowait(failure)  # streams 1 and 3 never answer
    err = await fails(asyncio.wait_for(peek_first(hub, ss), 1.0))  # type: ignore[arg-type]
    assert err.status in (400, 503)
    assert sorted(hub.aborted) == ["r0", "r1", "r2", "r3"]


async def test_peek_first_cancelled_leaves_no_getters() -> None:
    hub, ss = FakeHub(), streams(2)
    task = asyncio.ensure_future(peek_first(hub, ss))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    ss[0].queue.put_nowait(RequestOutput(request_id="r0"))
    assert ss[0].queue.qsize() == 1  # no orphaned get() swallowed it

