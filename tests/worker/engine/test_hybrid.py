"""Hybrid models (Gated DeltaNet + attention: Qwen3.5/3.6, Qwen3-Next) in the paged engine.

Tiny random-weight models with the real checkpoints' layer pattern (tools/tiny_models); greedy
output must equal mlx-lm's own generation alone, in batches with chunked prefill, after a prefix
hit that resumes from a state snapshot, and across preemption.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import PROMPTS, _reference, _run, make_engine
from tools.tiny_models.build import build
from worker.spec.controller import Speculator

GREEDY = SamplingParams(max_tokens=24, temperature=0.0)


@pytest.fixture(scope="module", params=["qwen3_5", "qwen3_5_moe", "qwen3_next", "qwen3_5-4bit"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Any, Any]:
    kind, _, bits = str(request.param).partition("-")
    dest = build(kind, tmp_path_factory.mktemp(request.param), bits=4 if bits else None)
    return load(str(dest))[:2]


def _idle(engine: Any) -> None:
    """Every state slot is back: free, or a prefix-cache snapshot."""
    kv = engine.kv
    kv.check()
    snaps = kv.snapshots
    assert snaps.running == 0
    assert snaps.pool.num_free + len(snaps.held) == snaps.pool.num_slots - 1
    snaps.pool.check()


def test_greedy_matches_mlx_lm_alone_and_batched(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS)}
    ref = {rid: _reference(mdl, tok, ids, 24) for rid, ids in prompts.items()}
    for rid in ("0", "2", "5"):
        assert _run(make_engine(mdl, tok), {rid: prompts[rid]}, GREEDY)[rid] == ref[rid]
    engine = make_engine(mdl, tok, prefill_budget=7)  # chunks of 7, cut at page boundaries
    assert _run(engine, prompts, GREEDY) == ref
    assert engine.stats.steps < engine.stats.generated_tokens / 4  # rows shared decode steps
    _idle(engine)


def test_second_turn_resumes_from_a_snapshot(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    turn1 = tok.encode(" ".join(PROMPTS[:6]))
    engine = make_engine(mdl, tok, page_size=8, prefill_budget=32)
    answer = _run(engine, {"t1": turn1}, GREEDY)["t1"]
    assert answer == _reference(mdl, tok, turn1, 24)
    turn2 = turn1 + answer + tok.encode(" And then the little bird sang")
    engine.add("t2", turn2, GREEDY)
    outs = []
    while engine.has_work:
        outs.extend(engine.step())
    assert [t for o in outs for t in o.token_ids] == _reference(mdl, tok, turn2, 24)
    # the prompt's and the answer's last page boundaries were kept: the hit reaches past turn 1
    assert outs[-1].cached_tokens >= 0.8 * len(turn1)
    assert outs[-1].cached_tokens == (len(turn1) + len(answer) - 1) // 8 * 8
    _idle(engine)


def test_preemption_recomputes_states(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS)}
    params = SamplingParams(max_tokens=40, temperature=0.0)
    ref = {rid: _reference(mdl, tok, ids, 40) for rid, ids in prompts.items()}
    engine = make_engine(mdl, tok, memory="1", page_size=4)
    engine.kv.pool.__init__(24)  # 23 usable pages = 92 tokens for 16 sequences
    assert _run(engine, prompts, params) == ref
    assert engine.stats.preemptions > 0
    _idle(engine)


def test_k8v4_is_the_same_alone_and_batched(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS[:8])}
    alone = {rid: _run(make_engine(mdl, tok, kind="k8v4"), {rid: ids}, GREEDY)[rid]
             for rid, ids in prompts.items()}
    engine = make_engine(mdl, tok, kind="k8v4", prefill_budget=7)
    assert engine.kv.store.quantized
    assert _run(engine, prompts, GREEDY) == alone
    _idle(engine)


def test_snapshots_are_evicted_when_slots_run_out(tmp_path: Path) -> None:
    """Many distinct prompts on a pool of few slots: old snapshots give way, outputs hold."""
    mdl, tok = load(str(build("qwen3_5", tmp_path / "m")))[:2]
    engine = make_engine(mdl, tok, page_size=4, max_batch=2)
    prompts = {str(i): tok.encode(p + " " + PROMPTS[-1 - i]) for i, p in enumerate(PROMPTS)}
    ref = {rid: _reference(mdl, tok, ids, 12) for rid, ids in prompts.items()}
    params = SamplingParams(max_tokens=12, temperature=0.0)
    assert _run(engine, prompts, params) == ref
    snaps = engine.kv.snapshots
    assert snaps.taken > len(snaps.held) > 0  # some were evicted to make room, some are kept
    _idle(engine)


class _Oracle:
    """A test drafter that knows the greedy answers and spoils one draft token now and then,
    so verify forwards keep some drafts and reject others."""

    name = "oracle"

    def __init__(self, answers: dict[tuple[int, ...], list[int]], vocab: int) -> None:
        self.answers, self.vocab = answers, vocab
        self.rng = random.Random(0)

    def propose(self, rows: list[Any], ks: list[int]) -> list[list[int]]:
        out = []
        for r, k in zip(rows, ks, strict=True):
            done = len(r.tokens) - r.prompt_len
            drafts = self.answers[tuple(r.tokens[: r.prompt_len])][done : done + k]
            if drafts and self.rng.random() < 0.7:
                i = self.rng.randrange(len(drafts))
                drafts = [*drafts[:i], (drafts[i] + 1) % self.vocab, *drafts[i + 1 :]]
            out.append(drafts)
        return out

    def verified(self, row: Any, accepted: int, drafted: int) -> None:
        """Nothing to learn."""

    def release(self, row: Any) -> None:
        """Nothing kept per row."""


@pytest.mark.parametrize("kind", ["none", "k8v4"])
def test_rejected_drafts_roll_the_states_back(model: tuple[Any, Any], kind: str) -> None:
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS[:6])}
    plain = _run(make_engine(mdl, tok, kind=kind), prompts, GREEDY)
    drafter = _Oracle({tuple(prompts[r]): plain[r] for r in prompts}, mdl_vocab(mdl))
    engine = make_engine(mdl, tok, kind=kind, spec=Speculator(drafter, 4, pause=False,
                                                               first_draft_at=1))
    assert _run(engine, prompts, GREEDY) == plain
    s = engine.stats
    assert 0 < s.accepted_tokens < s.drafted_tokens  # some drafts kept, some rolled back
    _idle(engine)


def mdl_vocab(model: Any) -> int:
    """The model's vocabulary size (its embedding's rows)."""
    return int(model.model.embed_tokens.weight.shape[0])
