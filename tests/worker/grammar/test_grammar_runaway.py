"""A JSON number in a digit loop ends at the cap; strings and the grammar's own bounds do not move."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from mlx_lm import load

from protocol.messages import GrammarSpec
from worker.grammar import masks
from worker.grammar.compiler import GrammarCompiler
from worker.grammar.matcher import Constraint
from worker.grammar.runaway import MAX_NUMBER_CHARS, NumberGuard
from worker.model.embedded import embedded_model_path

VOCAB = 4096


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    tok = load(str(embedded_model_path()))[1]
    return GrammarCompiler(tok, VOCAB, sorted(tok.eos_token_ids))


def spec(schema: dict[str, Any]) -> GrammarSpec:
    return GrammarSpec(kind="json_schema", text=json.dumps(schema))


def digit_loop(compiler: GrammarCompiler, c: Constraint, steps: int = 300) -> str | None:
    """Play a model that always wants another digit (or a point): the whole text once finished,
    else None."""
    digits = [t for t in range(VOCAB) if compiler.token_bytes(t).isdigit()]
    digits += [t for t in range(VOCAB) if compiler.token_bytes(t) == b"."]
    out = b""
    for _ in range(steps):
        if c.finished:
            return out.decode()
        words = masks.fill([c], VOCAB).view(np.uint32)[0]
        allowed = [t for t in range(VOCAB) if words[t // 32] >> (t % 32) & 1]
        pick = next((t for t in digits if t in allowed), allowed[0])
        assert c.advance(pick), c.error
        out += compiler.token_bytes(pick)
    return None


NUMBER = {"type": "object", "additionalProperties": False, "required": ["p", "q"],
          "properties": {"p": {"type": "number"}, "q": {"type": "number", "minimum": 0,
                                                        "maximum": 1}}}


def test_numbers_in_a_digit_loop_end_at_the_cap(compiler: GrammarCompiler) -> None:
    unguarded = compiler.compile(spec(NUMBER))
    unguarded.guard = None
    assert digit_loop(compiler, unguarded) is None  # the grammar alone never ends it
    text = digit_loop(compiler, compiler.compile(spec(NUMBER)))
    assert text is not None
    value = json.loads(text)
    assert 0 <= value["q"] <= 1
    for key in "pq":
        literal = text.split(f'"{key}":')[1].split(",")[0].rstrip("}")
        assert MAX_NUMBER_CHARS <= len(literal) < MAX_NUMBER_CHARS + 8, literal


def test_strings_and_patterns_are_never_cut(compiler: GrammarCompiler) -> None:
    text = digit_loop(compiler, compiler.compile(spec(
        {"type": "object", "additionalProperties": False, "required": ["s", "code"],
         "properties": {"s": {"type": "string", "maxLength": 90},
                        "code": {"type": "string", "pattern": "^[0-9]{60}$"}}})))
    assert text is not None
    value = json.loads(text)
    assert value["s"].isdigit() and len(value["s"]) == 90 and len(value["code"]) == 60


def test_the_guard_reads_json_strings_and_escapes() -> None:
    pieces = ['{"a', '1234', '\\"', '5678":', "12", "34", ',"b":"', "\\\\", '"', ":", "5"]
    guard = NumberGuard(np.zeros(1, dtype=np.uint32), lambda t: pieces[t].encode())
    runs = []
    for t in range(len(pieces)):
        guard.feed(t)
        runs.append((guard.in_string, guard.run))
    assert runs == [(True, 0), (True, 0), (True, 0), (False, 0), (False, 2), (False, 4),
                    (True, 0), (True, 0), (False, 0), (False, 0), (False, 1)]


def test_other_grammar_kinds_are_not_guarded(compiler: GrammarCompiler) -> None:
    regex = compiler.compile(GrammarSpec(kind="regex", text="[0-9]+"))
    assert regex.guard is None
    assert compiler.compile(GrammarSpec(kind="json_object", text="")).guard is not None
