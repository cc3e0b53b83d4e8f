"""Acceptance: kill -9 of the gateway during 50 concurrent stored requests loses no response that
was reported completed to its client; a new gateway on the same data dir returns every one."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

CONCURRENCY = 50
KILL_AFTER = 60  # responses reported to their clients before the gateway is killed


def _body(i: int) -> dict[str, Any]:
    return {"model": "default", "input": f"Tell me a story about the number {i}.",
            "max_output_tokens": 8 + i % 17, "ignore_eos": True, "temperature": 0,
            "reasoning": {"effort": "none"}, "stream": i % 2 == 1}


async def _one(client: httpx.AsyncClient, url: str, i: int) -> dict[str, Any] | None:
    """The response object this request was told had finished, or None."""
    body = _body(i)
    if not body["stream"]:
        r = await client.post(f"{url}/responses", json=body)
        obj = r.json() if r.status_code == 200 else {}
        return obj if obj.get("status") in ("completed", "incomplete") else None
    final = None
    async with client.stream("POST", f"{url}/responses", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                ev = json.loads(line[6:])
                if ev["type"] in ("response.completed", "response.incomplete"):
                    final = ev["response"]
    return final


async def _load_until_killed(srv: Server) -> tuple[list[dict[str, Any]], int]:
    """50 clients send stored requests in a loop; after KILL_AFTER reports, SIGKILL the gateway
    while the others are mid-flight. Returns the reported responses and how many were cut."""
    reported: list[dict[str, Any]] = []
    cut = 0
    killed = asyncio.Event()
    limits = httpx.Limits(max_connections=CONCURRENCY * 2)
    async with httpx.AsyncClient(timeout=httpx.Timeout(60, connect=5), limits=limits) as client:
        async def runner(k: int) -> None:
            nonlocal cut
            i = k
            while not killed.is_set():
                try:
                    got = await _one(client, srv.url, i)
                except (httpx.HTTPError, json.JSONDecodeError):
                    got = None
                if got is None:
                    cut += killed.is_set()
                    continue
                reported.append(got)
                if len(reported) >= KILL_AFTER and not killed.is_set():
                    os.kill(srv.proc.pid, signal.SIGKILL)
                    killed.set()
                i += CONCURRENCY

        await asyncio.wait_for(asyncio.gather(*(runner(k) for k in range(CONCURRENCY))), 180)
    return reported, cut


def test_kill_9_loses_no_reported_response(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = Server("--data-dir", str(data)).wait_ready()
    workers = srv.tree()[1:]
    try:
        reported, cut = asyncio.run(_load_until_killed(srv))
        assert srv.proc.wait(10) == -signal.SIGKILL
        # the workers die with their parent (PR_SET_PDEATHSIG, then the ppid poll)
        started = time.monotonic()
        _, lingering = psutil.wait_procs(workers, timeout=30)
        assert not lingering, f"workers outlived the gateway: {lingering}"
        print(f"reported {len(reported)}, cut by the kill {cut}, {len(workers)} worker(s) gone "
              f"{time.monotonic() - started:.1f}s after the kill")
    finally:
        for p in srv.tree()[1:] + workers:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        srv.stop()
    assert len(reported) >= KILL_AFTER
    assert cut > 0, "the kill interrupted no request: the test proved nothing"
    again = Server("--data-dir", str(data)).wait_ready()
    try:
        lost = []
        for resp in reported:
            r = httpx.get(f"{again.url}/responses/{resp['id']}", timeout=10)
            if r.status_code != 200 or r.json() != resp:
                lost.append((resp["id"], r.status_code))
        assert not lost, f"{len(lost)} of {len(reported)} reported responses lost: {lost[:5]}"
    finally:
        again.stop()
