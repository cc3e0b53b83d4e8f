"""Acceptance 1 and 3: kill, hang (SIGSTOP) and crash-loop with real processes; metrics survive.

In-flight requests of the broken alias end with a terminal error within 5 s, the alias comes back
(or shows `failed`), and alias `b` serves throughout with zero errors.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from tests.e2e.harness import Server
from tests.ops.harness import (
    DEMO,
    Load,
    monotonic_samples,
    pair,
    scrape,
    stream_chat,
    wait_for,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    s = pair("--hang-timeout", "3").wait_ready()
    yield s
    s.stop()


def _break_a_mid_stream(srv: Server, breaker: str) -> tuple[float, dict]:
    """Stream on `a`, break its worker (kill or SIGSTOP), return (seconds to error, error)."""
    pid = srv.worker("a")["pid"]
    first = threading.Event()
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(o=stream_chat(srv.url, "a", 1500, first=first)))
    t.start()
    assert first.wait(30)
    broken_at = time.monotonic()
    os.kill(pid, signal.SIGKILL if breaker == "kill" else signal.SIGSTOP)
    t.join(30)
    out = result["o"]
    assert out.error is not None, out
    wait_for(lambda: srv.worker("a")["state"] == "ready" and srv.worker("a")["pid"] != pid)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    return out.ended_at - broken_at, out.error


@pytest.mark.parametrize("breaker", ["kill", "hang"])
def test_broken_worker_fails_fast_and_comes_back(srv: Server, breaker: str) -> None:
    before = monotonic_samples(scrape(srv.base))
    restarts = srv.worker("a")["restarts"]
    load_b = Load(srv.url, "b", 2).start()
    try:
        elapsed, error = _break_a_mid_stream(srv, breaker)
        assert elapsed < 5.0, elapsed
        assert error["code"] == "worker_failed"
        word = "hung" if breaker == "hang" else "SIGKILL"
        assert word in error["message"], error
        info = srv.worker("a")
        assert info["restarts"] == restarts + 1 and word in info["last_exit"]
        assert stream_chat(srv.url, "a", 8).ok
    finally:
        outcomes = load_b.stop()
    print(f"{breaker}: terminal error after {elapsed:.2f}s; b served {len(outcomes)} streams")
    assert outcomes and not load_b.errors, load_b.errors[:3]
    after = monotonic_samples(scrape(srv.base))
    went_down = {k: (v, after.get(k)) for k, v in before.items() if after.get(k, -1) < v}
    assert not went_down, went_down
    key = ("rapid_mlx_worker_restarts_total", (("model_name", "a"),))
    assert after[key] == before[key] + 1
    errors = ("rapid_mlx_request_errors_total", (("code", "worker_failed"), ("model_name", "a")))
    assert after[errors] >= before.get(errors, 0) + 1


def test_metrics_parse_with_every_family(srv: Server) -> None:
    assert stream_chat(srv.url, "b", 8).ok
    samples = scrape(srv.base)
    names = {name for name, _ in samples}
    for family in ("num_requests_running", "num_requests_waiting", "prompt_tokens_total",
                   "generation_tokens_total", "request_success_total",
                   "time_to_first_token_seconds_bucket", "inter_token_latency_seconds_bucket",
                   "e2e_request_latency_seconds_bucket", "request_queue_time_seconds_bucket",
                   "kv_cache_usage_perc", "prefix_cache_queries_total", "prefix_cache_hits_total",
                   "worker_restarts_total"):
        assert f"rapid_mlx_{family}" in names, family
    assert samples[("rapid_mlx_generation_tokens_total", (("model_name", "b"),))] >= 8


def test_crash_loop_fails_alone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the demo's folder with unreadable weights: a load error not known to be final, so retried
    corrupt = tmp_path / "corrupt"
    shutil.copytree(DEMO, corrupt)
    (corrupt / "model.safetensors").write_bytes(b"not safetensors")
    srv = Server(str(corrupt), DEMO, "--served-model-name", "bad", "--served-model-name", "good",
                 "--max-start-crashes", "3", "--restart-backoff", "0.2", "--admin-key", "adm")
    try:
        srv.wait_http()
        wait_for(lambda: httpx.get(f"{srv.url}/health").json()["models"]["good"]["ready"])
        load = Load(srv.url, "good", 2).start()
        try:
            wait_for(lambda: srv.worker("bad")["state"] == "failed", timeout=90)
            r = httpx.post(f"{srv.url}/chat/completions", timeout=10, json={
                "model": "bad", "messages": [{"role": "user", "content": "x"}]})
            assert r.status_code == 503 and "Retry-After" in r.headers
            assert "failed" in r.json()["error"]["message"]
        finally:
            load.stop()
        assert load.outcomes and not load.errors, load.errors[:3]
        info = srv.worker("bad")
        assert info["restarts"] == 2 and "load failed" in info["last_exit"], info
        assert "exit code 3" in info["last_exit"], info
        health = httpx.get(f"{srv.url}/health").json()
        assert health["status"] == "degraded" and health["models"]["bad"]["state"] == "failed"
        models = {m["id"]: m for m in httpx.get(f"{srv.url}/models").json()["data"]}
        assert models["bad"]["state"] == "failed" and models["good"]["state"] == "ready"
        assert httpx.get(f"{srv.base}/readyz").status_code == 503
        assert httpx.get(f"{srv.base}/livez").status_code == 200
        assert httpx.get(f"{srv.url}/health/bad").status_code == 503
        samples = scrape(srv.base)
        assert samples[("rapid_mlx_worker_ready", (("model_name", "bad"),))] == 0
        failed = ("rapid_mlx_worker_state", (("model_name", "bad"), ("state", "failed")))
        assert samples[failed] == 1
        # a swap to a model that exists revives the failed alias
        r = httpx.post(f"{srv.base}/admin/swap/bad", json={"model": DEMO}, timeout=120,
                       headers={"Authorization": "Bearer adm"})  # DEMO: served at start
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "ready" and stream_chat(srv.url, "bad", 4).ok
        assert httpx.get(f"{srv.base}/readyz").status_code == 200
    finally:
        assert srv.stop() == 0


def test_workers_die_with_the_gateway() -> None:
    srv = Server().wait_ready()
    workers = srv.tree()[1:]
    assert workers
    srv.proc.kill()
    srv.proc.wait(10)
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, alive
