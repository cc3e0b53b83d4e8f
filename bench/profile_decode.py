"""Where a decode step's time goes: our Engine.step against mlx-lm's generate loop, in-process.

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.profile_decode \\
        [--models stories260K,qwen3] [--rows 1,8,32] [--kv none,k8v4] [--steps 48] [--repeats 3]
    ... --threads 1,2,default   # one child process per OPENBLAS_NUM_THREADS value, wall only
    ... --against ../base       # the same in a checkout of the code before (copy these files in)
    ... --stagger               # prompts of 48..63 tokens: rows fill pages on different steps

OpenBLAS gets the worker's thread count (`worker.cpu.blas` policy: one thread for these models)
unless OPENBLAS_NUM_THREADS is set. Both sides decode greedily, ignoring EOS, from distinct 64-token random prompts, after warm-up
(every row decoding). "wall" is ms per step of the real loop (ours overlapped, mlx-lm's
BatchGenerator with its async_eval pipelining), median over the repeats, taken in turns; its
"wall:" columns split it into graph building, page tables, "sync" (the host blocked in
mx.eval/mx.async_eval: MLX throttles async_eval, so most compute shows here) and the rest of the
Python step ("scheduling"). The "split:" columns (bench/decode_spans.py) put eval barriers
between categories to charge compute to model / KV update+gather / attention / sampling; they
remove the overlap of host and compute, so their sum exceeds wall.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

import numpy as np

from bench.decode_spans import COLUMNS, Spans, instrument, timed_sampler

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


def ours(model: Any, tok: Any, rows: int, kind: str, steps: int, split: bool) -> dict[str, float]:
    """ms/step of Engine.step while ROWS requests decode (split: per category)."""
    import mlx.core as mx

    import worker.engine.core as eng
    from protocol.messages import SamplingParams
    from worker.engine.attention import install
    from worker.engine.forward import Forward
    from worker.kv.paged_batch import PagedBatch, PagedView
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
    spans = Spans()
    module: Any = eng  # its sample (imported from worker.engine.sampling) is patched where it is called
    originals = (eng.Engine.step, Forward._build, PagedBatch.__init__, module.sample,
                 eng.Engine._deliver)

    def step(self: Any) -> Any:
        with spans.span("scheduling"):
            return originals[0](self)

    def build(self: Any, *a: Any, **k: Any) -> Any:
        with spans.span("build"):
            return originals[1](self, *a, **k)

    def tables(self: Any, *a: Any, **k: Any) -> None:
        with spans.span("tables"):
            originals[2](self, *a, **k)

    def sample(logits: mx.array, samplers: Any) -> Any:
        return timed_sampler(spans, lambda x: originals[3](x, samplers), split)(logits)

    def deliver(self: Any, batch: Any) -> Any:
        with spans.span("sync"):
            mx.eval(batch.tokens)
        return originals[4](self, batch)

    eng.Engine.step, Forward._build, PagedBatch.__init__ = step, build, tables  # type: ignore[method-assign]
    module.sample, eng.Engine._deliver = sample, deliver  # type: ignore[method-assign]
    try:
        with instrument(spans, model, [PagedView], split):
            return _timed(spans, lambda: engine.step(), steps)
    finally:
        eng.Engine.step, Forward._build, PagedBatch.__init__ = originals[:3]  # type: ignore[method-assign]
        module.sample, eng.Engine._deliver = originals[3:]  # type: ignore[method-assign]


class _Proxy:
    """The model, with its calls timed as graph building."""

    def __init__(self, model: Any, spans: Spans) -> None:
        self._model, self._spans = model, spans

    def __call__(self, *a: Any, **k: Any) -> Any:
        with self._spans.span("build"):
            return self._model(*a, **k)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def theirs(model: Any, rows: int, steps: int, split: bool) -> dict[str, float]:
    """ms/step of mlx-lm's BatchGenerator.next() while ROWS requests decode."""
    from mlx_lm.generate import BatchGenerator
    from mlx_lm.models.cache import BatchKVCache
    from mlx_lm.sample_utils import make_sampler

    spans = Spans()
    gen: Any = BatchGenerator(_Proxy(model, spans), max_tokens=WARM + steps + 16,
                         sampler=timed_sampler(spans, make_sampler(temp=0.0), split),
                         completion_batch_size=32, prefill_batch_size=8)
    gen.insert(_prompts(model.args.vocab_size, rows))
    while len(gen._generation_batch) < rows:
        gen.next()
    for _ in range(WARM):
        gen.next()

    def step() -> Any:
        with spans.span("scheduling"):
            return gen.next()

    with instrument(spans, model, [BatchKVCache], split):
        out = _timed(spans, step, steps)
    gen.close()
    return out


