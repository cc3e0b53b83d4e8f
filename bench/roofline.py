"""The floor of one decode step on this machine, against our Engine.step and mlx-lm's step.

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.roofline \\
        [--models stories260K,qwen3] [--rows 1,8,32] [--steps 32] [--repeats 3] [--json]

Per (model, rows), in turns in one process with one OpenBLAS thread (worker/cpu/blas.py's policy),
medians over the repeats, ms per decode step:
- ``matmuls``: the model's own weight matrices (every Linear, the LM head) applied to ROWS
  random rows, built and evaluated once per step: the products every server must do;
- ``+attention``: the same plus, per layer, softmax attention of one query per row over plain
  contiguous keys/values of the context length the decode loops below run at, in base 2
  (``plain_attention``, the cheapest formulation known on this CPU): **the floor**;
- ``blas``: the same products straight in OpenBLAS, gemv at one row (``blas_floor``): what
  the weight products cost without MLX's choice of kernel;
- ``+sdpa``: the same with ``mx.fast.scaled_dot_product_attention`` (a fallback of plain ops on
  CPU, what mlx-lm's attention calls), for reference;
- ``model code``: mlx-lm's model itself decoding ROWS rows greedily over plain KV caches (no
  paging, scheduling or logsumexp): the per-layer small ops every MLX server shares;
- ``ours fp`` / ``ours k8v4``: bench.profile_decode's Engine.step loop (compiled to 8 rows as
  served, full-precision pages and K8V4); ``mlx-lm``: its BatchGenerator.next() loop.
And once per run: memcpy bandwidth (numpy, one thread, bytes read + written), the read rate of
a float32 sum, and one big sgemm's GFLOP/s, so ``roof`` = max(weight bytes / read rate,
2 * rows * weight params / GFLOP/s) is the textbook roofline of the matmuls alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import numpy as np

from bench.profile_decode import PROMPT, WARM, load, ours, theirs

BARS = {1: 1.3}  # single stream: 1.3x the best peer; 8 and 32 streams: 1.5x
DEFAULT_BAR = 1.5
LOG2E = 1.4426950408889634
CHAIN = 500  # tiny ops in the dispatch measurement
FLOORS = {"matmuls": "", "+attention": "plain", "+sdpa": "sdpa"}  # floor_step's attention
STEPS = ("ours fp", "ours k8v4", "mlx-lm")
SIDES = ("blas", *FLOORS, "model code", *STEPS)
REAL = ("model code", *STEPS)  # the sides that decode


def weight_matrices(model: Any) -> list[Any]:
    """Every matrix a decode step multiplies by: the Linear layers' and the LM head (tied or not)."""
    import mlx.nn as nn

    kinds = (nn.Linear, nn.QuantizedLinear)  # type: ignore[attr-defined]
    mats = [m for _, m in model.named_modules() if isinstance(m, kinds)]
    if not any(name == "lm_head" for name, _ in model.named_modules()):
        mats.append(model.model.embed_tokens)  # tied: as_linear
    return mats


def shape_of(module: Any) -> tuple[int, int]:
    """(out, in) of a Linear's or an Embedding's weight."""
    out, inp = module.weight.shape
    return int(out), int(inp)


def step_bytes_flops(model: Any, rows: int) -> tuple[int, int]:
    """Weight bytes one decode step reads and the FLOPs of its products for ROWS rows."""
    mats = weight_matrices(model)
    nbytes = sum(int(m.weight.nbytes) for m in mats)
    flops = sum(2 * rows * o * i for o, i in map(shape_of, mats))
    return nbytes, flops


def _apply(module: Any, x: Any) -> Any:
    return module.as_linear(x) if hasattr(module, "as_linear") else module(x)


