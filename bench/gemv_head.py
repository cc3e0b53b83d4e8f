"""What a gemv kernel would give a one-row decode step: mlx-lm's model with its LM head in MLX
(sgemm) or straight in OpenBLAS's cblas_sgemv on the host, same process, in turns.

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.gemv_head \\
        [--model qwen3] [--steps 48] [--repeats 5]

One row, plain mlx-lm KVCache, greedy from a 64-token random prompt, 8 warm-up steps; prints
wall and CPU ms per step (medians) and whether both decoded the same tokens. An experiment for
bench/roofline.py's "machine floor", not a serving path: float32 weights only, and sgemv's sums
are not bit-identical to sgemm's (so one row's logits would differ from the same row batched).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from typing import Any

import numpy as np

from bench.profile_decode import PROMPT, WARM, load


def decode(model: Any, head: str, steps: int) -> tuple[float, float, list[int]]:
    """Wall and CPU ms per step of a one-row greedy decode, HEAD "mlx" or "gemv", and its tokens."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    from worker.cpu.blas import find_openblas

    lib = ctypes.CDLL(find_openblas() or None)
    embed = model.model.embed_tokens
    weight = np.array(embed.weight)
    vocab, dim = weight.shape
    logits = np.empty(vocab, dtype=np.float32)
    one, zero, ptr = ctypes.c_float(1.0), ctypes.c_float(0.0), ctypes.c_void_p
    cache = make_prompt_cache(model)
    prompt = mx.array(np.random.default_rng(0).integers(3, vocab, PROMPT))[None]
    token = mx.argmax(embed.as_linear(model.model(prompt, cache=cache)[:, -1]), -1)
    out: list[int] = []
    t0 = c0 = 0.0
    for i in range(WARM + steps):
        if i == WARM:
            t0, c0 = time.perf_counter(), time.process_time()
        hidden = model.model(token[:, None], cache=cache)[:, -1]
        if head == "mlx":
            token = mx.argmax(embed.as_linear(hidden), -1)
            mx.eval(token)
        else:
            x = np.array(hidden[0])  # evaluates the layers
            lib.cblas_sgemv(101, 111, vocab, dim, one, ptr(weight.ctypes.data), dim,
                            ptr(x.ctypes.data), 1, zero, ptr(logits.ctypes.data), 1)
            token = mx.array([int(logits.argmax())])
        out.append(int(token.item()))  # type: ignore[arg-type]
    return (time.perf_counter() - t0) / steps * 1e3, (time.process_time() - c0) / steps * 1e3, out


def main() -> None:
    """Run both heads in turns and print the medians."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="qwen3")
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    from worker.cpu.blas import apply_blas_policy

    model, _ = load(args.model)
    apply_blas_policy(model)
    runs: dict[str, list[tuple[float, float, list[int]]]] = {"mlx": [], "gemv": []}
    for _ in range(args.repeats):
        for head, done in runs.items():
            done.append(decode(model, head, args.steps))
    for head, done in runs.items():
        print(f"{head}: wall {statistics.median(r[0] for r in done):.2f} ms/step, "
              f"cpu {statistics.median(r[1] for r in done):.2f} ms/step")
    print("same tokens:", all(a[2] == b[2] for a, b in zip(runs["mlx"], runs["gemv"], strict=True)))


if __name__ == "__main__":
    main()
