"""Decode step cost in-process: our Engine.step against mlx-lm's BatchGenerator, wall and CPU.

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.peers.decode_step \\
        [--models stories260K,qwen3] [--rows 1,8,32] [--kv none,k8v4] [--steps 48] [--repeats 3]
    ... --threads 1,2,default   # one child process per OPENBLAS_NUM_THREADS value
    ... --against ../base       # the same in a checkout of the code before (copy this file in)
    ... --stagger               # prompts of 48..63 tokens: rows fill pages on different steps

OpenBLAS gets the worker's thread count (`worker.cpu.blas` policy: one thread for these models)
unless OPENBLAS_NUM_THREADS is set. Both sides decode greedily, ignoring EOS, from distinct
64-token random prompts, after warm-up (every row decoding). "wall" is ms per step of the real
loop (ours overlapped, mlx-lm's BatchGenerator with its async_eval pipelining), "cpu" the
process's CPU ms per step (every thread), medians over the repeats, sides taken in turns. Only
public entry points are timed (Engine.add/step, BatchGenerator.insert/next): no internals are
wrapped, so the numbers are those of the unmodified loops.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

PROMPT = 64
WARM = 8


def load(name: str) -> tuple[Any, Any]:
    """stories260K (the shared tiny Llama) or qwen3 (bench.build_qwen3_model's model)."""
    from mlx_lm import load as mlx_load

    if name == "qwen3":
        from bench.build_qwen3_model import DEFAULT_OUT, build

        path = str(build(DEFAULT_OUT, quiet=True))
    else:
        path = f"/work/shared/models/{name}" if "/" not in name else name
    model, tok = mlx_load(path)[:2]
    return model, tok


STAGGER = False  # --stagger: prompts of 48..63 tokens, so rows fill pages on different steps


def _prompts(vocab: int, rows: int) -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [rng.integers(3, vocab, PROMPT - (i % 16 if STAGGER else 0)).tolist()
            for i in range(rows)]


def ours(model: Any, tok: Any, rows: int, kind: str, steps: int) -> dict[str, float]:
    """Wall and CPU ms per Engine.step while ROWS requests decode (KV format KIND)."""
    import worker.engine.core as eng
    from protocol.messages import SamplingParams
    from worker.engine.attention import install
    from worker.kv.setup import plan_kv

    install()
    plan = plan_kv(model, eng.model_dtype(model), kind=kind.removesuffix("-quantized"),
                   memory="512MiB", page_size=16, group_size=32, max_batch=32,
                   context_length=1024, working_set=not kind.endswith("-quantized"))
    engine = eng.Engine(model, tok, plan.store, context_length=1024, max_batch=32)
    params = SamplingParams(max_tokens=WARM + steps + 16, temperature=0.0, ignore_eos=True)
    for i, ids in enumerate(_prompts(model.args.vocab_size, rows)):
        engine.add(str(i), ids, params)
    while engine.waiting or any(r.prefilling for r in engine.running):
        engine.step()
    for _ in range(WARM):
        engine.step()
    return _timed(engine.step, steps)


def theirs(model: Any, rows: int, steps: int) -> dict[str, float]:
    """Wall and CPU ms per mlx-lm BatchGenerator.next() while ROWS requests decode."""
    from mlx_lm.generate import BatchGenerator
    from mlx_lm.sample_utils import make_sampler

    gen: Any = BatchGenerator(model, max_tokens=WARM + steps + 16, sampler=make_sampler(temp=0.0),
                              completion_batch_size=32, prefill_batch_size=8)
    gen.insert(_prompts(model.args.vocab_size, rows))
    while len(gen._generation_batch) < rows:  # mlx-lm's own state: every row decoding
        gen.next()
    for _ in range(WARM):
        gen.next()
    out = _timed(gen.next, steps)
    gen.close()
    return out


def _timed(step: Callable[[], Any], steps: int) -> dict[str, float]:
    import time

    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    return {"wall": (time.perf_counter() - t0) / steps * 1e3,
            "cpu": (time.process_time() - c0) / steps * 1e3}  # every thread of the process


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (model, kv, rows) cell: wall and CPU medians over the repeats, sides in turns."""
    from worker.cpu.blas import apply_blas_policy

    results = []
    for name in args.models.split(","):
        model, tok = load(name)
        apply_blas_policy(model)  # the worker's OpenBLAS threads (one here), unless env says
        for rows in map(int, args.rows.split(",")):
            cells: dict[str, list[dict[str, float]]] = {}
            for _ in range(args.repeats):
                for kind in args.kv.split(","):
                    cells.setdefault(f"ours {kind}", []).append(
                        ours(model, tok, rows, kind, args.steps))
                if not args.no_peer:
                    cells.setdefault("mlx-lm", []).append(theirs(model, rows, args.steps))
            for side, runs in cells.items():
                results.append({"model": name, "rows": rows, "side": side,
                                "wall": statistics.median(r["wall"] for r in runs),
                                "cpu": statistics.median(r["cpu"] for r in runs)})
    return results


def table(results: list[dict[str, Any]]) -> str:
    """Markdown: wall and CPU ms/step and the speed ratio to mlx-lm (above 1: ours faster)."""
    lines = ["| model | rows | side | wall ms/step | cpu ms/step | vs mlx-lm |", "|---" * 6 + "|"]
    ref = {(r["model"], r["rows"]): r["wall"] for r in results if r["side"] == "mlx-lm"}
    for r in results:
        base = ref.get((r["model"], r["rows"]))
        ratio = f"{base / r['wall']:.2f}x" if base else "-"
        lines.append(f"| {r['model']} | {r['rows']} | {r['side']} | {r['wall']:.2f} | "
                     f"{r['cpu']:.2f} | {ratio} |")
    return "\n".join(lines)


def variants(args: argparse.Namespace) -> None:
    """Wall and CPU ms/step of child runs, one per variant, in turns (--threads or --against)."""
    from worker.cpu.blas import find_openblas

    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    base["LD_PRELOAD"] = find_openblas() or ""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    plan: list[tuple[str, str, dict[str, str]]] = []
    for value in filter(None, args.threads.split(",")):
        # "default": OpenBLAS's own choice (one thread per core), set explicitly so the child
        # does not apply the worker's policy (one thread on a small model)
        n = str(os.cpu_count() or 1) if value == "default" else value
        env = dict(base, OPENBLAS_NUM_THREADS=n)
        plan.append((f"threads={value}", here, env))
    if args.against:  # with --threads N: both sides with that many OpenBLAS threads
        env = plan[0][2] if plan else base
        plan = [("before", args.against, env), ("after", here, env)]
    runs: dict[str, list[list[dict[str, Any]]]] = {}
    for _ in range(args.repeats):
        for label, cwd, env in plan:
            cmd = [sys.executable, "-m", "bench.peers.decode_step", "--json",
                   "--repeats", "1", "--models", args.models, "--rows", args.rows,
                   "--kv", args.kv, "--steps", str(args.steps)] + (
                       ["--no-peer"] if args.no_peer else []) + (
                       ["--stagger"] if args.stagger else [])
            out = subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True,
                                 text=True).stdout
            runs.setdefault(label, []).append(json.loads(out.strip().splitlines()[-1]))
    print("| model | rows | side | " + " | ".join(f"{v}: wall / cpu ms/step" for v in runs) + " |")
    print("|" + "---|" * (3 + len(runs)))
    first = next(iter(runs.values()))[0]
    for i, cell in enumerate(first):
        medians = [(statistics.median(rep[i]["wall"] for rep in reps),
                    statistics.median(rep[i]["cpu"] for rep in reps)) for reps in runs.values()]
        print(f"| {cell['model']} | {cell['rows']} | {cell['side']} | "
              + " | ".join(f"{w:.2f} / {c:.2f}" for w, c in medians) + " |")
    if "none" not in args.kv.split(",") or "k8v4" not in args.kv.split(","):
        return  # the K8V4 cost needs both formats in the run
    print("\nK8V4 cost (median over rounds of the same-run ratio ours k8v4 / ours none, wall):")
    for label, reps in runs.items():
        ratios = {}
        for i, cell in enumerate(first):
            if cell["side"].startswith("ours k8v4"):
                none = next(j for j, c in enumerate(first) if c["side"] == "ours none"
                            and (c["model"], c["rows"]) == (cell["model"], cell["rows"]))
                ratios[f"{cell['model']}/{cell['rows']}{cell['side'][9:]}"] = statistics.median(
                    rep[i]["wall"] / rep[none]["wall"] for rep in reps)
        print(f"- {label}: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()))


def main() -> None:
    """Parse the options and print the tables."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="stories260K,qwen3")
    p.add_argument("--rows", default="1,8,32")
    p.add_argument("--kv", default="none,k8v4", help="our KV formats (k8v4 falls back on hd 8; "
                   "k8v4-quantized: without float page copies)")
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-peer", action="store_true", help="skip mlx-lm")
    p.add_argument("--threads", default="", help="e.g. 1,2,default: compare OpenBLAS threads")
    p.add_argument("--against", default="", help="a checkout to compare with (before/after)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--stagger", action="store_true",
                   help="prompts of 48..63 tokens: rows fill pages on different steps, as served "
                        "rows do (equal prompts fill them all on the same step)")
    args = p.parse_args()
    global STAGGER
    STAGGER = args.stagger
    if args.threads or args.against:
        variants(args)
        return
    results = measure(args)
    print(json.dumps(results) if args.json else table(results))


if __name__ == "__main__":
    main()
