"""Speculative vs plain decoding in one process, interleaved prompt by prompt (noise-robust).

    LD_PRELOAD="$(python -m worker.cpu.blas)" python -m bench.probes.spec_interleaved [--drafter draft|ngram]
        [--model demo|qwen3] [--prompts eval|stories|edit] [-k 4[,8]] [--kv k8v4|none] [--passes 3] [--max-tokens 80]
        [--clock decode|request] [--spec-engines pause,nopause] [--no-pause]

On a loaded machine whole rounds of plain and speculative runs see different loads. Here two
engines (plain, speculating) live side by side and take turns on every prompt (order alternating),
so a burst of load hits both alike; each prompt runs PASSES times per engine. Reported: the
decode-time ratio plain/speculative (time after each request's first token) over the sum of each
prompt's fastest pass, the same over all passes, the median per-prompt ratio, the acceptance and
the speculator's pauses. ``--clock request`` times whole requests (prefill and first token too,
as the serving bench's tokens/s does). ``--spec-engines`` runs several speculating engines in the
same turns: ``pause`` (the speculator's cost rules on, as served) and ``nopause`` (off: it drafts
whenever it can).
Prompts: the demo model's 33 evaluation cases (its own prompts, what the
draft model was trained for) or short story requests (bench.prompts.user_messages). Greedy outputs
are checked token-identical.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from mlx_lm import load

from bench.prompts import (
    EDIT_INSTRUCTION,
    REPEAT_INSTRUCTION,
    demo_eval_prompts,
    edit_messages,
    user_messages,
)
from bench.servers import ROOT
from protocol.messages import SamplingParams
from worker.cpu.blas import apply_blas_policy
from worker.engine.attention import install
from worker.engine.core import Engine, model_dtype
from worker.kv.setup import plan_kv
from worker.model.embedded import embedded_model_path
from worker.spec.controller import Speculator
from worker.spec.draft_load import draft_drafter
from worker.spec.ngram import NgramDrafter

QWEN3 = ROOT / "bench" / ".models" / "qwen3-4l-512"
EDIT_TOKENS = 160  # the edit prompts' paragraph length (tokens), as in bench.plan


def engine(model: Any, tok: Any, kv: str, spec: Speculator | None) -> Engine:
    """A fresh engine over MODEL with its own KV pool."""
    plan = plan_kv(model, model_dtype(model), kind=kv, memory="64MiB", page_size=16,
                   group_size=32, max_batch=8, context_length=1024)
    return Engine(model, tok, plan.store, context_length=1024, spec=spec)


def decode(e: Engine, ids: list[int], params: SamplingParams, tag: str,
           whole: bool = False) -> tuple[list[int], float]:
    """One request alone: its tokens and the seconds after its first token (WHOLE: after add)."""
    t0 = time.perf_counter()
    e.add(tag, ids, params)
    out: list[int] = []
    first = None
    while e.has_work:
        for o in e.step():
            first = time.perf_counter() if first is None else first
            out += o.token_ids
    start = t0 if whole else first
    return out, time.perf_counter() - start if start is not None else 0.0


def main() -> None:
    """Run the passes and print the ratios."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafter", default="draft", choices=["draft", "ngram"])
    ap.add_argument("--prompts", default="eval", choices=["eval", "stories", "edit"])
    ap.add_argument("-k", "--num-draft-tokens", default="4",
                    help="draft tokens per step; a comma list runs one speculating engine per k")
    ap.add_argument("--model", default="demo", choices=["demo", "qwen3"],
                    help="the target: the demo model, or the Qwen3 bench model (n-gram only; its "
                         "edit prompts are the serving bench's)")
    ap.add_argument("--kv", default="k8v4", choices=["k8v4", "none"])
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=80)
    ap.add_argument("--clock", default="decode", choices=["decode", "request"],
                    help="time after each request's first token (decode) or the whole request "
                         "(request: prefill and first token too, as the serving bench's tokens/s)")
    ap.add_argument("--spec-engines", default="pause",
                    help="comma list of speculating engines taking turns with plain: pause (the "
                         "cost rules on, as served), nopause (cost rules off)")
    ap.add_argument("--no-pause", action="store_true",
                    help="the speculator never pauses drafting (its cost rules off)")
    ap.add_argument("--draft-compile", default="on", choices=["on", "off"],
                    help="run the draft model's decode forwards through the compiled step")
    args = ap.parse_args()
    install()
    if args.model == "qwen3" and args.drafter != "ngram":
        ap.error("--model qwen3 has no draft model: use --drafter ngram")
    path = embedded_model_path() if args.model == "demo" else QWEN3
    loaded: Any = load(str(path))
    model, tok = loaded[:2]
    apply_blas_policy(model)  # the worker's OpenBLAS threads (one here): a second one busy-waits
    if args.prompts == "eval":
        prompts = demo_eval_prompts(tok)
    elif args.prompts == "edit":  # the serving bench's edit workload for the demo model
        prompts = [tok.apply_chat_template(c, add_generation_prompt=True) for c in edit_messages(
            path, "e", 16, EDIT_TOKENS,
            REPEAT_INSTRUCTION if args.model == "demo" else EDIT_INSTRUCTION)]
    else:
        prompts = [tok.apply_chat_template(c, add_generation_prompt=True)
                   for c in user_messages("s", 16)]
    ks = [int(k) for k in args.num_draft_tokens.split(",")]

    def speculator(pause: bool, k: int) -> Speculator:
        drafter: Any = (draft_drafter("demo-draft", tok, max_batch=8, context_length=1024,
                                      memory="64MiB", compile=args.draft_compile == "on")
                        if args.drafter == "draft" else NgramDrafter())
        return Speculator(drafter, k, pause=pause and not args.no_pause)

    engines = {"plain": engine(model, tok, args.kv, None)}
    for v, k in [(v, k) for v in args.spec_engines.split(",") for k in ks]:
        if v not in ("pause", "nopause"):
            ap.error(f"--spec-engines: unknown engine {v!r} (pause, nopause)")
        name = f"spec-{v}" if len(ks) == 1 else f"spec-{v}-k{k}"
        engines[name] = engine(model, tok, args.kv, speculator(v == "pause", k))
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    for i, ids in enumerate(prompts[:3]):  # warm-up
        for name, e in engines.items():
            decode(e, ids, params, f"warm{i}{name}")
    names = list(engines)
    best: dict[tuple[int, str], float] = {}
    total = dict.fromkeys(names, 0.0)
    ratios: dict[str, list[float]] = {n: [] for n in names[1:]}
    lengths: list[int] = []
    for p in range(args.passes):
        for i, ids in enumerate(prompts):
            shift = (i + p) % len(names)
            order = names[shift:] + names[:shift]
            order = order if (i + p) % 2 == 0 else order[::-1]
            got: dict[str, tuple[list[int], float]] = {}
            for name in order:
                got[name] = decode(engines[name], ids, params, f"{p}-{i}-{name}",
                                   whole=args.clock == "request")
            for name in names[1:]:
                assert got["plain"][0] == got[name][0], f"prompt {i}: {name}'s output differs"
            if len(got["plain"][0]) < 8:
                continue  # too short to time decoding
            for name, (_, secs) in got.items():
                best[(i, name)] = min(best.get((i, name), float("inf")), secs)
                total[name] += secs
            for name in names[1:]:
                ratios[name].append(got["plain"][1] / got[name][1])
            lengths.append(len(got["plain"][0]))
    fastest = {n: sum(v for (_, m), v in best.items() if m == n) for n in total}
    print(f"{args.model} {args.drafter} k={args.num_draft_tokens} kv={args.kv} draft-compile={args.draft_compile} "
          f"prompts={args.prompts} max_tokens={args.max_tokens} clock={args.clock} "
          f"({len(lengths)} timed requests per engine; answers {min(lengths)}-{max(lengths)} "
          f"tokens, median {statistics.median(lengths):.0f})")
    for name in names[1:]:
        e = engines[name]
        assert e.spec is not None
        print(f"  {name}: plain/speculative time {fastest['plain'] / fastest[name]:.2f}x over each "
              f"prompt's fastest pass, {total['plain'] / total[name]:.2f}x over all passes, median "
              f"per prompt {statistics.median(ratios[name]):.2f}x; acceptance "
              f"{e.stats.accepted_tokens / max(1, e.stats.drafted_tokens):.2f} "
              f"({e.stats.drafted_tokens} drafted), pauses {e.spec.pauses}"
              f"{' (off)' if args.no_pause else ''}")

if __name__ == "__main__":
    main()
