"""The CPU attention fallback with the exp replica (worker/cpu_softmax.py): MLX's bits exactly."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

import worker.cpu_softmax as cpu_softmax
from tests.conftest import shared_model
from tests.worker.test_engine import make_engine
from tests.worker.test_kv_dense import _prompts, _run
from worker.compile_mode import ROWS_ENV


def _same_bits(a: mx.array, b: mx.array) -> bool:
    return bool(mx.array_equal(mx.view(a, mx.uint32), mx.view(b, mx.uint32)).item())


def test_exp_gives_mx_exp_bits_on_every_exponent() -> None:
    """Every float32 exponent (both signs) with random mantissas, and the special values;
    bench/exp_replica.py checks all 2^32 inputs."""
    rng = np.random.default_rng(0)
    bits = (np.arange(512, dtype=np.uint32)[:, None] << 23) | rng.integers(
        0, 1 << 23, (512, 512), dtype=np.uint32)
    x = mx.array(bits.reshape(-1)).view(mx.float32)
    specials = mx.array([0.0, -0.0, 88.0, -88.0, 88.00001, -88.00001, 88.72284, -103.97208,
                         0.5 / 1.442695, -0.5 / 1.442695, np.inf, -np.inf,
                         -3.4028235e38, 3.4028235e38], mx.float32)
    for arr in (x, specials):
        want, got = mx.exp(arr), cpu_softmax.exp(arr)
        same = (mx.view(want, mx.uint32) == mx.view(got, mx.uint32)) | (
            mx.isnan(want) & mx.isnan(got))
        assert mx.all(same).item()


@pytest.mark.parametrize(("shape", "rep"), [((32, 4, 1, 136, 8), 2), ((3, 8, 1, 40, 16), 1),
                                            ((2, 2, 5, 33, 64), 4), ((1, 4, 16, 16, 8), 2)])
def test_sdpa_gives_the_fused_calls_bits(shape: tuple[int, ...], rep: int,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Decode and prompt shapes, grouped queries, a row with every key masked."""
    monkeypatch.setattr(cpu_softmax, "MIN_SCORES", 0)
    bsz, hkv, n, length, d = shape
    rng = np.random.default_rng(1)
    q = mx.array(rng.standard_normal((bsz, hkv * rep, n, d)).astype(np.float32) * 3)
    k = mx.array(rng.standard_normal((bsz, hkv, length, d)).astype(np.float32))
    v = mx.array(rng.standard_normal((bsz, hkv, length, d)).astype(np.float32))
    ends = rng.integers(n, length + 1, (bsz,))[:, None] - n + np.arange(n)[None]
    mask = mx.array(np.arange(length)[None, None, :] <= ends[:, :, None])[:, None]
    mask[0] = False
    assert cpu_softmax.fits(q, k, v, mask)
    for scale in (0.35, d ** -0.5):
        want = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
        assert _same_bits(cpu_softmax.sdpa(q, k, v, scale, mask), want)
        traced = mx.compile(lambda q, k, v, m, s=scale: cpu_softmax.sdpa(q, k, v, s, m))
        assert _same_bits(traced(q, k, v, mask), want)


def test_fits_only_cpu_float32_boolean_masks(monkeypatch: pytest.MonkeyPatch) -> None:
    q, k = mx.zeros((1, 2, 1, 8)), mx.zeros((1, 2, 4, 8))
    assert not cpu_softmax.fits(q, k, k, mx.ones((1, 1, 1, 4), mx.bool_))  # too few scores
    monkeypatch.setattr(cpu_softmax, "MIN_SCORES", 0)
    assert cpu_softmax.fits(q, k, k, mx.ones((1, 1, 1, 4), mx.bool_))
    assert not cpu_softmax.fits(q, k, k, None)
    assert not cpu_softmax.fits(q, k, k, "causal")
    assert not cpu_softmax.fits(q, k, k, mx.zeros((1, 1, 1, 4)))
    assert not cpu_softmax.fits(q.astype(mx.float16), k, k, mx.ones((1, 1, 1, 4), mx.bool_))
    long = mx.zeros((1, 2, cpu_softmax.MAX_SCORES, 8))  # 2 heads x MAX_SCORES scores
    assert not cpu_softmax.fits(q, long, long, mx.ones((1, 1, 1, cpu_softmax.MAX_SCORES), mx.bool_))


@pytest.fixture(scope="module")
def stories() -> tuple[Any, Any]:
    return load(str(shared_model("stories260K")))[:2]  # head_dim 8: full-precision pages


@pytest.mark.parametrize("rows", [1, 8, 32])
@pytest.mark.parametrize("compiled", [0, 32])
def test_engine_logits_are_the_fused_calls(stories: tuple[Any, Any], rows: int, compiled: int,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every sampled logits array of prefill and decode (plain and compiled steps, rows joining
    and leaving; mlx-lm's attention call on gathered or dense full-precision keys, routed by
    ``attention.install``) equals the one with the fused call, bit for bit."""
    mdl, tok = stories
    monkeypatch.setenv(ROWS_ENV, str(compiled))
    monkeypatch.setattr(cpu_softmax, "MIN_SCORES", 0)  # every batch size takes it
    prompts = _prompts(tok, rows, False)
    calls = []
    original = cpu_softmax.sdpa

    def counted(*a: Any) -> mx.array:
        calls.append(a[0].shape)
        return original(*a)

    monkeypatch.setattr(cpu_softmax, "sdpa", counted)
    results = []
    for enabled in (False, True):
        monkeypatch.setattr(cpu_softmax, "ENABLED", enabled)
        engine = make_engine(mdl, tok, kind="none", page_size=8, max_batch=rows,
                             compile_decode="auto")
        results.append(_run(engine, prompts, rows // 4, monkeypatch))
    (tokens_off, logits_off), (tokens_on, logits_on) = results
    assert tokens_on == tokens_off
    assert len(logits_on) == len(logits_off)
    for a, b in zip(logits_on, logits_off, strict=True):
        assert a.shape == b.shape and np.array_equal(a, b)
    if rows > 1:  # a single row passes no mask array (None or "causal"): the fused call
        assert any(shape[2] == 1 for shape in calls) and any(shape[2] > 1 for shape in calls)
