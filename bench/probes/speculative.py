"""Single-stream decode speed with speculative decoding vs plain, on the engine (in process).

    LD_PRELOAD="$(python -m worker.cpu.blas)" python -m bench.probes.speculative [--model demo|stories260K|PATH]
        [--drafter ngram|draft] [--draft-model PATH] [--k 4] [--rounds 3] [--tokens 128]

Workload "edit this text": each request asks the model to repeat a paragraph, so most of the
answer repeats the prompt (what prompt lookup is for). Requests run one at a time (single
stream); every round runs plain and speculative back to back on fresh engines with the same
KV settings; the report gives medians over rounds of tokens/s, the ratio, and acceptance.
Greedy outputs are checked token-identical (the run fails otherwise).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from mlx_lm import load

from protocol.messages import SamplingParams
from worker.cpu.blas import apply_blas_policy
from worker.engine.attention import install
from worker.engine.core import Engine, model_dtype
from worker.kv.setup import plan_kv
from worker.spec.registry import build_speculator

TEXTS = [
    "the quick brown fox jumps over the lazy dog near the river bank every morning",
    "my name is Anna and I live in Berlin with my two cats and a very old piano",
    "please call me at five tomorrow about the report on the new garden project",
    "we met at the station and walked to the old library on the hill after lunch",
]


def model_path(name: str) -> str:
    """A model folder for NAME (demo, stories260K, or a path)."""
    if name == "demo":
        from worker.model.embedded import embedded_model_path

        return str(embedded_model_path())
    if name == "stories260K":
        return "/work/shared/models/stories260K"
    return name


def prompts(tok: Any) -> list[list[int]]:
    """The 'edit this text' prompts, through the chat template when the tokenizer has one."""
    out = []
    for text in TEXTS:
        msg = f"Repeat after me: {text}"
        if getattr(tok, "chat_template", None):
            out.append(list(tok.apply_chat_template([{"role": "user", "content": msg}],
                                                    add_generation_prompt=True)))
        else:
            out.append(tok.encode(f"{text}. {text}. {text}."))
    return out


def engine(mdl: Any, tok: Any, args: argparse.Namespace, spec: bool, loaded: Any) -> Engine:
    """A fresh engine (a fresh KV pool), speculating or not."""
    plan = plan_kv(mdl, model_dtype(mdl), kind=args.kv, memory="256MiB", page_size=16,
                   group_size=32, max_batch=8, context_length=1024)
    s = build_speculator(args.drafter, loaded, num_draft=args.k, draft_model=args.draft_model,
                         max_batch=8, context_length=1024) if spec else None
    return Engine(mdl, tok, plan.store, context_length=1024, max_batch=8, spec=s)


def one_round(mdl: Any, tok: Any, args: argparse.Namespace, spec: bool, loaded: Any
              ) -> tuple[float, list[list[int]], Engine]:
    """Tokens/s over the prompts run one at a time (decode-dominated), and the outputs."""
    e = engine(mdl, tok, args, spec, loaded)
    params = SamplingParams(max_tokens=args.tokens, temperature=0.0)
    outs, tokens, seconds = [], 0, 0.0
    for i, ids in enumerate(prompts(tok)):
        e.add(str(i), ids, params)
        got: list[int] = []
        t0 = time.perf_counter()
        while e.has_work:
            for o in e.step():
                got += o.token_ids
        seconds += time.perf_counter() - t0
        tokens += len(got)
        outs.append(got)
    return tokens / seconds, outs, e


class _Loaded:
    """What the drafter registry reads of a loaded model."""

    def __init__(self, path: str, model: Any, tokenizer: Any) -> None:
        self.path, self.model, self.tokenizer = path, model, tokenizer


def main() -> None:
    """Run the rounds and print the report."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="demo")
    p.add_argument("--drafter", default="ngram", choices=["ngram", "draft", "mtp"])
    p.add_argument("--draft-model", default=None)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--kv", default="k8v4", choices=["k8v4", "none"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=128)
    args = p.parse_args()
    install()
    path = model_path(args.model)
    mdl, tok = load(path)[:2]
    apply_blas_policy(mdl)  # the worker's OpenBLAS threads (one here)
    loaded = _Loaded(path, mdl, tok)
    one_round(mdl, tok, args, False, loaded)  # warm-up (compiles, caches)
    plain, spec, rates = [], [], []
    for _ in range(args.rounds):
        tps, want, _ = one_round(mdl, tok, args, False, loaded)
        plain.append(tps)
        tps, got, e = one_round(mdl, tok, args, True, loaded)
        spec.append(tps)
        assert got == want, "speculative output differs from plain"
        rates.append(e.stats.accepted_tokens / max(e.stats.drafted_tokens, 1))
        tokens = sum(len(o) for o in got)
        print(f"round: plain {plain[-1]:.1f} tok/s, {args.drafter} {spec[-1]:.1f} tok/s, "
              f"ratio {spec[-1] / plain[-1]:.2f}x, accepted {e.stats.accepted_tokens}/"
              f"{e.stats.drafted_tokens}, {tokens} tokens in {e.stats.steps} steps")
    mp, ms = statistics.median(plain), statistics.median(spec)
    print(f"{args.model} kv={args.kv} k={args.k} single stream, {len(TEXTS)} prompts x "
          f"{args.tokens} max tokens, medians of {args.rounds} rounds: plain {mp:.1f} tok/s, "
          f"{args.drafter} {ms:.1f} tok/s, ratio {ms / mp:.2f}x, acceptance "
          f"{statistics.median(rates):.2f}")


if __name__ == "__main__":
    main()
