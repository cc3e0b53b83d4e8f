"""Speculative vs plain decoding in one process, interleaved prompt by prompt (noise-robust).

    LD_PRELOAD="$(python -m worker.blas)" python -m bench.spec_interleaved [--drafter draft|ngram]
        [--prompts eval|stories|edit] [-k 4] [--kv k8v4|none] [--passes 3] [--max-tokens 80]

On a loaded machine whole rounds of plain and speculative runs see different loads. Here two
engines (plain, speculating) live side by side and take turns on every prompt (order alternating),
so a burst of load hits both alike; each prompt runs PASSES times per engine. Reported: the
decode-time ratio plain/speculative (time after each request's first token) over the sum of each
prompt's fastest pass, the same over all passes, the median per-prompt ratio, the acceptance and
the speculator's pauses. Prompts: the demo model's 33 evaluation cases (its own prompts, what the
draft model was trained for) or short story requests (bench.prompts.user_messages). Greedy outputs
are checked token-identical.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from mlx_lm import load

from bench.prompts import REPEAT_INSTRUCTION, edit_messages, user_messages
from protocol.messages import SamplingParams
from worker.attention import install
from worker.blas import apply_blas_policy
from worker.demo_model.evaluate import cases
from worker.embedded import embedded_model_path
from worker.engine import Engine, model_dtype
from worker.kv_setup import plan_kv
from worker.spec.controller import Speculator
from worker.spec.draft_load import draft_drafter
from worker.spec.ngram import NgramDrafter

EDIT_TOKENS = 160  # the edit prompts' paragraph length (tokens), as in bench.plan


def engine(model: Any, tok: Any, kv: str, spec: Speculator | None) -> Engine:
    """A fresh engine over MODEL with its own KV pool."""
    plan = plan_kv(model, model_dtype(model), kind=kv, memory="64MiB", page_size=16,
                   group_size=32, max_batch=8, context_length=1024)
    return Engine(model, tok, plan.store, context_length=1024, spec=spec)


def decode(e: Engine, ids: list[int], params: SamplingParams, tag: str) -> tuple[list[int], float]:
    """One request alone: its tokens and the seconds after its first token."""
    e.add(tag, ids, params)
    out: list[int] = []
    first = None
    while e.has_work:
        for o in e.step():
            first = time.perf_counter() if first is None else first
            out += o.token_ids
    return out, time.perf_counter() - first if first is not None else 0.0


def main() -> None:
    """Run the passes and print the ratios."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafter", default="draft", choices=["draft", "ngram"])
    ap.add_argument("--prompts", default="eval", choices=["eval", "stories", "edit"])
    ap.add_argument("-k", "--num-draft-tokens", type=int, default=4)
    ap.add_argument("--kv", default="k8v4", choices=["k8v4", "none"])
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=80)
    ap.add_argument("--draft-compile", default="on", choices=["on", "off"],
                    help="run the draft model's decode forwards through the compiled step")
    args = ap.parse_args()
    install()
    model, tok = load(str(embedded_model_path()))[:2]
    apply_blas_policy(model)  # the worker's OpenBLAS threads (one here): a second one busy-waits
    if args.prompts == "eval":
        prompts = [tok.apply_chat_template(c.messages, tools=c.tools, add_generation_prompt=True,
                                           enable_thinking=c.enable_thinking) for c in cases()]
    elif args.prompts == "edit":  # the serving bench's edit workload for the demo model
        prompts = [tok.apply_chat_template(c, add_generation_prompt=True) for c in edit_messages(
            embedded_model_path(), "e", 16, EDIT_TOKENS, REPEAT_INSTRUCTION)]
    else:
        prompts = [tok.apply_chat_template(c, add_generation_prompt=True)
                   for c in user_messages("s", 16)]
    drafter: Any = (draft_drafter("demo-draft", tok, max_batch=8, context_length=1024, memory="64MiB",
                                  compile=args.draft_compile == "on")
                    if args.drafter == "draft" else NgramDrafter())
    spec = Speculator(drafter, args.num_draft_tokens)
    engines = {"plain": engine(model, tok, args.kv, None), "spec": engine(model, tok, args.kv, spec)}
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    for i, ids in enumerate(prompts[:3]):  # warm-up
        for name, e in engines.items():
            decode(e, ids, params, f"warm{i}{name}")
    best: dict[tuple[int, str], float] = {}
    total = {"plain": 0.0, "spec": 0.0}
    ratios = []
    for p in range(args.passes):
        for i, ids in enumerate(prompts):
            order = ["plain", "spec"] if (i + p) % 2 == 0 else ["spec", "plain"]
            got: dict[str, tuple[list[int], float]] = {}
            for name in order:
                got[name] = decode(engines[name], ids, params, f"{p}-{i}-{name}")
            assert got["plain"][0] == got["spec"][0], f"prompt {i}: speculative output differs"
            if len(got["plain"][0]) < 8:
                continue  # too short to time decoding
            for name, (_, secs) in got.items():
                best[(i, name)] = min(best.get((i, name), float("inf")), secs)
                total[name] += secs
            ratios.append(got["plain"][1] / got["spec"][1])
    stats = engines["spec"].stats
    fastest = {n: sum(v for (_, m), v in best.items() if m == n) for n in total}
    print(f"{args.drafter} k={args.num_draft_tokens} kv={args.kv} draft-compile={args.draft_compile} prompts={args.prompts} "
          f"({len(ratios)} timed requests per engine): decode time plain/speculative: "
          f"{fastest['plain'] / fastest['spec']:.2f}x over each prompt's fastest pass, "
          f"{total['plain'] / total['spec']:.2f}x over all passes, median per prompt "
          f"{statistics.median(ratios):.2f}x; acceptance "
          f"{stats.accepted_tokens / max(1, stats.drafted_tokens):.2f} "
          f"({stats.drafted_tokens} drafted), pauses {spec.pauses}")


if __name__ == "__main__":
    main()
