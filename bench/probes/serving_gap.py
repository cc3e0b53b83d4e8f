"""Where serving wall time goes at N streams: our server's steps against the in-engine step.

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.probes.serving_gap \\
        [--models qwen3] [--concurrency 8,32] [--rounds 3] [--baseline ../checkout]

Keeps our server up (and a baseline checkout's, with ``--baseline``) and, per round and
concurrency, in turns: one closed-loop batch of ``bench.peers.serving_cpu``'s workload (2 x
concurrency requests, 128 tokens, greedy) against each server, then ``bench.peers.decode_step``'s
in-engine step (ours, K8V4, same rows, no peer) in a child process. For each batch it reads the
worker's books (steps, overlapped steps, seconds in synchronous steps) and the kernel's
scheduler books of every thread of the server (``/proc/<pid>/task/<tid>/schedstat``: seconds on
a CPU and seconds runnable but waiting for one; the rest of the batch's wall it slept).

Per concurrency it prints the medians over rounds of: the batch's wall per step, split into the
synchronous steps (prefill, a request's last tokens) and the overlapped ones; the in-engine wall
per step of the same run; their ratio; and per thread its share of the batch's wall on a CPU,
waiting for a CPU and asleep. A thread that waits for a CPU lost it to another runnable thread
(ours or another process): with 2 cores, that is the machine, not the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.peers.stream_overhead import server_processes
from bench.prompts import user_messages
from bench.servers import ROOT, Server, ServerGroup
from bench.serving import run_batch


def thread_sched(server: Server) -> dict[str, tuple[float, float]]:
    """(seconds on a CPU, seconds waiting for one) so far of each thread of the server's
    processes, keyed "role/thread" as bench.peers.serving_cpu keys its CPU (threads of one name summed)."""
    out: dict[str, tuple[float, float]] = {}
    for role, p in server_processes(server):
        try:
            tids = sorted(int(t) for t in os.listdir(f"/proc/{p.pid}/task"))
        except OSError:
            continue
        for rank, tid in enumerate(tids):
            try:
                comm = Path(f"/proc/{p.pid}/task/{tid}/comm").read_text().strip()
                run, wait = Path(f"/proc/{p.pid}/task/{tid}/schedstat").read_text().split()[:2]
            except OSError:
                continue
            key = f"{role}/{'main' if tid == p.pid else f'{comm}#{rank}'}"
            a, b = out.get(key, (0.0, 0.0))
            out[key] = (a + int(run) / 1e9, b + int(wait) / 1e9)
    return out


def one_batch(s: Server, convs: list[list[dict[str, str]]], conc: int,
              max_tokens: int) -> dict[str, Any]:
    """Run one closed-loop batch against S: tok/s, the engine's step split, thread shares."""
    e0, t0, w0 = s.worker_status(), thread_sched(s), time.monotonic()
    b = asyncio.run(run_batch(s.base_url, s.request_model, convs, concurrency=conc,
                              max_tokens=max_tokens))
    wall = time.monotonic() - w0
    e1, t1 = s.worker_status(), thread_sched(s)
    d = {k: float(e1.get(k) or 0) - float(e0.get(k) or 0)
         for k in ("steps", "overlapped_steps", "decode_rows", "sync_step_seconds")}
    steps, over = max(d["steps"], 1.0), max(d["overlapped_steps"], 1.0)
    threads = {}
    for k, (run, wait) in t1.items():
        r0, q0 = t0.get(k, (0.0, 0.0))
        if run - r0 + wait - q0 >= 0.01 * wall:
            threads[k] = (100 * (run - r0) / wall, 100 * (wait - q0) / wall)
    return {"tok_s": b.tokens_per_s, "errors": len(b.errors), "wall_ms_step": 1000 * wall / steps,
            "rows_step": d["decode_rows"] / steps, "sync_share": d["sync_step_seconds"] / wall,
            "sync_steps": d["steps"] - d["overlapped_steps"],
            "overlapped_ms_step": 1000 * (wall - d["sync_step_seconds"]) / over,
            "threads": threads}


