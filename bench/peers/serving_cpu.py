"""CPU per generated token of every process under concurrent streaming load: ours vs peers.

    .venv/bin/python -m bench.peers.serving_cpu [--models stories,qwen3,qwen3_5] [--concurrency 8,32] [--rounds 3]
        [--peers mlx_lm] [--baseline ../checkout] [--scale 4] [--hold SECONDS]

Starts the servers side by side and runs ``bench.run_all``'s chat workload (closed loop, 2 x
concurrency requests x scale, ``max_tokens`` 128, greedy) against one server at a time, in turns
(order reversed every other round). Around each batch it reads the CPU seconds (user + system)
of every thread of the server's processes (gateway, worker: main, MLX stream, ZeroMQ, other
threads; a peer's one process) and of this client process, and reports per server the medians
over the rounds of tokens/s, TTFT p50 and CPU milliseconds per generated token by role.
``--hold`` first keeps ours under that load for SECONDS and prints the pids (for py-spy).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.peers.stream_overhead import group_cpu as thread_cpu
from bench.prompts import user_messages
from bench.servers import Server, ServerGroup
from bench.serving import run_batch

ENGINE_KEYS = ("steps", "overlapped_steps", "decode_rows", "sync_step_seconds")


def group_cpu(server: Server) -> dict[str, float]:
    """CPU seconds so far of every thread of the server's processes, keyed "role/thread"
    (thread main, or its /proc name and rank: bench.peers.stream_overhead.group_cpu)."""
    return thread_cpu(server, lambda comm, rank: f"{comm}#{rank}")


def client_cpu() -> float:
    """CPU seconds this process (the load generator) has used."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def one_batch(s: Server, convs: list[list[dict[str, str]]], conc: int,
              max_tokens: int) -> dict[str, Any]:
    """Run one closed-loop batch against S; tokens/s, TTFT p50 and CPU ms per token by role."""
    e0 = s.worker_status()
    before, c0, w0 = group_cpu(s), client_cpu(), time.monotonic()
    b = asyncio.run(run_batch(s.base_url, s.request_model, convs, concurrency=conc,
                              max_tokens=max_tokens))
    after, c1, wall = group_cpu(s), client_cpu(), time.monotonic() - w0
    toks = max(b.generated_tokens, 1)
    row: dict[str, Any] = {"tok_s": b.tokens_per_s, "ttft_p50": b.summary()["ttft_p50_s"] or 0.0,
                           "tokens": b.generated_tokens, "errors": len(b.errors)}
    cpu = {k: 1000 * (t - before.get(k, 0.0)) / toks for k, t in after.items()}
    row["cpu"] = cpu
    row["server_ms"] = sum(cpu.values())
    row["client_ms"] = 1000 * (c1 - c0) / toks
    row["wall_ms"] = 1000 * wall / toks  # wall per token: 2 cores give 2x this in CPU at most
    e1 = s.worker_status()
    if e0 and e1:  # ours: the engine's own books over the batch
        d = {k: float(e1.get(k) or 0) - float(e0.get(k) or 0) for k in ENGINE_KEYS}
        steps = max(d["steps"], 1.0)
        row["engine"] = {"steps": d["steps"], "overlapped": d["overlapped_steps"] / steps,
                         "rows_per_step": d["decode_rows"] / steps,
                         "wall_ms_per_step": 1000 * wall / steps,
                         "sync_share": d["sync_step_seconds"] / wall,
                         "tokens_per_request": b.generated_tokens / max(len(b.ok), 1)}
    return row


