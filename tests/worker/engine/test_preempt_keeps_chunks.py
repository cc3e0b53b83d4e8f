"""Preempting a long prompt mid-prefill keeps its finished chunks: their full pages go to the
prefix cache when the request's pages are freed, and its recomputation starts from them."""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import PROMPTS, _reference, make_engine
from worker.model.embedded import embedded_model_path

GREEDY = SamplingParams(max_tokens=12, temperature=0.0)
CHUNK, PAGE = 32, 8  # prefill budget per step, tokens per page


@pytest.fixture(scope="module")
def model() -> tuple[Any, Any]:
    return load(str(embedded_model_path()))[:2]


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_a_preempted_prompt_resumes_from_its_finished_chunks(model: tuple[Any, Any],
                                                            prefix_cache: bool) -> None:
    mdl, tok = model
    ids = tok.encode(" ".join(PROMPTS * 3))[:300]
    ref = _reference(mdl, tok, ids, GREEDY.max_tokens)
    engine = make_engine(mdl, tok, page_size=PAGE, prefill_budget=CHUNK,
                         prefix_cache=prefix_cache)
    engine.add("long", ids, GREEDY)
    outs = []
    while not engine.running or engine.running[0].computed < 5 * CHUNK:
        outs.extend(engine.step())
    r = engine.running[0]
    done = r.computed
    assert r.prefilling and done % PAGE == 0 and not outs
    engine.scheduler.preempt(r)  # as a reservation of an older request would
    assert engine.stats.preemptions == 1 and r in engine.waiting
    while engine.has_work:
        outs.extend(engine.step())
    assert [t for o in outs for t in o.token_ids] == ref
    computed = engine.stats.prompt_tokens_computed
    if prefix_cache:  # the finished chunks were not computed again
        assert computed == len(ids), (computed, len(ids), done)
    else:  # without the cache they are (the test can tell the two apart)
        assert computed == len(ids) + done
    engine.kv.check()
