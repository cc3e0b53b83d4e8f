"""Speculative decoding with the trained demo draft is lossless: greedy output is token-identical
to plain decoding on the demo model's own prompts, alone and 8 at a time, and drafts are kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import make_engine
from tests.worker.spec.test_draft_model import QUESTIONS
from worker.engine.core import Engine
from worker.model.embedded import embedded_model_path
from worker.spec.controller import Speculator
from worker.spec.draft_load import draft_drafter

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(max_tokens=40, temperature=0.0)


@pytest.fixture(scope="module")
def demo() -> tuple[Any, Any, dict[str, list[int]]]:
    mdl, tok = load(str(embedded_model_path()))[:2]
    prompts = {str(i): tok.apply_chat_template([{"role": "user", "content": q}],
                                               add_generation_prompt=True)
               for i, q in enumerate(QUESTIONS)}
    return mdl, tok, prompts


def spec_engine(mdl: Any, tok: Any, k: int = 4, **kw: Any) -> Engine:
    """An engine drafting with the demo's trained draft model (K tokens at most)."""
    drafter = draft_drafter("demo-draft", tok, max_batch=8, context_length=512, memory="16MiB")
    return make_engine(mdl, tok, spec=Speculator(drafter, k, pause=False, first_draft_at=1), **kw)  # exactness


def run(engine: Engine, prompts: dict[str, list[int]], params: SamplingParams) -> dict[str, list[int]]:
    """Each request's tokens once the engine has no work left (pages balanced)."""
    for rid, ids in prompts.items():
        engine.add(rid, ids, params)
    got: dict[str, list[int]] = {rid: [] for rid in prompts}
    for _ in range(50_000):
        if not engine.has_work:
            engine.kv.check()
            return got
        for out in engine.step():
            got[out.request_id].extend(out.token_ids)
    raise AssertionError("engine stuck")


@pytest.mark.parametrize("kind", ["none", "k8v4"])
def test_alone_and_batched_equal_plain(demo: tuple[Any, Any, dict[str, list[int]]], kind: str) -> None:
    mdl, tok, prompts = demo
    plain = run(make_engine(mdl, tok, kind=kind), prompts, GREEDY)
    drafted = accepted = 0
    for rid, ids in prompts.items():
        engine = spec_engine(mdl, tok, kind=kind)
        assert run(engine, {rid: ids}, GREEDY)[rid] == plain[rid], f"prompt {rid} alone"
        drafted += engine.stats.drafted_tokens
        accepted += engine.stats.accepted_tokens
    engine = spec_engine(mdl, tok, kind=kind, prefill_budget=64)
    assert run(engine, prompts, GREEDY) == plain
    assert accepted > 0 and engine.stats.accepted_tokens > 0  # the draft's tokens were kept
    drafter = engine.spec.drafter if engine.spec else None
    assert drafter is not None and not drafter.rows  # every row's draft state was released
    assert drafter.kv.pool.num_used == 0
    print(f"\n{kind}: alone {accepted}/{drafted} accepted, batched "
          f"{engine.stats.accepted_tokens}/{engine.stats.drafted_tokens}")


def test_under_preemption_and_after_a_prefix_hit(demo: tuple[Any, Any, dict[str, list[int]]]) -> None:
    mdl, tok, prompts = demo
    plain_engine = make_engine(mdl, tok, memory="1", page_size=8)
    plain_engine.kv.pool.__init__(24)  # type: ignore[misc]  # 23 usable pages: 3-4 rows fit
    plain = run(plain_engine, prompts, GREEDY)
    engine = spec_engine(mdl, tok, memory="1", page_size=8)
    engine.kv.pool.__init__(24)  # type: ignore[misc]
    assert run(engine, prompts, GREEDY) == plain
    assert engine.stats.preemptions > 0 and engine.stats.accepted_tokens > 0
    hits = engine.kv.stats.hits
    again = run(engine, {f"{k}b": v for k, v in prompts.items()}, GREEDY)
    assert {k[:-1]: v for k, v in again.items()} == plain
    assert engine.kv.stats.hits > hits


def test_sampling_with_a_draft_model_keeps_the_joint_distribution(tmp_path: Path) -> None:
    """Target and draft: two random tiny-vocabulary models on one tokenizer (q differs from p,
    so both acceptance and the residual resampling are exercised); 5,000 samples each way."""
    from tests.worker.spec.spec_helpers import tiny_vocab_model
    from tests.worker.spec.test_spec_sampling import homogeneity_p, pairs

    mdl, tok = load(str(tiny_vocab_model(tmp_path / "target")))[:2]
    draft_path = tiny_vocab_model(tmp_path / "draft", seed=6)
    plain = pairs(make_engine(mdl, tok, max_batch=8, max_waiting=6000), 5000)
    drafter = draft_drafter(str(draft_path), tok, max_batch=8, context_length=512, memory="4MiB")
    engine = make_engine(mdl, tok, max_batch=8, max_waiting=6000,
                         spec=Speculator(drafter, 3, pause=False, first_draft_at=1))  # exactness, not cost rules
    spec = pairs(engine, 5000)
    assert engine.stats.drafted_tokens > 4000
    assert 0 < engine.stats.accepted_tokens < engine.stats.drafted_tokens  # both paths taken
    assert homogeneity_p(plain, spec) > 1e-3, (plain.most_common(8), spec.most_common(8))
