"""OpenAI logprobs objects from the worker's per-token log-probabilities."""

from __future__ import annotations

from typing import Any

from protocol.messages import TokenLogprob


def _bytes(s: str) -> list[int]:
    return list(s.encode("utf-8", errors="replace"))


def chat_logprobs(entries: list[TokenLogprob]) -> dict[str, Any] | None:
    """The `logprobs` field of a chat choice (or chunk)."""
    if not entries:
        return None
    return {"content": [
        {"token": e.token, "logprob": e.logprob, "bytes": _bytes(e.token),
         "top_logprobs": [{"token": t, "logprob": lp, "bytes": _bytes(t)} for t, _, lp in e.top]}
        for e in entries
    ]}


def text_offsets(entries: list[TokenLogprob], offset: int = 0) -> list[int]:
    """Where each entry's token starts in the text, counting from OFFSET."""
    offsets, pos = [], offset
    for e in entries:
        offsets.append(pos)
        pos += len(e.token)
    return offsets


def completion_logprobs(entries: list[TokenLogprob], offset: int = 0) -> dict[str, Any] | None:
    """The legacy `logprobs` field of a text-completion choice."""
    if not entries:
        return None
    offsets = text_offsets(entries, offset)
    return {"tokens": [e.token for e in entries], "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{t: lp for t, _, lp in e.top} for e in entries],
            "text_offset": offsets}
