"""Seeds of any 64-bit value and logit_bias, in the sampler and through the engine."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.conftest import shared_model
from tests.worker.engine.test_engine import PROMPTS, _reference, _run, make_engine
from worker.engine.sampling import RowSampler, sample, seed_key


@pytest.fixture(scope="module")
def model() -> tuple[Any, Any]:
    return load(str(shared_model("stories260K")))[:2]


@pytest.mark.parametrize("seed", [-1, -(2**63), 2**63 - 1, 2**64 - 1, 0])
def test_any_64_bit_seed_gives_reproducible_samples(seed: int) -> None:
    logits = mx.random.normal((3, 50), key=mx.random.key(7))

    def draw() -> list[int]:
        rows = [RowSampler(SamplingParams(temperature=1.0, seed=seed)) for _ in range(3)]
        out = []
        for _ in range(5):
            tokens, _ = sample(logits, rows)
            out.extend(tokens.tolist())  # type: ignore[arg-type]
        return out

    assert draw() == draw()
    assert 0 <= seed_key(seed) < 2**64


def test_negative_seed_through_the_engine(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    prompts = {"a": tok.encode(PROMPTS[0])}
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=-1)
    first = _run(make_engine(mdl, tok), prompts, params)
    again = _run(make_engine(mdl, tok), prompts, SamplingParams(max_tokens=12, temperature=1.0,
                                                                  seed=-1))
    other = _run(make_engine(mdl, tok), prompts, SamplingParams(max_tokens=12, temperature=1.0,
                                                                  seed=-2))
    assert first == again and len(first["a"]) > 0
    assert first != other


def test_bias_forces_and_bans_in_the_sampler() -> None:
    logits = mx.array([[5.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 9.0], [9.0, 8.0, 0.0, 0.0]])
    rows = [RowSampler(SamplingParams(temperature=0.0, logit_bias={3: 100.0})),
            RowSampler(SamplingParams(temperature=0.0)),
            RowSampler(SamplingParams(temperature=1.0, seed=1, logit_bias={0: -100.0, 1: -100}))]
    for _ in range(20):
        tokens, _ = sample(logits, rows)
        t = tokens.tolist()
        assert t[0] == 3 and t[1] == 3 and t[2] in (2, 3)  # type: ignore[index]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_bias_through_the_engine_next_to_an_unbiased_row(model: tuple[Any, Any],
                                                         temperature: float) -> None:
    mdl, tok = model
    ids = tok.encode(PROMPTS[2])
    ref = _reference(mdl, tok, ids, 10)
    forced = next(t for t in range(10, 500) if t not in tok.eos_token_ids and t not in ref)
    engine = make_engine(mdl, tok)
    engine.add("plain", ids, SamplingParams(max_tokens=10, temperature=0.0))
    engine.add("forced", ids, SamplingParams(max_tokens=10, temperature=temperature, seed=3,
                                             logit_bias={forced: 100.0}))
    engine.add("banned", ids, SamplingParams(max_tokens=10, temperature=0.0,
                                             logit_bias={t: -100.0 for t in set(ref)}))
    got: dict[str, list[int]] = {"plain": [], "forced": [], "banned": []}
    while engine.has_work:
        for out in engine.step():
            got[out.request_id].extend(out.token_ids)
    assert got["plain"] == ref
    assert got["forced"] == [forced] * 10
    assert len(got["banned"]) > 0 and not set(got["banned"]) & set(ref)


def test_top_p_zero_keeps_the_most_likely_token() -> None:
    logits = mx.array([[0.0, 3.0, 2.9, 1.0]] * 4)
    rows = [RowSampler(SamplingParams(temperature=1.0, top_p=0.0, seed=s)) for s in range(4)]
    for _ in range(10):
        tokens, _ = sample(logits, rows)
        assert tokens.tolist() == [1, 1, 1, 1]
