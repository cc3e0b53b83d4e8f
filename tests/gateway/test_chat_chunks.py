"""The streamed chat events' fast paths give the bytes of the generic encoding: a content chunk
from its template, and outputs that waited coming out together (same bytes, fewer writes)."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from gateway.doors.streaming import batched, sse
from gateway.openai.chat_chunks import ChatChunks
from gateway.plane.state import Stream, Terminal
from protocol.messages import RequestOutput

TEXTS = ["Hello", " there", "", '"quoted" \\ back', "line\nbreak\ttab", "\x00\x1f ctl",
         "naïve 東京 🙂", "</script>", "\u2028\u2029", "x" * 5000]


@pytest.mark.parametrize("usage", [True, False])
@pytest.mark.parametrize("index", [0, 3])
def test_content_chunk_is_the_generic_encoding(usage: bool, index: int) -> None:
    out = ChatChunks("chatcmpl-abc", 1_700_000_000, "bench/model \"x\"", usage)
    for text in TEXTS:
        generic = sse({"id": "chatcmpl-abc", "object": "chat.completion.chunk",
                       "created": 1_700_000_000, "model": "bench/model \"x\"",
                       "choices": [{"index": index, "delta": {"content": text}, "logprobs": None,
                                    "finish_reason": None}],
                       **({"usage": None} if usage else {})})
        assert out.content(index, text) == generic
        assert out.delta(index, {"content": text}, None, None) == generic
        assert msgspec.json.decode(generic[6:])["choices"][0]["delta"]["content"] == text


def test_a_model_name_holding_the_mark_falls_back() -> None:
    out = ChatChunks("c", 1, "m\x00rapid-mlx-content\x00", False)
    assert out.content(0, "hi") == out.delta(0, {"content": "hi"}, None, None)


def _out(n: int, finish: str | None = None) -> RequestOutput:
    return RequestOutput(request_id="r", token_ids=[n], text=f"t{n}", finish_reason=finish)


async def _collect(stream: Stream, first: RequestOutput) -> list[list[int]]:
    got = []
    async for batch in batched([stream], [first]):
        got.append([-1 if isinstance(item, Terminal) else item.token_ids[0] for _, item in batch])
    return got


def test_batched_hands_over_what_waits_and_stops_at_the_finish() -> None:
    async def run() -> list[list[int]]:
        s = Stream("r", "a", "b")
        for n in (2, 3):
            s.queue.put_nowait(_out(n))

        async def later() -> None:
            await asyncio.sleep(0.01)
            s.queue.put_nowait(_out(4))
            s.queue.put_nowait(_out(5, "stop"))
            s.queue.put_nowait(_out(6))  # after the finish: never read

        task = asyncio.create_task(later())
        got = await _collect(s, _out(1))
        await task
        assert s.done
        return got

    assert asyncio.run(run()) == [[1, 2, 3], [4, 5]]


def test_batched_ends_at_a_terminal_and_at_a_finished_first_output() -> None:
    async def run() -> tuple[list[list[int]], list[list[int]]]:
        s = Stream("r", "a", "b")
        s.queue.put_nowait(_out(2))
        s.queue.put_nowait(Terminal("gone"))
        first_done = Stream("q", "a", "b")
        return await _collect(s, _out(1)), await _collect(first_done, _out(7, "length"))

    assert asyncio.run(run()) == ([[1, 2, -1]], [[7]])