def in_engine(rows: int, model: str, cwd: Path) -> float:
    """bench.peers.decode_step's wall ms per step of ours (K8V4, ROWS rows) in a child of CWD."""
    cmd = [sys.executable, "-m", "bench.peers.decode_step", "--json", "--no-peer",
           "--repeats", "1", "--models", model, "--rows", str(rows), "--kv", "k8v4"]
    out = subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])[0]["wall"])


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print one table per concurrency."""
    from bench.run_all import STORIES

    paths = {"stories": STORIES, "qwen3": ROOT / "bench" / ".models" / "qwen3-4l-512"}
    profile = {"stories": "stories260K", "qwen3": "qwen3"}
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default="qwen3")
    ap.add_argument("--concurrency", default="8,32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--baseline", default="", help="another checkout of ours (before/after)")
    a = ap.parse_args(argv)
    concs = [int(c) for c in a.concurrency.split(",")]
    for name in a.models.split(","):
        path = str(paths[name])
        servers = [Server("ours", "ours", path, ["--max-batch", "32"])]
        if a.baseline:
            servers.append(Server("ours-base", "ours", path, ["--max-batch", "32"],
                                  cwd=Path(a.baseline)))
        with ServerGroup(servers):
            for s in servers:
                for c in concs:
                    asyncio.run(run_batch(s.base_url, s.request_model, user_messages("warm", c),
                                          concurrency=c, max_tokens=16))
            for c in concs:
                res: dict[str, list[dict[str, Any]]] = {s.name: [] for s in servers}
                engine: list[float] = []
                for i in range(a.rounds):
                    convs = user_messages(f"gap{c}r{i}", 2 * c)
                    for s in servers if i % 2 == 0 else servers[::-1]:
                        row = one_batch(s, convs, c, a.max_tokens)
                        res[s.name].append(row)
                        print(f"  {name} c={c} round {i} {s.name:<9} {row['tok_s']:6.1f} tok/s, "
                              f"{row['wall_ms_step']:.1f} ms/step, load {os.getloadavg()[0]:.1f}",
                              flush=True)
                    engine.append(in_engine(c, profile[name], ROOT))
                    print(f"  {name} c={c} round {i} in-engine {engine[-1]:.1f} ms/step", flush=True)
                report(name, c, res, engine)
    return 0


def report(name: str, c: int, res: dict[str, list[dict[str, Any]]], engine: list[float]) -> None:
    """Print the medians of one model and concurrency."""
    med = statistics.median
    print(f"\n{name}, {c} streams, medians of {len(engine)} rounds; in-engine step "
          f"{med(engine):.1f} ms wall")
    print("| server | tok/s | wall ms/step | rows/step | sync steps | sync share of wall | "
          "overlapped ms/step | wall/step over in-engine (per round) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for s, rows in res.items():
        ratios = [r["wall_ms_step"] / e for r, e in zip(rows, engine, strict=True)]
        print(f"| {s} | {med(r['tok_s'] for r in rows):.0f} | "
              f"{med(r['wall_ms_step'] for r in rows):.1f} | {med(r['rows_step'] for r in rows):.2f} | "
              f"{med(r['sync_steps'] for r in rows):.0f} | {med(r['sync_share'] for r in rows):.1%} | "
              f"{med(r['overlapped_ms_step'] for r in rows):.1f} | {med(ratios):.2f} ("
              + ", ".join(f"{x:.2f}" for x in ratios) + ") |")
    for s, rows in res.items():
        keys = sorted({k for r in rows for k in r["threads"]})
        parts = []
        for k in keys:
            on = med(r["threads"].get(k, (0.0, 0.0))[0] for r in rows)
            wait = med(r["threads"].get(k, (0.0, 0.0))[1] for r in rows)
            parts.append(f"{k} {on:.0f}% on CPU / {wait:.0f}% waiting")
        print(f"{s} threads (share of the batch's wall): " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
