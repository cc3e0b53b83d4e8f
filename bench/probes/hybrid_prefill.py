"""Prefill and decode tokens/s of a hybrid (Gated DeltaNet) model through the engine, in-process.

    .venv/bin/python -m bench.probes.hybrid_prefill [--model DIR] [--prompt-tokens 512]
        [--rows 1] [--decode 64] [--rounds 3] [--gdn both|sequential|chunked] [--profile]

Default model: the Qwen3.5 bench model (``bench.build_qwen3_5_model``, built when missing).
Per round and per Gated DeltaNet path (mlx-lm's sequential ``gated_delta_ops`` or the chunked
form, worker/engine/gated_delta.py), in turns: ROWS prompts of PROMPT_TOKENS random tokens are
prefilled (one engine step each chunk of 512) with ``max_tokens`` 1, then the same prompts again
with ``max_tokens`` DECODE+1 on a fresh engine; prefill tok/s = prompt tokens / prefill wall,
decode tok/s = DECODE x ROWS / (second run's wall - first run's wall); the same per CPU
second of the process (all threads). ``--profile`` prints the
time split of one prefill: building the graph vs evaluating it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from protocol.messages import SamplingParams
from worker.engine import gated_delta
from worker.engine.attention import install
from worker.engine.core import Engine, model_dtype
from worker.kv.setup import plan_kv


def make_engine(model: Any, tok: Any, context: int) -> Engine:
    """An engine over a fresh full-precision paged pool (as tests/worker/engine make_engine)."""
    install()
    plan = plan_kv(model, model_dtype(model), kind="none", memory="512MiB", page_size=16,
                   group_size=32, max_batch=32, context_length=context)
    return Engine(model, tok, plan.store, context_length=context, prefix_cache=False)


def run(model: Any, tok: Any, prompts: list[list[int]], max_tokens: int) -> tuple[float, float]:
    """(wall, CPU) seconds to finish every prompt with MAX_TOKENS greedy tokens on a fresh
    engine (CPU: every thread of this process, steadier than wall on a shared machine)."""
    engine = make_engine(model, tok, max(len(p) for p in prompts) + max_tokens + 16)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    t0, c0 = time.perf_counter(), time.process_time()
    for i, ids in enumerate(prompts):
        engine.add(str(i), ids, params)
    while engine.has_work:
        engine.step()
    return time.perf_counter() - t0, time.process_time() - c0


def profile(model: Any, prompt: list[int]) -> tuple[float, float]:
    """(graph build seconds, evaluation seconds) of one plain mlx-lm forward over PROMPT."""
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    t0 = time.perf_counter()
    with gated_delta.running():
        out = model(mx.array([prompt]), cache=cache)
    t1 = time.perf_counter()
    mx.eval(out, [c.state for c in cache])
    return t1 - t0, time.perf_counter() - t1


def main(argv: list[str] | None = None) -> int:
    """Print prefill and decode tok/s per Gated DeltaNet path, medians over rounds."""
    from mlx_lm import load

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gdn", default="both", choices=("both", "sequential", "chunked"))
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args(argv)
    if not a.model:
        from bench.build_qwen3_5_model import build

        a.model = str(build(quiet=True))
    model, tok = load(a.model)[:2]
    rng = np.random.default_rng(0)
    vocab = int(model.args.text_config["vocab_size"]) if hasattr(model.args, "text_config") else 1000
    prompts = [rng.integers(10, vocab, a.prompt_tokens).tolist() for _ in range(a.rows)]
    paths = ["sequential", "chunked"] if a.gdn == "both" else [a.gdn]
    keys = ("prefill", "decode", "prefill_cpu", "decode_cpu")
    res: dict[str, dict[str, list[float]]] = {p: {k: [] for k in keys} for p in paths}
    run(model, tok, prompts, 2)  # warm up
    for r in range(a.rounds):
        for p in paths if r % 2 == 0 else paths[::-1]:
            gated_delta.ENABLED = p == "chunked"
            pre = run(model, tok, prompts, 1)
            both = run(model, tok, prompts, a.decode + 1)
            for i, suffix in enumerate(("", "_cpu")):
                res[p]["prefill" + suffix].append(a.rows * a.prompt_tokens / pre[i])
                res[p]["decode" + suffix].append(a.rows * a.decode / max(both[i] - pre[i], 1e-9))
            print(f"round {r} {p:<10} " + "  ".join(
                f"{k} {res[p][k][-1]:8.1f}" for k in keys) + " tok/s", flush=True)
        if a.profile and r == 0:
            for p in paths:
                gated_delta.ENABLED = p == "chunked"
                graph, ev = profile(model, prompts[0])
                print(f"  profile {p}: graph build {graph * 1000:.0f} ms, eval {ev * 1000:.0f} ms")
    print(f"\n{Path(a.model).name}, {a.rows} row(s) x {a.prompt_tokens} prompt tokens, "
          f"medians of {a.rounds}")
    print("| path | prefill tok/s | decode tok/s | prefill tok per CPU s | decode tok per CPU s |")
    print("|---|---:|---:|---:|---:|")
    for p in paths:
        print(f"| {p} | " + " | ".join(f"{statistics.median(res[p][k]):.0f}" for k in keys) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
