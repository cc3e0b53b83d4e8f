"""Serve the gateway with an event-loop lag probe: `python bench/lag_probe.py LAGFILE serve ...`.

Run as a script from a checkout (its working directory: any tree, old or new, imports its own
gateway), this starts `rapid-mlx serve` with its arguments and, on the gateway's event loop, a
task that sleeps PERIOD_S over and over and appends to LAGFILE, as "<monotonic> <late ms>", each
wake-up later than REPORT_MS: how long something else held the loop. time.monotonic() is the
system's CLOCK_MONOTONIC, so another process reads the lines against its own clock.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from typing import Any

PERIOD_S = 0.005  # the probe's sleep
REPORT_MS = 2.0  # wake-ups later than this are written


async def probe(path: str) -> None:
    """Sleep PERIOD_S in a loop; write each wake-up later than REPORT_MS to PATH."""
    with open(path, "a", buffering=1) as out:
        while True:
            t = time.monotonic()
            await asyncio.sleep(PERIOD_S)
            now = time.monotonic()
            late = (now - t - PERIOD_S) * 1000
            if late > REPORT_MS:
                out.write(f"{now:.6f} {late:.3f}\n")


def log_gc(path: str) -> None:
    """Append each garbage collection longer than REPORT_MS to PATH as "gc <monotonic> <ms>
    <generation> <objects collected>" (RAPID_MLX_LAG_GC=1: to tell GC pauses from other stalls)."""
    out = open(path, "a", buffering=1)  # noqa: SIM115 (open for the process's life)
    began = [0.0]

    def cb(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.monotonic()
            return
        ms = (time.monotonic() - began[0]) * 1000
        if ms > REPORT_MS:
            out.write(f"gc {time.monotonic():.6f} {ms:.3f} {info['generation']} "
                      f"{info['collected']}\n")

    gc.callbacks.append(cb)


def worst(path: str, start: float, end: float, gc_pauses: bool = False) -> float:
    """The worst lateness (ms) LAGFILE PATH recorded for wake-ups between START and END
    (monotonic seconds), or with GC_PAUSES the longest collection; 0 if none."""
    late = 0.0
    try:
        with open(path) as f:
            for line in f:
                fields = line.split()
                if (fields[0] == "gc") != gc_pauses:
                    continue
                t, ms = fields[gc_pauses:gc_pauses + 2]
                if start <= float(t) <= end:
                    late = max(late, float(ms))
    except FileNotFoundError:
        pass
    return late


def main() -> None:
    """Start the probe with the gateway's own serve() (its module's, patched in place)."""
    path = sys.argv[1]
    sys.path.insert(0, os.getcwd())
    import gateway.server as server

    inner = server.serve

    async def serve(config: Any) -> None:
        task = asyncio.create_task(probe(path), name="lag-probe")
        try:
            await inner(config)
        finally:
            task.cancel()

    if os.environ.get("RAPID_MLX_LAG_GC") == "1":
        log_gc(path)
    server.serve = serve
    from gateway.cli import main as cli

    sys.argv = ["rapid-mlx", *sys.argv[2:]]
    cli()


if __name__ == "__main__":
    main()
