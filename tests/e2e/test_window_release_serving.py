"""A gpt_oss-shaped tiny model (sliding window 24 on half its layers) behind the gateway with
full-precision pages: its sliding layers sit in their own page pool (worker/kv/window_group.py).
Over a generation sixteen windows long, /v1/workers shows the pages the running request holds for
its sliding layers staying within the window's (+2) while its full layers' grow; the text begins
with ``mlx_lm.generate``'s (which stops at EOS, after four windows; the request ignores EOS);
once it ends, both pools hold only the prefix cache's pages."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.harness import Server
from tests.e2e.test_windowed_serving import ARGS, _model_id
from tests.worker.spec.spec_helpers import PROMPTS
from tools.tiny_models.build import build

WINDOW, PAGE = 24, 16  # the tiny config's window, the worker's default page size
N = 16 * WINDOW + 8  # four windows and more: long enough for the status to be read while it runs


async def _long(server: Server, model: str) -> tuple[int, str, int]:
    """A greedy completion of N tokens (EOS ignored): status, text, tokens generated."""
    async with httpx.AsyncClient(timeout=300) as client:
        r = await client.post(f"{server.url}/completions", json={
            "model": model, "prompt": PROMPTS[0], "max_tokens": N, "temperature": 0,
            "ignore_eos": True})
        body = r.json()
        return r.status_code, body["choices"][0]["text"], body["usage"]["completion_tokens"]


def test_sliding_pages_released_while_generating(tmp_path: Path) -> None:
    from mlx_lm import generate, load

    path = build("gpt_oss", tmp_path / "gpt_oss")
    model_, tok = load(str(path))[:2]
    want = generate(model_, tok, PROMPTS[0], max_tokens=N, verbose=False)
    server = Server(str(path), "--kv-cache-turboquant", "none", *ARGS).wait_ready()
    seen: list[dict[str, Any]] = []
    done = threading.Event()
    try:
        model = _model_id(server)
        before = server.worker(model)["live"]
        assert before["kv_window_pages_total"] > 0
        assert "windowed layers in their own pool" in before["kv_format_note"]

        def watch() -> None:
            while not done.is_set():
                live = server.worker(model)["live"]
                if live.get("running"):
                    seen.append(live)

        t = threading.Thread(target=watch)
        t.start()
        try:
            code, text, generated = asyncio.run(_long(server, model))
        finally:
            done.set()
            t.join()
        after = server.worker(model)["live"]
    finally:
        server.stop()
    assert code == 200 and generated == N  # past EOS: mlx-lm's text (up to EOS) begins it
    assert text.startswith(want) and len(text) > len(want)
    assert len(tok.encode(want)) >= 4 * WINDOW  # the exact part spans four windows
    assert len(seen) >= 3, f"{len(seen)} looks while the request ran"
    held = [s["kv_pages_held_by_kind"] for s in seen]
    bound = -(-WINDOW // PAGE) + 2
    assert max(h["sliding"] for h in held) <= bound
    assert max(h["full"] for h in held) >= 6  # 100+ positions: every page of the sequence
    assert held[-1]["full"] > held[-1]["sliding"]
    # the request's own pages went back; what stays is the prefix cache's
    assert after["running"] == 0
    assert after["kv_pages_held_by_kind"] == {"full": 0, "sliding": 0}
    assert after["kv_pages_used_by_kind"] == {"full": after["prefix_cache_pages"],
                                              "sliding": after["prefix_cache_window_pages"]}
    # the tree has the prompt's windowed pages (published before they left the window) and
    # those of the generation's last window; its full pages cover the whole sequence
    prompt_pages = -(-len(tok.encode(PROMPTS[0])) // PAGE)
    assert after["prefix_cache_window_pages"] <= prompt_pages + bound
    assert after["prefix_cache_pages"] >= (len(tok.encode(PROMPTS[0])) + N - 1) // PAGE - 1
    assert after["prefix_cache_pages"] > after["prefix_cache_window_pages"] + 16
