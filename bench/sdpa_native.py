"""Isolated timing: the fused attention call vs worker/cpu/native's sdpa, MLX's select+softmax vs
the native one, at stories260K's decode shapes (8 query / 4 KV heads, head_dim 8, 1 query).

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.sdpa_native \\
        [--cells 1x136,8x136,32x136,32x300] [--calls 300]

Prints per cell (rows x keys) the median (and p20) microseconds of one evaluated call.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import mlx.core as mx
import numpy as np

from worker.cpu import softmax as cpu_softmax


def _timed(fn: Callable[[], mx.array], calls: int) -> tuple[float, float]:
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        mx.eval(fn())
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2] * 1e6, ts[len(ts) // 5] * 1e6


def _cell(native: Any, rows: int, keys: int, calls: int, rng: np.random.Generator) -> str:
    hq, hkv, d = 8, 4, 8
    low = mx.array(float(np.finfo(np.float32).min), mx.float32)
    q = mx.array(rng.standard_normal((rows, hq, 1, d)).astype(np.float32))
    k = mx.array(rng.standard_normal((rows, hkv, keys, d)).astype(np.float32))
    v = mx.array(rng.standard_normal((rows, hkv, keys, d)).astype(np.float32))
    mask = mx.array(rng.random((rows, 1, 1, keys)) > 0.1) if rows > 1 else None
    s = mx.array(rng.standard_normal((rows, hkv, hq // hkv, 1, keys)).astype(np.float32))
    full = mx.broadcast_to(mx.array(rng.random((rows, 1, 1, 1, keys)) > 0.1), s.shape)
    mx.eval(q, k, v, s, full)
    fused = _timed(lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=0.35, mask=mask),
                   calls)
    ours = _timed(lambda: native.sdpa(q, k, v, 0.35, mask), calls)
    mlx_sm = _timed(lambda: mx.softmax(mx.where(full, s, low), axis=-1, precise=True), calls)
    our_sm = _timed(lambda: native.softmax(s, full), calls)
    return (f"{rows} rows x {keys} keys ({s.size} scores): sdpa fused {fused[0]:.1f} us "
            f"(p20 {fused[1]:.1f}), native {ours[0]:.1f} (p20 {ours[1]:.1f}), "
            f"{ours[0] / fused[0]:.2f}x | select+softmax {mlx_sm[0]:.1f}, native "
            f"{our_sm[0]:.1f}, {our_sm[0] / mlx_sm[0]:.2f}x")


def main() -> None:
    """Time every cell and print one line each."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cells", default="1x136,8x136,32x136,32x300")
    p.add_argument("--calls", type=int, default=300)
    args = p.parse_args()
    native = cpu_softmax.native()
    if native is None:
        raise SystemExit("worker/cpu/native is not built (make install)")
    rng = np.random.default_rng(0)
    for cell in args.cells.split(","):
        rows, keys = map(int, cell.split("x"))
        print(_cell(native, rows, keys, args.calls, rng))


if __name__ == "__main__":
    main()
