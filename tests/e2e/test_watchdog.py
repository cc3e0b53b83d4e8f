"""The hang watchdog tells a slow worker from a stuck one, with the real gateway and worker: a step
made long by the test hook (worker/serve/testhook.py) is not killed; a deadlocked step, or a
worker stopped with SIGSTOP, is killed and restarted, and its request gets an error."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import openai
import pytest

from tests.e2e.harness import Server
from worker.serve.testhook import HOOK_ENV, ONCE_ENV

pytestmark = pytest.mark.slow

HANG = "2"  # --hang-timeout: a step of 4 of them must survive when it is only slow


def _wait(pred, timeout: float = 90.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def _chat(srv: Server, max_tokens: int = 3) -> openai.types.chat.ChatCompletion:
    client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)
    return client.chat.completions.create(model="default", max_tokens=max_tokens,
                                          messages=[{"role": "user", "content": "Hi"}])


def test_a_slow_step_is_not_killed() -> None:
    srv = Server("--hang-timeout", HANG, env={HOOK_ENV: "slow:8"}).wait_ready()
    try:
        pid = srv.worker("default")["pid"]
        out = _chat(srv)  # its first step burns CPU for 8 s: 4 hang timeouts
        assert out.choices[0].finish_reason in ("stop", "length")
        info = srv.worker("default")
        assert info["pid"] == pid and info["restarts"] == 0, info
        # pulses come: the next one says no step runs any more
        _wait(lambda: srv.worker("default")["replicas"][0]["step_running_s"] == 0.0, 10)
    finally:
        srv.stop()


def test_a_deadlocked_step_is_killed_and_the_worker_restarted() -> None:
    with tempfile.TemporaryDirectory(prefix="rmlx-hook-") as d:
        once = str(Path(d) / "fired")  # only the first worker deadlocks
        srv = Server("--hang-timeout", HANG, env={HOOK_ENV: "deadlock", ONCE_ENV: once})
        srv.wait_ready()
        try:
            pid = srv.worker("default")["pid"]
            with pytest.raises(openai.APIError) as info:
                _chat(srv)
            message = str(info.value.message)
            assert "hung" in message and "CPU" in message, message
            _wait(lambda: srv.worker("default")["state"] == "ready"
                  and srv.worker("default")["pid"] != pid)
            worker = srv.worker("default")
            assert worker["restarts"] == 1 and "hung" in (worker["last_exit"] or ""), worker
            assert _chat(srv).choices[0].finish_reason in ("stop", "length")
        finally:
            srv.stop()


def test_a_stopped_worker_is_killed_and_restarted() -> None:
    srv = Server("--hang-timeout", HANG).wait_ready()
    try:
        pid = srv.worker("default")["pid"]
        client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=120)
        stream = client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "Hello!"}], max_tokens=1500,
            stream=True, extra_body={"ignore_eos": True})
        next(iter(stream))
        os.kill(pid, signal.SIGSTOP)
        with pytest.raises(openai.APIError) as info:
            for _ in stream:
                pass
        # stopped mid-step: its pulse stopped; between steps: its steps stopped too (whichever
        # the watchdog sees first)
        assert "hung" in str(info.value.message), info.value.message
        _wait(lambda: srv.worker("default")["state"] == "ready"
              and srv.worker("default")["pid"] != pid)
        assert srv.worker("default")["restarts"] == 1
        assert _chat(srv).choices[0].finish_reason in ("stop", "length")
    finally:
        srv.stop()
