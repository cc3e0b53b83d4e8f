"""The grammar path on the real Qwen3 (151,643 + 26) and Llama 3 (128,000 + 256) vocabularies.

Tokenizer files only (no weights), fetched by deploy/ensure-tokenizer-files.sh (``make install``);
the tests skip and say so when they are absent. The project's own compile (limits, error checks),
cache, Constraint and batched mask fill run on an llguidance tokenizer built from the tiktoken
ranks (the worker's GrammarCompiler takes an HF tokenizer, which these files are not).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from bench.peers import real_vocab
from protocol.messages import GrammarSpec
from worker.grammar import masks
from worker.grammar.backend import compile_matcher
from worker.grammar.cache import GrammarCache, spec_key
from worker.grammar.matcher import Constraint

SCHEMAS: list[tuple[dict[str, Any], Any]] = [
    ({"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"],
      "properties": {"name": {"type": "string", "maxLength": 40},
                     "age": {"type": "integer", "minimum": 0, "maximum": 120},
                     "tags": {"type": "array", "minItems": 1, "maxItems": 3,
                              "items": {"enum": ["red", "green", "blue"]}}}},
     {"name": "Zoë Ångström 日本語", "age": 36, "tags": ["green", "blue"]}),
    ({"type": "object", "additionalProperties": False, "required": ["user", "result"],
      "properties": {
          "user": {"type": "object", "additionalProperties": False, "required": ["email"],
                   "properties": {"email": {"type": "string",
                                            "pattern": "^[a-z]+@[a-z]+\\.com$"}}},
          "result": {"anyOf": [
              {"type": "object", "required": ["ok"], "additionalProperties": False,
               "properties": {"ok": {"type": "boolean"}}},
              {"type": "object", "required": ["code"], "additionalProperties": False,
               "properties": {"code": {"type": "number", "minimum": -1e6, "maximum": 1e6}}}]}}},
     {"user": {"email": "ada@example.com"}, "result": {"code": 12345.678}}),
    ({"type": "array", "minItems": 2, "items": {"type": "integer"}}, [1, 22, 333, 4444, -55555]),
]


@pytest.fixture(scope="module", params=list(real_vocab.FAMILIES))
def vocab(request: pytest.FixtureRequest) -> tuple[str, Any, int]:
    return _load(request.param)


@pytest.fixture(scope="module")
def qwen3() -> tuple[str, Any, int]:
    return _load("qwen3")


def _load(family: str) -> tuple[str, Any, int]:
    if not real_vocab.available(family):
        pytest.skip(f"no real {family} tokenizer file in {real_vocab.files_dir()} (or no "
                    "tiktoken): run deploy/ensure-tokenizer-files.sh (make install)")
    tok, eos = real_vocab.lltokenizer(family)
    return family, tok, eos


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def allowed(c: Constraint, token: int, width: int) -> bool:
    bits = masks.fill([c], width).view(np.uint32)
    return bool(bits[0, token // 32] >> np.uint32(token % 32) & np.uint32(1))


@pytest.mark.parametrize("case", range(len(SCHEMAS)))
def test_valid_answer_walks_and_invalid_token_is_refused(vocab: tuple[str, Any, int],
                                                         case: int) -> None:
    family, tok, eos = vocab
    schema, answer = SCHEMAS[case]
    width = real_vocab.FAMILIES[family][4]
    spec = GrammarSpec(kind="json_schema", text=json.dumps(schema))
    cache = GrammarCache()
    cache.put(spec_key(spec), compile_matcher(tok, spec))
    text = compact(answer)
    ids = list(tok.tokenize_str(text))
    assert len(ids) < len(text.encode())  # real BPE merges, not bytes
    c = Constraint(cache.get(spec_key(spec)))
    for i, t in enumerate(ids):
        assert allowed(c, t, width), f"{family}: token {i} ({tok.decode_str([t])!r}) masked"
        assert c.advance(t), c.error
    assert c.accepting and allowed(c, eos, width)
    assert c.advance(eos) and c.finished

    bad = Constraint(cache.get(spec_key(spec)))  # a fresh copy from the cache, at the start
    wrong = tok.tokenize_str(" hello")[0]  # a word where the opening bracket must be
    assert not allowed(bad, wrong, width)
    assert not allowed(bad, width - 1, width)  # the padded logits tail is never allowed
    assert not bad.advance(wrong) and bad.error is not None


def test_qwen3_thinks_freely_then_answers_in_schema(qwen3: tuple[str, Any, int]) -> None:
    family, tok, eos = qwen3  # Llama 3 has no <think> tokens
    enc = real_vocab.encoding(family)
    think = (enc._special_tokens["<think>"], enc._special_tokens["</think>"])
    assert think == (151667, 151668)  # Qwen3's ids
    spec = GrammarSpec(kind="json_schema", text=json.dumps(SCHEMAS[0][0]), after_think=True)
    c = Constraint(compile_matcher(tok, spec), think)
    width = real_vocab.FAMILIES[family][4]
    prose = list(tok.tokenize_str("Let me think. Hello!"))
    assert allowed(c, think[0], width) and not allowed(c, prose[0], width)
    for t in [think[0], *prose, think[1], *tok.tokenize_str(compact(SCHEMAS[0][1]))]:
        assert allowed(c, t, width) and c.advance(t), c.error
    assert c.accepting