def plain_attention(q: Any, k: Any, v: Any, scale: float) -> Any:
    """Softmax attention of one decode query per row (B, Hq, 1, D) over plain (B, Hkv, L, D)
    keys and values, in base 2 (``mx.power`` is ~3x cheaper than ``mx.exp`` on MLX's CPU)."""
    import mlx.core as mx

    b, hq, _, d = q.shape
    hkv = k.shape[1]
    scores = (q * (scale * LOG2E)).reshape(b, hkv, hq // hkv, d) @ k.swapaxes(-1, -2)
    probs = mx.power(2.0, scores - mx.max(scores, axis=-1, keepdims=True))
    out = (probs @ v) / mx.sum(probs, axis=-1, keepdims=True)
    return out.reshape(b, hq, 1, d)


def floor_step(model: Any, rows: int, context: int, attention: str = "") -> Any:
    """A function running one floor step: the weight products for ROWS, plus ATTENTION ("plain":
    ``plain_attention``, "sdpa": ``mx.fast.scaled_dot_product_attention``) per layer."""
    import mlx.core as mx

    dtype = model.model.embed_tokens.weight.dtype
    mats = weight_matrices(model)
    xs = [mx.random.normal((rows, shape_of(m)[1])).astype(dtype) for m in mats]
    args = model.args
    heads, kv_heads = args.num_attention_heads, args.num_key_value_heads
    dim = getattr(args, "head_dim", None) or args.hidden_size // heads
    layers = len(model.model.layers)
    q = mx.random.normal((rows, heads, 1, dim)).astype(dtype)
    kv = [(mx.random.normal((rows, kv_heads, context, dim)).astype(dtype),
           mx.random.normal((rows, kv_heads, context, dim)).astype(dtype)) for _ in range(layers)]
    mx.eval(xs, q, kv)

    def run() -> None:
        outs = [_apply(m, x) for m, x in zip(mats, xs, strict=True)]
        if attention:
            attend = plain_attention if attention == "plain" else mx.fast.scaled_dot_product_attention
            outs += [attend(q, k, v, scale=dim ** -0.5) for k, v in kv]
        mx.eval(outs)
    return run


def blas_floor(model: Any, rows: int) -> Any:
    """A function running the step's weight products straight in the loaded OpenBLAS, in step
    order (cache-cold, as in a step): ``cblas_sgemv`` per row at one row (MLX calls sgemm, which
    reads a skinny product's weights at about half gemv's rate here), else ``cblas_sgemm`` as
    W @ x^T (the faster orientation for these shapes). float32 models only."""
    import ctypes

    from worker.cpu.blas import find_openblas

    lib = ctypes.CDLL(find_openblas() or None)
    mats = [np.array(m.weight) for m in weight_matrices(model)]
    if any(w.dtype != np.float32 for w in mats):
        raise ValueError("the BLAS floor takes float32 weights")
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((rows, w.shape[1]), dtype=np.float32) for w in mats]
    ys = [np.empty((w.shape[0], rows), dtype=np.float32) for w in mats]
    one, zero, ptr = ctypes.c_float(1.0), ctypes.c_float(0.0), ctypes.c_void_p
    row_major, no_trans, trans = 101, 111, 112

    def run() -> list[np.ndarray]:
        for w, x, y in zip(mats, xs, ys, strict=True):
            out, inp = w.shape
            if rows == 1:
                lib.cblas_sgemv(row_major, no_trans, out, inp, one, ptr(w.ctypes.data), inp,
                                ptr(x.ctypes.data), 1, zero, ptr(y.ctypes.data), 1)
            else:
                lib.cblas_sgemm(row_major, no_trans, trans, out, rows, inp, one,
                                ptr(w.ctypes.data), inp, ptr(x.ctypes.data), inp, zero,
                                ptr(y.ctypes.data), rows)
        return ys
    return run


