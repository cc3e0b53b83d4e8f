"""Structured output through the server: 16 free streams vs 8 json_schema + 8 free streams.

    python -m bench.probes.grammar_serving [--model bench/.models/qwen3-4l-512] [--tokens 128] [--rounds 3]

Starts `rapid-mlx serve MODEL` (its defaults: K8V4, overlapped decode), then per round runs both
mixes of 16 concurrent streaming chat requests (temperature 1.0, `max_tokens` TOKENS, free rows
with `ignore_eos`, constrained rows under bench.probes.grammar_engine's SCHEMA, an array of 20-40 objects
so no row finishes early) and prints aggregate generated tokens/s of each mix and their ratio
(median over the rounds; rounds alternate the order). Every constrained answer is checked to be
a JSON prefix of the schema's shape or complete JSON; any failed request aborts the run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from pathlib import Path

import httpx

from bench.probes.grammar_engine import SCHEMA
from bench.servers import ROOT, Server
from bench.serving import stream_chat

MESSAGES = [{"role": "user", "content": "List the records as JSON."}]


def payload(model: str, tokens: int, constrained: bool) -> dict[str, object]:
    """One streamed request of the mix."""
    body: dict[str, object] = {
        "model": model, "messages": MESSAGES, "max_tokens": tokens, "temperature": 1.0,
        "stream": True, "stream_options": {"include_usage": True}}
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "records", "schema": SCHEMA, "strict": True}}
    else:
        body["ignore_eos"] = True
    return body


async def mix(base: str, model: str, tokens: int, constrained: int) -> float:
    """Aggregate generated tokens/s of 16 concurrent streams, CONSTRAINED of them under SCHEMA."""
    url = base + "/v1/chat/completions"
    async with httpx.AsyncClient(timeout=600) as client:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        results = await asyncio.gather(*(
            stream_chat(client, url, payload(model, tokens, i < constrained), 600.0)
            for i in range(16)))
        wall = loop.time() - t0
    bad = [r.error for r in results if not r.ok]
    if bad:
        raise SystemExit(f"failed requests: {bad[:3]}")
    for r in results[:constrained]:
        if not r.text.startswith("["):
            raise SystemExit(f"a constrained answer is not the schema's array: {r.text[:80]!r}")
    return sum(r.completion_tokens or 0 for r in results) / wall


def main() -> None:
    """Serve the model, run the rounds, print the table."""
    ap = argparse.ArgumentParser(prog="python -m bench.probes.grammar_serving")
    ap.add_argument("--model", default=str(ROOT / "bench" / ".models" / "qwen3-4l-512"))
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not Path(args.model).exists():
        raise SystemExit(f"{args.model} is missing: python -m bench.build_qwen3_model")
    server = Server(name="ours-grammar", kind="ours", model_path=args.model)
    server.start()
    try:
        server.wait_ready()
        asyncio.run(mix(server.base_url, server.alias, 16, 8))  # warm-up (grammar compiled)
        free: list[float] = []
        mixed: list[float] = []
        for i in range(args.rounds):
            order = [(free, 0), (mixed, 8)] if i % 2 == 0 else [(mixed, 8), (free, 0)]
            for out, constrained in order:
                out.append(asyncio.run(mix(server.base_url, server.alias, args.tokens,
                                           constrained)))
        f, m = statistics.median(free), statistics.median(mixed)
        print(f"16 free            {f:8.1f} tok/s  (rounds: {[round(x) for x in free]})")
        print(f"8 json + 8 free    {m:8.1f} tok/s  (rounds: {[round(x) for x in mixed]})")
        print(f"ratio {m / f:.3f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
