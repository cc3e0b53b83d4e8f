"""What many open client connections do to a real gateway: its fds and memory, whether /livez and
a chat request are still served, whether its worker survives, and what it logs.

    python -m bench.probes.conn_flood --counts 1000,5000,19000 --mode idle --trees /tmp/old .

Modes: `idle` (connect, send nothing), `head` (trickle a request head, a byte every --every
seconds), `body` (send a complete head, then trickle the body). Each tree serves stories260K
(the demo model when it is absent) in turn; the flood is opened, held --hold seconds, measured,
then closed.

With --loop S the flood is topped up (a closed flood socket is opened again at once, as an
attacker would) while a client sends /livez and a chat request on fresh connections in a loop
for S seconds; the row then says how many of each were served (200) and what else they got.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

MODEL = Path("/work/shared/models/stories260K")
HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        b"content-type: application/json\r\ncontent-length: 100000\r\n\r\n")


def start(tree: str, port: int, extra: list[str]) -> tuple[subprocess.Popen[str], list[str]]:
    """`serve` from TREE on PORT; its process and its output lines (read by a thread)."""
    model = [str(MODEL)] if (MODEL / "config.json").exists() else []
    data = tempfile.mkdtemp(prefix="conn-flood-")  # the response store is exercised too
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", *model, "--port",
                             str(port), "--log-level", "warning", "--data-dir", data, *extra],
                            cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Ready: "):
                ready.set()

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(120):
        proc.kill()
        raise RuntimeError("not ready:\n" + "".join(lines[-20:]))
    return proc, lines


def flood(port: int, n: int, mode: str) -> list[socket.socket]:
    """N connections to PORT (those the server refuses or drops are kept too, closed)."""
    out = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
            if mode == "body":
                s.sendall(HEAD + b"{")
            s.setblocking(False)
        except OSError:
            pass
        out.append(s)
    return out


def trickle(socks: list[socket.socket], mode: str, every: float, stop: threading.Event) -> None:
    """Send one byte on each socket every EVERY seconds until STOP."""
    if mode == "idle":
        return
    data = b"GET /livez HTTP/1.1\r\nhost: x\r\nx-pad: " if mode == "head" else b""
    i = 0
    while not stop.wait(every):
        byte = data[i:i + 1] if i < len(data) else b"a"
        i += 1
        for s in socks:
            try:
                s.send(byte)
            except OSError:
                pass


def probe(base: str) -> dict[str, Any]:
    """Latency and status of /livez and of one chat request (fresh connections)."""
    out: dict[str, Any] = {}
    t = time.perf_counter()
    try:
        r = httpx.get(base + "/livez", timeout=30)
        out["livez"] = r.status_code
    except httpx.HTTPError as exc:
        out["livez"] = type(exc).__name__
    out["livez_s"] = round(time.perf_counter() - t, 3)
    t = time.perf_counter()
    try:
        r = httpx.post(base + "/v1/chat/completions", timeout=60, json={
            "model": MODEL.name if (MODEL / "config.json").exists() else "default",
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
        out["chat"] = r.status_code
    except httpx.HTTPError as exc:
        out["chat"] = type(exc).__name__
    out["chat_s"] = round(time.perf_counter() - t, 3)
    try:  # a stored response: the sqlite store needs fds too
        r = httpx.post(base + "/v1/responses", timeout=60, json={
            "model": MODEL.name if (MODEL / "config.json").exists() else "default",
            "input": "hi", "max_output_tokens": 8})
        out["stored"] = r.status_code
    except httpx.HTTPError as exc:
        out["stored"] = type(exc).__name__
    return out


def refill(port: int, socks: list[socket.socket], mode: str, stop: threading.Event) -> None:
    """Open a new flood socket in place of each one the server answered or closed, until STOP."""
    while not stop.wait(0.05):
        for i, s in enumerate(socks):
            try:
                s.recv(1, socket.MSG_PEEK)  # an answer (503, 408) or EOF: it is done
            except BlockingIOError:
                continue  # still open, nothing sent
            except OSError:
                pass  # reset, or never connected
            s.close()
            socks[i] = flood(port, 1, mode)[0]
            if mode == "head":  # a request line first: the trickle may be past it
                try:
                    socks[i].send(b"GET /livez HTTP/1.1\r\nhost: x\r\nx-pad: ")
                except OSError:
                    pass


def probe_loop(base: str, seconds: float) -> dict[str, Any]:
    """/livez and a one-token chat request on fresh connections in turn for SECONDS."""
    got: dict[str, dict[str, int]] = {"livez": {}, "chat": {}}
    first: dict[str, float] = {}  # seconds from the loop's start to the first 200 of each
    start = time.perf_counter()
    end = start + seconds
    model = MODEL.name if (MODEL / "config.json").exists() else "default"
    while time.perf_counter() < end:
        for kind in ("livez", "chat"):
            try:
                if kind == "livez":
                    r = httpx.get(base + "/livez", timeout=10)
                else:
                    r = httpx.post(base + "/v1/chat/completions", timeout=30, json={
                        "model": model, "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 1})
                key = str(r.status_code)
            except httpx.HTTPError as exc:
                key = type(exc).__name__
            got[kind][key] = got[kind].get(key, 0) + 1
            if key == "200" and kind not in first:
                first[kind] = round(time.perf_counter() - start, 2)
    return {f"{k}_served": f"{v.get('200', 0)}/{sum(v.values())}" for k, v in got.items()} | {
        f"{k}_first_s": first.get(k) for k in got} | {"probe_results": got}


def answered(socks: list[socket.socket]) -> dict[str, int]:
    """What the flood's sockets got: a status line (by code), EOF, a reset, or nothing yet."""
    seen: dict[str, int] = {}
    for s in socks:
        try:
            data = s.recv(64)
            key = data[9:12].decode() if data.startswith(b"HTTP/1.1 ") else (
                "eof" if not data else "other")
        except BlockingIOError:
            key = "open"
        except OSError as exc:
            key = type(exc).__name__
        seen[key] = seen.get(key, 0) + 1
    return seen