def _timed(spans: Spans, step: Any, steps: int) -> dict[str, float]:
    import time

    spans.reset()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    out = {k: v / steps * 1e3 for k, v in spans.seconds.items()}
    out["wall"] = (time.perf_counter() - t0) / steps * 1e3
    out["cpu"] = (time.process_time() - c0) / steps * 1e3  # every thread of the process
    return out


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (model, kv, rows) cell: wall medians in turns, then one split run per side."""
    from worker.cpu.blas import apply_blas_policy

    results = []
    for name in args.models.split(","):
        model, tok = load(name)
        apply_blas_policy(model)  # the worker's OpenBLAS threads (one here), unless env says
        for rows in map(int, args.rows.split(",")):
            cells: dict[str, list[dict[str, float]]] = {}
            kinds = args.kv.split(",")
            for _ in range(args.repeats):
                for kind in kinds:
                    cells.setdefault(f"ours {kind}", []).append(
                        ours(model, tok, rows, kind, args.steps, False))
                if not args.no_peer:
                    cells.setdefault("mlx-lm", []).append(theirs(model, rows, args.steps, False))
            for side, runs in cells.items():
                row = {"model": name, "rows": rows, "side": side,
                       "wall": statistics.median(r["wall"] for r in runs),
                       "cpu": statistics.median(r["cpu"] for r in runs),
                       "host": {c: statistics.median(r.get(c, 0.0) for r in runs)
                                for c in ("build", "tables", "sync", "scheduling")}}
                if not args.wall_only:
                    kind = side.split()[-1]
                    row["split"] = (theirs(model, rows, args.steps, True) if side == "mlx-lm"
                                    else ours(model, tok, rows, kind, args.steps, True))
                results.append(row)
    return results


def table(results: list[dict[str, Any]]) -> str:
    """Markdown: wall ms/step and its host split, ratio to mlx-lm, and the barrier split."""
    host = ("build", "tables", "sync", "scheduling")
    lines = ["| model | rows | side | wall ms/step | cpu ms/step | vs mlx-lm | "
             + " | ".join(f"wall: {c}" for c in host) + " | "
             + " | ".join(f"split: {c}" for c in COLUMNS) + " |",
             "|" + "---|" * (6 + len(host) + len(COLUMNS))]
    ref = {(r["model"], r["rows"]): r["wall"] for r in results if r["side"] == "mlx-lm"}
    for r in results:
        split = r.get("split", {})
        cols = " | ".join(f"{split[c]:.2f}" if c in split else "-" for c in COLUMNS)
        walls = " | ".join(f"{r['host'][c]:.2f}" if r["host"][c] else "-" for c in host)
        base = ref.get((r["model"], r["rows"]))
        ratio = f"{base / r['wall']:.2f}x" if base else "-"
        lines.append(f"| {r['model']} | {r['rows']} | {r['side']} | {r['wall']:.2f} | "
                     f"{r['cpu']:.2f} | {ratio} | "
                     f"{walls} | {cols} |")
    return "\n".join(lines)


def variants(args: argparse.Namespace) -> None:
    """Wall and CPU ms/step of child runs, one per variant, in turns (--threads or --against)."""
    from worker.cpu.blas import find_openblas

    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    base["LD_PRELOAD"] = find_openblas() or ""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
            cmd = [sys.executable, "-m", "bench.profile_decode", "--json", "--wall-only",
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
    p.add_argument("--wall-only", action="store_true")
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
