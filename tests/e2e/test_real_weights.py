"""Real pretrained checkpoints served from their GGUF files (`rapid-mlx serve FILE.gguf`): greedy
output with full-precision pages equals mlx_lm.generate on the converted folder, alone and 8 at a
time; the Qwen2.5-Coder model's tool call comes back parsed through the openai SDK."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import mlx_lm
import openai
import pytest

from tests.e2e.harness import Server
from tests.real_weights import QWEN, SMOL, cache_env, converted_or_skip, gguf_or_skip
from worker.model.load import choose_dtype

PROMPTS = ["What is the capital of France?", "Name a primary color.", "Say hello in Spanish.",
           "What is 2 + 2?", "Name a planet.", "What do bees make?", "Name a fruit.",
           "What color is the sky?"]
MAX_TOKENS = {SMOL: 16, QWEN: 6}
# real checkpoints on a CPU: minutes per test (a 1.5B 4-bit model decodes at seconds per token)
pytestmark = pytest.mark.timeout(3600)
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def _alias(name: str) -> str:
    return name[: -len(".gguf")]


@pytest.fixture(scope="module", params=[SMOL, QWEN], ids=["smollm2", "qwen2.5-coder"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[str, Server, Any]]:
    name = request.param
    gguf = gguf_or_skip(name)
    model, tok = mlx_lm.load(str(converted_or_skip(name)))[:2]
    choose_dtype(model)  # the dtype the worker runs it at (float32 on CPU)
    srv = Server(str(gguf), "--kv-cache-turboquant", "none", "--max-batch", "8",
                 env=cache_env()).wait_ready(timeout=900)
    yield name, srv, (model, tok)
    srv.stop()


def _reference(model_tok: Any, prompt: str, max_tokens: int) -> str:
    model, tok = model_tok
    text = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                   add_generation_prompt=True, tokenize=False)
    return str(mlx_lm.generate(model, tok, text, max_tokens=max_tokens))


def _ask(srv: Server, alias: str, prompt: str, max_tokens: int) -> str:
    r = httpx.post(f"{srv.url}/chat/completions", timeout=1800, json={
        "model": alias, "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens, "temperature": 0})
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["message"]["content"])


def test_greedy_equals_mlx_lm_alone_and_8_at_a_time(served: tuple[str, Server, Any]) -> None:
    name, srv, model_tok = served
    n = MAX_TOKENS[name]
    want = [_reference(model_tok, p, n) for p in PROMPTS]
    assert any(w.strip() for w in want)
    assert _ask(srv, _alias(name), PROMPTS[0], n) == want[0]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda p: _ask(srv, _alias(name), p, n), PROMPTS))
    assert got == want


def test_qwen_tool_call_comes_back_parsed() -> None:
    gguf = gguf_or_skip(QWEN)
    converted_or_skip(QWEN)
    srv = Server(str(gguf), "--max-batch", "8", env=cache_env()).wait_ready(timeout=900)
    try:
        client = openai.OpenAI(base_url=srv.url, api_key="unused", timeout=1800)
        reply = client.chat.completions.create(
            model=_alias(QWEN), messages=[{"role": "user", "content": "What's the weather in Paris?"}],
            tools=[WEATHER], max_tokens=40, temperature=0)  # type: ignore[list-item]
    finally:
        srv.stop()
    message = reply.choices[0].message
    assert message.tool_calls, message
    call = message.tool_calls[0]
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert "paris" in call.function.arguments.lower()  # type: ignore[union-attr]
