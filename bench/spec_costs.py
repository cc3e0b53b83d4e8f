"""What a draft-model speculative step costs against plain decoding, and what 1.5x would need.

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.spec_costs \\
        [--kv k8v4|none] [-k 4] [--passes 2] [--max-tokens 128] [--target 1.5]

The demo model and its trained draft (``demo-draft``) on the demo's 33 evaluation prompts, one
request at a time, a plain and a drafting engine (``bench.spec_interleaved``'s) in turns, the
drafting one with its cost rules off (it drafts whenever it can). Reported: ms per generated
token of each (after each request's first token), the drafting engine's proposals (k draft steps,
waited for), the rest of a drafting step (verify and acceptance), the acceptance rate and the
tokens a drafting step makes, E = (1 - a^(k+1)) / (1 - a); then MLX graph nodes of one plain
step, one draft step and one verify (``bench.graph_nodes.nodes``) and the budget per draft step
for TARGET x plain: (E x plain ms per token / TARGET - verify ms) / k. Outputs are checked
token-identical.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import tempfile
import time
from typing import Any

import mlx.core as mx
from mlx_lm import load

from bench.graph_nodes import nodes
from bench.prompts import demo_eval_prompts
from bench.spec_interleaved import engine
from protocol.messages import SamplingParams
from worker.cpu.blas import apply_blas_policy
from worker.engine.attention import install
from worker.model.embedded import embedded_model_path
from worker.spec.controller import Speculator
from worker.spec.draft_load import draft_drafter

PROPOSALS: list[float] = []  # seconds of each proposal of the drafting engine (waited for)


def run(e: Any, ids: list[int], params: SamplingParams, tag: str
        ) -> tuple[list[int], list[tuple[float, int, bool]]]:
    """One request alone: its tokens and, for each step after its first token, (seconds,
    tokens made, whether the step drafted)."""
    e.add(tag, ids, params)
    out: list[int] = []
    steps: list[tuple[float, int, bool]] = []
    while e.has_work:
        before = len(PROPOSALS)
        t = time.perf_counter()
        made: list[int] = sum((o.token_ids for o in e.step()), [])
        if out:
            steps.append((time.perf_counter() - t, len(made), len(PROPOSALS) > before))
        out += made
    return out, steps


def main() -> None:
    """Time both engines in turns, count nodes, print the arithmetic."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kv", default="k8v4", choices=["k8v4", "none"])
    ap.add_argument("-k", "--num-draft-tokens", type=int, default=4)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--target", type=float, default=1.5)
    args = ap.parse_args()
    install()
    loaded: Any = load(str(embedded_model_path()))
    model, tok = loaded[:2]
    apply_blas_policy(model)
    prompts = demo_eval_prompts(tok)
    drafter = draft_drafter("demo-draft", tok, max_batch=8, context_length=1024, memory="64MiB")
    k = args.num_draft_tokens
    spec = engine(model, tok, args.kv, Speculator(drafter, k, pause=False))
    plain = engine(model, tok, args.kv, None)
    assert spec.spec is not None
    proposals = PROPOSALS
    propose = spec.spec.propose

    def timed(rows: Any, caps: Any) -> Any:
        t = time.perf_counter()
        PHASE[0] = "proposal"
        try:
            out = propose(rows, caps)
            mx.eval([toks for toks, _ in out if isinstance(toks, mx.array)])
        finally:
            PHASE[0] = "verify"
        proposals.append(time.perf_counter() - t)
        return out

    spec.spec.propose = timed  # type: ignore[method-assign]
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0)
    for i, ids in enumerate(prompts[:3]):  # warm-up
        run(plain, ids, params, f"w{i}")
        run(spec, ids, params, f"ws{i}")
    proposals.clear()
    spec.stats.drafted_tokens = spec.stats.accepted_tokens = 0
    steps: dict[str, list[tuple[float, int, bool]]] = collections.defaultdict(list)
    for p in range(args.passes):
        for i, ids in enumerate(prompts):
            pair = [("plain", plain), ("spec", spec)]
            got = {}
            for name, e in pair if (i + p) % 2 else pair[::-1]:
                got[name], made = run(e, ids, params, f"{p}-{i}-{name}")
                steps[name] += made
            assert got["plain"] == got["spec"], f"prompt {i}: the drafting engine's output differs"
    per = {n: sum(s for s, _, _ in v) / max(1, sum(m for _, m, _ in v)) * 1e3
           for n, v in steps.items()}
    a = spec.stats.accepted_tokens / max(1, spec.stats.drafted_tokens)
    made = (1 - a ** (k + 1)) / (1 - a) if a < 1 else k + 1
    drafting = [s for s, _, drafted in steps["spec"] if drafted]
    step_ms = statistics.median(drafting) * 1e3 if drafting else 0.0
    propose_ms = statistics.median(proposals) * 1e3 if proposals else 0.0
    verify_ms = step_ms - propose_ms
    print(f"demo model, kv={args.kv}, k={k}, {len(prompts)} prompts x {args.passes}, "
          f"{args.max_tokens} tokens")
    print(f"  plain {per['plain']:.2f} ms/token; drafting {per['spec']:.2f} ms/token "
          f"({per['plain'] / per['spec']:.3f}x plain)")
    print(f"  proposal (k draft steps) median {propose_ms:.2f} ms = {propose_ms / k:.2f} ms per "
          f"draft step ({propose_ms / k / per['plain']:.2f} of a plain token); drafting step "
          f"median {step_ms:.2f} ms, of which verify + acceptance {verify_ms:.2f}")
    print(f"  acceptance {a:.3f}: E = {made:.2f} tokens per drafting step; {len(drafting)} of "
          f"{len(steps['spec'])} steps drafted")
    path = os.path.join(tempfile.mkdtemp(prefix="spec-costs-"), "step.dot")
    counts = graph_counts(plain, spec, prompts[5], params, path)
    print(f"  graph nodes: plain step {counts['plain']}, draft step "
          f"{counts['proposal'] / k:.0f} (a proposal's {counts['proposal']} / k, catch-up "
          f"included), verify and acceptance {counts['verify']}")
    budget = (made * per["plain"] / args.target - verify_ms) / k
    print(f"  for {args.target}x plain a drafting step may cost {made * per['plain'] / args.target:.2f} ms: "
          f"with this verify, {budget:.2f} ms per draft step ("
          f"{budget / (propose_ms / k) if propose_ms else 0:.2f} of today's)")


PHASE = ["verify"]  # what the drafting engine's evaluations are for (the proposal's, or not)


def graph_counts(plain: Any, spec: Any, ids: list[int], params: SamplingParams, path: str
                 ) -> dict[str, int]:
    """Nodes of one plain decode step, and of one drafting step's proposal and the rest."""
    out: collections.Counter[str] = collections.Counter()
    originals = mx.async_eval, mx.eval

    def spy(which: int, name: str) -> Any:
        def counted(*arrays: Any) -> Any:
            out[PHASE[0] if name == "spec" else name] += sum(nodes(path, arrays).values())
            return originals[which](*arrays)
        return counted

    for name, e in (("plain", plain), ("spec", spec)):
        e.add(f"nodes-{name}", ids, params)
        for _ in range(4):  # past the first tokens (a row drafts from its third)
            e.step()
        mx.async_eval, mx.eval = spy(0, name), spy(1, name)
        try:
            e.step()
        finally:
            mx.async_eval, mx.eval = originals
        while e.has_work:
            e.step()
    return dict(out)


if __name__ == "__main__":
    main()
