"""The paged engine on MLA models (tiny DeepSeek-V3 and GLM-4.7-Flash) against mlx-lm's greedy
decode: alone, batched with chunked prefill, through the dense decode cache and the compiled
step, across preemption and after a prefix-cache hit. Full-precision pages must be exact."""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import PROMPTS, _reference, _run, make_engine
from tools.tiny_models.build import build

PARAMS = SamplingParams(max_tokens=24, temperature=0.0)


@pytest.fixture(scope="module", params=["deepseek_v3", "glm4_moe_lite", "deepseek_v3-4bit"])
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[Any, Any, dict[str, list[int]], dict[str, list[int]]]:
    name, _, bits = request.param.partition("-")
    path = build(name, tmp_path_factory.mktemp(request.param), bits=4 if bits else None)
    model, tok = load(str(path))[:2]
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS)}
    ref = {rid: _reference(model, tok, ids, 24) for rid, ids in prompts.items()}
    return model, tok, prompts, ref


def test_alone_and_batched_with_chunked_prefill(tiny: Any) -> None:
    model, tok, prompts, ref = tiny
    for rid in ("0", "5"):
        engine = make_engine(model, tok, kind="k8v4")  # MLA keeps full-precision pages
        assert engine.kv.store.fmt.split and engine.kv.store.fmt.kind == "none"
        assert _run(engine, {rid: prompts[rid]}, PARAMS)[rid] == ref[rid], rid
    engine = make_engine(model, tok, prefill_budget=7)
    assert _run(engine, prompts, PARAMS) == ref


def test_dense_cache_and_compiled_steps(tiny: Any) -> None:
    model, tok, prompts, ref = tiny
    engine = make_engine(model, tok, max_batch=8, compile_decode="on")
    assert _run(engine, prompts, PARAMS) == ref
    forward = engine.forwards()[""]
    assert forward.dense is not None and forward.dense.steps > 0
    assert engine.compiled is not None and engine.compiled.fns


def test_preemption_and_prefix_hits(tiny: Any) -> None:
    model, tok, prompts, ref = tiny
    # the pool's least (a context's pages and two) holds 8 of these rows at most: rows are
    # preempted and resumed
    longer = SamplingParams(max_tokens=48, temperature=0.0)
    engine = make_engine(model, tok, memory="1KiB", page_size=8)
    want = {rid: _reference(model, tok, ids, 48) for rid, ids in prompts.items()}
    assert _run(engine, prompts, longer) == want
    assert engine.stats.preemptions > 0
    engine = make_engine(model, tok, page_size=8)
    long = tok.encode(" ".join(PROMPTS))
    want = _reference(model, tok, long, 24)
    assert _run(engine, {"a": long}, PARAMS)["a"] == want
    engine.add("b", long, PARAMS)
    outs = []
    while engine.has_work:
        outs.extend(engine.step())
    assert [t for o in outs for t in o.token_ids] == want
    assert outs[-1].cached_tokens >= len(long) // 8 * 8 - 8
