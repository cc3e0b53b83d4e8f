"""SIGTERM drains: readiness 503, new requests 503 + Retry-After, running ones finish up to
--shutdown-timeout, the rest end with a terminal error, exit code 0, no process left."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import psutil
import pytest

from tests.e2e.harness import Server
from tests.ops.harness import stream_chat

pytestmark = pytest.mark.slow

TIMEOUT = 1.5  # --shutdown-timeout (seconds)


def test_sigterm_drains_then_exits_zero() -> None:
    # the timeout is short enough that the long stream (2,000 tokens) cannot finish inside it
    # even where the demo model runs at 1,000 tokens/s, and long enough for the short one
    srv = Server("--shutdown-timeout", str(TIMEOUT)).wait_ready()
    procs = srv.tree()
    results: dict = {}
    first_long, first_short = threading.Event(), threading.Event()
    threads = [
        threading.Thread(target=lambda: results.update(
            long=stream_chat(srv.url, "default", 2000, first=first_long))),
        threading.Thread(target=lambda: results.update(
            short=stream_chat(srv.url, "default", 40, first=first_short))),
    ]
    for t in threads:
        t.start()
    assert first_long.wait(30) and first_short.wait(30)
    srv.proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    time.sleep(0.3)
    ready = httpx.get(f"{srv.base}/readyz", timeout=5)
    assert ready.status_code == 503 and ready.json()["status"] == "draining"
    assert httpx.get(f"{srv.base}/livez", timeout=5).status_code == 200
    r = httpx.post(f"{srv.url}/chat/completions", timeout=5, json={
        "model": "default", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 503 and r.headers.get("Retry-After")
    assert r.json()["error"]["code"] == "server_shutting_down"
    for t in threads:
        t.join(30)
    short, long = results["short"], results["long"]
    assert short.ok, short  # finished inside the shutdown timeout
    assert long.error and long.error["code"] == "server_shutting_down", long
    cut_after = long.ended_at - sent
    print(f"long request cut {cut_after:.2f}s after SIGTERM (--shutdown-timeout {TIMEOUT})")
    assert TIMEOUT - 0.5 < cut_after < TIMEOUT + 5.0
    assert srv.proc.wait(30) == 0
    _, alive = psutil.wait_procs(procs, timeout=10)
    assert not alive, alive
