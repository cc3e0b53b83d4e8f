"""Issue 9, item 12: a client that saw the alias in /v1/models never gets an immediate 503: a
request during the first load, or sent right after the worker died, waits for the worker."""

from __future__ import annotations

import os
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.e2e.harness import Server
from tests.ops.harness import DEMO

pytestmark = pytest.mark.slow

BODY = {"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _chat(url: str) -> httpx.Response:
    return httpx.post(f"{url}/chat/completions", json=BODY, timeout=60)


def test_requests_wait_for_the_first_load_and_for_a_restart() -> None:
    srv = Server()
    try:
        srv.wait_http()
        models = httpx.get(f"{srv.url}/models", timeout=5).json()
        assert [d["id"] for d in models["data"]] == ["default"]
        assert httpx.get(f"{srv.url}/health/default", timeout=5).json()["state"] == "starting"
        r = _chat(srv.url)  # sent while the worker loads
        assert r.status_code == 200, r.text
        srv.wait_ready()

        for _ in range(2):  # right after the worker dies, before the gateway can notice
            pid = srv.worker("default")["pid"]
            with ThreadPoolExecutor(4) as pool:
                os.kill(pid, signal.SIGKILL)
                answers = list(pool.map(lambda _: _chat(srv.url), range(4)))
            assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
            assert srv.worker("default")["pid"] != pid
    finally:
        srv.stop()


def test_a_failed_alias_still_answers_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # a folder whose weights cannot be read (a missing folder is refused by the CLI), beside a
    # good alias so the server stays up once the bad one has failed
    corrupt = tmp_path / "missing"
    shutil.copytree(DEMO, corrupt)
    (corrupt / "model.safetensors").write_bytes(b"not safetensors")
    srv = Server(str(corrupt), DEMO, "--served-model-name", "missing", "--served-model-name",
                 "default", "--max-start-crashes", "1")
    try:
        srv.wait_http()
        deadline = time.monotonic() + 60
        while httpx.get(f"{srv.url}/health", timeout=5).json()["models"]["missing"]["state"] != "failed":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        started = time.monotonic()
        r = httpx.post(f"{srv.url}/chat/completions", timeout=10, json={**BODY, "model": "missing"})
        assert r.status_code == 503 and "Retry-After" in r.headers
        assert time.monotonic() - started < 1.0
    finally:
        srv.stop()
