"""The paged engine against mlx-lm on the windowed aliases' architectures (tools/tiny_models).

gpt_oss (attention sinks, sliding window 24 on alternate layers), llama4 (chunked attention, 32
positions, on 3 of 4 layers; NoPE on the 4th) and gemma3_text (sliding window 32 on 5 of 6
layers): greedy tokens equal mlx-lm's with full-precision pages, alone and batched with a
shared prefix (cascade), prefill chunks of 10 tokens crossing the windows, and decode steps
with rows at different positions. K8V4 gives the same tokens alone and in a batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.generate import generate_step

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import PROMPTS, _run, make_engine
from tools.tiny_models.build import build
from worker.kv.layer_kinds import CHUNKED, FULL, SLIDING

KINDS = {"gpt_oss": {SLIDING: 2, FULL: 2}, "llama4": {CHUNKED: 3, FULL: 1},
         "gemma3_text": {SLIDING: 5, FULL: 1}}
N = 40  # generated tokens: every row's positions cross a window or chunk boundary


@pytest.fixture(scope="module", params=sorted(KINDS))
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[str, Any, Any]:
    dest = build(request.param, Path(tmp_path_factory.mktemp(request.param)))
    model, tok = load(str(dest))[:2]
    return request.param, model, tok


def _prompts(tok: Any) -> dict[str, list[int]]:
    shared = tok.encode(" ".join(PROMPTS[8:14]))[:40]  # 2.5 pages every row shares
    return {str(i): shared + tok.encode(" ".join(PROMPTS[i : i + 6]))[: 5 + 9 * i]
            for i in range(6)}


def test_full_precision_matches_mlx_lm(tiny: tuple[str, Any, Any]) -> None:
    arch, model, tok = tiny
    prompts = _prompts(tok)
    params = SamplingParams(max_tokens=N, temperature=0.0, ignore_eos=True)
    want = {rid: [int(t) for t, _ in generate_step(mx.array(ids), model, max_tokens=N)]
            for rid, ids in prompts.items()}
    engine = make_engine(model, tok, page_size=16)
    assert engine.kv.store.kinds.counts == KINDS[arch]
    assert _run(engine, {"0": prompts["0"]}, params) == {"0": want["0"]}
    engine = make_engine(model, tok, page_size=16, prefill_budget=10)
    assert _run(engine, prompts, params) == want


def test_k8v4_same_tokens_alone_and_batched(tiny: tuple[str, Any, Any]) -> None:
    _, model, tok = tiny
    prompts = _prompts(tok)
    params = SamplingParams(max_tokens=N, temperature=0.0, ignore_eos=True)
    batched = _run(make_engine(model, tok, kind="k8v4", page_size=16, prefill_budget=10),
                   prompts, params)
    for rid in ("0", "5"):
        engine = make_engine(model, tok, kind="k8v4", page_size=16, prefill_budget=10)
        assert engine.kv.store.fmt.kind == "k8v4"
        assert _run(engine, {rid: prompts[rid]}, params) == {rid: batched[rid]}
