"""How long one large body stalls the gateway's event loop: the worst /livez latency (a probe
every 20 ms from another thread) while a body of many tiny items is handled, per chat-like door.

    python -m bench.loop_stall --items 110000 --rounds 3 --trees /tmp/old-checkout .

Each tree (a checkout) serves the demo model in turn, round by round (the machine is noisy). The
bodies are far over the demo model's context, so each ends in a 400 after the full decode,
translation and checks: the work measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx


def bodies(n: int) -> dict[str, dict[str, Any]]:
    """The large body of N tiny items for each door."""
    item = {"role": "user", "content": "a"}
    use = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    return {"/v1/responses": {"model": "default", "input": [item] * n, "max_output_tokens": 1},
            "/v1/chat/completions": {"model": "default", "messages": [item] * n, "max_tokens": 1},
            "/v1/messages": {"model": "default", "max_tokens": 1,
                             "messages": [{"role": "assistant", "content": [use] * (n // 2)}]}}


def one(base: str, path: str, raw: bytes) -> tuple[float, float, int]:
    """(seconds the large request took, worst /livez seconds meanwhile, its status)."""
    lat: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client() as c:
            while not stop.is_set():
                t = time.perf_counter()
                c.get(base + "/livez")
                lat.append(time.perf_counter() - t)
                time.sleep(0.02)

    th = threading.Thread(target=probe)
    th.start()
    time.sleep(0.3)
    t0 = time.perf_counter()
    r = httpx.post(base + path, content=raw, timeout=120,
                   headers={"content-type": "application/json"})
    took = time.perf_counter() - t0
    stop.set()
    th.join()
    return took, max(lat), r.status_code


def serve(tree: Path) -> tuple[Any, str]:
    """Start TREE's server (its own harness) in a subprocess; (handle, base URL)."""
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); "
            "from tests.e2e.harness import Server; s = Server().wait_ready(); "
            "print(s.base, flush=True); sys.stdin.read(); s.stop()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tree)], cwd=tree, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def main() -> None:
    """Run the rounds and print per-round lines and medians."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--items", type=int, default=110_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trees", nargs="+", default=["."])
    args = ap.parse_args()
    raws = {p: json.dumps(b).encode() for p, b in bodies(args.items).items()}
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for rnd in range(args.rounds):
        for tree in args.trees:
            proc, base = serve(Path(tree).resolve())
            try:
                for path, raw in raws.items():
                    took, worst, status = one(base, path, raw)
                    results.setdefault((tree, path), []).append((took, worst))
                    print(f"round {rnd} {tree} {path} {len(raw) / 2**20:.2f} MiB {status}: "
                          f"took {took * 1000:.0f} ms, worst /livez {worst * 1000:.0f} ms",
                          flush=True)
            finally:
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(60)
    for (tree, path), rows in results.items():
        print(f"median {tree} {path}: took {statistics.median(r[0] for r in rows) * 1000:.0f} "
              f"ms, worst /livez {statistics.median(r[1] for r in rows) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
