"""A bound on a non-streamed answer's log-probabilities, and its body built off the event loop.

A non-streamed `n: 16`, `logprobs`, `top_logprobs: 20`, 2,000-token chat answer is 672,000
logprob entries, a 42 MB JSON body: built on the event loop it stalled every other stream and
/livez for ~15 s. So a non-streamed request may hold at most MAX_LOGPROB_ENTRIES entries (each
token's own plus its alternatives, over every choice): one whose `max_tokens` says it could
hold more gets a 400 `response_too_large` before anything is generated, naming `n`,
`top_logprobs` and `max_tokens` and suggesting `stream: true`; one without `max_tokens` is
counted as its tokens arrive and fails with the same 400 when it crosses the bound. A body
within the bound is built (its dicts and its JSON) in a thread when it is large
(gateway/edge/offload.py), so the loop keeps serving meanwhile: its logprobs as bytes, never as
millions of dicts the garbage collector would walk holding the interpreter
(gateway/openai/logprobs_json.py), and its JSON by msgspec (json.dumps of an 8 MB answer held
the interpreter 0.84 s in one call, even from another thread).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from starlette.responses import Response

from gateway.edge.errors import APIError, bad_request
from gateway.edge.offload import off_loop

MAX_LOGPROB_ENTRIES = 512 * 1024  # ~32 MB of JSON in a chat answer (~62 bytes an entry)
ENTRY_BYTES = 64  # a logprob entry's share of the JSON body (its weight for off_loop)
TEXT_BYTES = 8  # a token of text's share


def too_large(n: int, top: int, param: str, entries: int) -> APIError:
    """The 400 of a non-streamed answer of ENTRIES logprob entries over the bound."""
    return bad_request(
        f"This answer would hold up to {entries} log-probabilities (n={n} x max_tokens x "
        f"(1 + {param}={top})), more than the {MAX_LOGPROB_ENTRIES} a non-streamed answer may "
        f"hold: lower n, {param} or max_tokens, or set `stream: true`.", param=param,
        code="response_too_large")


def check_upfront(n: int, max_tokens: int, top: int, param: str) -> None:
    """Refuse, before generating, a non-streamed request whose N choices of MAX_TOKENS tokens
    (0: not given) with TOP alternatives each could pass the bound."""
    entries = n * max_tokens * (1 + top)
    if entries > MAX_LOGPROB_ENTRIES:
        raise too_large(n, top, param, entries)


class Tally:
    """The logprob entries (and text tokens) of a non-streamed answer so far, against the bound."""

    def __init__(self, n: int, top: int, param: str, enabled: bool) -> None:
        self.n, self.top, self.param, self.enabled = n, top, param, enabled
        self.entries = 0
        self.tokens = 0

    def add(self, tokens: int) -> None:
        """TOKENS more tokens arrived; raise the 400 when their entries pass the bound."""
        self.tokens += tokens
        if self.enabled:
            self.entries += tokens * (1 + self.top)
            if self.entries > MAX_LOGPROB_ENTRIES:
                raise too_large(self.n, self.top, self.param, self.entries)

    @property
    def weight(self) -> int:
        """About the bytes of the answer's JSON body."""
        return self.entries * ENTRY_BYTES + self.tokens * TEXT_BYTES


def render(body: dict[str, Any]) -> bytes:
    """BODY as compact JSON (its logprobs already rendered: gateway/openai/logprobs_json.py)."""
    return msgspec.json.encode(body)


def _response(fn: Callable[[], dict[str, Any]]) -> Response:
    return Response(render(fn()), media_type="application/json")


async def build(tally: Tally, fn: Callable[[], dict[str, Any]]) -> Response:
    """The JSON response of the answer body FN() builds: built and rendered in a thread when
    it is large."""
    return await off_loop(tally.weight, _response, fn)
