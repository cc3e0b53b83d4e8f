"""One streamed chat request to a bench server, read at the client: the chunk times and text."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.servers import Server


@dataclass
class Streamed:
    """What the client saw of one streamed request (seconds from sending it)."""

    times: list[float] = field(default_factory=list)  # arrival of each chunk with text
    text: str = ""  # reasoning, content and tool-call text in order
    tokens: int = 0  # completion tokens of the final usage chunk
    total: float = 0.0  # until the stream ended


def stream_chat(server: Server, messages: list[dict[str, Any]], max_tokens: int,
                extra: dict[str, Any] | None = None) -> Streamed:
    """Stream one greedy chat request (EXTRA: more payload fields) and time its text chunks."""
    payload = {"model": server.request_model, "messages": messages, "max_tokens": max_tokens,
               "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
               **(extra or {})}
    got = Streamed()
    t0 = time.perf_counter()
    with httpx.stream("POST", server.base_url + "/v1/chat/completions", json=payload,
                      timeout=120) as r:
        for line in r.iter_lines():
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            chunk = json.loads(line[5:])
            for c in chunk.get("choices") or []:
                d = c.get("delta") or {}
                # one delta may carry reasoning and content (a step's tokens span </think>)
                part = ((d.get("reasoning_content") or d.get("reasoning") or "") + (d.get("content") or "")
                        + "".join(json.dumps(t.get("function")) for t in d.get("tool_calls") or []))
                if part:
                    got.times.append(time.perf_counter() - t0)
                    got.text += part
            if chunk.get("usage"):
                got.tokens = chunk["usage"]["completion_tokens"]
    got.total = time.perf_counter() - t0
    return got