def model_step(model: Any, rows: int) -> Any:
    """A function running one greedy decode step of the mlx-lm model itself for ROWS rows over
    plain KV caches (after a 64-token prompt each): the model code every MLX server runs, without
    paging, batching machinery, scheduling or logsumexp."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    prompt = mx.array(np.random.default_rng(0).integers(3, model.args.vocab_size, (rows, PROMPT)))
    logits = model(prompt, cache=cache)
    token = [mx.argmax(logits[:, -1], axis=-1)]
    mx.eval(token)

    def run() -> None:
        token[0] = mx.argmax(model(token[0][:, None], cache=cache)[:, -1], axis=-1)
        mx.eval(token[0])
    return run


def timed(run: Any, steps: int) -> dict[str, float]:
    """Wall and CPU ms per call of RUN over STEPS calls, after two warm-up calls."""
    run()
    run()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        run()
    return {"wall": (time.perf_counter() - t0) / steps * 1e3,
            "cpu": (time.process_time() - c0) / steps * 1e3}


def machine(repeats: int = 5) -> dict[str, float]:
    """One thread's memcpy GB/s (read + write), float32 sum read GB/s, sgemm GFLOP/s, and the
    wall microseconds per op of a chain of tiny adds (building + dispatch + compute)."""
    import mlx.core as mx

    src = np.random.default_rng(0).standard_normal(64 << 20, dtype=np.float32)  # 256 MiB
    dst = np.empty_like(src)
    copy, read, gemm, ops = [], [], [], []
    a = mx.random.normal((1024, 1024))
    b = mx.random.normal((1024, 1024))
    mx.eval(a, b)
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        copy.append(2 * src.nbytes / (time.perf_counter() - t0) / 1e9)
        t0 = time.perf_counter()
        src.sum()
        read.append(src.nbytes / (time.perf_counter() - t0) / 1e9)
        t0 = time.perf_counter()
        mx.eval(a @ b)
        gemm.append(2 * 1024 ** 3 / (time.perf_counter() - t0) / 1e9)
        x, t0 = mx.zeros((1,)), time.perf_counter()
        for _ in range(CHAIN):
            x = x + 1
        mx.eval(x)
        ops.append((time.perf_counter() - t0) / CHAIN * 1e6)
    return {"copy_gbs": statistics.median(copy), "read_gbs": statistics.median(read),
            "gflops": statistics.median(gemm), "op_us": statistics.median(ops)}


def verdict(peer_ms: float, floor_ms: float, bar: float) -> dict[str, Any]:
    """The most any server could beat PEER_MS by if its step cost FLOOR_MS, and whether BAR fits."""
    most = peer_ms / floor_ms
    return {"bar": bar, "most": most, "reachable": most >= bar}


def run_side(side: str, model: Any, tok: Any, rows: int, context: int, steps: int
             ) -> dict[str, float]:
    """Wall and CPU ms per step of one side (a floor, or a real decode loop) at ROWS rows."""
    if side == "blas":
        try:
            return timed(blas_floor(model, rows), steps)
        except ValueError:  # not float32: no OpenBLAS kernel for it, the MLX floor stands
            return {"wall": float("inf"), "cpu": float("inf")}
    if side == "model code":
        return timed(model_step(model, rows), steps)
    if side in FLOORS:
        return timed(floor_step(model, rows, context, FLOORS[side]), steps)
    if side == "mlx-lm":
        return theirs(model, rows, steps, False)
    return ours(model, tok, rows, {"ours fp": "none", "ours k8v4": "k8v4"}[side], steps, False)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every (model, rows) cell: the floors and the three real steps, in turns, medians."""
    from worker.cpu.blas import apply_blas_policy, get_blas_threads

    context = PROMPT + WARM + args.steps // 2  # the decode loops' mean context length
    cells = []
    for name in args.models.split(","):
        model, tok = load(name)
        apply_blas_policy(model)
        for rows in map(int, args.rows.split(",")):
            runs: dict[str, list[dict[str, float]]] = {}
            for _ in range(args.repeats):
                for side in SIDES:
                    runs.setdefault(side, []).append(
                        run_side(side, model, tok, rows, context, args.steps))
            nbytes, flops = step_bytes_flops(model, rows)
            cells.append({"model": name, "rows": rows, "context": context, "weight_bytes": nbytes,
                          "flops": flops, **{side: {k: statistics.median(r[k] for r in rs)
                                                    for k in ("wall", "cpu")}
                                             for side, rs in runs.items()}})
            print(json.dumps(cells[-1]), flush=True)
    return {"machine": machine(), "blas_threads": get_blas_threads(), "cells": cells}


def roof_ms(cell: dict[str, Any], mach: dict[str, float]) -> float:
    """The textbook roofline of a cell's weight products: max(bytes / read rate, FLOPs / GFLOP/s)."""
    return max(float(cell["weight_bytes"]) / mach["read_gbs"] / 1e6,
               float(cell["flops"]) / mach["gflops"] / 1e6)


