"""Where a closed-loop wave's turnover goes: timeline marks in our gateway and worker.

.venv/bin/python -m bench.turnover [--batches 3] [--concurrency 32] [--max-tokens 128]
[--trace-dir DIR] [--analyze DIR]

Starts ours on stories260K with ``bench/turnover_hook`` on the servers' PYTHONPATH (it wraps a
few functions and writes ``<event> <key> <monotonic s>`` lines per process), runs
``bench.run_all``'s chat workload (closed loop, 256 requests a batch, greedy), records each
client request's send / first token / end, then prints, relative to each wave's last token sent
by the worker, when the next wave's requests pass each stage (first / median / last of the wave,
medians over waves), per-request stage latencies, and the worker's rows per step.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import statistics as stats
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench import serving
from bench.prompts import user_messages
from bench.run_all import STORIES
from bench.servers import ROOT, Server, ServerGroup

HOOK = ROOT / "bench" / "turnover_hook"
STAGES = ["C_done", "G_done", "C_send", "G_recv", "G_handle", "G_submit", "W_read", "W_prep1",
          "W_admit", "W_first", "G_out", "G_first", "C_first"]
PAIRS = [("G_handle", "G_submit"), ("G_submit", "W_read"), ("W_read", "W_prep0"),
         ("W_prep0", "W_prep1"), ("W_prep1", "W_admit"), ("W_admit", "W_first"),
         ("W_first", "G_out"), ("G_out", "G_first")]


def run(trace: Path, batches: int, concurrency: int, max_tokens: int) -> None:
    """Serve stories260K with the hook on and run BATCHES closed-loop batches into TRACE."""
    trace.mkdir(parents=True, exist_ok=True)
    client: list[tuple[float, float, float]] = []
    read = serving._read_stream

    async def timed(c: Any, url: str, payload: dict[str, Any], res: Any, t0: float) -> None:
        start = time.monotonic()
        await read(c, url, payload, res, t0)
        client.append((start, time.monotonic(), -1.0 if res.ttft_any is None else res.ttft_any))

    serving._read_stream = timed  # type: ignore[assignment]
    env = {"RAPID_TRACE": str(trace), "PYTHONPATH": f"{HOOK}{os.pathsep}{ROOT}"}
    s = Server("ours", "ours", str(STORIES), ["--max-batch", str(concurrency)], env_extra=env)
    try:
        with ServerGroup([s]):
            asyncio.run(serving.run_batch(s.base_url, s.request_model,
                                          user_messages("warm", concurrency),
                                          concurrency=concurrency, max_tokens=16))
            client.clear()
            for i in range(batches):
                r = asyncio.run(serving.run_batch(s.base_url, s.request_model,
                                                  user_messages(f"turn{i}", 8 * concurrency),
                                                  concurrency=concurrency,
                                                  max_tokens=max_tokens))
                print(f"batch {i}: {r.tokens_per_s:.0f} tok/s", flush=True)
    finally:
        serving._read_stream = read
    with open(trace / "client.txt", "w") as f:
        f.writelines(f"{a:.6f} {b:.6f} {c:.6f}\n" for a, b, c in client)


def load(trace: Path) -> tuple[dict[str, dict[str, float]], list[tuple[float, str, int]]]:
    """The marks of TRACE by event and key (first mark per key), and the engine's steps."""
    ev: dict[str, dict[str, float]] = defaultdict(dict)
    steps: list[tuple[float, str, int]] = []
    for fn in glob.glob(str(trace / "*.txt")):
        if fn.endswith("client.txt"):
            continue
        for line in open(fn):
            kind, key, t = line.split()
            if kind.startswith("W_step"):
                steps.append((float(t), kind, int(key)))
            else:
                ev[kind].setdefault(key, float(t))
    for i, line in enumerate(open(trace / "client.txt")):
        start, end, ttft = map(float, line.split())
        ev["C_send"][str(i)], ev["C_done"][str(i)] = start, end
        if ttft >= 0:
            ev["C_first"][str(i)] = start + ttft
    return ev, sorted(steps)


def waves(lasts: list[float], gap: float = 0.03) -> list[list[float]]:
    """Cluster the worker's last-token times: a wave ends in one step (gaps under GAP s)."""
    out: list[list[float]] = []
    for t in sorted(lasts):
        if out and t - out[-1][-1] <= gap:
            out[-1].append(t)
        else:
            out.append([t])
    return out


def analyze(trace: Path, concurrency: int) -> None:
    """Print the turnover table, the per-request latencies and the rows per step of TRACE."""
    ev, steps = load(trace)
    full = [w for w in waves(list(ev["W_last"].values())) if len(w) >= concurrency - 2]
    print(f"{len(full)} whole waves (of {len(waves(list(ev['W_last'].values())))} clusters)")
    print("| stage | first | median | last | (ms after the wave's last token left the worker) |")
    print("|---|---:|---:|---:|---|")
    for stage in STAGES:
        rows = []
        for w in full:
            end = max(w)
            ts = sorted(t - end for t in ev[stage].values() if -0.2 < t - end < 0.8)
            ts = [x for x in ts if x < 0.3] if stage in ("C_done", "G_done") else \
                [x for x in ts if x > -0.05][:concurrency]
            if len(ts) >= concurrency // 2:
                rows.append((ts[0], ts[len(ts) // 2], ts[-1]))
        if rows:
            first, med, last = (stats.median(r[i] for r in rows) * 1e3 for i in range(3))
            print(f"| {stage} | {first:.1f} | {med:.1f} | {last:.1f} | {len(rows)} waves |")
    for a, b in PAIRS:
        d = [ev[b][k] - ev[a][k] for k in ev[a] if k in ev[b]]
        if d:
            print(f"{a} -> {b}: p50 {stats.median(d) * 1e3:.2f} ms, mean "
                  f"{stats.mean(d) * 1e3:.2f} ms ({len(d)} requests)")
    busy = idle = 0.0
    spans: dict[str, float] = defaultdict(float)
    for (t0, k0, n_rows), (t1, k1, _) in zip(steps, steps[1:], strict=False):
        if (k0, k1) != ("W_step0", "W_step1"):
            continue
        r = min(n_rows, concurrency)
        busy += t1 - t0
        idle += (t1 - t0) * (concurrency - r) / concurrency
        spans["full" if r == concurrency else "3/4+" if 4 * r >= 3 * concurrency else
              "1/4+" if 4 * r >= concurrency else "under 1/4"] += t1 - t0
    if busy:
        print(f"steps {busy:.1f} s; empty rows x time {idle:.2f} s ({100 * idle / busy:.1f}%); "
              + ", ".join(f"{k} {v:.1f} s" for k, v in spans.items()))


def main() -> int:
    """Run (unless --analyze) and print the turnover of a traced closed loop."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--trace-dir", type=Path, default=None)
    ap.add_argument("--analyze", type=Path, default=None, help="only analyze this trace folder")
    a = ap.parse_args()
    trace = a.analyze or a.trace_dir or Path(tempfile.mkdtemp(prefix="turnover-"))
    if a.analyze is None:
        run(trace, a.batches, a.concurrency, a.max_tokens)
    print(f"trace: {trace}")
    analyze(trace, a.concurrency)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
