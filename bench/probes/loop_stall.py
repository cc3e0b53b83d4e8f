"""How long one large body stalls the gateway's event loop: the worst /livez latency (a probe
every 20 ms from another thread) while a body of many tiny items is handled, per chat-like door.

    python -m bench.probes.loop_stall --items 110000 --rounds 3 --trees /tmp/old-checkout .

Each tree (a checkout) serves the demo model in turn, round by round (the machine is noisy). The
bodies are far over the demo model's context, so each ends in a 400 after the full decode,
translation and checks: the work measured. The continuation case (`/v1/responses+previous`) is a
small body whose `previous_response_id` names a stored conversation of as many tiny items,
written into each server's data directory before it starts (as a model with a longer context
would have left it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
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


CONTINUED = "/v1/responses+previous"  # the continuation case's name
STORED_ID = "resp_" + "b" * 32


def continuation() -> dict[str, Any]:
    """A small body continuing the stored conversation STORED_ID."""
    return {"model": "default", "previous_response_id": STORED_ID, "input": "and then?",
            "max_output_tokens": 1}


def store_conversation(data_dir: Path, n: int) -> None:
    """Write STORED_ID (no API key) with N tiny input items into DATA_DIR's response store."""
    from gateway.storage.paths import RESPONSES_DB
    from gateway.storage.responses import ResponseStore

    items = [{"id": f"msg_{i}", "type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "a"}]} for i in range(n)]
    response = {"id": STORED_ID, "object": "response", "created_at": int(time.time()),
                "status": "completed", "model": "default",
                "output": [{"id": "msg_out", "type": "message", "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": "b"}]}]}

    async def put() -> None:
        store = ResponseStore(data_dir / RESPONSES_DB)
        await store.open()
        try:
            await store.put(STORED_ID, "", response, items)
        finally:
            await store.close()

    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    asyncio.run(put())


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
    r = httpx.post(base + path.split("+")[0], content=raw, timeout=120,
                   headers={"content-type": "application/json"})
    took = time.perf_counter() - t0
    stop.set()
    th.join()
    return took, max(lat), r.status_code


def serve(tree: Path, data_dir: Path) -> tuple[Any, str]:
    """Start TREE's server (its own harness) on DATA_DIR in a subprocess; (handle, base URL)."""
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); "
            "from tests.e2e.harness import Server; "
            "s = Server('--data-dir', sys.argv[2]).wait_ready(); "
            "print(s.base, flush=True); sys.stdin.read(); s.stop()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tree), str(data_dir)], cwd=tree,
                            text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def main() -> None:
    """Run the rounds and print per-round lines and medians."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--items", type=int, default=110_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trees", nargs="+", default=["."])
    ap.add_argument("--paths", nargs="+", default=[*bodies(1), CONTINUED],
                    help="which cases to run (default: all)")
    args = ap.parse_args()
    raws = {p: json.dumps(b).encode() for p, b in bodies(args.items).items() if p in args.paths}
    if CONTINUED in args.paths:
        raws[CONTINUED] = json.dumps(continuation()).encode()
    stored = Path(tempfile.mkdtemp(prefix="loop-stall-"))
    if CONTINUED in args.paths:
        store_conversation(stored / "template", args.items)
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for rnd in range(args.rounds):
        for t, tree in enumerate(args.trees):
            data = stored / f"r{rnd}-t{t}"  # a fresh copy: nothing of a run leaks into the next
            if CONTINUED in args.paths:
                shutil.copytree(stored / "template", data)
            else:
                data.mkdir()
            proc, base = serve(Path(tree).resolve(), data)
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
                shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(stored, ignore_errors=True)
    for (tree, path), rows in results.items():
        print(f"median {tree} {path}: took {statistics.median(r[0] for r in rows) * 1000:.0f} "
              f"ms, worst /livez {statistics.median(r[1] for r in rows) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