def floors(cell: dict[str, Any], key: str) -> tuple[float, float]:
    """(MLX floor, machine floor) of a cell in KEY (wall or cpu): ``+attention``, and the same
    with its weight products at the cheaper of MLX's and OpenBLAS's (``blas``) cost."""
    mlx = float(cell["+attention"][key])
    return mlx, mlx - cell["matmuls"][key] + min(cell["matmuls"][key], cell["blas"][key])


def above(step_ms: float, floor_ms: float) -> float:
    """The fraction of a step above the floor (0 when the step is at or under it)."""
    return max(step_ms - floor_ms, 0.0) / step_ms


def report(result: dict[str, Any]) -> str:
    """Markdown: per-step wall / CPU ms, the fraction above the floor, bandwidth use, verdicts."""
    m = result["machine"]
    lines = [f"Machine, one thread: memcpy {m['copy_gbs']:.1f} GB/s (read + write), float32 sum "
             f"{m['read_gbs']:.1f} GB/s read, sgemm 1024^3 {m['gflops']:.1f} GFLOP/s, "
             f"{m['op_us']:.1f} us per tiny op; OpenBLAS threads {result['blas_threads']}.", "",
             "ms per step, wall / CPU:", "",
             "| model | rows | roof | " + " | ".join(SIDES) + " | above floor (cpu): "
             + " / ".join(REAL) + " | weight GB/s: matmuls / mlx-lm (cpu) |",
             "|" + "---|" * (5 + len(SIDES))]
    for c in result["cells"]:
        floor = c["+attention"]["cpu"]
        gbs = [c["weight_bytes"] / c[s]["cpu"] / 1e6 for s in ("matmuls", "mlx-lm")]
        lines.append(
            f"| {c['model']} | {c['rows']} | {roof_ms(c, m):.2f} | "
            + " | ".join(f"{c[s]['wall']:.2f} / {c[s]['cpu']:.2f}" if s in c else "-"
                         for s in SIDES) + " | "
            + " / ".join(f"{above(c[s]['cpu'], floor):.0%}" if s in c else "-" for s in REAL)
            + f" | {gbs[0]:.1f} / {gbs[1]:.1f} |")
    lines += ["", "Bars: the most any server's step could beat mlx-lm's by (mlx-lm / floor), "
              "wall (CPU); MLX floor = `+attention`, machine floor = the same with the weight "
              "products at `blas` cost where that is cheaper:", "",
              "| model | rows | bar | mlx-lm / MLX floor | mlx-lm / machine floor | "
              "reachable in principle (MLX / machine) | mlx-lm / ours k8v4 now | ours k8v4 / fp |",
              "|---|---|---|---|---|---|---|---|"]
    for c in result["cells"]:
        bar = BARS.get(c["rows"], DEFAULT_BAR)
        most = {k: [verdict(c["mlx-lm"][k], f, bar) for f in floors(c, k)] for k in ("wall", "cpu")}
        ok = [_yes(most["wall"][i]["reachable"], most["cpu"][i]["reachable"]) for i in (0, 1)]
        now = [c["mlx-lm"][k] / c["ours k8v4"][k] for k in ("wall", "cpu")]
        kv = [c["ours k8v4"][k] / c["ours fp"][k] for k in ("wall", "cpu")]
        lines.append(
            f"| {c['model']} | {c['rows']} | {bar}x | "
            + " | ".join(f"{most['wall'][i]['most']:.2f}x ({most['cpu'][i]['most']:.2f}x)"
                         for i in (0, 1))
            + f" | {ok[0]} / {ok[1]} | {now[0]:.2f}x ({now[1]:.2f}x) | {kv[0]:.2f} ({kv[1]:.2f}) |")
    return "\n".join(lines)


def _yes(wall: bool, cpu: bool) -> str:
    return "yes" if wall and cpu else "no" if not (wall or cpu) else "borderline"


def main() -> None:
    """Parse the options, measure, print the tables (or the JSON with --json)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="stories260K,qwen3")
    p.add_argument("--rows", default="1,8,32")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.add_argument("--from-json", default="", help="print the tables of a saved --json run")
    args = p.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            result = json.loads(f.read().strip().splitlines()[-1])
    else:
        result = measure(args)
    print(json.dumps(result) if args.json else report(result))


if __name__ == "__main__":
    main()
