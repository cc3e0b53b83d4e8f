"""Replicas bench: aggregate tokens/s with 2 replicas vs 1 on the shared-prefix workload, and
the prefix-cache hit rate of cache-aware routing vs round robin.

    .venv/bin/python -m bench.probes.replicas [--model PATH] [--turns 6] [--users 2] [--max-tokens 32]

Three servers run one after another (1 replica; 2 cache_aware; 2 round_robin), each with its
workers over tcp loopback with CURVE, on the same workload: 4 long system prompts, USERS
conversations each per round, TURNS rounds, each round's requests sent together. Each server
first runs one round on other system prompts to warm up (compile, page pool); the measured pass
then starts with nothing of its prompts cached."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import replica_workload as wl
from tests.e2e.harness import ROOT, Server, free_port
from tests.ops.harness import DEMO, wait_for

SETUPS = (("1 replica", ("--replicas", "1")),
          ("2 replicas, cache_aware", ("--replicas", "2", "--routing", "cache_aware")),
          ("2 replicas, round_robin", ("--replicas", "2", "--routing", "round_robin")))


def measure(model: str, keys: Path, extra: tuple[str, ...], args: argparse.Namespace) -> dict[str, Any]:
    """One server: warm-up pass, then the measured pass; tokens/s and prefix-cache counters."""
    srv = Server(model, "--served-model-name", "a", "--worker-address",
                 f"tcp://127.0.0.1:{free_port()}", "--curve-dir", str(keys), *extra)
    try:
        srv.wait_ready(300)
        n = int(extra[1])
        wait_for(lambda: sum(r["state"] == "ready" for r in wl.replicas(srv.url, "a")) == n)
        plan = wl.rounds(turns=args.turns, users=args.users)
        # warm-up on other system prompts: compile and pages, while the measured pass starts cold
        wl.run(srv.url, "a", wl.rounds(turns=1, users=args.users, seed=99), max_tokens=4)
        before = wl.counters(srv.url, "a")
        result = wl.run(srv.url, "a", plan, max_tokens=args.max_tokens, concurrency=16)
        after = wl.counters(srv.url, "a")
        delta = {k: after[k] - before[k] for k in after}
        rows = wl.replicas(srv.url, "a")
        return {**result, "prompt_tokens_computed": delta["computed"],
                "prefix_hit_rate": round(delta["hits"] / delta["queries"], 4)
                if delta["queries"] else None,
                "route_hit_rate": [r["route_prefix_hit_rate"] for r in rows]}
    finally:
        srv.stop()


def main() -> None:
    """Run the three setups and print one line each (and JSON with --json)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEMO)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--users", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp) / "keys"
        subprocess.run([sys.executable, "-m", "gateway", "keys", str(keys)], cwd=ROOT,
                       check=True, capture_output=True, timeout=60)
        results = {name: measure(args.model, keys, extra, args) for name, extra in SETUPS}
    base = results["1 replica"]["tokens_per_s"]
    for name, r in results.items():
        print(f"{name:26s} {r['tokens_per_s']:8.1f} tok/s ({r['tokens_per_s'] / base:.2f}x)  "
              f"prompt tokens computed {r['prompt_tokens_computed']:6d}  "
              f"worker prefix hit rate {r['prefix_hit_rate']}  "
              f"router estimate {r['route_hit_rate']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
