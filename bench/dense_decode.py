"""Decode steps with the dense decode cache (worker/kv/dense.py) against the page gather, in turns.

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.dense_decode \\
        [--models stories260K,qwen3] [--rows 1,8,32] [--kv k8v4] [--steps 48] [--repeats 3]

One process, one model at a time; per round, in turns: ``gather`` (the dense cache off: the
page gather every step, as before), ``dense`` (on), ``refill`` (on, but every row refilled from
the pages every step: what a membership change costs, at worst), optionally ``dense-plain``
(on, no compiled step: ``RAPID_MLX_COMPILE_DECODE_MAX_ROWS=0``) and mlx-lm's BatchGenerator;
``NAME@ROWS`` runs variant NAME with compiled steps up to ROWS rows.
ms per step (wall / CPU of the process) of ``bench.profile_decode``'s loops, medians over the
rounds, and the median of the same-round ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from typing import Any

from bench.profile_decode import load, ours, theirs


def _variant(name: str) -> Callable[[], None]:
    """Set the dense cache up for variant NAME; returns the undo."""
    import worker.engine.compile_mode as cm
    import worker.kv.dense as kd
    import worker.kv.paged_batch as pb

    planner = pb.plan_dense  # type: ignore[attr-defined]
    saved = (kd.ENABLED, planner, os.environ.get(cm.ROWS_ENV), kd.MIN_ROWS)
    name, _, rows = name.partition("@")  # NAME@ROWS: compiled steps up to ROWS rows
    if rows:
        os.environ[cm.ROWS_ENV] = rows
    kd.ENABLED = name != "gather"
    kd.MIN_ROWS = 1  # every batch size on the cache (serving uses it from kd.MIN_ROWS rows)
    if name == "refill":
        def every_row(cache: Any, *a: Any, **k: Any) -> Any:
            cache.reset()
            return saved[1](cache, *a, **k)

        pb.plan_dense = every_row  # type: ignore[attr-defined]
    if name == "dense-plain":
        os.environ[cm.ROWS_ENV] = "0"

    def undo() -> None:
        kd.ENABLED, kd.MIN_ROWS = saved[0], saved[3]
        pb.plan_dense = saved[1]  # type: ignore[attr-defined]
        if saved[2] is None:
            os.environ.pop(cm.ROWS_ENV, None)
        else:
            os.environ[cm.ROWS_ENV] = saved[2]

    return undo


def churn(model: Any, tok: Any, rows: int, kind: str, tokens: int) -> dict[str, float]:
    """ms per generated token (wall / CPU) while ROWS requests of 128 tokens run, each finished
    one replaced at once by a new one (prompts of 16-112 random tokens): rows join and leave."""
    import time

    import numpy as np

    import worker.engine.core as eng
    from protocol.messages import SamplingParams
    from worker.engine.attention import install
    from worker.kv.setup import plan_kv

    install()
    plan = plan_kv(model, eng.model_dtype(model), kind=kind, memory="512MiB", page_size=16,
                   group_size=32, max_batch=32, context_length=1024, working_set=True)
    engine = eng.Engine(model, tok, plan.store, context_length=1024, max_batch=32)
    rng = np.random.default_rng(1)
    params = SamplingParams(max_tokens=128, temperature=0.0, ignore_eos=True)
    added = 0

    def add() -> None:
        nonlocal added
        ids = rng.integers(3, model.args.vocab_size, int(rng.integers(16, 113))).tolist()
        engine.add(str(added), ids, params)
        added += 1

    for _ in range(rows):
        add()
    for _ in range(64):  # warm-up: the first requests prefill and decode a little
        engine.step()
    made = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while made < tokens:
        for out in engine.step():
            made += len(out.token_ids)
            if out.finish_reason is not None:
                add()
    return {"wall": (time.perf_counter() - t0) / made * 1e3,
            "cpu": (time.process_time() - c0) / made * 1e3}


def _ratio(runs: dict[str, list[dict[str, float]]], a: str, b: str) -> str:
    """Median of the same-round ratios A / B, wall / CPU."""
    if a not in runs or b not in runs:
        return "-"
    return " / ".join(f"{statistics.median(x[c] / y[c] for x, y in zip(runs[a], runs[b], strict=True)):.2f}"
                      for c in ("wall", "cpu"))


def main() -> None:
    """Parse the options, run the rounds, print the table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="stories260K,qwen3")
    p.add_argument("--rows", default="1,8,32")
    p.add_argument("--kv", default="k8v4", help="none or k8v4 (k8v4 falls back on head dim 8)")
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--variants", default="gather,dense,refill,mlx-lm",
                   help="of gather, dense, refill, dense-plain, mlx-lm")
    p.add_argument("--churn", type=int, default=0,
                   help="instead: ms per token over this many tokens with rows joining/leaving")
    args = p.parse_args()
    names = args.variants.split(",")
    print("| model | rows | " + " | ".join(f"{n}: wall / cpu" for n in names)
          + " | dense / gather: wall / cpu | mlx-lm / dense: wall / cpu |")
    print("|" + "---|" * (4 + len(names)))
    for model_name in args.models.split(","):
        model, tok = load(model_name)
        for rows in map(int, args.rows.split(",")):
            runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
            for _ in range(args.repeats):
                for n in names:
                    if n == "mlx-lm":
                        runs[n].append(theirs(model, rows, args.steps, False))
                        continue
                    undo = _variant(n)
                    try:
                        runs[n].append(churn(model, tok, rows, args.kv, args.churn) if args.churn
                                       else ours(model, tok, rows, args.kv, args.steps, False))
                    finally:
                        undo()
            cells = " | ".join(
                f"{statistics.median(r['wall'] for r in runs[n]):.2f} / "
                f"{statistics.median(r['cpu'] for r in runs[n]):.2f}" for n in names)

            print(f"| {model_name} | {rows} | {cells} | {_ratio(runs, 'dense', 'gather')} | "
                  f"{_ratio(runs, 'mlx-lm', 'dense')} |", flush=True)


if __name__ == "__main__":
    main()
