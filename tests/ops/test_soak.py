"""Soak: 2,000 requests at concurrency 16, valid and hostile bodies, client disconnects, 5 kills.

Every valid request must end in exactly one terminal outcome (a completion, or an error status
or error event); hostile bodies get a 4xx; nothing hangs. Afterwards the worker has restarted
exactly 5 times, KV pages and in-flight counts are back to baseline, and the gateway's and the
worker's memory are back within 10%.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import psutil
import pytest

from tests.e2e.harness import Server
from tests.ops.harness import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

ALIAS = "default"
TOTAL = 2000
CONCURRENCY = 16
KILLS = 5
KILL_PHASE = 1600  # kills are spread over the first requests; the rest measure memory again
REQUEST_TIMEOUT = 120.0

PROMPTS = ["Hello!", "What is the weather in Paris?", "Tell me a story", "Count to five.",
           "Who are you?", "Write a haiku about rain."]

HOSTILE: list[tuple[str, Any]] = [
    ("completions", {"model": ALIAS, "prompt": [999999999, 5]}),
    ("completions", {"model": ALIAS, "prompt": [4294967295]}),
    ("completions", {"model": ALIAS, "prompt": [18446744073709551615]}),
    ("completions", {"model": ALIAS, "prompt": [[-1, 5]]}),
    ("completions", {"model": ALIAS, "prompt": [[True, 5]]}),
    ("completions", {"model": ALIAS, "prompt": ["x"] * 250, "n": 16}),
    ("chat", {"model": ALIAS, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi", "x": 2**64}]}]}),
    ("chat", {"model": ALIAS, "messages": [{"role": "user", "content": "hi"}],
              "chat_template_kwargs": {"k": 2**70}}),
    ("chat", {"model": ALIAS, "messages": [{"role": "user", "content": "hi"}],
              "tools": [{"type": "function", "function": {"name": "f",
                                                          "parameters": {"x": 2**65}}}]}),
    ("chat", {"model": ALIAS, "messages": "not a list"}),
    ("chat", {"model": ALIAS, "messages": [{"role": "wizard", "content": "hi"}]}),
    ("chat", {"model": ALIAS, "messages": [{"role": "user", "content": "hi"}],
              "temperature": "hot"}),
    ("chat", {"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}),
    ("chat", "{\"model\": \"default\", \"messages\": ["),  # truncated JSON
    ("chat", "[" * 1000 + "]" * 1000),
    ("chat", {"model": ALIAS, "messages": [{"role": "user", "content": "hi"}],
              "deep": json.loads("[" * 900 + "]" * 900)}),
    ("chat", {"model": ALIAS, "messages": [{"role": "user", "content": "x" * 300_000}],
              "max_tokens": 4}),
]


@dataclass
class Result:
    kind: str  # valid, hostile, disconnect
    ok: bool
    detail: str = ""


def _valid_body(rng: random.Random) -> tuple[str, dict[str, Any]]:
    stream = rng.random() < 0.5
    max_tokens = rng.randint(1, 16)
    extra: dict[str, Any] = {}
    if rng.random() < 0.5:
        extra = {"temperature": 0.8, "seed": rng.randint(-2**63, 2**63 - 1)}
    if rng.random() < 0.7:
        body = {"model": ALIAS, "messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
                "max_tokens": max_tokens, "stream": stream, "n": rng.choice([1, 1, 1, 2]), **extra}
        return "chat", body
    body = {"model": ALIAS, "prompt": rng.choice(PROMPTS), "max_tokens": max_tokens,
            "stream": stream, **extra}
    return "completions", body


def _terminal_stream(lines: list[str], n: int) -> str | None:
    """None when the SSE lines end in exactly one terminal outcome, else why not."""
    errors, done, finished = 0, 0, set()
    for line in lines:
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done += 1
            continue
        obj = json.loads(data)
        if "error" in obj:
            errors += 1
            continue
        for c in obj.get("choices", []):
            if c.get("finish_reason") is not None:
                finished.add(c["index"])
    if errors == 1 and done == 0:
        return None
    if errors == 0 and done == 1 and len(finished) == n:
        return None
    return f"errors={errors} done={done} finished={sorted(finished)} of {n}"


async def _valid(client: httpx.AsyncClient, url: str, rng: random.Random) -> Result:
    route, body = _valid_body(rng)
    n = body.get("n", 1)
    if not body["stream"]:
        r = await client.post(f"{url}/{route.replace('chat', 'chat/completions')}", json=body)
        if r.status_code == 200:
            choices = r.json()["choices"]
            ok = len(choices) == n and all(c["finish_reason"] for c in choices)
            return Result("valid", ok, "" if ok else f"200 without finish: {r.text[:200]}")
        ok = r.status_code in (400, 503) and "error" in r.json()
        return Result("valid", ok, f"{r.status_code} {r.text[:200]}")
    async with client.stream("POST", f"{url}/{route.replace('chat', 'chat/completions')}",
                             json=body) as r:
        if r.status_code != 200:
            text = (await r.aread()).decode()
            ok = r.status_code in (400, 503) and "error" in json.loads(text)
            return Result("valid", ok, f"{r.status_code} {text[:200]}")
        lines = [line async for line in r.aiter_lines()]
    why = _terminal_stream(lines, n)
    return Result("valid", why is None, why or "")


async def _disconnect(client: httpx.AsyncClient, url: str, rng: random.Random) -> Result:
    body = {"model": ALIAS, "messages": [{"role": "user", "content": "Tell me a story"}],
            "max_tokens": 64, "ignore_eos": True, "stream": True}
    try:
        async with client.stream("POST", f"{url}/chat/completions", json=body) as r:
            read = 0
            async for _ in r.aiter_lines():
                read += 1
                if read >= rng.randint(1, 6):
                    break  # leaving the block closes the connection mid-stream
    except httpx.HTTPError:
        pass
    return Result("disconnect", True)


async def _hostile(client: httpx.AsyncClient, url: str, rng: random.Random) -> Result:
    route, body = rng.choice(HOSTILE)
    path = f"{url}/{route.replace('chat', 'chat/completions')}"
    content = body if isinstance(body, str) else json.dumps(body)
    started = time.monotonic()
    r = await client.post(path, content=content, headers={"Content-Type": "application/json"})
    took = time.monotonic() - started
    ok = 400 <= r.status_code < 500 and "error" in r.json()
    return Result("hostile", ok, f"{r.status_code} in {took:.1f}s {r.text[:150]}")


def _rss(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def _idle(srv: Server) -> dict[str, Any] | None:
    """The worker's live status once nothing runs, waits or holds pages; else None."""
    w = srv.worker(ALIAS)
    live = w.get("live") or {}
    if (w["state"] == "ready" and w["in_flight"] == 0 and live.get("running") == 0
            and live.get("waiting") == 0
            and live.get("kv_pages_used") == live.get("prefix_cache_pages")):
        return w
    return None


