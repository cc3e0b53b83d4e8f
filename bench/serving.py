"""An async load generator for OpenAI-compatible streaming chat completions.

``run_batch`` sends a list of chat requests with a fixed concurrency (a closed loop: N client
tasks each take the next request as soon as their previous one finished) and measures, per
request, the time to the first content chunk (TTFT), the total time, and the generated tokens
(``usage.completion_tokens`` from ``stream_options.include_usage`` when the server sends it,
otherwise the number of content chunks).  Aggregate tokens/s is the batch's generated tokens
divided by the wall time from the first request sent to the last one finished.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class RequestResult:
    """What one streamed request did."""

    ok: bool = False
    error: str = ""
    # seconds from sending to the first chunk with visible (non-whitespace) text: the same token
    # position on every server (a reasoning parser may hold the "\n" after <think>, or not)
    ttft: float | None = None
    ttft_any: float | None = None  # ... to the first non-empty text chunk, whitespace or not
    total: float = 0.0  # seconds from sending to the end of the stream
    content_chunks: int = 0
    completion_tokens: int | None = None  # from usage, when sent
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    text: str = ""
    retries: int = 0  # connection attempts that failed before any response byte

    @property
    def tokens(self) -> int:
        """Generated tokens: usage.completion_tokens, else the content chunks counted."""
        return self.completion_tokens if self.completion_tokens is not None else self.content_chunks


@dataclass
class BatchResult:
    """A batch of requests run at one concurrency."""

    concurrency: int
    wall: float
    results: list[RequestResult] = field(default_factory=list)

    @property
    def ok(self) -> list[RequestResult]:
        return [r for r in self.results if r.ok]

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self.results if not r.ok]

    @property
    def generated_tokens(self) -> int:
        return sum(r.tokens for r in self.ok)

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.wall if self.wall > 0 else 0.0

    @property
    def ttfts(self) -> list[float]:
        return [r.ttft for r in self.ok if r.ttft is not None]

    @property
    def prompt_tokens(self) -> int:
        return sum(r.prompt_tokens or 0 for r in self.ok)

    @property
    def cached_tokens(self) -> int | None:
        vals = [r.cached_tokens for r in self.ok]
        return None if all(v is None for v in vals) else sum(v or 0 for v in vals)

    @property
    def usage_counted(self) -> bool:
        """True when every successful request's token count came from ``usage``."""
        return all(r.completion_tokens is not None for r in self.ok)

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly digest."""
        toks = [r.tokens for r in self.ok]
        return {
            "concurrency": self.concurrency, "requests": len(self.results), "ok": len(self.ok),
            "errors": self.errors[:3], "wall_s": round(self.wall, 3),
            "generated_tokens": self.generated_tokens,
            "tokens_min": min(toks) if toks else 0, "tokens_max": max(toks) if toks else 0,
            "usage_counted": self.usage_counted,
            "tokens_per_s": round(self.tokens_per_s, 2),
            "ttft_p50_s": _r(percentile(self.ttfts, 50)), "ttft_p95_s": _r(percentile(self.ttfts, 95)),
            "ttft_any_p50_s": _r(percentile([r.ttft_any for r in self.ok if r.ttft_any is not None],
                                            50)),
            "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
            "finish_reasons": sorted({str(r.finish_reason) for r in self.ok}),
            "connect_retries": sum(r.retries for r in self.results),
        }


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation (numpy's default); None if empty."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def p50(values: Sequence[float]) -> float | None:
    return percentile(values, 50)


def p95(values: Sequence[float]) -> float | None:
    return percentile(values, 95)


async def stream_chat(client: httpx.AsyncClient, url: str, payload: dict[str, Any],
                      timeout: float, connect_retries: int = 4) -> RequestResult:
    """POST one streaming chat completion and read it to the end (or the timeout).

    A connection that fails before any response byte (refused, or reset by a server whose listen
    backlog overflowed, as ``http.server``'s backlog of 5 does under 32 simultaneous clients) is
    retried up to ``connect_retries`` times, like the OpenAI SDK does; the retries count in
    ``retries`` and their delay stays in the request's TTFT.
    """
    res = RequestResult()
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            for attempt in range(connect_retries + 1):
                try:
                    await _read_stream(client, url, payload, res, t0)
                    break
                except httpx.TransportError:
                    if res.ttft is not None or res.content_chunks or attempt == connect_retries:
                        raise
                    res.retries += 1
                    await asyncio.sleep(0.05 * (attempt + 1))
    except TimeoutError:
        res.error = f"timed out after {timeout:.0f}s"
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    finally:
        res.total = time.perf_counter() - t0
    return res


async def _read_stream(client: httpx.AsyncClient, url: str, payload: dict[str, Any],
                       res: RequestResult, t0: float) -> None:
    async with client.stream("POST", url, json=payload) as resp:
        if resp.status_code != 200:
            body = (await resp.aread()).decode(errors="replace")
            res.error = f"HTTP {resp.status_code}: {body[:300]}"
            return
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue  # blank separators and ': keepalive' comments
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk and not chunk.get("choices"):
                res.error = f"stream error: {json.dumps(chunk['error'])[:300]}"
                return
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                piece = (delta.get("content") or "") + (delta.get("reasoning_content") or "") \
                    + (delta.get("reasoning") or "")
                if piece:
                    if res.ttft_any is None:
                        res.ttft_any = time.perf_counter() - t0
                    if res.ttft is None and piece.strip():
                        res.ttft = time.perf_counter() - t0
                    res.content_chunks += 1
                    res.text += piece
                if choice.get("finish_reason"):
                    res.finish_reason = choice["finish_reason"]
            usage = chunk.get("usage")
            if usage:
                res.completion_tokens = usage.get("completion_tokens")
                res.prompt_tokens = usage.get("prompt_tokens")
                details = usage.get("prompt_tokens_details") or {}
                res.cached_tokens = details.get("cached_tokens")
    res.ok = not res.error


def chat_payload(model: str, messages: list[dict[str, str]], max_tokens: int,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A streamed, greedy chat request asking for usage in the stream."""
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens,
                            "temperature": 0.0, "stream": True,
                            "stream_options": {"include_usage": True}}
    body.update(extra or {})
    return body


async def run_batch(base_url: str, model: str, conversations: Sequence[list[dict[str, str]]], *,
                    concurrency: int, max_tokens: int, request_timeout: float = 300.0,
                    batch_timeout: float = 900.0, extra: dict[str, Any] | None = None) -> BatchResult:
    """Run every conversation through the server with ``concurrency`` requests in flight."""
    url = base_url.rstrip("/") + "/v1/chat/completions"
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(conversations)):
        queue.put_nowait(i)
    results: list[RequestResult | None] = [None] * len(conversations)
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(request_timeout, connect=30.0),
                                 limits=limits) as client:

        async def worker() -> None:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                payload = chat_payload(model, conversations[i], max_tokens, extra)
                results[i] = await stream_chat(client, url, payload, request_timeout)

        t0 = time.perf_counter()
        tasks = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(conversations)))]
        try:
            async with asyncio.timeout(batch_timeout):
                await asyncio.gather(*tasks)
        except TimeoutError:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        wall = time.perf_counter() - t0
    out = [r if r is not None else RequestResult(error=f"batch timed out after {batch_timeout:.0f}s")
           for r in results]
    return BatchResult(concurrency=concurrency, wall=wall, results=out)
