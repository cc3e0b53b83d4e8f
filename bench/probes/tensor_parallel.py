"""Tensor-parallel bench: one worker vs a group of 2 ranks (ring over TCP loopback) on the same
model, alternating servers for ROUNDS rounds; aggregate decode tokens/s with 1 and 8 concurrent
greedy requests, and how close the group's logits are to the single worker's (the gap between
the first tokens' logprobs: float sums in another order).

    .venv/bin/python -m bench.probes.tensor_parallel [--model PATH] [--rounds 3] [--max-tokens 64]

On a machine with few cores two ranks compete for them: expect no speed-up here. The group is
for a model larger than one machine's memory, where each rank holds half the weights and KV."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai

from tests.e2e.harness import Server
from tests.ops.harness import DEMO

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park. They saw",
           "One day, a big", "Tom had a red ball.", "The sun was hot and", "Sue liked to",
           "There was a cat named"]


def _one(url: str, prompt: str, n: int) -> tuple[int, list[float]]:
    c = openai.OpenAI(base_url=url, api_key="x", timeout=300).completions.create(
        model="m", prompt=prompt, max_tokens=n, temperature=0, logprobs=1)
    lp = c.choices[0].logprobs
    assert c.usage is not None
    return c.usage.completion_tokens, list(lp.token_logprobs or []) if lp else []


def _rate(url: str, prompts: list[str], n: int) -> tuple[float, list[list[float]]]:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(prompts)) as ex:
        outs = list(ex.map(lambda p: _one(url, p, n), prompts))
    return sum(k for k, _ in outs) / (time.perf_counter() - t0), [lp for _, lp in outs]


def main() -> None:
    """Run the rounds and print one JSON line per setting."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=DEMO)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--kv", default="none", choices=["none", "k8v4"])
    args = ap.parse_args()
    rates: dict[str, dict[int, list[float]]] = {"1 worker": {1: [], 8: []},
                                                "tp 2": {1: [], 8: []}}
    logprobs: dict[str, list[list[float]]] = {}
    for _ in range(args.rounds):
        for name, extra in (("1 worker", ()), ("tp 2", ("--tensor-parallel", "2"))):
            srv = Server(args.model, "--served-model-name", "m", "--kv-cache-turboquant",
                         args.kv, *extra).wait_ready(300)
            try:
                _rate(srv.url, PROMPTS[:2], 8)  # warm-up
                for conc in (1, 8):
                    r, lps = _rate(srv.url, PROMPTS[:conc], args.max_tokens)
                    rates[name][conc].append(r)
                    if conc == 8:
                        logprobs[name] = lps
            finally:
                srv.stop()
    out: dict[str, Any] = {}
    for conc in (1, 8):
        one, tp = (statistics.median(rates[k][conc]) for k in ("1 worker", "tp 2"))
        out[f"{conc} concurrent"] = {"1 worker tok/s": round(one, 1), "tp 2 tok/s": round(tp, 1),
                                     "ratio tp/1": round(tp / one, 2)}
    gaps = [abs(a - b) for x, y in zip(logprobs["1 worker"], logprobs["tp 2"], strict=True)
            for a, b in zip(x, y, strict=False)]
    out["max |logprob gap| over the chosen tokens"] = max(gaps) if gaps else None
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
