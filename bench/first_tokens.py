"""In-engine timeline of one request's first tokens: arrival, prefill, tokens 1, 2, 3, ...

    LD_PRELOAD="$(python -m worker.cpu.blas)" python -m bench.first_tokens [--rounds 7]
        [--kv k8v4|none] [--tokens 6] [--compile-decode auto|off] [--steps] [--at-return]
    ... python -m bench.first_tokens --prefill [--rounds 25]
    ... python -m bench.first_tokens --read-back [--rounds 40]

Builds the engine the worker builds for the demo model (same KV plan defaults, the boot
warm-up), then sends the serving bench's short chats one at a time (greedy) and, per request,
records when each ``Engine.step`` started and ended, whether it was overlapped, and when each
token left the engine (its return value, or ``Engine.on_outputs`` mid-step where the engine has
one; the worker loop sends them to the gateway then). Printed: medians over the rounds of the time from ``add`` to each of the first
tokens, and of each token's gap to the one before; ``--steps`` also prints one request's steps.
``--at-return`` alternates requests between the two ways tokens leave: mid-step (``on_outputs``,
as the worker loop has it) and at the step's return only (as before ``on_outputs`` existed), and
reports both. Run from another checkout (``PYTHONPATH=DIR python PATH/first_tokens.py``) it
measures that checkout's engine. ``--prefill`` instead times the prefill step alone (a request of
one token, prefix cache off) with K8V4 pages, with full-precision pages, and mlx-lm's own forward
over the same prompt (a fresh ``KVCache``, argmax read back), in turns. ``--read-back``
alternates requests in one engine between this checkout's K8V4 first tokens and session 8's
(a prompt's chunk writes its pages and reads them back, ``mx.dequantize``, masked scores through
powf; same tokens), and prints both timelines and the CPU time to token 3.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.prompts import user_messages
from protocol.messages import SamplingParams
from worker.cpu.blas import apply_blas_policy
from worker.engine.attention import install
from worker.engine.core import Engine, model_dtype
from worker.kv.setup import plan_kv
from worker.model.embedded import embedded_model_path
from worker.model.load import load_model
from worker.serve.warmup import warm_up


def build(kv: str, compile_decode: str) -> tuple[Engine, Any]:
    """The demo model's engine as the worker builds it (defaults of `serve`), warmed up."""
    loaded = load_model(str(embedded_model_path()), None)
    apply_blas_policy(loaded.model)
    install()
    ctx = loaded.facts.context_length
    plan = plan_kv(loaded.model, model_dtype(loaded.model), kind=kv, memory="0.1", page_size=16,
                   group_size=32, max_batch=32, context_length=ctx)
    engine = Engine(loaded.model, loaded.tokenizer, plan.store, context_length=ctx,
                    compile_decode=compile_decode)
    warm_up(engine)
    return engine, loaded.tokenizer


def one(engine: Engine, ids: list[int], tokens: int, tag: str, early: bool = True
        ) -> tuple[list[float], list[tuple[Any, ...]]]:
    """Times (s after add) of the first TOKENS tokens, and the steps (start, end, kind, n).

    EARLY: tokens leave through ``Engine.on_outputs`` mid-step (else at the step's return).
    """
    params = SamplingParams(max_tokens=128, temperature=0.0)
    t0 = time.perf_counter()
    engine.add(tag, ids, params)
    times: list[float] = []
    steps = []

    def sent(outs: list[Any]) -> None:  # the worker loop's sender (older engines never call it)
        now = time.perf_counter()
        for o in outs:
            times.extend([now - t0] * len(o.token_ids))

    engine.on_outputs = sent if early else None
    while engine.has_work:
        a = time.perf_counter()
        before, made = engine.stats.overlapped_steps, len(times)
        sent(engine.step())
        b = time.perf_counter()
        kind = "overlap" if engine.stats.overlapped_steps > before else "sync"
        steps.append((a - t0, b - t0, kind, len(times) - made))
        if len(times) >= tokens:
            break
    engine.abort([tag])
    return times[:tokens], steps


