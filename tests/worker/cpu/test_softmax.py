"""The native FMA softmax (worker/cpu/native, worker/cpu/softmax.py) gives MLX's CPU bits."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

import worker.cpu.softmax as cpu_softmax
from tests.conftest import shared_model
from tests.worker.cpu.native_helpers import bits, fma_cpu
from tests.worker.engine.test_engine import make_engine
from tests.worker.kv.test_dense import _prompts, _run
from worker.engine.compile_mode import ROWS_ENV

# make install/make test build the extension on Linux x86-64: there (with AVX2 and FMA) it must
# load; a failed build fails these tests instead of silently testing MLX against itself
pytestmark = pytest.mark.skipif(not fma_cpu(), reason="built and used on x86-64 with FMA only")
MIN = np.finfo(np.float32).min


@pytest.fixture(scope="module")
def native() -> Any:
    module = cpu_softmax.native()
    assert module is not None, "worker/cpu/native not built or failed its check (make install)"
    return module


def test_exp_is_mx_exp_on_every_exponent(native: Any) -> None:
    """Every float32 exponent (both signs) with random mantissas, and special values;
    (all 2^32 inputs were compared once, when the kernel was written)."""
    rng = np.random.default_rng(0)
    patterns = (np.arange(512, dtype=np.uint32)[:, None] << 23) | rng.integers(
        0, 1 << 23, (512, 512), dtype=np.uint32)
    specials = np.array([0.0, -0.0, 88.0, -88.0, 88.00001, -88.00001, 88.72284, -103.97208,
                         0.5 / 1.442695, -0.5 / 1.442695, 0.49999997 / 1.442695, np.inf,
                         -np.inf, np.nan, MIN, -MIN], np.float32)
    for x in (mx.array(patterns.reshape(-1)).view(mx.float32), mx.array(specials)):
        for n in (x.size, 13):  # the 8-lane loop and the scalar tail
            assert np.array_equal(bits(native.exp(x[:n])), bits(mx.exp(x[:n])))


def _rows(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = (rng.standard_normal(shape) * rng.choice([0.1, 3.0, 60.0], shape[:-1])[..., None])
    x = x.astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    specials = [np.inf, -np.inf, np.nan, MIN, -MIN, 0.0, -0.0, 88.5, -88.5]
    for r in range(0, flat.shape[0], 3):  # a third of the rows get one or two special values
        flat[r, rng.integers(0, shape[-1], 2)] = rng.choice(specials, 2)
    flat[-1] = -np.inf  # a fully -inf row (NaN everywhere in MLX too)
    return x


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (5, 8), (4, 9), (2, 3, 17), (32, 8, 1, 136),
                                   (2, 4, 2, 5, 33), (1, 1, 1000), (64, 1)])
def test_softmax_is_mx_softmax(native: Any, shape: tuple[int, ...]) -> None:
    """Plain, masked (with fully masked rows), transposed (strided) and inside mx.compile."""
    rng = np.random.default_rng(sum(shape))
    x = mx.array(_rows(rng, shape))
    assert np.array_equal(bits(native.softmax(x)), bits(mx.softmax(x, axis=-1, precise=True)))
    mask_np = rng.random((*shape[:-2], 1, shape[-1])) > 0.4 if len(shape) > 1 else None
    if mask_np is not None:
        mask_np[..., 0, :] &= rng.random(shape[-1]) > 0.5
        if mask_np.size > shape[-1]:
            mask_np.reshape(-1, shape[-1])[0] = False  # every key masked
        mask = mx.array(mask_np)
        want = mx.softmax(mx.where(mask, x, mx.array(MIN)), axis=-1, precise=True)
        assert np.array_equal(bits(native.softmax(x, mask)), bits(want))
        compiled = mx.compile(lambda a, m: native.softmax(a, m))
        assert np.array_equal(bits(compiled(x, mask)), bits(want))
    if x.ndim >= 2:
        t = mx.swapaxes(x, -1, -2)  # not row-contiguous
        want = mx.softmax(t, axis=-1, precise=True)
        assert np.array_equal(bits(native.softmax(t)), bits(want))


def test_softmax_falls_back_to_mlx_outside_float32(native: Any) -> None:
    x = mx.array(np.random.default_rng(2).standard_normal((4, 20)).astype(np.float16))
    assert np.array_equal(np.array(native.softmax(x)), np.array(
        mx.softmax(x, axis=-1, precise=True)))


@pytest.mark.parametrize(("shape", "rep"), [((32, 4, 1, 136, 8), 2), ((3, 8, 1, 40, 16), 1),
                                            ((2, 2, 5, 33, 64), 4), ((1, 4, 16, 16, 8), 2)])
def test_sdpa_gives_the_fused_calls_bits(native: Any, shape: tuple[int, ...], rep: int) -> None:
    """Decode and prompt shapes, grouped queries, a row with every key masked, no mask."""
    bsz, hkv, n, length, d = shape
    rng = np.random.default_rng(1)
    q = mx.array(rng.standard_normal((bsz, hkv * rep, n, d)).astype(np.float32) * 3)
    k = mx.array(rng.standard_normal((bsz, hkv, length, d)).astype(np.float32))
    v = mx.array(rng.standard_normal((bsz, hkv, length, d)).astype(np.float32))
    ends = rng.integers(n, length + 1, (bsz,))[:, None] - n + np.arange(n)[None]
    mask = mx.array(np.arange(length)[None, None, :] <= ends[:, :, None])[:, None]
    mask[0] = False
    for m in (mask, None):
        assert cpu_softmax.fits(q, k, v, m) == (q.size // d * length >= cpu_softmax.MIN_SCORES)
        for scale in (0.35, d ** -0.5):
            want = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=m)
            assert np.array_equal(bits(cpu_softmax.sdpa(q, k, v, scale, m)), bits(want))
            traced = mx.compile(lambda q, k, v, s=scale, m=m: cpu_softmax.sdpa(q, k, v, s, m))
            assert np.array_equal(bits(traced(q, k, v)), bits(want))


@pytest.mark.parametrize(("bsz", "hkv", "rep", "length", "d"), [
    (1, 4, 2, 300, 64), (6, 2, 1, 200, 32), (3, 2, 4, 320, 128), (2, 8, 2, 3000, 128)])
def test_sdpa_with_an_addend_is_the_fused_call_plus_it(native: Any, bsz: int, hkv: int, rep: int,
                                                      length: int, d: int) -> None:
    """One query per row (decode): the addend (the last product's shape) summed onto by that
    product gives the fused call's output plus it, traced or not: the same bits while OpenBLAS
    sums the product over the keys in one block (up to its GEMM_Q, 320 or 448 keys, or in its
    small-matrix kernel), else within float rounding (the addend joins the first block)."""
    rng = np.random.default_rng(3)
    q = mx.array(rng.standard_normal((bsz, hkv * rep, 1, d)).astype(np.float32) * 3)
    k = mx.array(rng.standard_normal((bsz, hkv, length, d)).astype(np.float32))
    v = mx.array(rng.standard_normal((bsz, hkv, length, d)).astype(np.float32))
    mask = mx.array(np.arange(length)[None, None, None, :] < rng.integers(
        1, length + 1, (bsz, 1, 1, 1)))
    center = mx.array(rng.standard_normal((hkv, 1, d)).astype(np.float32))
    addend = mx.contiguous(mx.broadcast_to(center[:, None], (bsz, hkv, rep, 1, d)) if rep > 1
                           else mx.broadcast_to(center, (bsz, hkv, 1, d)))
    heads = mx.repeat(center, rep, axis=0)
    assert cpu_softmax.fits(q, k, v, mask)
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=d ** -0.5, mask=mask) + heads
    got = cpu_softmax.sdpa(q, k, v, d ** -0.5, mask, addend)
    traced = mx.compile(lambda q, k, v, a: cpu_softmax.sdpa(q, k, v, d ** -0.5, mask, a))
    assert np.array_equal(bits(traced(q, k, v, addend)), bits(got))
    if length <= 320:
        assert np.array_equal(bits(got), bits(want))
    else:
        assert np.allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-5)


def test_fits_only_cpu_float32_boolean_masks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_softmax, "MIN_SCORES", 0)
    q, k = mx.zeros((1, 2, 1, 8)), mx.zeros((1, 2, 4, 8))
    assert cpu_softmax.fits(q, k, k, mx.ones((1, 1, 1, 4), mx.bool_))
    assert cpu_softmax.fits(q, k, k, None)
    assert not cpu_softmax.fits(q, k, k, "causal")
    assert not cpu_softmax.fits(q, k, k, mx.zeros((1, 1, 1, 4)))  # additive
    assert not cpu_softmax.fits(q.astype(mx.float16), k, k, None)
    assert not cpu_softmax.fits(q, mx.zeros((1, 3, 4, 8)), mx.zeros((1, 3, 4, 8)), None)
    monkeypatch.setattr(cpu_softmax, "ENABLED", False)
    assert not cpu_softmax.fits(q, k, k, None)


def test_a_failed_check_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """An extension whose bits differ (or that cannot take MLX's arrays) is not used."""
    monkeypatch.setattr(cpu_softmax, "_loaded", {})
    monkeypatch.setattr(cpu_softmax, "_check", lambda module: False)
    assert cpu_softmax.native() is None
    monkeypatch.setattr(cpu_softmax, "_loaded", {})

    def broken(module: Any) -> bool:
        raise TypeError("incompatible function arguments")

    monkeypatch.setattr(cpu_softmax, "_check", broken)
    assert cpu_softmax.native() is None
    assert not cpu_softmax.fits(mx.zeros((4, 8, 1, 64)), mx.zeros((4, 8, 64, 8)),
                                mx.zeros((4, 8, 64, 8)), None)


@pytest.fixture(scope="module")
def stories() -> tuple[Any, Any]:
    return load(str(shared_model("stories260K")))[:2]  # head_dim 8: full-precision pages


@pytest.mark.parametrize("rows", [1, 8, 32])
@pytest.mark.parametrize("compiled", [0, 32])
@pytest.mark.parametrize("kind", ["none", "k8v4"])  # K8V4: full precision at head_dim 8
def test_engine_logits_are_the_fused_calls(native: Any, stories: tuple[Any, Any], rows: int,
                                           compiled: int, kind: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy tokens and every sampled logits array of prefill and decode (plain and compiled
    steps, rows joining and leaving) equal the fused call's, bit for bit, and the native path
    ran on decode steps."""
    mdl, tok = stories
    monkeypatch.setenv(ROWS_ENV, str(compiled))
    monkeypatch.setattr(cpu_softmax, "MIN_SCORES", 0)  # every batch size takes it
    prompts = _prompts(tok, rows, False)
    calls: list[tuple[int, ...]] = []
    original = cpu_softmax.sdpa

    def counted(*a: Any) -> mx.array:
        calls.append(a[0].shape)
        return original(*a)

    monkeypatch.setattr(cpu_softmax, "sdpa", counted)
    results = []
    for enabled in (False, True):
        monkeypatch.setattr(cpu_softmax, "ENABLED", enabled)
        engine = make_engine(mdl, tok, kind=kind, page_size=8, max_batch=rows,
                             compile_decode="auto")
        results.append(_run(engine, prompts, rows // 4, monkeypatch))
    (tokens_off, logits_off), (tokens_on, logits_on) = results
    assert tokens_on == tokens_off
    assert len(logits_on) == len(logits_off) > 0
    for a, b in zip(logits_on, logits_off, strict=True):
        assert a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert any(shape[2] == 1 for shape in calls)  # decode steps went through the extension
    if rows > 1:
        assert any(shape[0] == rows for shape in calls)
