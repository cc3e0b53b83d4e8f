"""A constrained request pays for its own mask work (worker/grammar/budget.py): the issue's
`"pattern": "^(a{300}){300}$"` (20-100 ms of mask work a token here) is refused after a few tokens with
a clear error, instead of holding every batch it is in for its whole answer; an ordinary schema
walks its whole answer inside the budget."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from mlx_lm import load

from protocol.messages import GrammarSpec
from worker.grammar import budget, masks
from worker.grammar.compiler import GrammarCompiler
from worker.grammar.matcher import Constraint
from worker.model.embedded import embedded_model_path

HOSTILE = {"type": "object", "required": ["s"],
           "properties": {"s": {"type": "string", "pattern": "^(a{300}){300}$"}}}
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 10},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}}}
VOCAB = 4096


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    tok = load(str(embedded_model_path()))[1]
    return GrammarCompiler(tok, VOCAB, sorted(tok.eos_token_ids))


def _walk(c: Constraint, tokens: int) -> int:
    """Fill and take the highest allowed token TOKENS times; the tokens taken."""
    for i in range(tokens):
        bits = masks.fill([c], VOCAB).view(np.uint32)[0]
        allowed = [t for t in range(VOCAB) if bits[t // 32] >> (t % 32) & 1]
        if c.finished or not c.advance(allowed[-1]):
            return i
    return tokens


def _compile(compiler: GrammarCompiler, schema: dict[str, Any]) -> Constraint:
    c = compiler.compile(GrammarSpec(kind="json_schema", text=json.dumps(schema)))
    assert c is not None
    return c


def test_a_costly_constraint_is_refused_after_a_few_tokens(compiler: GrammarCompiler) -> None:
    """Old code: all 300 tokens were masked (20-100 ms each, the batch waiting on every one)."""
    c = _compile(compiler, HOSTILE)
    taken = _walk(c, 300)
    assert taken < 300 and c.refused is not None and c.error == c.refused
    assert "too costly" in c.refused and budget.over(c.mask_s, c.consumed)
    assert not c.advance(0)  # it stays refused
    bits = masks.fill([c], VOCAB)
    assert (bits == -1).all()  # its row is no longer masked: nothing waits on it


def test_an_ordinary_schema_stays_inside_its_budget(compiler: GrammarCompiler) -> None:
    c = _compile(compiler, PERSON)
    _walk(c, 60)
    assert c.refused is None and c.mask_s < budget.GRACE_S
    assert not c.suspect  # its masks were cheap: filled with the others from then on
