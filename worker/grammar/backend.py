"""The grammar library behind one seam: llguidance (chosen by measurement, see bench/README.md)."""

from __future__ import annotations

import json
from typing import Any

import llguidance
import numpy as np

from protocol.messages import GrammarSpec

MAX_GRAMMAR_SIZE = 200_000  # grammar symbols: a recursion or enum bomb stops here
INITIAL_LEXER_FUEL = 1_000_000  # regex work while compiling (~20 ms)
STEP_LEXER_FUEL = 200_000  # lexer work per token mask (~15 ms)


class GrammarError(ValueError):
    """A grammar spec that cannot be compiled (bad schema, unsupported keyword, over a limit)."""


def limits() -> llguidance.LLParserLimits:
    """The resource bounds every compile and every mask step run under."""
    return llguidance.LLParserLimits(max_grammar_size=MAX_GRAMMAR_SIZE,
                                     initial_lexer_fuel=INITIAL_LEXER_FUEL,
                                     step_lexer_fuel=STEP_LEXER_FUEL, verbose_errors=False)


def make_tokenizer(tokenizer: Any, n_vocab: int, eos_ids: list[int]) -> llguidance.LLTokenizer:
    """The library's view of a model tokenizer (an mlx-lm wrapper, a HF fast tokenizer, or a
    tokenizer.json string); N_VOCAB is the logits width, EOS_IDS the tokens that end an answer."""
    if isinstance(tokenizer, str):
        text = tokenizer
    else:
        hf = getattr(tokenizer, "_tokenizer", tokenizer)
        backend = getattr(hf, "backend_tokenizer", hf)
        text = backend.to_str()
    return llguidance.LLTokenizer(text, n_vocab=n_vocab, eos_token=list(eos_ids) or None)


def grammar_text(spec: GrammarSpec) -> str:
    """The library's grammar for SPEC; raises GrammarError for a kind or schema it cannot take."""
    try:
        if spec.kind == "json_object":
            return str(llguidance.LLMatcher.grammar_from_json_schema(
                {"type": "object"}, defaults={"whitespace_flexible": False}))
        if spec.kind == "json_schema":
            schema = json.loads(spec.text)
            if not isinstance(schema, dict):
                raise GrammarError("the JSON schema must be an object")
            return str(llguidance.LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": False}))
        if spec.kind == "lark":
            return str(llguidance.LLMatcher.grammar_from_lark(spec.text))
        if spec.kind == "regex":
            return str(llguidance.LLMatcher.grammar_from_regex(spec.text))
    except (ValueError, TypeError, RecursionError) as exc:
        raise GrammarError(f"invalid {spec.kind}: {exc}") from None
    raise GrammarError(f"unknown grammar kind {spec.kind!r}")


def compile_matcher(tok: llguidance.LLTokenizer, spec: GrammarSpec) -> llguidance.LLMatcher:
    """A matcher at the start of SPEC's grammar; raises GrammarError naming the problem."""
    matcher = llguidance.LLMatcher(tok, grammar_text(spec), log_level=0, limits=limits())
    if not matcher.is_error():  # the first mask builds the lexer's start: errors show up now
        scratch = np.zeros(((tok.vocab_size + 31) // 32,), dtype=np.int32)
        matcher.unsafe_compute_mask_ptr(scratch.ctypes.data, scratch.nbytes)
        if not matcher.is_error() and not scratch.any():
            raise GrammarError(f"the {spec.kind.replace('_', ' ')} cannot be used: it allows "
                               "no text at all")
    if matcher.is_error():
        raise GrammarError(f"the {spec.kind.replace('_', ' ')} cannot be used: "
                           f"{_short(matcher.get_error())}")
    return matcher


def _short(message: str, limit: int = 400) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."
