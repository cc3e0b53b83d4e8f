"""worker/cpu/native's gemv primitive against MLX's matmul (cblas_sgemm) on the Qwen3 bench model's
weight shapes, one OpenBLAS thread, in turns in one process.

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.gemv_kernel \\
        [--repeats 7] [--rows 1,2,3,4] [--per-row] [--shapes 32000x512,1536x512]

Prints ms per product (each evaluated alone: MLX's per-op overhead included) as medians and
the median of the paired ratios gemv / mlx, and whether the bits were equal: to MLX's product
(``matmul_t``, up to 4 rows), or with --per-row (``matmul_rows``, what the worker routes 1-32
rows to) to MLX's product of each row alone.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import mlx.core as mx
import numpy as np

SHAPES = ((32000, 512), (1536, 512), (512, 1536), (512, 512), (256, 512))  # (N, K) of W


def timed(fn: Callable[[], None], reps: int) -> float:
    """ms per call of FN over REPS calls."""
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e3


def main() -> None:
    """Time both products per shape and row count and print one line each."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--rows", default="1,2,3,4")
    p.add_argument("--per-row", action="store_true", help="time matmul_rows (any rows)")
    p.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES))
    args = p.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    from worker.cpu.blas import set_blas_threads
    from worker.cpu.gemv import GemvState, detect, native

    set_blas_threads(1)
    module = native()
    assert module is not None, "worker/cpu/native/_gemv is not built (make install)"
    order = detect(module)
    assert order is not None, "the kernel knows no order that matches this OpenBLAS"
    print(f"OpenBLAS order: {order.name} (GEMM_Q {order.q})", flush=True)
    rng = np.random.default_rng(0)

    state = GemvState(module, order)
    product = state.matmul_rows if args.per_row else state.matmul_t
    for n, k in shapes:
        w = mx.array(rng.standard_normal((n, k)).astype(np.float32) * 0.05)
        for m in (int(r) for r in args.rows.split(",")):
            x = mx.array(rng.standard_normal((m, k)).astype(np.float32))
            mx.eval(x, w)
            want = (mx.concatenate([x[i:i + 1] @ w.T for i in range(m)]) if args.per_row
                    else x @ w.T)
            same = mx.array_equal(mx.view(want, mx.uint32),
                                  mx.view(product(x, w), mx.uint32)).item()
            reps = max(int(2e7 // (n * k)), 3)
            ts: dict[str, list[float]] = {"mlx": [], "gemv": []}
            def plain(x: mx.array = x, w: mx.array = w) -> None:
                mx.eval(x @ w.T)

            def kernel(x: mx.array = x, w: mx.array = w) -> None:
                mx.eval(product(x, w))

            for _ in range(args.repeats):
                ts["mlx"].append(timed(plain, reps))
                ts["gemv"].append(timed(kernel, reps))
            ratio = statistics.median(g / b for g, b in zip(ts["gemv"], ts["mlx"], strict=True))
            print(f"W {n}x{k} rows {m}: mlx {statistics.median(ts['mlx']):.3f} ms, gemv "
                  f"{statistics.median(ts['gemv']):.3f} ms, gemv/mlx {ratio:.2f}, same bits {same}",
                  flush=True)


if __name__ == "__main__":
    main()
