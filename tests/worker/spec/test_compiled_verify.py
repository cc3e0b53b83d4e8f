"""The compiled verify forward: each call's logits equal the plain verify's, outputs unchanged."""

from __future__ import annotations

import copy
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import PROMPTS, _run, make_engine
from worker.model.embedded import embedded_model_path
from worker.spec import compiled_verify
from worker.spec.compiled_verify import CompiledVerify
from worker.spec.controller import Speculator
from worker.spec.draft_load import draft_drafter

GREEDY = SamplingParams(max_tokens=40, temperature=0.0)


@pytest.mark.parametrize("kind", ["none", "k8v4"])
def test_every_compiled_verify_equals_the_plain_verify(kind: str, monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """The demo's draft drafts for 8 rows at once (the target's verify forwards and the draft's
    few-token catch-ups both go through CompiledVerify); every call's logits are the plain
    forward's on the same batch within float rounding, and greedy output equals plain decoding."""
    import worker.engine.attention as attention

    monkeypatch.setattr(attention, "NUMPY_AT", 1)  # no numpy exp2 detour in a trace
    monkeypatch.setattr(compiled_verify, "MAX_VERIFY_ROWS", 8)  # served: 2 rows; exact at 8 too
    monkeypatch.setenv("RAPID_MLX_COMPILE_DECODE", "1")
    mdl, tok = load(str(embedded_model_path()))[:2]
    prompts = {f"p{i}": tok.encode(p) for i, p in enumerate(PROMPTS[:8])}
    plain = _run(make_engine(mdl, tok, kind=kind, page_size=16), prompts, GREEDY)
    calls: list[bool] = []
    original = CompiledVerify.__call__

    def checked(self: Any, tokens: mx.array, batch: Any) -> mx.array:
        want = self.run(tokens, copy.copy(batch))  # the plain forward first (same page writes)
        mx.eval(want, self.store.arrays())
        out = original(self, tokens, batch)
        assert out is not None
        calls.append(bool(mx.allclose(out, want, rtol=0, atol=1e-4).item()))
        return out

    monkeypatch.setattr(CompiledVerify, "__call__", checked)
    drafter = draft_drafter("demo-draft", tok, max_batch=8, context_length=512, memory="16MiB")
    spec = Speculator(drafter, 4, pause=False, first_draft_at=1)
    engine = make_engine(mdl, tok, kind=kind, page_size=16, spec=spec)
    assert _run(engine, prompts, GREEDY) == plain
    assert engine.stats.accepted_tokens > 0
    assert len(calls) > 10 and all(calls), f"{calls.count(False)} of {len(calls)} calls differ"
    target = engine.executor.forward.compiled_verify
    assert target is not None and any(fn is not None for fn in target.fns.values())


def test_fused_draft_steps_propose_what_single_steps_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """The draft's k greedy steps in one compiled call give the tokens of k single steps, and
    its KV afterwards serves the next proposal alike (page writes kept, in place)."""
    monkeypatch.setenv("RAPID_MLX_COMPILE_DECODE", "1")
    monkeypatch.setattr(compiled_verify, "MAX_VERIFY_ROWS", 8)  # three rows fuse
    mdl, tok = load(str(embedded_model_path()))[:2]
    engine = make_engine(mdl, tok, page_size=16)
    prompts = {f"p{i}": tok.encode(p) for i, p in enumerate(PROMPTS[:3])}
    for rid, ids in prompts.items():
        engine.add(rid, ids, SamplingParams(max_tokens=200, temperature=0.0))
    for _ in range(6):
        engine.step()
    engine.flush()
    rows = list(engine.running)
    got = {}
    for fused in (True, False):
        drafter = draft_drafter("demo-draft", tok, max_batch=8, context_length=512, memory="16MiB")
        assert drafter.fused is not None
        if not fused:
            drafter.fused = None
        first = drafter.propose(rows, [4] * len(rows))
        for r in rows:  # none kept: the next proposal starts where this one did
            drafter.verified(r, 0, 4)
        got[fused] = (first, drafter.propose(rows, [4] * len(rows)))
        if fused:
            assert drafter.fused is not None and drafter.fused.fns
    assert got[True] == got[False]
    assert all(len(p) == 4 for p in got[True][0])
