"""OpenAI logprobs objects rendered straight to JSON bytes, for large non-streamed answers.

Built as dicts, the 134,400 entries of an `n: 16`, `top_logprobs: 20`, 400-token answer are
millions of container objects: the cyclic garbage collector then walks them all, holding the
interpreter (the event loop stalled 1.3 s though the build ran in another thread). Bytes are not
tracked by the collector, so each entry is rendered as bytes (a token's `"token"` and `"bytes"`
part is cached) and the answer embeds them with msgspec.Raw. The output equals json.dumps of
gateway/openai/logprobs.py's dicts, but a non-finite logprob is null (json.dumps refused it).
"""

from __future__ import annotations

import functools

import msgspec

from gateway.openai.logprobs import text_offsets
from protocol.messages import TokenLogprob

_encode = msgspec.json.encode


@functools.lru_cache(maxsize=65536)
def _token(token: str) -> tuple[bytes, bytes]:
    """TOKEN's `"token":...` part and its `"bytes":[...]` part."""
    return (b'"token":' + _encode(token),
            b'"bytes":' + _encode(list(token.encode("utf-8", errors="replace"))))


def _alt(token: str, logprob: float) -> bytes:
    name, raw = _token(token)
    return b"{" + name + b',"logprob":' + _encode(logprob) + b"," + raw + b"}"


def chat_logprobs_raw(entries: list[TokenLogprob]) -> msgspec.Raw | None:
    """The `logprobs` field of a chat choice, as JSON (gateway/openai/logprobs.py chat_logprobs)."""
    if not entries:
        return None
    parts = []
    for e in entries:
        name, raw = _token(e.token)
        tops = b",".join([_alt(t, lp) for t, _, lp in e.top])
        parts.append(b"{" + name + b',"logprob":' + _encode(e.logprob) + b"," + raw
                     + b',"top_logprobs":[' + tops + b"]}")
    return msgspec.Raw(b'{"content":[' + b",".join(parts) + b"]}")


def completion_logprobs_raw(entries: list[TokenLogprob], offset: int = 0) -> msgspec.Raw | None:
    """The legacy `logprobs` field of a text-completion choice, as JSON
    (gateway/openai/logprobs.py completion_logprobs)."""
    if not entries:
        return None
    offsets = text_offsets(entries, offset)
    tops = b",".join([b"{" + b",".join([_encode(t) + b":" + _encode(lp) for t, _, lp in e.top])
                      + b"}" for e in entries])
    return msgspec.Raw(b'{"tokens":' + _encode([e.token for e in entries])
                       + b',"token_logprobs":' + _encode([e.logprob for e in entries])
                       + b',"top_logprobs":[' + tops + b'],"text_offset":' + _encode(offsets)
                       + b"}")
