"""The chunked gated delta rule (worker/engine/gated_delta.py) against mlx-lm's sequential steps.

On random inputs (GQA, padded rows, a given initial state, lower-bounded and negative-eigenvalue
gates) the chunked form equals ``gated_delta_ops`` within float32 rounding; in the engine, long
prompts on tiny hybrid models (prefilled in chunks that take the chunked form) still give
mlx_lm.generate's greedy tokens, alone and batched with right-padded rows.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.models.gated_delta import compute_g, compute_lower_bound_g, gated_delta_ops

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import PROMPTS, _reference, _run, make_engine
from tools.tiny_models.build import build
from worker.engine import gated_delta
from worker.engine.gated_delta import chunked_gated_delta, log_decay


def _inputs(b: int, t: int, hk: int, hv: int, dk: int, dv: int, seed: int) -> list[mx.array]:
    mx.random.seed(seed)
    q, k = mx.random.normal((b, t, hk, dk)), mx.random.normal((b, t, hk, dk))
    q = q / mx.linalg.norm(q, axis=-1, keepdims=True) * dk**-0.5  # as mlx-lm's normalize_qk
    k = k / mx.linalg.norm(k, axis=-1, keepdims=True)
    v = mx.random.normal((b, t, hv, dv))
    a, beta_logit = mx.random.normal((b, t, hv)) * 2, mx.random.normal((b, t, hv))
    a_log, dt_bias = mx.log(mx.random.uniform(1, 16, (hv,))), mx.random.normal((hv,))
    return [q, k, v, a, beta_logit, a_log, dt_bias]


@pytest.mark.parametrize("b,t,hk,hv,dk,dv,padded,state,lower_bound", [
    (1, 100, 2, 4, 32, 32, False, False, None),   # GQA, T not a multiple of the chunk
    (3, 130, 2, 4, 128, 128, True, True, None),   # the real head dims, right-padded rows
    (2, 64, 4, 4, 32, 16, True, True, -5.0),      # Dv != Dk, lower-bounded gate
    (2, 17, 1, 2, 32, 32, False, True, None),     # shorter than one chunk
])
def test_chunked_equals_sequential(b: int, t: int, hk: int, hv: int, dk: int, dv: int,
                                   padded: bool, state: bool, lower_bound: float | None) -> None:
    q, k, v, a, beta_logit, a_log, dt_bias = _inputs(b, t, hk, hv, dk, dv, seed=t)
    s0 = mx.random.normal((b, hv, dv, dk)) * 0.3 if state else None
    mask = (mx.arange(t)[None] < mx.array([t - 5 * i for i in range(b)])[:, None]
            if padded else None)
    g = (compute_g(a_log, a, dt_bias) if lower_bound is None
         else compute_lower_bound_g(a_log, a, dt_bias, lower_bound))
    beta = mx.sigmoid(beta_logit)
    y_seq, s_seq = gated_delta_ops(q, k, v, g, beta, s0, mask)
    y, s = chunked_gated_delta(q, k, v, log_decay(a, a_log, dt_bias, lower_bound), beta, s0, mask)
    assert y.shape == y_seq.shape and s.shape == s_seq.shape
    if mask is not None:  # padded steps' outputs are nobody's (the state skips them)
        y, y_seq = (mx.where(mask[..., None, None], x, 0.0) for x in (y, y_seq))
    for got, want in ((y, y_seq), (s, s_seq)):
        scale = max(mx.abs(want).max().item(), 1.0)  # type: ignore[type-var]
        assert mx.abs(got - want).max().item() <= 1e-5 * scale  # type: ignore[operator]


def test_strong_decay_stays_finite() -> None:
    """Decays that underflow to 0 in float32 (g = exp(-200)) reset the state, no NaN."""
    q, k, v, a, beta_logit, a_log, dt_bias = _inputs(1, 40, 2, 2, 32, 32, seed=1)
    a = a + 60.0  # softplus(a) * exp(A_log) ~ 60-960: g underflows
    g, beta = compute_g(a_log, a, dt_bias), mx.sigmoid(beta_logit)
    assert (g == 0).any().item()
    y_seq, s_seq = gated_delta_ops(q, k, v, g, beta)
    y, s = chunked_gated_delta(q, k, v, log_decay(a, a_log, dt_bias), beta)
    assert not mx.isnan(y).any().item() and not mx.isnan(s).any().item()
    assert mx.allclose(y, y_seq, atol=1e-5).item() and mx.allclose(s, s_seq, atol=1e-5).item()


@pytest.fixture(scope="module", params=["qwen3_5", "qwen3_next"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Any, Any]:
    return load(str(build(request.param, tmp_path_factory.mktemp(request.param))))[:2]


def test_long_prompts_match_mlx_lm(model: tuple[Any, Any]) -> None:
    """Prompts of 60-200 tokens: chunked prefill in the engine, mlx-lm's own steps in the
    reference (its generation runs outside our forwards, so it never takes the chunked form)."""
    mdl, tok = model
    texts = [" ".join(PROMPTS[i:] + PROMPTS[:i]) * (1 + i % 3) for i in range(6)]
    prompts = {str(i): tok.encode(t) for i, t in enumerate(texts)}
    assert min(map(len, prompts.values())) >= 60
    before = gated_delta.chunked_calls()
    ref = {rid: _reference(mdl, tok, ids, 24) for rid, ids in prompts.items()}
    assert gated_delta.chunked_calls() == before  # mlx-lm's generation: its own path
    params = SamplingParams(max_tokens=24, temperature=0.0)
    for rid in ("0", "5"):
        assert _run(make_engine(mdl, tok), {rid: prompts[rid]}, params)[rid] == ref[rid]
    assert gated_delta.chunked_calls() > before
    engine = make_engine(mdl, tok, prefill_budget=96)  # rows of unequal length share chunks
    assert _run(engine, prompts, params) == ref


def test_disabled_keeps_mlx_lm_path(model: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
                                    ) -> None:
    mdl, tok = model
    monkeypatch.setattr(gated_delta, "ENABLED", False)
    ids = tok.encode(" ".join(PROMPTS))
    before = gated_delta.chunked_calls()
    params = SamplingParams(max_tokens=8, temperature=0.0)
    assert _run(make_engine(mdl, tok), {"a": ids}, params)["a"] == _reference(mdl, tok, ids, 8)
    assert gated_delta.chunked_calls() == before



def test_routing_applies_to_long_calls_inside_our_forwards() -> None:
    """The name mlx-lm's Qwen3.5 module calls: chunked only inside ``running()`` for 16+ steps."""
    import importlib

    gated_delta.install()
    q, k, v, a, beta_logit, a_log, dt_bias = _inputs(1, 20, 1, 2, 32, 32, seed=3)
    qwen3_5 = importlib.import_module("mlx_lm.models.qwen3_5")
    update = qwen3_5.gated_delta_update  # the name its GatedDeltaNet calls
    n = gated_delta.chunked_calls()
    y_seq, s_seq = update(q, k, v, a, beta_logit, a_log, dt_bias)  # outside our forwards
    assert gated_delta.chunked_calls() == n
    with gated_delta.running():
        update(q[:, :1], k[:, :1], v[:, :1], a[:, :1], beta_logit[:, :1], a_log, dt_bias)
        assert gated_delta.chunked_calls() == n  # one step (decode): mlx-lm's
        y, s = update(q, k, v, a, beta_logit, a_log, dt_bias)
    assert gated_delta.chunked_calls() == n + 1
    assert mx.allclose(y, y_seq, atol=1e-6).item() and mx.allclose(s, s_seq, atol=1e-6).item()
