"""A drafting worker's boot warm-up, cold and warm MLX kernel cache, and its first requests.

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.warmup_boot \\
        [--runs cold,warm,warm] [--cache DIR] [--pairs-upto 2,8]

Each run is a fresh process with ``TMPDIR`` set to a private folder (MLX caches its compiled
CPU kernels in ``$TMPDIR/mlx``): ``cold`` empties it first, ``warm`` reuses what the runs before
left (DIR, default a new temporary folder shared by this invocation's runs). A run builds the
server's engine for the demo model with its trained draft (K8V4, max batch 32, context 2048,
k = 4), times ``warm_up`` (its plain part and its drafting part, per key bucket), then three short chats one
after another and two at once, and prints per phase seconds and the compiled functions each
added (0 after the warm-up: nothing left to compile on the first requests). ``--pairs-upto``
runs each kind once per value of ``warmup.DRAFT_PAIRS_UPTO`` in turns (8: two rows at once in
every bucket, as before session 10).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

CHATS = ["tell me a story about a cat.", "What is the weather in Paris?", "Who are you?"]


def run(pairs_upto: int) -> dict[str, Any]:
    """One boot in this process: warm-up phases and chats, seconds and new functions each."""
    from mlx_lm import load

    import worker.serve.warmup as warmup
    from protocol.messages import SamplingParams
    from worker.engine.attention import install
    from worker.engine.core import Engine, model_dtype
    from worker.kv.setup import plan_kv
    from worker.model.embedded import embedded_model_path
    from worker.spec.controller import Speculator
    from worker.spec.draft_load import draft_drafter

    loaded: Any = load(str(embedded_model_path()))
    model, tok = loaded[:2]
    install()
    plan = plan_kv(model, model_dtype(model), kind="k8v4", memory="0.1", page_size=16,
                   group_size=32, max_batch=32, context_length=2048)
    spec = Speculator(draft_drafter("demo-draft", tok, max_batch=32, context_length=2048), 4)
    engine = Engine(model, tok, plan.store, context_length=2048, max_batch=32, spec=spec)
    phases: list[tuple[str, float, int]] = []
    if pairs_upto:
        warmup.DRAFT_PAIRS_UPTO = pairs_upto

    def functions() -> int:
        return sum(warmup.compiled_functions(engine).values())

    requests = warmup._requests

    def timed(eng: Any, tokens: int, buckets: tuple[int, ...] = (1, 2), *a: Any, **k: Any
              ) -> None:
        name = "plain" if tokens == warmup.TOKENS else "drafting"
        for b in buckets:  # one call per key bucket: the same requests, timed apart
            t0, n = time.perf_counter(), functions()
            requests(eng, tokens, (b,), *a, **k)
            phases.append((f"{name} {b}p", time.perf_counter() - t0, functions() - n))

    warmup._requests = timed  # type: ignore[assignment]
    total = warmup.warm_up(engine)
    warmup._requests = requests
    params = SamplingParams(max_tokens=40, temperature=0.0)

    def chat(texts: list[str], name: str) -> None:
        t0, n = time.perf_counter(), functions()
        for i, text in enumerate(texts):
            ids = tok.apply_chat_template([{"role": "user", "content": text}],
                                          add_generation_prompt=True)
            engine.add(f"{name}-{i}", ids, params)
        while engine.has_work:
            engine.step()
        phases.append((name, time.perf_counter() - t0, functions() - n))

    for i, text in enumerate(CHATS):
        chat([text], f"chat {i + 1}")
    chat(CHATS[:2], "two chats")
    return {"warm_up": total, "phases": phases, "functions": warmup.compiled_functions(engine)}


def main() -> None:
    """Runs in turns, each in a fresh process; one table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", default="cold,warm,warm")
    ap.add_argument("--cache", default="", help="TMPDIR of the runs (default: a new temp folder)")
    ap.add_argument("--pairs-upto", default="0", help="values of DRAFT_PAIRS_UPTO (0: as is)")
    ap.add_argument("--child", type=int, default=-1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child >= 0:
        print(json.dumps(run(args.child)))
        return
    cache = args.cache or tempfile.mkdtemp(prefix="warmup-boot-")
    os.makedirs(cache, exist_ok=True)
    rows = []
    for kind, pairs in ((k, int(p)) for k in args.runs.split(",")
                        for p in args.pairs_upto.split(",")):
        if kind == "cold":
            shutil.rmtree(os.path.join(cache, "mlx"), ignore_errors=True)
        env = dict(os.environ, TMPDIR=cache)
        done = subprocess.run([sys.executable, "-m", "bench.warmup_boot", "--child", str(pairs)],
                              env=env, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{kind} run failed:\n{done.stderr}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        label = f"{kind}, pairs up to {pairs}" if pairs else kind
        rows.append((label, result))
        print(f"{label}: warm-up {result['warm_up']:.1f} s, functions {result['functions']}",
              file=sys.stderr)
    names = [name for name, _, _ in rows[0][1]["phases"]]
    print("| kernel cache | warm-up s | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for label, result in rows:
        cells = [f"{s:.2f} s, +{n}" for _, s, n in result["phases"]]
        print(f"| {label} | {result['warm_up']:.1f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
