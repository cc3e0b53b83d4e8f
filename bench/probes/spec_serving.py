"""A drafter through the real server at one stream: plain vs speculating servers of ours, in turns.

    LD_PRELOAD="$(python -m worker.cpu.blas)" python -m bench.probes.spec_serving [--model demo]
        [--prompts chat|eval|stories] [--rounds 3] [--requests 8] [--max-tokens 128]
        [--variant draft="--speculative draft --draft-model worker/model/demo/draft"] ...

Starts our plain server and one server per variant side by side and sends the same streamed,
greedy chat requests to each in turn, one at a time (order alternating per request, so a burst
of load hits all alike). Per server, medians over the rounds of: tokens/s as the serving bench
counts it (completion tokens over the round's wall time), time to the first content chunk, and
the client's decode tokens/s (tokens after the first over the time from the first chunk to the
last, summed over the round's requests); each variant's ratio to plain is taken round by round. Answers are checked identical.
``--baseline`` runs each variant from another checkout too (before/after). Prompts: the serving bench's chat workload (``chat``: short story requests) or the demo model's
own evaluation prompts (``eval``, what its draft was trained for).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
from pathlib import Path
from typing import Any

from bench.peers.stream_client import stream_chat
from bench.prompts import user_messages
from bench.servers import Server, ServerGroup

Conv = tuple[list[dict[str, Any]], dict[str, Any]]  # messages, extra payload fields


def one(server: Server, conv: Conv, max_tokens: int) -> dict[str, Any]:
    """Stream one chat request: content chunk times, usage tokens and the text."""
    messages, extra = conv
    got = stream_chat(server, messages, max_tokens, extra)
    times, total = got.times, got.total
    decode = times[-1] - times[0] if len(times) > 1 else 0.0
    return {"ttft": times[0] if times else total, "total": total, "tokens": got.tokens,
            "chunks": len(times), "decode_s": decode, "text": got.text}


def eval_convs() -> list[Conv]:
    """The demo model's evaluation prompts as chat requests (with their tools and thinking)."""
    from tools.demo_model.evaluate import cases

    return [(list(c.messages), {**({"tools": c.tools} if c.tools else {}),
                                "chat_template_kwargs": {"enable_thinking": c.enable_thinking}})
            for c in cases()]


def chat_convs(tag: str, n: int) -> list[Conv]:
    """The serving bench's chat workload: short story requests."""
    return [(m, {}) for m in user_messages(tag, n)]


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print one table."""
    from bench.run_all import DEMO, STORIES
    from bench.servers import ROOT

    paths = {"demo": DEMO, "stories": STORIES, "qwen3": ROOT / "bench" / ".models" / "qwen3-4l-512"}
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="demo", choices=sorted(paths))
    ap.add_argument("--prompts", default="chat", choices=["chat", "eval", "stories"],
                    help="chat: new story requests per round (the serving bench's); eval: the "
                         "demo's evaluation prompts; stories: bench.probes.spec_interleaved's story "
                         "requests (the same 16 every run)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=8, help="requests per round")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--flags", default="--kv-cache-turboquant k8v4",
                    help="serve flags of every server of ours")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=FLAGS")
    ap.add_argument("--baseline", default="",
                    help="another checkout of ours: each variant runs from it too (LABEL-base)")
    ap.add_argument("--env", action="append", default=[], metavar="LABEL:KEY=VALUE",
                    help="environment for one server (LABEL plain or a variant's)")
    a = ap.parse_args(argv)
    path = str(paths[a.model])
    envs: dict[str, dict[str, str]] = {}
    for e in a.env:
        label, _, kv = e.partition(":")
        key, _, value = kv.partition("=")
        envs.setdefault(label, {})[key] = value
    common = ["--max-batch", "32", *shlex.split(a.flags)]
    servers = [Server("plain", "ours", path, common, env_extra=envs.get("plain", {}))]
    for v in a.variant:
        label, _, flags = v.partition("=")
        servers.append(Server(label, "ours", path, [*common, *shlex.split(flags)],
                              env_extra=envs.get(label, {})))
        if a.baseline:
            servers.append(Server(f"{label}-base", "ours", path, [*common, *shlex.split(flags)],
                                  env_extra=envs.get(f"{label}-base", {}), cwd=Path(a.baseline)))
    pool = {"eval": eval_convs, "stories": lambda: chat_convs("s", 16)}.get(a.prompts, lambda: None)()
    rows: dict[str, list[dict[str, float]]] = {s.name: [] for s in servers}
    with ServerGroup(servers):
        for s in servers:  # the serving bench's warm-up: short requests, none of the prompts
            for conv in chat_convs("warm-a", 2):
                one(s, conv, 16)
        for rnd in range(a.rounds):
            convs = (chat_convs(f"ch1r{rnd}", a.requests) if pool is None
                     else [pool[(rnd * a.requests + i) % len(pool)] for i in range(a.requests)])
            got: dict[str, list[dict[str, Any]]] = {s.name: [] for s in servers}
            for i, conv in enumerate(convs):
                for s in servers if (rnd + i) % 2 == 0 else servers[::-1]:
                    got[s.name].append(one(s, conv, a.max_tokens))
                texts = {got[s.name][-1]["text"] for s in servers}
                assert len(texts) == 1, f"round {rnd} request {i}: answers differ: {texts}"
            for s in servers:
                res = got[s.name]
                rows[s.name].append({
                    "tok_s": sum(r["tokens"] for r in res) / sum(r["total"] for r in res),
                    "ttft_ms": 1000 * statistics.median(r["ttft"] for r in res),
                    # tokens after the first over the time from the first chunk to the last
                    # (requests answered in one chunk, e.g. a tool call, left out)
                    "decode_tps": sum(r["tokens"] - 1 for r in res if r["decode_s"] > 0)
                    / max(1e-9, sum(r["decode_s"] for r in res)),
                    "tokens": sum(r["tokens"] for r in res)})
            print(f"round {rnd}: " + "  ".join(
                f"{s.name} {rows[s.name][-1]['tok_s']:.1f} tok/s (decode {rows[s.name][-1]['decode_tps']:.1f}, "
                f"chunks {sum(r['chunks'] for r in got[s.name])})" for s in servers), flush=True)
        status = {s.name: s.worker_status() for s in servers}
    print(f"\n{a.model}, prompts {a.prompts}, {a.rounds} rounds x {a.requests} requests, "
          f"max_tokens {a.max_tokens}, one stream; medians over rounds")
    print("| server | tokens/round | tok/s | vs plain | TTFT ms | client decode tok/s | vs plain |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = rows["plain"]
    for s in servers:
        r = rows[s.name]
        med = {k: statistics.median(x[k] for x in r) for k in r[0]}
        ratio = statistics.median(x["tok_s"] / b["tok_s"] for x, b in zip(r, base, strict=True))
        dratio = statistics.median([x["decode_tps"] / b["decode_tps"]
                                    for x, b in zip(r, base, strict=True) if b["decode_tps"]] or [0.0])
        print(f"| {s.name} | {med['tokens']:.0f} | {med['tok_s']:.1f} | {ratio:.2f}x "
              f"| {med['ttft_ms']:.1f} | {med['decode_tps']:.1f} | {dratio:.2f}x |")
    for name, st in status.items():
        print(f"{name}: steps {st.get('steps')} overlapped {st.get('overlapped_steps')} "
              f"drafted {st.get('spec_draft_tokens', 0)} accepted {st.get('spec_accepted_tokens', 0)} "
              f"acceptance {st.get('spec_acceptance_rate', '-')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
