"""Engine-level cost of constrained decoding: 16 free rows vs 8 json_schema + 8 free rows.

    python -m bench.probes.grammar_engine [--model PATH] [--tokens 128] [--repeats 3]

Runs the engine in-process (no server) with overlapped decode on, on the demo model by default
(or PATH; a random-weight model shows the pure cost best, since its free rows never stop early).
Every row gets the same prompt and max_tokens; free rows ignore EOS.  Prints aggregate generated
tokens/s of both mixes (best of REPEATS), their ratio, the engine's decode seconds and the
seconds spent filling masks (while the forward pass runs).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from mlx_lm import load

from protocol.messages import GrammarSpec, SamplingParams
from worker.engine.core import Engine, model_dtype
from worker.grammar.compiler import GrammarCompiler
from worker.kv.setup import plan_kv
from worker.model.embedded import embedded_model_path

SCHEMA = {"type": "array", "minItems": 20, "maxItems": 40, "items": {
    "type": "object", "additionalProperties": False, "required": ["id", "tag", "ok"],
    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 9999},
                   "tag": {"enum": ["alpha", "beta", "gamma"]}, "ok": {"type": "boolean"}}}}


def run(model: Any, tok: Any, constrained: int, free: int, tokens: int) -> tuple[float, Engine]:
    """Aggregate tokens/s of one batch, and the engine (for its counters)."""
    plan = plan_kv(model, model_dtype(model), kind="none", memory="256MiB", page_size=16,
                   group_size=32, max_batch=32, context_length=1024)
    engine = Engine(model, tok, plan.store, context_length=1024)
    comp = GrammarCompiler(tok, model.args.vocab_size, sorted(engine.eos_ids))
    spec = GrammarSpec(kind="json_schema", text=json.dumps(SCHEMA))
    ids = tok.encode("List the records as JSON.")
    for i in range(constrained):
        engine.add(f"g{i}", ids, SamplingParams(max_tokens=tokens, temperature=1.0),
                   grammar=comp.compile(spec))
    for i in range(free):
        engine.add(f"f{i}", ids, SamplingParams(max_tokens=tokens, temperature=1.0,
                                                ignore_eos=True))
    t0 = time.perf_counter()
    while engine.has_work:
        engine.step()
    return engine.stats.generated_tokens / (time.perf_counter() - t0), engine


def main() -> None:
    """Print both mixes' tokens/s, the ratio and the mask counters."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(embedded_model_path()))
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    model, tok = load(args.model)[:2]
    from worker.engine.attention import install

    install()
    best: dict[str, tuple[float, Engine]] = {}
    for _ in range(args.repeats):
        for name, (c, f) in {"16 free": (0, 16), "8 json + 8 free": (8, 8)}.items():
            tps, engine = run(model, tok, c, f, args.tokens)
            if name not in best or tps > best[name][0]:
                best[name] = (tps, engine)
    for name, (tps, engine) in best.items():
        s = engine.stats
        print(f"{name:16} {tps:8.1f} tok/s  steps {s.steps:4d}  decode {s.decode_seconds:6.2f} s"
              f"  mask fill {s.mask_seconds * 1e3:7.1f} ms")
    print(f"ratio {best['8 json + 8 free'][0] / best['16 free'][0]:.3f}")


if __name__ == "__main__":
    main()
