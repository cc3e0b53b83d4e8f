"""CPU float32 attention and sampling's softmax through worker/cpu/native's FMA softmax: MLX's bits.

On the CPU, ``mx.fast.scaled_dot_product_attention`` falls back to plain ops (scale, matmul,
select with the mask, ``softmax(precise=True)``, matmul), and MLX's x86 CPU softmax spends most
of its time in ``simd::exp``: scalar, six calls to libm's ``fmaf`` per float (bench/README.md,
"What we learned"). worker/cpu/native/fma_softmax.cpp is an MLX primitive computing the same
polynomial with inline FMA instructions, 8 lanes at a time, and the select and softmax in one
kernel; ``sdpa`` is the fallback's graph built in C++ around it, and ``softmax`` is that kernel
for worker/engine/sampling.py's top-p and min-p probabilities (over the vocabulary). Same float32 bits
(tests/worker/cpu/test_softmax.py; also compared over all 2^32 inputs when it was written). When the extension is
not built (``make install`` builds it on Linux x86-64), does not load, lacks AVX2/FMA or fails
its check at first use, one line is logged and everything stays on MLX's own ops.
"""

from __future__ import annotations

import logging
from typing import Any

import mlx.core as mx
import numpy as np

from worker.cpu.native import load_checked

log = logging.getLogger("rapid_mlx.worker")

ENABLED = True  # tests and benches compare against the fused call with this off
MIN_SCORES = 1024  # below this many scores the fused call's C++ graph is built faster
_loaded: dict[str, Any] = {}


def native() -> Any | None:
    """The extension module once it has passed its check (loaded once), else None."""
    if "module" not in _loaded:
        _loaded["module"] = _load()
    return _loaded["module"]


def _load() -> Any | None:
    module = load_checked("_fma_softmax", "FMA softmax", "MLX's own softmax", _check)
    if module is None:
        return None
    log.info("native FMA softmax in use for CPU float32 attention (worker/cpu/native)")
    return module


def _check(module: Any) -> bool:
    """Bit-compare the extension with MLX on a few rows with specials and masked keys."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 2, 37)).astype(np.float32) * 40
    x[0, 0, :3] = [np.inf, -np.inf, 89.0]
    x[1, 1, 5] = np.nan
    mask = rng.random((3, 1, 37)) > 0.3
    mask[2] = False
    xs, ms = mx.array(x), mx.array(mask)
    want = mx.softmax(mx.where(ms, xs, mx.array(float(np.finfo(np.float32).min), mx.float32)), axis=-1,
                      precise=True)
    got = module.softmax(xs, ms)
    return bool(mx.array_equal(mx.view(want, mx.uint32), mx.view(got, mx.uint32)).item())


def softmax(x: mx.array) -> mx.array:
    """``mx.softmax(x, axis=-1)`` with its bits: the native kernel on CPU float32 (sampling's
    top-p and min-p probabilities), else MLX's own op."""
    if ENABLED and x.dtype == mx.float32 and mx.default_device() == mx.cpu:
        module = native()
        if module is not None:
            out: mx.array = module.softmax(x)
            return out
    return mx.softmax(x, axis=-1)


def fits(queries: mx.array, keys: mx.array, values: mx.array, mask: object) -> bool:
    """True when ``sdpa`` reproduces the fused call (CPU, float32, 4-D, a boolean mask or
    none) with enough scores to pay, and the extension is loaded."""
    if not ENABLED or mx.default_device() != mx.cpu:
        return False
    if mask is not None and not (isinstance(mask, mx.array) and mask.dtype == mx.bool_
                                 and mask.ndim <= 4):
        return False
    if not (queries.ndim == keys.ndim == values.ndim == 4
            and queries.dtype == keys.dtype == values.dtype == mx.float32):
        return False
    bsz, hq, n, _ = queries.shape
    hkv, length = keys.shape[1], keys.shape[2]
    if hkv == 0 or hq % hkv or keys.shape[0] != bsz or bsz * hq * n * length < MIN_SCORES:
        return False
    return native() is not None


def sdpa(queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: Any,
         addend: mx.array | None = None) -> mx.array:
    """``mx.fast.scaled_dot_product_attention`` on CPU (``fits``), bit for bit; plus ADDEND
    (the last product's shape: ``PagedKVStore.value_addend``) summed onto by that product (the
    output plus ADDEND's bits while OpenBLAS sums the keys in one block: fma_softmax.cpp)."""
    module = native()
    assert module is not None
    out: mx.array = module.sdpa(queries, keys, values, scale, mask, addend)
    return out
