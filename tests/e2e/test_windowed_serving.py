"""`rapid-mlx serve DIR` on the windowed aliases' architectures (tools/tiny_models): gpt_oss
(attention sinks + sliding window 24), llama4 (chunked attention, 32) and gemma3_text (sliding
window 32). Greedy text equals `mlx_lm.generate` with full-precision pages, alone and 8 at a
time (all 200), with prefill chunks of 10 tokens crossing the windows; gpt_oss with K8V4 pages
answers 8 at a time with the same text as alone; /v1/workers shows the layer kinds and the pages
the sliding layers need stay bounded by the window over a generation four windows long.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.harness import Server
from tests.worker.spec.spec_helpers import PROMPTS
from tools.tiny_models.build import build

pytestmark = pytest.mark.slow
ARGS = ("--max-batch", "8", "--prefill-budget", "10")
N = 48


def _model_id(server: Server) -> str:
    return str(httpx.get(f"{server.url}/models", timeout=10).json()["data"][0]["id"])


async def _complete(server: Server, model: str, prompt: str, n: int = N) -> tuple[int, str]:
    async with httpx.AsyncClient(timeout=300) as client:
        r = await client.post(f"{server.url}/completions", json={
            "model": model, "prompt": prompt, "max_tokens": n, "temperature": 0})
        return r.status_code, r.json()["choices"][0]["text"] if r.status_code == 200 else r.text


def _answers(server: Server, prompts: list[str]) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    model = _model_id(server)
    alone = [asyncio.run(_complete(server, model, p)) for p in prompts[:2]]

    async def together() -> list[tuple[int, str]]:
        return list(await asyncio.gather(*(_complete(server, model, p) for p in prompts)))

    return alone, asyncio.run(together())


def _reference(path: Path, prompts: list[str]) -> list[str]:
    from mlx_lm import generate, load

    model, tok = load(str(path))[:2]
    return [generate(model, tok, p, max_tokens=N, verbose=False) for p in prompts]


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return [" ".join(PROMPTS[i : i + 3]) for i in range(8)]


@pytest.mark.parametrize("arch", ["gpt_oss", "llama4", "gemma3_text"])
def test_full_precision_equals_mlx_lm(arch: str, prompts: list[str], tmp_path: Path) -> None:
    path = build(arch, tmp_path / arch)
    want = _reference(path, prompts)
    server = Server(str(path), "--kv-cache-turboquant", "none", *ARGS).wait_ready()
    try:
        alone, together = _answers(server, prompts)
        kinds = server.worker(_model_id(server))["live"]["kv_layer_kinds"]
    finally:
        server.stop()
    assert alone == [(200, t) for t in want[:2]]
    assert together == [(200, t) for t in want]
    assert set(kinds) == {"full", "chunked" if arch == "llama4" else "sliding"}


@pytest.fixture(scope="module")
def gpt_oss_k8v4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    path = build("gpt_oss", tmp_path_factory.mktemp("gpt_oss"))
    server = Server(str(path), "--kv-cache-turboquant", "k8v4", *ARGS).wait_ready()
    yield server
    server.stop()


def test_gpt_oss_k8v4_same_alone_and_batched(gpt_oss_k8v4: Server, prompts: list[str]) -> None:
    alone, together = _answers(gpt_oss_k8v4, prompts)
    assert all(code == 200 for code, _ in alone + together)
    assert together[:2] == alone
    assert gpt_oss_k8v4.worker(_model_id(gpt_oss_k8v4))["kv_format"] == "k8v4"


def test_sliding_layers_need_a_bounded_number_of_pages(gpt_oss_k8v4: Server) -> None:
    """A generation four windows long (window 24, pages of 16): at every look, the sliding
    layers need at most the pages a window of 24 positions can touch (3), while the full layers
    need every page of the sequence."""
    server = gpt_oss_k8v4
    model = _model_id(server)
    seen: list[dict[str, Any]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            live = server.worker(model)["live"]
            if live.get("running"):
                seen.append(live["kv_pages_needed_by_kind"])

    t = threading.Thread(target=watch)
    t.start()
    try:
        code, _ = asyncio.run(_complete(server, model, PROMPTS[0], n=4 * 24 + 8))
    finally:
        done.set()
        t.join()
    assert code == 200
    assert seen, "no status while the request ran"
    assert max(s["sliding"] for s in seen) <= 3
    assert max(s["full"] for s in seen) >= 6  # 100+ positions: the full layers' pages grow
