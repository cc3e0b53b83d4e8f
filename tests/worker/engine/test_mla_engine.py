"""The paged engine on MLA models (tiny DeepSeek-V3 and GLM-4.7-Flash) against mlx-lm's greedy
decode: alone, batched with chunked prefill, through the dense decode cache and the compiled
step, across preemption, after a prefix-cache hit and in speculative verify batches.
Full-precision pages must be exact."""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import PROMPTS, _reference, _run, make_engine
from tools.tiny_models.build import build
from worker.spec.controller import Speculator
from worker.spec.ngram import NgramDrafter

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


class _Oracle(NgramDrafter):
    """Drafts mlx-lm's own next tokens with every third one wrong: verify batches keep some
    drafts and roll the rest back."""

    def __init__(self, want: dict[tuple[int, ...], list[int]]) -> None:
        super().__init__()
        self.want = want

    def propose(self, rows: list[Any], ks: list[int]) -> list[list[int]]:
        """Up to ks[i] tokens: the reference's next ones, every third replaced."""
        out = []
        for r, k in zip(rows, ks, strict=True):
            ref = self.want[tuple(r.tokens[: r.prompt_len])]
            done = len(r.tokens) - r.prompt_len
            draft = ref[done : done + k]
            out.append([t if (done + i) % 3 else (t + 1) % 4096 for i, t in enumerate(draft)])
        return out

    def hopeful(self, row: Any) -> bool:
        """Always: the oracle has a draft."""
        return True


def test_speculative_verify_batches(tiny: Any) -> None:
    """Drafts verified over MLA pages (several positions per row, rejected drafts' positions
    rolled back), in batches of 8 rows: the tokens stay mlx-lm's."""
    model, tok, prompts, ref = tiny
    rows = dict(list(prompts.items())[:8])
    oracle = _Oracle({tuple(ids): ref[rid] for rid, ids in rows.items()})
    engine = make_engine(model, tok, max_batch=8, spec=Speculator(oracle, 4, pause=False,
                                                                  first_draft_at=1))
    assert _run(engine, rows, PARAMS) == {rid: ref[rid] for rid in rows}
    assert 0 < engine.stats.accepted_tokens < engine.stats.drafted_tokens
