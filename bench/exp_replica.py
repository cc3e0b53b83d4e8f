"""Check worker.cpu_softmax.exp against mx.exp on every float32 (or a range of bit patterns).

    LD_PRELOAD="$(.venv/bin/python -m worker.blas)" .venv/bin/python -m bench.exp_replica \\
        [--start 0] [--stop 4294967296] [--chunk 16777216]

Counts inputs whose outputs differ in bits (NaN outputs compare equal to NaN) and times both on
one chunk. Every 32-bit pattern takes a few minutes on this CPU.
"""

from __future__ import annotations

import argparse
import time

import mlx.core as mx
import numpy as np

from worker.cpu_softmax import exp


def differing(start: int, stop: int) -> int:
    """How many bit patterns in [START, STOP) give different bits from mx.exp and exp."""
    x = mx.view(mx.arange(start, stop, dtype=mx.uint32), mx.float32)
    want, got = mx.exp(x), exp(x)
    same = (mx.view(want, mx.uint32) == mx.view(got, mx.uint32)) | (mx.isnan(want) & mx.isnan(got))
    return int(np.asarray(mx.sum(~same)))


def main() -> None:
    """Sweep the range in chunks and print mismatches and timings."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--stop", type=int, default=1 << 32)
    p.add_argument("--chunk", type=int, default=1 << 24)
    args = p.parse_args()
    bad, t0 = 0, time.perf_counter()
    for lo in range(args.start, args.stop, args.chunk):
        bad += differing(lo, min(lo + args.chunk, args.stop))
    print(f"{args.stop - args.start} inputs, {bad} differ ({time.perf_counter() - t0:.0f} s)")
    x = mx.random.normal((1 << 20,)) * 20
    mx.eval(x)
    for name, f in (("mx.exp", mx.exp), ("replica", exp)):
        mx.eval(f(x))
        t = time.perf_counter()
        for _ in range(10):
            mx.eval(f(x))
        print(f"{name}: {(time.perf_counter() - t) / 10 * 1e3:.2f} ms per 2^20 floats")


if __name__ == "__main__":
    main()
