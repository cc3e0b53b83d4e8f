"""The bench's TTFT is the first chunk with visible text, the same token on every server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx

from bench.serving import stream_chat


def _sse(delta: dict[str, str]) -> bytes:
    return f"data: {json.dumps({'choices': [{'index': 0, 'delta': delta}]})}\n\n".encode()


class _Body(httpx.AsyncByteStream):
    """A reasoning reply: the role, a whitespace-only piece ("\\n" after <think>), then text."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield _sse({"role": "assistant", "content": ""})
        await asyncio.sleep(0.05)
        yield _sse({"reasoning": "\n"})
        await asyncio.sleep(0.05)
        yield _sse({"reasoning": "The"})
        yield b"data: [DONE]\n\n"


def test_whitespace_only_pieces_do_not_end_the_ttft() -> None:
    async def run() -> tuple[float | None, float | None, str]:
        transport = httpx.MockTransport(lambda _: httpx.Response(200, stream=_Body()))
        async with httpx.AsyncClient(transport=transport) as client:
            res = await stream_chat(client, "http://x/v1/chat/completions", {}, timeout=5)
        return res.ttft, res.ttft_any, res.text

    ttft, ttft_any, text = asyncio.run(run())
    assert text == "\nThe"
    assert ttft is not None and ttft_any is not None
    assert 0.05 <= ttft_any < ttft and ttft >= 0.1
