"""What a compiled decode step's new shape key costs: its first call against repeat calls.

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.compile_cost \\
        [--models stories260K,demo,qwen3] [--rows 1,8] [--tokens 96]

ROWS requests (full-precision pages) decode greedily to TOKENS tokens with the compiled step on
(--compile-decode on). Each ``CompiledDecode`` call is timed to its evaluated logits: calls that
traced a new function (a new row count or key-page bucket) against calls that reused one, and
the plain step for the same batch. Prints ms medians per kind, and how many new keys came.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import mlx.core as mx
import numpy as np


def measure(name: str, rows: int, tokens: int, mode: str) -> dict[str, list[float]]:
    """ms of each decode call while ROWS requests decode TOKENS tokens under MODE."""
    import worker.engine.compiled_decode as cd
    from bench.profile_decode import load
    from protocol.messages import SamplingParams
    from worker.engine.attention import install
    from worker.engine.core import Engine, model_dtype
    from worker.engine.forward import Forward
    from worker.kv.setup import plan_kv
    from worker.model.embedded import embedded_model_path

    model, tok = load(str(embedded_model_path()) if name == "demo" else name)
    install()
    plan = plan_kv(model, model_dtype(model), kind="none", memory="256MiB", page_size=16,
                   group_size=32, max_batch=32, context_length=1024)
    engine = Engine(model, tok, plan.store, context_length=1024, max_batch=32,
                    compile_decode=mode)
    times: dict[str, list[float]] = {"new": [], "reuse": [], "plain": []}
    orig_call, orig_build = cd.CompiledDecode.__call__, Forward._build

    def call(self: Any, tokens: mx.array, batch: Any) -> mx.array | None:
        mx.eval(self.store.arrays())
        before, t = len(self.fns), time.perf_counter()
        known = set(self.fns)
        out = orig_call(self, tokens, batch)
        mx.eval(out)
        ms = (time.perf_counter() - t) * 1e3
        times["new" if len(self.fns) > before or set(self.fns) != known else "reuse"].append(ms)
        return out

    def build(self: Any, tokens: mx.array, *a: Any, **k: Any) -> Any:
        mx.eval(self.store.arrays())
        t = time.perf_counter()
        out = orig_build(self, tokens, *a, **k)
        if out is not None:
            mx.eval(out)
        if tokens.shape[1] == 1:
            times["plain"].append((time.perf_counter() - t) * 1e3)
        return out

    cd.CompiledDecode.__call__, Forward._build = call, build  # type: ignore[method-assign]
    try:
        rng = np.random.default_rng(0)
        vocab = model.args.vocab_size
        params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
        for i in range(rows):
            engine.add(str(i), rng.integers(3, vocab, 24).tolist(), params)
        while engine.running or engine.waiting:
            engine.step()
    finally:
        cd.CompiledDecode.__call__, Forward._build = orig_call, orig_build  # type: ignore[method-assign]
    return times


def main() -> None:
    """Print one markdown row per (model, rows)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="stories260K,demo,qwen3")
    p.add_argument("--rows", default="1,8")
    p.add_argument("--tokens", type=int, default=96)
    args = p.parse_args()
    print("| model | rows | new keys | first call of a new key ms | reused key ms | plain step ms |")
    print("|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for rows in map(int, args.rows.split(",")):
            plain = measure(name, rows, args.tokens, "off")["plain"]
            t = measure(name, rows, args.tokens, "on")

            def med(x: list[float]) -> str:
                return f"{statistics.median(x):.1f}" if x else "-"

            news = ", ".join(f"{x:.0f}" for x in t["new"])
            print(f"| {name} | {rows} | {len(t['new'])} | {news} | {med(t['reuse'])} | "
                  f"{med(plain)} |", flush=True)


if __name__ == "__main__":
    main()
