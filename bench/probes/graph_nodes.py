"""MLX graph nodes per decode step, by primitive: what the worker's main thread builds and
encodes, and MLX's stream thread runs, one by one (each costs a few microseconds on the CPU).

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.probes.graph_nodes \\
        [--model qwen3|stories260K] [--rows 8] [--kv k8v4,none] [--steps 32]

ROWS requests with prompts of 40..55 tokens (so rows fill pages on different steps, as served
rows do) decode greedily in an in-process engine; after warm-up, every ``mx.async_eval`` of a
step is exported with ``mx.export_to_dot`` and its nodes counted by primitive name (already
evaluated arrays are inputs, not nodes). Prints nodes per step and the primitives whose counts
differ between the KV formats.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import tempfile
from typing import Any

import numpy as np

LABEL = re.compile(r'label ="([A-Za-z_]+)')


def nodes(path: str, arrays: Any) -> collections.Counter[str]:
    """The graph nodes (by primitive) MLX would run to evaluate ARRAYS (PATH: a scratch file)."""
    import mlx.core as mx

    mx.export_to_dot(path, *arrays)
    with open(path) as f:
        return collections.Counter(LABEL.findall(f.read()))


def count(model: Any, tok: Any, rows: int, kind: str, steps: int) -> dict[str, float]:
    """Nodes per overlapped decode step by primitive, KIND pages."""
    import mlx.core as mx

    import worker.engine.core as eng
    from protocol.messages import SamplingParams
    from worker.engine.attention import install
    from worker.kv.setup import plan_kv

    install()
    plan = plan_kv(model, eng.model_dtype(model), kind=kind, memory="1536MiB", page_size=16,
                   group_size=32, max_batch=32, context_length=1024, working_set=True)
    engine = eng.Engine(model, tok, plan.store, context_length=1024, max_batch=32)
    rng = np.random.default_rng(0)
    params = SamplingParams(max_tokens=4000, temperature=0.0, ignore_eos=True)
    vocab = int(model.args.vocab_size)
    for i in range(rows):
        engine.add(str(i), rng.integers(3, vocab, 40 + i % 16).tolist(), params)
    while engine.waiting or any(r.prefilling for r in engine.running):
        engine.step()
    for _ in range(8):
        engine.step()
    counts: collections.Counter[str] = collections.Counter()
    seen = [0]
    original = mx.async_eval
    path = os.path.join(tempfile.mkdtemp(prefix="graph-nodes-"), "step.dot")

    def spy(*arrays: Any) -> Any:
        counts.update(nodes(path, arrays))
        seen[0] += 1
        return original(*arrays)  # type: ignore[no-untyped-call]

    mx.async_eval = spy
    try:
        for _ in range(steps):
            engine.step()
    finally:
        mx.async_eval = original
    return {k: v / max(seen[0], 1) for k, v in counts.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen3")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--kv", default="k8v4,none")
    p.add_argument("--steps", type=int, default=32)
    args = p.parse_args()
    from bench.peers.decode_step import load

    model, tok = load(args.model)
    results = {kind: count(model, tok, args.rows, kind, args.steps)
               for kind in args.kv.split(",")}
    for kind, c in results.items():
        print(f"{args.model}, {args.rows} rows, {kind}: {sum(c.values()):.1f} nodes per step")
    kinds = list(results)
    names = sorted({n for c in results.values() for n in c},
                   key=lambda n: -max(c.get(n, 0.0) for c in results.values()))
    print("| primitive | " + " | ".join(kinds) + " |")
    print("|---|" + "---:|" * len(kinds))
    for n in names:
        vals = [results[k].get(n, 0.0) for k in kinds]
        if len(set(vals)) > 1 or len(kinds) == 1:
            print(f"| {n[:48]} | " + " | ".join(f"{v:.1f}" for v in vals) + " |")


if __name__ == "__main__":
    main()
