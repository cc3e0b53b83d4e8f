"""MLX's CPU attention fallback with a cheaper softmax that gives the same bits.

On CPU, ``mx.fast.scaled_dot_product_attention`` falls back to plain ops (scale, matmul, select
with the mask, ``softmax(precise=True)``, matmul). MLX's CPU softmax kernel is scalar on x86
and its exponential (``simd::exp`` in ``mlx/backend/cpu/simd/math.h``: a Cephes polynomial in
six ``std::fma`` calls) dominates it: at 32 decode rows of stories260K it is ~60% of attention.
``exp`` below is that function written in MLX ops (each fma as an exact float64 product plus a
float64 add, rounded to float32 once more; ``floor`` from a truncating cast), compiled into a few
fused kernels: 0.72-0.75x the softmax's time at decode sizes, and the same float32 bits for every
input (checked over all 2^32 floats by ``bench/exp_replica.py``; the sum runs left to right as
the kernel's does). ``sdpa`` repeats the fallback's ops around it: bit-identical outputs.
"""

from __future__ import annotations

import mlx.core as mx

F32, F64 = mx.float32, mx.float64
LOG2E = 1.442695  # the float32 constant simd::exp multiplies by
POLY = (1.535336188319500e-4, 1.339887440266574e-3, 9.618437357674640e-3, 5.550332471162809e-2,
        2.402264791363012e-1, 6.931472028550421e-1, 1.0)  # Horner, highest degree first
# score arrays (B x query heads x queries x keys) from MIN_SCORES to MAX_SCORES take the replica.
# Below, its extra kernels cost more than the exponentials save; above, its float64 intermediates
# spill out of cache. sdpa / fused call at stories260K's decode shapes (8 heads, head_dim 8;
# p20 of 300 calls, session 10): 1.23 at 4K scores, 1.01 at 8K, 0.87-1.38 at 16K,
# 0.78-0.79 at 32K, 0.73-0.74 at 64K, 0.84 at 131K; the softmax alone: 0.83 at 262K, 1.72 at 524K
MIN_SCORES = 20_000
MAX_SCORES = 1 << 18
ENABLED = True  # tests and bench/profile runs compare against the fused call with this off
FLOAT32_MIN = -3.4028234663852886e38  # finfo(float32).min: the fallback's masked score


def _parts(x_init: mx.array) -> tuple[mx.array, mx.array]:
    """simd::exp's polynomial and exponent bits (specials folded in): exp is their product."""
    x = x_init * mx.array(LOG2E, F32)
    t = x.astype(F64) + 0.5  # exact; simd::exp takes floor(x + 0.5) in double
    i = t.astype(mx.int32)  # truncates; inputs beyond +-88 overflow here and are replaced below
    i = i - (i.astype(F64) > t).astype(mx.int32)  # floor
    fpart = (x - i.astype(F32)).astype(F64)
    acc = mx.array(POLY[0], F32)
    for c in POLY[1:]:  # fma(acc, fpart, c): the float64 product is exact
        acc = (acc.astype(F64) * fpart + mx.array(c, F32).astype(F64)).astype(F32)
    # NaN stays NaN, above 88 is inf, below -88 is 0 (simd::exp's selects), each times 1.0
    nan, high, low = mx.isnan(x_init), x_init > 88.0, x_init < -88.0
    acc = mx.where(nan, x_init, mx.where(high, mx.array(float("inf"), F32),
                                         mx.where(low, mx.array(0.0, F32), acc)))
    bits = mx.left_shift(mx.where(nan | high | low, 0, i) + 127, 23)  # 2^i's float32 bits
    return acc, bits


_compiled_parts = mx.compile(_parts, shapeless=True)


def exp(x_init: mx.array) -> mx.array:
    """MLX's CPU ``exp`` of float32 X_INIT, bit for bit, from cheaper element-wise ops."""
    acc, bits = _compiled_parts(x_init)
    return mx.view(bits, F32) * acc


def softmax(scores: mx.array, mask: mx.array) -> mx.array:
    """``softmax(where(mask, scores, min), -1, precise=True)`` of MLX's CPU kernel."""
    scores = mx.where(mask, scores, mx.array(FLOAT32_MIN, F32))
    e = exp(scores - mx.max(scores, axis=-1, keepdims=True))
    return e * mx.reciprocal(mx.sum(e, axis=-1, keepdims=True))


def fits(queries: mx.array, keys: mx.array, values: mx.array, mask: object) -> bool:
    """True when ``sdpa`` reproduces the fused call (CPU, float32, a boolean mask) and pays."""
    bsz, hq, n, _ = queries.shape
    return (ENABLED and mx.default_device() == mx.cpu and isinstance(mask, mx.array) and mask.dtype == mx.bool_
            and queries.dtype == keys.dtype == values.dtype == F32 and mask.ndim <= 4
            and MIN_SCORES <= bsz * hq * n * keys.shape[2] <= MAX_SCORES)


def sdpa(queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: mx.array
         ) -> mx.array:
    """``mx.fast.scaled_dot_product_attention`` on CPU (``fits``): its fallback's ops and bits."""
    bsz, hq, n, _ = queries.shape
    hkv, length = keys.shape[1], keys.shape[2]
    rep = hq // hkv
    q = mx.array(scale, F32) * queries
    mask = mx.broadcast_to(mask, (bsz, hq, n, length))
    if rep > 1:
        q = mx.unflatten(q, 1, (hkv, rep))
        keys, values = mx.expand_dims(keys, 2), mx.expand_dims(values, 2)
        mask = mx.unflatten(mask, -3, (hkv, rep))
    out = softmax(q @ keys.swapaxes(-1, -2), mask) @ values
    return mx.flatten(out, 1, 2) if rep > 1 else out
