"""Time to the first visible text at one stream, through the server: ours, another checkout, peer.

    LD_PRELOAD="$(python -m worker.cpu.blas)" python -m bench.peers.first_tokens_serving [--rounds 40]
        [--baseline DIR] [--no-peer] [--max-tokens 8] [--ours-flags "..."]

Starts ours (this checkout), optionally ours from another checkout (``--baseline``, e.g. a clone
of main: before/after) and ``mlx_lm.server`` (same OpenBLAS), then sends one short streamed
greedy chat (the serving bench's chat prompts) to each server per round, in an order that
rotates every round, one request at a time. Per server: medians (and quartiles) of the time to
the first chunk with visible text (``bench.run_all``'s TTFT: the same token position on every
server) and to the first chunk of any text; and per round the ratio of each server's TTFT to the
first server's, whose median is the paired comparison (a load burst hits one round of all
servers alike).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from pathlib import Path

import httpx

from bench.prompts import user_messages
from bench.servers import Server, ServerGroup
from bench.serving import RequestResult, chat_payload, stream_chat


def one(server: Server, messages: list[dict[str, str]], max_tokens: int) -> RequestResult:
    """One streamed chat request against SERVER."""
    async def go() -> RequestResult:
        async with httpx.AsyncClient(timeout=120) as client:
            return await stream_chat(client, server.base_url + "/v1/chat/completions",
                                     chat_payload(server.request_model, messages, max_tokens), 120)
    return asyncio.run(go())


def quartiles(xs: list[float]) -> str:
    """Median [p25-p75] in ms."""
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return f"{1e3 * q[1]:6.1f} [{1e3 * q[0]:.1f}-{1e3 * q[2]:.1f}]"


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print one table."""
    from bench.run_all import DEMO, MLX_LM_FLAGS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--baseline", default="", help="another checkout of ours (before/after)")
    ap.add_argument("--no-peer", action="store_true", help="no mlx_lm.server")
    ap.add_argument("--ours-flags", default="", help="extra `serve` flags for ours (both checkouts)")
    a = ap.parse_args(argv)
    path = str(DEMO)
    servers = [Server("ours", "ours", path, ["--max-batch", "32", *a.ours_flags.split()])]
    if a.baseline:
        servers.append(Server("ours-base", "ours", path,
                              ["--max-batch", "32", *a.ours_flags.split()], cwd=Path(a.baseline)))
    if not a.no_peer:
        servers.append(Server("mlx_lm", "mlx_lm", path, MLX_LM_FLAGS))
    convs = user_messages("ttft", max(a.rounds, 8))
    res: dict[str, list[RequestResult]] = {s.name: [] for s in servers}
    with ServerGroup(servers):
        for s in servers:  # warm up: every server's first requests compile or allocate
            for c in convs[:3]:
                one(s, c, a.max_tokens)
        for i in range(a.rounds):
            k = i % len(servers)
            for s in servers[k:] + servers[:k]:
                r = one(s, convs[i % len(convs)], a.max_tokens)
                if not r.ok or r.ttft is None:
                    raise SystemExit(f"{s.name}: {r.error or 'no visible text'}")
                res[s.name].append(r)
    first = servers[0].name
    print(f"demo model, {a.rounds} rounds, max_tokens {a.max_tokens}, one request at a time")
    print("| server | TTFT visible ms, median [p25-p75] | first any text ms | paired TTFT vs "
          f"{first} (median of per-round ratios) |")
    print("|---|---:|---:|---:|")
    for s in servers:
        ttft = [r.ttft or 0.0 for r in res[s.name]]
        ratios = [t / (b.ttft or 1.0) for t, b in zip(ttft, res[first], strict=True)]
        print(f"| {s.name} | {quartiles(ttft)} | "
              f"{quartiles([r.ttft_any or 0.0 for r in res[s.name]])} | {statistics.median(ratios):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