def run(tree: str, n: int, mode: str, hold: float, every: float, extra: list[str],
        log: str = "", kill_worker: float = 0.0, loop: float = 0.0) -> dict[str, Any]:
    """One flood of N connections against a fresh server from TREE."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc, lines = start(tree, port, extra)
    gw = psutil.Process(proc.pid)
    workers = gw.children(recursive=True)
    base = f"http://127.0.0.1:{port}"
    row: dict[str, Any] = {"tree": tree, "n": n, "mode": mode, "fds0": gw.num_fds(),
                           "rss0_mb": gw.memory_info().rss >> 20}
    t0 = time.perf_counter()
    socks = flood(port, n, mode)
    row["open_s"] = round(time.perf_counter() - t0, 2)
    stop = threading.Event()
    th = threading.Thread(target=trickle, args=(socks, mode, every, stop), daemon=True)
    th.start()
    time.sleep(hold)
    if loop:
        halt = threading.Event()
        topper = threading.Thread(target=refill, args=(port, socks, mode, halt), daemon=True)
        topper.start()
        row.update(probe_loop(base, loop))
        halt.set()
        topper.join()
        row["fds_loop"] = gw.num_fds()
    if kill_worker:  # the supervisor must spawn a new one with the flood still open
        for w in workers:
            w.kill()
        time.sleep(kill_worker)
        row["respawned"] = [c.pid for c in gw.children(recursive=True)
                            if c.pid not in {w.pid for w in workers}]
    row["fds"] = gw.num_fds()
    row["rss_mb"] = gw.memory_info().rss >> 20
    row["cpu_s"] = round(sum(gw.cpu_times()[:2]), 1)
    row.update(probe(base))
    row["flood"] = answered(socks)
    row["workers_alive"] = sum(w.is_running() and w.status() != psutil.STATUS_ZOMBIE
                               for w in workers)
    row["log_lines"] = len(lines)
    stop.set()
    for s in socks:
        s.close()
    time.sleep(1)
    if kill_worker:
        time.sleep(kill_worker)  # the worker may come back only now
    row["after"] = probe(base)
    row["fds_after"] = gw.num_fds()
    proc.terminate()
    proc.wait(60)
    if log:
        Path(log).write_text("".join(lines))
    row["log_tail"] = [ln.strip()[:160] for ln in lines[-3:]]
    return row


def main() -> None:
    """Parse arguments and print one row per tree and count."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--counts", default="1000,5000")
    ap.add_argument("--mode", choices=["idle", "head", "body"], default="idle")
    ap.add_argument("--hold", type=float, default=5.0, help="seconds before measuring")
    ap.add_argument("--every", type=float, default=3.0, help="seconds between trickled bytes")
    ap.add_argument("--trees", nargs="+", default=["."])
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `serve` argument")
    ap.add_argument("--log", default="", help="write the server's output to this file")
    ap.add_argument("--kill-worker", type=float, default=0.0,
                    help="SIGKILL the worker after --hold, measure this many seconds later")
    ap.add_argument("--loop", type=float, default=0.0,
                    help="after --hold, top the flood up and probe in a loop this many seconds")
    args = ap.parse_args()
    for n in [int(c) for c in args.counts.split(",")]:
        for tree in args.trees:
            print(run(tree, n, args.mode, args.hold, args.every, args.serve_arg,
                      args.log, args.kill_worker, args.loop), flush=True)


if __name__ == "__main__":
    main()