def prefill(rounds: int) -> None:
    """Median seconds of the prefill step: K8V4 and full-precision engines, mlx-lm's forward."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    loaded = load_model(str(embedded_model_path()), None)
    apply_blas_policy(loaded.model)
    install()
    model, tok, ctx = loaded.model, loaded.tokenizer, loaded.facts.context_length
    engines = {}
    for kv in ("k8v4", "none"):
        plan = plan_kv(model, model_dtype(model), kind=kv, memory="0.1", page_size=16,
                       group_size=32, max_batch=32, context_length=ctx)
        engines[kv] = Engine(model, tok, plan.store, context_length=ctx, prefix_cache=False)
    ids = tok.apply_chat_template(user_messages("ft", 1)[0], add_generation_prompt=True)
    times: dict[str, list[float]] = {"k8v4": [], "none": [], "mlx-lm forward": []}
    for i in range(rounds + 3):
        for kv, e in engines.items():
            e.add(f"p{i}", ids, SamplingParams(max_tokens=1, temperature=0.0))
            t = time.perf_counter()
            e.step()
            times[kv].append(time.perf_counter() - t)
        cache = make_prompt_cache(model)
        t = time.perf_counter()
        y = mx.argmax(model(mx.array(ids)[None], cache=cache)[:, -1], axis=-1)
        mx.eval(y, [c.state for c in cache])
        y.item()
        times["mlx-lm forward"].append(time.perf_counter() - t)
    print(f"demo model, prefill of a {len(ids)}-token prompt, {rounds} rounds (median, min):")
    for name, ts in times.items():
        print(f"  {name:15s} {1e3 * statistics.median(ts[3:]):6.2f} ms  {1e3 * min(ts[3:]):6.2f} ms")


def read_back(rounds: int, tokens: int = 3) -> None:
    """Requests alternating between this checkout's K8V4 first tokens and session 8's."""
    import mlx.core as mx

    import worker.engine.attention as att
    import worker.kv.fresh as kf
    import worker.kv.paged_kv as pk

    targets = [(kf, "starts_rows"), (att, "dequantize"), (pk, "dequantize"),
               (att, "_exp2_normalizers")]
    now = tuple(getattr(module, name) for module, name in targets)

    def use(fns: tuple[Any, ...]) -> None:
        for (module, name), fn in zip(targets, fns, strict=True):
            setattr(module, name, fn)

    def mx_dequantize(w: Any, s: Any, b: Any, group_size: int, bits: int) -> Any:
        return mx.dequantize(w, s, b, group_size=group_size, bits=bits)

    def powf_everywhere(scores: Any, host: bool = True, skip_masked: bool = False) -> Any:
        return now[3](scores, host, False)

    before = (lambda starts, bucket: False, mx_dequantize, mx_dequantize, powf_everywhere)
    engine, tok = build("k8v4", "auto")
    modes = {"session 8 (read back)": before, "this checkout": now}
    chats = user_messages("ft", 2 * rounds + 2)
    at: dict[str, list[list[float]]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    for i, chat in enumerate(chats):
        mode = list(modes)[i % 2]
        use(modes[mode])
        ids = tok.apply_chat_template(chat, add_generation_prompt=True)
        c = time.process_time()
        times, _ = one(engine, ids, tokens, f"rb-{i}")
        if i >= 2:  # the first request of each mode is a warm-up
            at[mode].append(times)
            cpu[mode].append(time.process_time() - c)
    use(now)
    print(f"demo model, kv k8v4, {rounds} requests per mode, alternating; medians, ms after add:")
    for mode in modes:
        print(f"  {mode:22s} " + "  ".join(
            f"token {k + 1} {1e3 * statistics.median([r[k] for r in at[mode]]):6.2f}"
            for k in range(tokens)) + f"   CPU to token {tokens}: "
            f"{1e3 * statistics.median(cpu[mode]):6.2f}")
    old, new = at[list(modes)[0]], at[list(modes)[1]]
    paired = [b[-1] / a[-1] for a, b in zip(old, new, strict=False)]
    print(f"  paired, this checkout / session 8, time to token {tokens}: median "
          f"{statistics.median(paired):.3f}")


def main() -> None:
    """Run the rounds and print the medians."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=6)
    ap.add_argument("--kv", default="k8v4", choices=["k8v4", "none"])
    ap.add_argument("--compile-decode", default="auto", choices=["auto", "on", "off"])
    ap.add_argument("--steps", action="store_true", help="print the steps of the last request")
    ap.add_argument("--at-return", action="store_true",
                    help="alternate requests: tokens out mid-step vs at the step's return")
    ap.add_argument("--prefill", action="store_true",
                    help="time the prefill step: K8V4, full precision, mlx-lm's forward")
    ap.add_argument("--read-back", action="store_true",
                    help="alternate requests: this checkout's K8V4 first tokens vs session 8's")
    args = ap.parse_args()
    if args.prefill:
        prefill(args.rounds)
        return
    if args.read_back:
        read_back(args.rounds)
        return
    engine, tok = build(args.kv, args.compile_decode)
    modes = [True, False] if args.at_return else [True]
    chats = user_messages("ft", args.rounds * len(modes) + 1)
    rows: dict[bool, list[list[float]]] = {m: [] for m in modes}
    steps: list[tuple[Any, ...]] = []
    for i, chat in enumerate(chats):
        ids = tok.apply_chat_template(chat, add_generation_prompt=True)
        early = modes[i % len(modes)]
        times, steps = one(engine, ids, args.tokens, f"ft-{i}", early)
        if i:  # the first request is a warm-up of its own
            rows[early].append(times)
    print(f"demo model, kv {args.kv}, compile {args.compile_decode}, {args.rounds} requests per "
          f"mode, prompts ~{len(ids)} tokens; ms after add (median), gap to the previous token:")
    for early in modes:
        print("  tokens out mid-step (on_outputs):" if early else "  tokens out at the step's return:")
        for k in range(args.tokens):
            at = [r[k] for r in rows[early] if len(r) > k]
            gap = [r[k] - (r[k - 1] if k else 0.0) for r in rows[early] if len(r) > k]
            print(f"    token {k + 1}: {1e3 * statistics.median(at):7.2f} ms   "
                  f"gap {1e3 * statistics.median(gap):6.2f} ms")
    if args.steps:
        for a, b, kind, n in steps:
            print(f"  step {kind:8s} {1e3 * a:7.2f} -> {1e3 * b:7.2f} ms ({1e3 * (b - a):6.2f})"
                  f"  tokens {n}")


if __name__ == "__main__":
    main()
