"""Compare worker/cpu/native's FMA exp with mx.exp on all 2^32 float32 bit patterns.

Usage: python -m bench.exp_fma [--chunk-bits 24]. Prints the count of differing inputs (NaN
payloads included: both return the input NaN) and the time each side took.
"""

from __future__ import annotations

import argparse
import time

import mlx.core as mx

from worker.cpu import softmax as cpu_softmax


def main() -> None:
    """Run the exhaustive comparison."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunk-bits", type=int, default=24)
    args = parser.parse_args()
    native = cpu_softmax.native()
    if native is None:
        raise SystemExit("worker/cpu/native is not built (make install)")
    chunk = 1 << args.chunk_bits
    base = mx.arange(chunk, dtype=mx.uint32)
    differ, t_mlx, t_fma, t0 = 0, 0.0, 0.0, time.perf_counter()
    for start in range(0, 1 << 32, chunk):
        x = mx.view(base + mx.array(start, mx.uint32), mx.float32)
        mx.eval(x)
        t = time.perf_counter()
        want = mx.exp(x)
        mx.eval(want)
        t_mlx += time.perf_counter() - t
        t = time.perf_counter()
        got = native.exp(x)
        mx.eval(got)
        t_fma += time.perf_counter() - t
        differ += int(mx.sum(mx.view(want, mx.uint32) != mx.view(got, mx.uint32)).item())  # type: ignore[arg-type]
    print(f"inputs 2^32, differing {differ}; mx.exp {t_mlx:.1f} s, fma exp {t_fma:.1f} s "
          f"({t_mlx / t_fma:.1f}x); wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
