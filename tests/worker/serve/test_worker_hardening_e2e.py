"""Through the real server: inputs that used to kill or wedge the worker now fail only themselves."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

CHAT = {"model": "default", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server().wait_ready()
    yield s
    s.stop()


def _post(server: Server, path: str, body: dict[str, Any]) -> tuple[httpx.Response, float]:
    t0 = time.monotonic()
    r = httpx.post(f"{server.url}{path}", json=body, timeout=30)
    return r, time.monotonic() - t0


@pytest.mark.parametrize("prompt", [[999_999_999, 5], [4_294_967_295], [18_446_744_073_709_551_615],
                                    [4096], [[-1, 5]], [[True, 5]], [-3]])
def test_token_ids_the_model_cannot_take_are_400(server: Server, prompt: list[Any]) -> None:
    boot = server.worker("default")["boot_id"]
    r, took = _post(server, "/completions", {"model": "default", "prompt": prompt, "max_tokens": 4})
    assert r.status_code == 400, r.text
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert took < 2.0
    assert server.worker("default")["boot_id"] == boot


def test_negative_seed_works_and_repeats(server: Server) -> None:
    boot = server.worker("default")["boot_id"]
    body = {**CHAT, "seed": -1, "temperature": 1.0}
    a, _ = _post(server, "/chat/completions", body)
    b, _ = _post(server, "/chat/completions", body)
    assert a.status_code == b.status_code == 200, a.text
    assert a.json()["choices"][0]["message"] == b.json()["choices"][0]["message"]
    assert server.worker("default")["boot_id"] == boot


def test_huge_message_is_refused_fast_while_another_stream_flows(server: Server) -> None:
    boot = server.worker("default")["boot_id"]
    gaps: list[float] = []

    def stream() -> None:
        body = {"model": "default", "prompt": "Once upon a time", "max_tokens": 300,
                "temperature": 0.0, "stream": True}
        last = time.monotonic()
        with httpx.stream("POST", f"{server.url}/completions", json=body, timeout=60) as r:
            for _ in r.iter_lines():
                now = time.monotonic()
                gaps.append(now - last)
                last = now

    t = threading.Thread(target=stream)
    t.start()
    time.sleep(0.3)
    huge = {"model": "default", "messages": [{"role": "user", "content": "x" * 5_000_000}]}
    r, took = _post(server, "/chat/completions", huge)
    t.join(60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    assert took < 2.0
    assert len(gaps) > 10 and max(gaps[1:]) < 1.5
    assert server.worker("default")["boot_id"] == boot
