"""What a JSON body decodes to, measured with tracemalloc: 8 MiB of `{},` decoded to 40x its
bytes (24x in free-form fields, 14x as one-letter strings) before MAX_JSON_VALUES; now a body
with more strings, arrays and objects is refused before it is decoded (check_json), and what is
left (numbers, at most 8x, and the counted values under the bound) stays under 12x. The sizes are
those of this Python and msgspec (deterministic for a given version, not timing)."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import pytest

from gateway.anthropic.schemas import MessagesRequest
from gateway.edge.errors import APIError, decode_body
from gateway.edge.limits import MAX_BODY_BYTES, MAX_JSON_VALUES
from gateway.openai.embedding_schemas import EmbeddingRequest
from gateway.openai.schemas import ChatCompletionRequest, CompletionRequest
from gateway.responses.schemas import CreateResponse

SIZE = MAX_BODY_BYTES - 256
MSG = '"messages":[{"role":"user","content":"a"}]'


def fill(prefix: str, item: str, suffix: str, size: int = SIZE) -> bytes:
    """PREFIX, ITEM repeated (comma-separated) to SIZE bytes, SUFFIX."""
    n = (size - len(prefix) - len(suffix)) // (len(item) + 1)
    return (prefix + ",".join([item] * n) + suffix).encode()


def decoded_peak(raw: bytes, type_: Any) -> tuple[float, str]:
    """The peak traced bytes of decode_body(RAW) as a multiple of len(RAW), and its outcome."""
    gc.collect()
    tracemalloc.start()
    try:
        decoded: Any = decode_body(raw, type_)
        outcome = "ok"
    except APIError as exc:
        decoded, outcome = None, str(exc.code)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del decoded
    return peak / len(raw), outcome


# the worst bodies found per route (old code: decoded peak / body bytes)
WORST = [
    ("chat-messages", ChatCompletionRequest,  # 9x
     fill('{"model":"m","messages":[', '{"role":"user","content":"a"}', "]}")),
    ("chat-content-parts", ChatCompletionRequest,  # 24x
     fill('{"model":"m","messages":[{"role":"user","content":[', "{}", "]}]}")),
    ("chat-tool-parameters", ChatCompletionRequest,  # 22x
     fill('{"model":"m",' + MSG + ',"tools":[{"type":"function","function":{"name":"f",'
          '"parameters":{"a":[', "[]", "]}}}]}")),
    ("chat-stop", ChatCompletionRequest,  # 14x
     fill('{"model":"m",' + MSG + ',"stop":[', '"a"', "]}")),
    ("completions-token-lists", CompletionRequest,  # 24x
     fill('{"model":"m","prompt":[', "[0]", "]}")),
    ("messages-tool-input", MessagesRequest,  # 24x
     fill('{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":'
          '"tool_use","id":"a","name":"f","input":{"a":[', "{}", "]}}]}]}")),
    ("messages-text-blocks", MessagesRequest,  # 9x
     fill('{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[',
          '{"type":"text","text":""}', "]}]}")),
    ("responses-input-items", CreateResponse,  # 40x
     fill('{"model":"m","input":[', "{}", "]}")),
    ("embeddings-token-lists", EmbeddingRequest,  # 24x
     fill('{"model":"m","input":[', "[0]", "]}")),
]


@pytest.mark.parametrize("name,type_,raw", WORST, ids=[w[0] for w in WORST])
def test_value_dense_bodies_are_refused_before_decoding(name: str, type_: Any,
                                                        raw: bytes) -> None:
    ratio, outcome = decoded_peak(raw, type_)
    assert outcome == "json_too_many_values", (name, outcome)
    assert ratio < 6, f"{name}: {ratio:.1f}x"  # the scan's own copies (~4.7x at the worst)


@pytest.mark.slow
def test_the_worst_accepted_body_stays_under_12x() -> None:
    """MAX_JSON_VALUES empty input items (the largest struct a counted value makes) and the rest
    of the body floats in a free-form field: accepted, 11.1x (old code: 40x for the same bytes
    as empty items)."""
    head = '{"model":"m","input":[' + ",".join(["{}"] * (MAX_JSON_VALUES - 20))
    head += '],"tools":[{"type":"function","name":"f","parameters":{"a":['
    raw = fill(head, "1e9", "]}}]}")
    ratio, outcome = decoded_peak(raw, CreateResponse)
    assert outcome == "ok" and ratio < 12, (outcome, ratio)


def test_numbers_are_not_counted() -> None:
    """A token-id prompt of 400k ids (past MAX_JSON_VALUES) is still decoded: 8x at most."""
    raw = fill('{"model":"m","prompt":[', "1000", "]}", 2 << 20)
    ratio, outcome = decoded_peak(raw, CompletionRequest)
    assert outcome == "ok" and ratio < 8.5, (outcome, ratio)
