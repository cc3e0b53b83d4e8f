"""MLA models (tiny DeepSeek-V3 and GLM-4.7-Flash, tools/tiny_models) served by `rapid-mlx serve
DIR`: greedy completions token-identical to mlx-lm's own greedy decode, alone, 8 at a time, after
a prefix-cache hit and across preemption (a pool of a context's pages and two); K8V4, the
default, is declined for MLA with its reason in /v1/workers, and the pages stay full precision.
A 4-bit model serves the same way."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.generate import generate_step

from tests.e2e.harness import Server
from tools.tiny_models.build import build
from tools.tiny_models.configs import config_for
from worker.kv.setup import MLA_REASON

pytestmark = pytest.mark.slow
PROMPTS = ["Once upon a time", "The cat sat", "Lily and Tom went to the", "One day, a big dog",
           "The sun was", "She wanted to", "In the park there was", "Mom said"]
LONG = " ".join(PROMPTS)
TOKENS = 40
# context 128 in pages of 16: a pool of 10 pages; 8 rows of 40 tokens and more need 24
SMALL = ("--context-length", "128", "--kv-cache-memory", "1KiB", "--max-batch", "8")


def _reference(path: Path, prompts: list[str]) -> dict[str, str]:
    """mlx-lm's greedy text of each prompt (its token ids decoded), stopping at EOS."""
    model, tok = load(str(path))[:2]
    out = {}
    for prompt in prompts:
        ids = []
        for token, _ in generate_step(mx.array(tok.encode(prompt)), model, max_tokens=TOKENS):
            if int(token) in tok.eos_token_ids:
                break
            ids.append(int(token))
        out[prompt] = tok.decode(ids)
    return out


@pytest.fixture(scope="module", params=["deepseek_v3", "glm4_moe_lite", "deepseek_v3-4bit"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, Server, dict[str, str]]]:
    name, _, bits = request.param.partition("-")
    path = build(name, tmp_path_factory.mktemp(request.param), bits=4 if bits else None)
    ref = _reference(path, [*PROMPTS, LONG])
    server = Server(str(path), *SMALL).wait_ready()
    yield request.param, server, ref
    server.stop()


def _model(server: Server) -> str:
    models = httpx.get(f"{server.url}/models", timeout=10).json()["data"]
    return str(models[0]["id"])


async def _complete(server: Server, model: str, prompt: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=120) as client:
        r = await client.post(f"{server.url}/completions", json={
            "model": model, "prompt": prompt, "max_tokens": TOKENS, "temperature": 0})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body


def _status(server: Server, model: str) -> dict[str, Any]:
    view = server.worker(model)
    live: dict[str, Any] = view.get("live") or view
    return live


def test_mla_serves_token_identical(served: tuple[str, Server, dict[str, str]]) -> None:
    name, server, ref = served
    model = _model(server)
    status = _status(server, model)
    assert status["kv_format"] == "none" and MLA_REASON in str(status["kv_format_note"])
    config = config_for(name.partition("-")[0])
    assert (status["kv_key_width"], status["kv_value_width"]) == (
        config["kv_lora_rank"], config["qk_rope_head_dim"])
    assert status["kv_bytes_per_token_per_layer"] == (config["kv_lora_rank"]
                                                      + config["qk_rope_head_dim"]) * 4
    for prompt in PROMPTS[:2]:  # alone
        assert asyncio.run(_complete(server, model, prompt))["choices"][0]["text"] == ref[prompt]

    async def together() -> list[dict[str, Any]]:
        return await asyncio.gather(*(_complete(server, model, p) for p in PROMPTS))

    before = _status(server, model)["preemptions"]
    bodies = asyncio.run(together())
    assert [b["choices"][0]["text"] for b in bodies] == [ref[p] for p in PROMPTS]
    assert _status(server, model)["preemptions"] > before, "the small pool preempted no row"
    first = asyncio.run(_complete(server, model, LONG))
    second = asyncio.run(_complete(server, model, LONG))
    assert first["choices"][0]["text"] == second["choices"][0]["text"] == ref[LONG]
    details = second["usage"].get("prompt_tokens_details") or {}
    assert details.get("cached_tokens", 0) > 0, second["usage"]
