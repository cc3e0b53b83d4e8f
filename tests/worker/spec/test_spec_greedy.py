"""Speculative decoding with the n-gram drafter is lossless: greedy output is token-identical."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.conftest import shared_model
from tests.worker.engine.test_engine import make_engine
from tests.worker.spec.spec_helpers import (
    PROMPTS,
    random_model_path,
    run,
    spec_engine,
    summary,
    tokens,
)
from worker.model.embedded import embedded_model_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["random", "demo", "stories260K"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Any, Any]:
    if request.param == "random":
        path: Path = random_model_path(tmp_path_factory.mktemp("spec"))
    else:
        path = embedded_model_path() if request.param == "demo" else shared_model("stories260K")
    return load(str(path))[:2]


GREEDY = SamplingParams(max_tokens=48, temperature=0.0)


@pytest.mark.parametrize("k", [4, 8])  # 8: the n-gram drafter's default (worker/spec/registry.py)
@pytest.mark.parametrize("kind", ["none", "k8v4"])
def test_alone_and_batched_equal_plain(model: tuple[Any, Any], kind: str, k: int) -> None:
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS)}
    plain = tokens(run(make_engine(mdl, tok, kind=kind), prompts, GREEDY))
    accepted = 0
    for rid, ids in prompts.items():
        engine = spec_engine(mdl, tok, k=k, kind=kind)
        alone = tokens(run(engine, {rid: ids}, GREEDY))
        assert alone[rid] == plain[rid], f"prompt {rid} alone"
        accepted += engine.stats.accepted_tokens
    engine = spec_engine(mdl, tok, k=k, kind=kind, prefill_budget=64)
    assert tokens(run(engine, prompts, GREEDY)) == plain
    assert accepted > 0 and engine.stats.accepted_tokens > 0  # drafts really were kept
    assert engine.stats.drafted_tokens >= engine.stats.accepted_tokens


def test_after_a_prefix_hit(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS)}
    plain = tokens(run(make_engine(mdl, tok), prompts, GREEDY))
    engine = spec_engine(mdl, tok)
    run(engine, {"warm": tok.encode(PROMPTS[0])}, GREEDY)
    hits = engine.kv.stats.hits
    assert tokens(run(engine, prompts, GREEDY)) == plain
    assert engine.kv.stats.hits > hits
    again = tokens(run(engine, {f"{k}b": v for k, v in prompts.items()}, GREEDY))
    assert {k[:-1]: v for k, v in again.items()} == plain  # its own published pages: verified only


@pytest.mark.parametrize("kind", ["none", "k8v4"])
def test_under_preemption(model: tuple[Any, Any], kind: str) -> None:
    """Same tiny pool with and without drafts (K8V4 recomputation after a preemption rounds a
    little differently from decoding, so the plain run under the same pressure is the baseline).
    """
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS)}
    plain_engine = make_engine(mdl, tok, kind=kind, memory="1", page_size=8)
    plain_engine.kv.pool.__init__(60)  # type: ignore[misc]  # 59 usable pages: 2-3 rows fit
    plain = tokens(run(plain_engine, prompts, GREEDY))
    engine = spec_engine(mdl, tok, kind=kind, memory="1", page_size=8)
    engine.kv.pool.__init__(60)  # type: ignore[misc]
    assert tokens(run(engine, prompts, GREEDY)) == plain
    assert engine.stats.preemptions > 0 and engine.stats.accepted_tokens > 0


def test_stops_max_tokens_and_logprobs_equal(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS)}
    probe = tokens(run(make_engine(mdl, tok), prompts, GREEDY))
    stop = tok.decode(probe["0"])[6:9] or "e"  # a string the answer really contains
    for params in (SamplingParams(max_tokens=7, temperature=0.0),
                   SamplingParams(max_tokens=40, temperature=0.0, stop=[stop]),
                   SamplingParams(max_tokens=30, temperature=0.0, logprobs=True, top_logprobs=3)):
        plain = run(make_engine(mdl, tok), prompts, params)
        engine = spec_engine(mdl, tok)
        spec = run(engine, prompts, params)
        assert summary(spec) == summary(plain), params
        if params.logprobs:
            for rid in prompts:
                a = [lp for o in plain[rid] for lp in o.logprobs]
                b = [lp for o in spec[rid] for lp in o.logprobs]
                assert [x.token_id for x in a] == [x.token_id for x in b]
                assert [x.logprob for x in b] == pytest.approx([x.logprob for x in a], abs=1e-4)
                assert [[t[1] for t in x.top] for x in b] == [[t[1] for t in x.top] for x in a]


def test_rows_that_do_not_speculate_are_unchanged(model: tuple[Any, Any]) -> None:
    """Seeded sampled rows and penalized rows never draft, beside rows that do: their outputs
    are the plain engine's, token for token."""
    mdl, tok = model
    prompts = {str(i): tok.encode(p) for i, p in enumerate(PROMPTS[:2])}  # 7 rows: may draft
    kinds = [SamplingParams(max_tokens=32, temperature=0.8, seed=7),
             SamplingParams(max_tokens=32, temperature=0.0, repetition_penalty=1.3),
             SamplingParams(max_tokens=32, temperature=0.0, frequency_penalty=0.5)]

    def go(engine: Any) -> dict[str, list[int]]:
        for i, params in enumerate(kinds):
            for rid, ids in prompts.items():
                engine.add(f"{i}-{rid}", ids, params)
        return tokens(run(engine, {"g": prompts["0"]}, GREEDY))

    plain = go(make_engine(mdl, tok))
    engine = spec_engine(mdl, tok)
    assert go(engine) == plain
    assert engine.stats.drafted_tokens > 0  # the greedy row "g" did speculate
