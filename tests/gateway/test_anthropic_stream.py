"""The /v1/messages stream on its own: pings while the first output is late, events after it,
an error frame, and the abort when the stream is closed early (a fake hub; no worker)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec

from gateway.anthropic import endpoint as ep
from gateway.anthropic.schemas import MessagesRequest
from gateway.doors.choice import ChoiceAssembler
from gateway.edge.errors import APIError
from gateway.plane.state import Stream
from protocol.messages import RequestOutput


class FakeHub:
    def __init__(self) -> None:
        self.aborted: list[str] = []

    def abort(self, s: Stream) -> None:
        self.aborted.append(s.request_id)


REQ = msgspec.json.decode(b'{"model": "default", "max_tokens": 9, "stream": true, '
                          b'"messages": [{"role": "user", "content": "hi"}]}', type=MessagesRequest)


def _asm(think_opened: bool) -> ChoiceAssembler:
    return ChoiceAssembler(0, tool_parser=None, reasoning_parser=None, tools=None,
                           parse_tools=False, think_opened=think_opened)


def _frames(raw: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for chunk in raw:
        name, data = chunk.decode().strip().split("\n")
        out.append((name[7:], json.loads(data[6:])))
    return out


async def _run(first: asyncio.Future[Any], stream: Stream, hub: FakeHub) -> list[bytes]:
    end = ep.MessagesEndpoint(hub, {})  # type: ignore[arg-type]
    return [b async for b in end._stream("msg_1", REQ, _asm, False, [stream], first)]


async def test_pings_until_the_first_output_then_events(monkeypatch: Any) -> None:
    monkeypatch.setattr(ep, "PING_S", 0.05)
    hub, stream = FakeHub(), Stream("msg_1", "default", "b")
    first: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(0.3, first.set_result, [RequestOutput(
        request_id="msg_1", text="Hel", prompt_tokens=5, completion_tokens=1)])
    stream.queue.put_nowait(RequestOutput(request_id="msg_1", text="lo", finish_reason="length",
                                          prompt_tokens=5, completion_tokens=2))
    frames = _frames(await _run(first, stream, hub))
    names = [n for n, _ in frames]
    assert names[0] == "message_start" and names[1] == "ping" and names.count("ping") >= 3
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    text = "".join(d["delta"]["text"] for n, d in frames if n == "content_block_delta")
    assert text == "Hello"
    delta = frames[-2][1]
    assert delta["delta"]["stop_reason"] == "max_tokens" and delta["usage"]["output_tokens"] == 2
    assert hub.aborted == []  # finished: nothing to abort


async def test_late_error_is_an_error_frame_and_aborts() -> None:
    hub, stream = FakeHub(), Stream("msg_1", "default", "b")
    first: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    first.set_exception(APIError(503, "busy", type="server_error"))
    frames = _frames(await _run(first, stream, hub))
    assert frames[-1] == ("error", {"type": "error", "error": {"type": "overloaded_error",
                                                               "message": "busy"}})
    assert hub.aborted == ["msg_1"]


async def test_closing_the_stream_early_aborts_the_job() -> None:
    hub, stream = FakeHub(), Stream("msg_1", "default", "b")
    first: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    end = ep.MessagesEndpoint(hub, {})  # type: ignore[arg-type]
    gen = end._stream("msg_1", REQ, _asm, False, [stream], first)
    assert b"message_start" in await gen.__anext__()
    await gen.aclose()  # the client went away
    assert hub.aborted == ["msg_1"] and first.cancelled()
