"""The `data:` events of a streamed chat completion, built once per request and filled per token."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.doors.streaming import sse

_MARK = "\x00rapid-mlx-content\x00"  # stands for a chunk's content while the template is built
_MARK_JSON = msgspec.json.encode(_MARK)


class ChatChunks:
    """Encodes the chunks of one streamed chat completion.

    ``content`` makes the commonest chunk (one choice's content delta, no logprobs, no finish)
    from a template cut once per choice from the generic encoding, so its bytes are exactly
    what ``chunk`` would give for the same delta.
    """

    def __init__(self, cid: str, created: int, model: str, include_usage: bool) -> None:
        self.head: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk",
                                     "created": created, "model": model}
        self.extra: dict[str, Any] = {"usage": None} if include_usage else {}
        self._templates: dict[int, tuple[bytes, bytes] | None] = {}

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        """One event with these choices (and EXTRA top-level fields, such as usage)."""
        return sse({**self.head, "choices": choices, **extra})

    def delta(self, index: int, delta: dict[str, Any], logprobs: Any,
              finish_reason: str | None) -> bytes:
        """One choice's delta, with `usage: null` when the stream reports usage."""
        return self.chunk([{"index": index, "delta": delta, "logprobs": logprobs,
                            "finish_reason": finish_reason}], **self.extra)

    def content(self, index: int, text: str) -> bytes:
        """The same bytes as ``delta(index, {"content": text}, None, None)``, cheaper."""
        if index not in self._templates:
            whole = self.delta(index, {"content": _MARK}, None, None)
            parts = whole.split(_MARK_JSON)
            self._templates[index] = (parts[0], parts[1]) if len(parts) == 2 else None
        cut = self._templates[index]
        if cut is None:  # the mark shows up elsewhere (a model alias containing it)
            return self.delta(index, {"content": text}, None, None)
        return cut[0] + msgspec.json.encode(text) + cut[1]