def exit_on_sigterm() -> None:
    """SIGTERM raises SystemExit, so the running ServerGroup stops its servers on the way out
    (the default action ended the process and left every gateway and worker running)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print one table per model and concurrency."""
    from bench.run_all import MLX_LM_FLAGS, STORIES
    from bench.servers import ROOT

    paths = {"stories": STORIES, "qwen3": ROOT / "bench" / ".models" / "qwen3-4l-512",
             "qwen3_5": ROOT / "bench" / ".models" / "qwen3_5-4l-512"}
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default="stories")
    ap.add_argument("--concurrency", default="8,32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scale", type=int, default=0, help="requests = 2 x concurrency x scale "
                    "(default: 4 on stories, 1 otherwise, as bench.run_all)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--peers", default="mlx_lm")
    ap.add_argument("--ours-flags", default="")
    ap.add_argument("--baseline", default="", help="another checkout of ours (before/after)")
    ap.add_argument("--no-ours", action="store_true", help="only the baseline and the peers")
    ap.add_argument("--hold", type=float, default=0.0)
    ap.add_argument("--variant-env", action="append", default=[], metavar="KEY=VALUE",
                    help="one more server of ours, ours-env, with this environment")
    ap.add_argument("--variant-flags", default="",
                    help="one more server of ours, ours-var, with these extra serve flags")
    a = ap.parse_args(argv)
    unknown = [n for n in a.models.split(",") if n not in paths]
    if unknown:  # before any server starts, not after the models before it ran
        ap.error(f"--models: unknown {', '.join(unknown)} (known: {', '.join(paths)})")
    exit_on_sigterm()
    concs = [int(c) for c in a.concurrency.split(",")]
    for name in a.models.split(","):
        if name == "qwen3_5":  # the hybrid bench model: built on first use (bench.build_qwen3_5_model)
            from bench.build_qwen3_5_model import build

            build(paths[name])
        path = str(paths[name])
        scale = a.scale or (4 if name == "stories" else 1)
        servers: list[Server] = []
        if "mlx_lm" in a.peers.split(","):
            servers.append(Server("mlx_lm", "mlx_lm", path, list(MLX_LM_FLAGS)))
        if "rapid_mlx_ref" in a.peers.split(","):
            servers.append(Server("rapid_mlx_ref", "rapid_mlx_ref", path, []))
        flags = ["--max-batch", "32", *a.ours_flags.split()]
        if not a.no_ours:
            servers.append(Server("ours", "ours", path, flags))
        if a.variant_env:
            servers.append(Server("ours-env", "ours", path, flags,
                                  env_extra=dict(kv.split("=", 1) for kv in a.variant_env)))
        if a.variant_flags:
            servers.append(Server("ours-var", "ours", path, [*flags, *a.variant_flags.split()]))
        if a.baseline:
            servers.append(Server("ours-base", "ours", path, flags, cwd=Path(a.baseline)))
        with ServerGroup(servers):
            for s in servers:  # warm up: the batch shapes of every concurrency
                for c in concs:
                    asyncio.run(run_batch(s.base_url, s.request_model, user_messages("warm", c),
                                          concurrency=c, max_tokens=16))
            if a.hold:
                ours = servers[-1]
                print(f"hold: gateway pid {ours.proc.pid if ours.proc else '?'} worker pid "
                      f"{ours.worker_status().get('pid')}", flush=True)
                end = time.monotonic() + a.hold
                while time.monotonic() < end:
                    one_batch(ours, user_messages("hold", 2 * concs[-1] * scale), concs[-1],
                              a.max_tokens)
            for c in concs:
                n = 2 * c * scale
                res: dict[str, list[dict[str, Any]]] = {s.name: [] for s in servers}
                for i in range(a.rounds):
                    convs = user_messages(f"cpu{c}r{i}", n)
                    for s in servers if i % 2 == 0 else servers[::-1]:
                        row = one_batch(s, convs, c, a.max_tokens)
                        res[s.name].append(row)
                        print(f"  {name} c={c} round {i} {s.name:<10} {row['tok_s']:7.1f} tok/s "
                              f"TTFT p50 {row['ttft_p50']:.3f} s  server {row['server_ms']:.2f} "
                              f"client {row['client_ms']:.2f} CPU ms/token  errors "
                              f"{row['errors']}", flush=True)
                report(name, c, n, servers, res)
    return 0


def report(name: str, c: int, n: int, servers: list[Server],
           res: dict[str, list[dict[str, Any]]]) -> None:
    """Print the medians of one model and concurrency."""
    print(f"\n{name}, {c} streams, {n} requests per round, medians of {len(res[servers[0].name])}"
          " rounds")
    print("| server | tok/s | TTFT p50 s | wall ms/token | server CPU ms/token | client CPU "
          "ms/token | by thread (CPU ms/token) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for s in servers:
        rows = res[s.name]
        med = {k: statistics.median(r[k] for r in rows)
               for k in ("tok_s", "ttft_p50", "wall_ms", "server_ms", "client_ms")}
        keys = sorted({k for r in rows for k in r["cpu"]})
        parts = {k: statistics.median(r["cpu"].get(k, 0.0) for r in rows) for k in keys}
        by = ", ".join(f"{k} {v:.2f}" for k, v in parts.items() if v >= 0.01)
        print(f"| {s.name} | {med['tok_s']:.0f} | {med['ttft_p50']:.3f} | {med['wall_ms']:.3f} "
              f"| {med['server_ms']:.3f} | {med['client_ms']:.3f} | {by} |", flush=True)
    for s in servers:
        eng = [r["engine"] for r in res[s.name] if "engine" in r]
        if eng:
            print(f"{s.name} engine (medians): " + ", ".join(
                f"{k} {statistics.median(e[k] for e in eng):.2f}" for k in eng[0]), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
