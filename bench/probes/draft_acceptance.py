"""Acceptance rate and in-engine speed of a draft model on the demo model's own prompts.

    LD_PRELOAD="$(python -m worker.cpu.blas)" python -m bench.probes.draft_acceptance --draft demo-draft -k 4

Runs the 33 greedy evaluation cases of tools/demo_model/evaluate.py (chat, tool calls, tool
results, thinking) one at a time through the engine, plain and speculating with the draft, checks
the outputs are token-identical, and prints drafted/accepted tokens, tokens per target forward
and the single-stream tokens/s ratio (median over rounds, same process, same prompts).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from mlx_lm import load

from bench.prompts import demo_eval_prompts
from protocol.messages import SamplingParams
from worker.cpu.blas import apply_blas_policy
from worker.engine.attention import install
from worker.engine.core import Engine, model_dtype
from worker.kv.setup import plan_kv
from worker.model.embedded import embedded_model_path
from worker.spec.controller import Speculator
from worker.spec.draft_load import draft_drafter


def engine(model: Any, tok: Any, kind: str, spec: Speculator | None) -> Engine:
    """A fresh engine over the target with its own KV pool."""
    plan = plan_kv(model, model_dtype(model), kind=kind, memory="64MiB", page_size=16,
                   group_size=32, max_batch=8, context_length=1024)
    return Engine(model, tok, plan.store, context_length=1024, spec=spec)


def generate(e: Engine, ids: list[int], params: SamplingParams) -> list[int]:
    """One request alone through the engine: its tokens."""
    e.add("r", ids, params)
    out: list[int] = []
    while e.has_work:
        for o in e.step():
            out.extend(o.token_ids)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draft", default="demo-draft")
    ap.add_argument("-k", "--num-draft-tokens", type=int, default=4)
    ap.add_argument("--kv", default="k8v4", choices=["k8v4", "none"])
    ap.add_argument("--max-tokens", type=int, default=80)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    install()
    loaded: Any = load(str(embedded_model_path()))
    model, tok = loaded[:2]
    apply_blas_policy(model)  # the worker's OpenBLAS threads (one here)
    prompts = demo_eval_prompts(tok)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    drafter = draft_drafter(args.draft, tok, max_batch=8, context_length=1024, memory="64MiB")
    plain_e = engine(model, tok, args.kv, None)
    spec_e = engine(model, tok, args.kv, Speculator(drafter, args.num_draft_tokens))
    plain_s, spec_s = [], []
    tokens = 0
    for rnd in range(args.rounds + 1):  # round 0 warms up (compiles, page arrays)
        t0 = time.perf_counter()
        plain = [generate(plain_e, p, params) for p in prompts]
        t1 = time.perf_counter()
        drafted, accepted, steps = (spec_e.stats.drafted_tokens, spec_e.stats.accepted_tokens,
                                    spec_e.stats.steps)
        spec = [generate(spec_e, p, params) for p in prompts]
        t2 = time.perf_counter()
        bad = [i for i, (a, b) in enumerate(zip(plain, spec, strict=True)) if a != b]
        assert not bad, f"speculative output differs from plain for cases {bad}"
        if rnd == 0:
            continue
        plain_s.append(t1 - t0)
        spec_s.append(t2 - t1)
        tokens = sum(len(x) for x in plain)
        d = spec_e.stats.drafted_tokens - drafted
        a = spec_e.stats.accepted_tokens - accepted
        n = spec_e.stats.steps - steps
        print(f"round {rnd}: {len(prompts)} prompts, {tokens} tokens; drafted {d}, accepted {a} "
              f"({a / max(d, 1):.1%}); {tokens / n:.2f} tokens per step; plain "
              f"{tokens / (t1 - t0):.0f} tok/s, speculative {tokens / (t2 - t1):.0f} tok/s", flush=True)
    p, s = statistics.median(plain_s), statistics.median(spec_s)
    print(f"median over {args.rounds} rounds: plain {tokens / p:.0f} tok/s, draft {args.draft} k="
          f"{args.num_draft_tokens} {tokens / s:.0f} tok/s: {p / s:.2f}x (kv {args.kv})")


if __name__ == "__main__":
    main()