async def _load(url: str, count: int, seed: int, on_progress: Any = None) -> list[Result]:
    rng = random.Random(seed)
    kinds = rng.choices(["valid", "hostile", "disconnect"], weights=[70, 20, 10], k=count)
    results: list[Result] = []
    queue: asyncio.Queue[str] = asyncio.Queue()
    for k in kinds:
        queue.put_nowait(k)
    timeout = httpx.Timeout(REQUEST_TIMEOUT, connect=10.0)
    limits = httpx.Limits(max_connections=CONCURRENCY * 2)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        async def runner(i: int) -> None:
            local = random.Random(seed * 1000 + i)
            while not queue.empty():
                kind = queue.get_nowait()
                fn = {"valid": _valid, "hostile": _hostile, "disconnect": _disconnect}[kind]
                try:
                    res = await fn(client, url, local)
                except (httpx.HTTPError, ValueError) as exc:
                    res = Result(kind, False, f"{type(exc).__name__}: {exc}")
                results.append(res)
                if on_progress is not None:
                    on_progress(len(results))

        await asyncio.gather(*(runner(i) for i in range(CONCURRENCY)))
    return results


@pytest.fixture(scope="module")
def soak_server() -> Iterator[Server]:
    srv = Server("--max-batch", "16", "--restart-backoff", "0.2").wait_ready()
    yield srv
    srv.stop()


def test_soak_mixed_load_with_worker_kills(soak_server: Server) -> None:
    srv = soak_server
    url = srv.url
    gateway = psutil.Process(srv.proc.pid)
    asyncio.run(_load(url, 100, seed=1))  # warm up both processes
    base = wait_for(lambda: _idle(srv), timeout=60)
    gw_rss0 = gateway.memory_info().rss
    restarts0 = base["restarts"]

    kill_at = {int(KILL_PHASE * (i + 1) / (KILLS + 1)) for i in range(KILLS)}
    killed: list[int] = []

    def progress(done: int) -> None:
        if done in kill_at and len(killed) < KILLS:
            pid = srv.worker(ALIAS)["pid"]
            if pid and pid not in killed:
                killed.append(pid)
                os.kill(pid, signal.SIGKILL)

    started = time.monotonic()
    results = asyncio.run(_load(url, KILL_PHASE, seed=2, on_progress=progress))
    assert len(killed) == KILLS, f"only {len(killed)} kills happened"
    after_kills = wait_for(lambda: _idle(srv), timeout=120)
    worker_rss0 = _rss(after_kills["pid"])
    results += asyncio.run(_load(url, TOTAL - KILL_PHASE, seed=3))
    elapsed = time.monotonic() - started

    final = wait_for(lambda: _idle(srv), timeout=60)
    counts = Counter((r.kind, r.ok) for r in results)
    print(f"soak: {len(results)} requests in {elapsed:.0f} s, {dict(counts)}")
    bad = [r for r in results if not r.ok]
    assert len(results) == TOTAL
    assert not bad, f"{len(bad)} requests without a proper outcome, e.g. " + "; ".join(
        f"{r.kind}: {r.detail}" for r in bad[:5])
    assert final["restarts"] - restarts0 == KILLS, "a worker restarted besides the kills"
    assert final["pid"] == after_kills["pid"], "the worker restarted after the kill phase"
    gw_rss1, worker_rss1 = gateway.memory_info().rss, _rss(final["pid"])
    print(f"gateway RSS {gw_rss0 / 2**20:.0f} -> {gw_rss1 / 2**20:.0f} MiB; "
          f"worker RSS {worker_rss0 / 2**20:.0f} -> {worker_rss1 / 2**20:.0f} MiB")
    assert gw_rss1 <= gw_rss0 * 1.10, "gateway memory grew by more than 10%"
    assert worker_rss1 <= worker_rss0 * 1.10, "worker memory grew by more than 10%"
