"""Single-stream per-token overhead: ours vs ``mlx_lm.server``, one streamed request at a time.

    .venv/bin/python -m bench.peers.stream_overhead [--models demo,stories,qwen3] [--rounds 5]
        [--max-tokens 128] [--hold SECONDS]

Starts both servers side by side, then alternates long streamed chat requests (temperature 0,
``max_tokens`` 128) between them and reports, per server, the medians over the rounds of the
time to the first chunk, the inter-chunk gap at the client (decode: chunk 2 to the last), and
the decode tokens/s at the client; for ours also the engine's own decode tokens/s from
``/v1/workers`` (``decode_tokens_per_s``), so client-side minus engine time is the server's
per-token overhead. ``--hold`` keeps sending requests to ours for that many seconds first (to
attach py-spy to the gateway and the worker; their pids are printed).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.peers.stream_client import stream_chat
from bench.prompts import user_messages
from bench.servers import Server, ServerGroup


def one(server: Server, messages: list[dict[str, str]], max_tokens: int) -> dict[str, float]:
    """Stream one chat request; times of the chunks that carry content."""
    got = stream_chat(server, messages, max_tokens)
    times, tokens = got.times, got.tokens
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    decode = times[-1] - times[0] if len(times) > 1 else 0.0
    return {"ttft": times[0] if times else 0.0, "chunks": len(times), "tokens": tokens,
            "gap_ms": 1000 * statistics.median(gaps) if gaps else 0.0,
            "decode_tps": (tokens - 1) / decode if decode else 0.0}


def short_thread_name(comm: str, rank: int) -> str:
    """A server thread's name in stream_overhead's tables: ZeroMQ's I/O thread, or its rank."""
    return "zmq-io" if comm.startswith("ZMQ") else f"thread{rank}"


def server_processes(server: Server) -> Iterator[tuple[str, Any]]:
    """(role, psutil.Process) of the server's process and its descendants still alive: role
    gateway, worker or server (a peer)."""
    import psutil

    if server.proc is None:
        return
    root = psutil.Process(server.proc.pid)
    for p in [root, *root.children(recursive=True)]:
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        yield "worker" if "-m worker" in cmd else "gateway" if "gateway" in cmd else "server", p


def group_cpu(server: Server, name: Callable[[str, int], str] = short_thread_name
              ) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each thread of the server's processes, keyed
    "role/thread": role gateway, worker or server (a peer); thread main, or NAME(comm, rank) of
    the thread's /proc comm and its rank among the process's threads by id."""
    import psutil

    out: dict[str, float] = {}
    for role, p in server_processes(server):
        try:
            threads = p.threads()
        except psutil.Error:
            continue
        for rank, t in enumerate(sorted(threads, key=lambda t: t.id)):
            try:
                comm = Path(f"/proc/{p.pid}/task/{t.id}/comm").read_text().strip()
            except OSError:
                comm = "?"
            key = f"{role}/{'main' if t.id == p.pid else name(comm, rank)}"
            out[key] = out.get(key, 0.0) + t.user_time + t.system_time
    return out


def engine_tps(server: Server) -> float:
    """Our worker's own decode tokens/s (decode rows over the seconds spent in decode steps)."""
    return float(server.worker_status().get("decode_tokens_per_s") or 0.0)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print one table per model."""
    from bench.run_all import DEMO, STORIES
    from bench.servers import ROOT

    paths = {"demo": DEMO, "stories": STORIES, "qwen3": ROOT / "bench" / ".models" / "qwen3-4l-512"}
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default="demo,stories")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--hold", type=float, default=0.0)
    ap.add_argument("--ours-flags", default="")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--ours-env", action="append", default=[], metavar="KEY=VALUE",
                    help="environment for this checkout's server only")
    ap.add_argument("--baseline", default="",
                    help="another checkout of ours to run beside this one (before/after)")
    a = ap.parse_args(argv)
    for name in a.models.split(","):
        path = str(paths[name])
        servers = [] if a.no_peer else [Server("mlx_lm", "mlx_lm", path,
                                               ["--decode-concurrency", "32",
                                                "--prompt-concurrency", "8"])]
        ours = Server("ours", "ours", path, ["--max-batch", "32", *a.ours_flags.split()],
                      env_extra=dict(kv.split("=", 1) for kv in a.ours_env))
        servers.append(ours)
        if a.baseline:
            servers.append(Server("ours-base", "ours", path,
                                  ["--max-batch", "32", *a.ours_flags.split()],
                                  cwd=Path(a.baseline)))
        convs = user_messages("ovh", 8)
        with ServerGroup(servers):
            for s in servers:  # warm up
                one(s, convs[0], 16)
            if a.hold:
                st = ours.worker_status()
                print(f"gateway pid {ours.proc.pid if ours.proc else '?'} worker pid {st.get('pid')}",
                      flush=True)
                end = time.monotonic() + a.hold
                while time.monotonic() < end:
                    one(ours, convs[0], a.max_tokens)
            res: dict[str, list[dict[str, float]]] = {s.name: [] for s in servers}
            cpu: dict[str, dict[str, float]] = {s.name: {} for s in servers}
            for i in range(a.rounds):
                order = servers if i % 2 == 0 else servers[::-1]
                for s in order:
                    before = group_cpu(s)
                    row = one(s, convs[i % len(convs)], a.max_tokens)
                    after = group_cpu(s)
                    for key, t in after.items():
                        cpu[s.name][key] = cpu[s.name].get(key, 0.0) + t - before.get(key, 0.0)
                    row["cpu_ms_per_token"] = 1000 * (sum(after.values()) - sum(before.values())) \
                        / max(row["tokens"], 1)
                    res[s.name].append(row)
            eng = engine_tps(ours)
        for s in servers:
            print(s.name, "ttft ms per round", [round(1000 * r["ttft"]) for r in res[s.name]],
                  "tok/s", [round(r["decode_tps"]) for r in res[s.name]])
        print(f"\n{name}: {a.rounds} rounds, max_tokens {a.max_tokens}, medians")
        print("| server | tokens | chunks | TTFT ms | gap ms | client decode tok/s | vs first "
              "| CPU ms/token | vs first |")
        base: dict[str, float] | None = None
        for s in servers:
            rows = res[s.name]
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            base = base or med
            print(f"| {s.name} | {med['tokens']:.0f} | {med['chunks']:.0f} | {1000 * med['ttft']:.1f} "
                  f"| {med['gap_ms']:.2f} | {med['decode_tps']:.1f} "
                  f"| {med['decode_tps'] / base['decode_tps']:.2f}x | {med['cpu_ms_per_token']:.2f} "
                  f"| {base['cpu_ms_per_token'] / med['cpu_ms_per_token']:.2f}x |")
        for s in servers:
            toks = sum(r["tokens"] for r in res[s.name])
            print(f"{s.name}: CPU ms per generated token: " + ", ".join(
                f"{role} {1000 * t / toks:.2f}" for role, t in sorted(cpu[s.name].items())
                if 1000 * t / toks >= 0.01)
                + f" (total {1000 * sum(cpu[s.name].values()) / toks:.2f})")
        print(f"ours engine decode tok/s (worker status, whole run): {eng:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
