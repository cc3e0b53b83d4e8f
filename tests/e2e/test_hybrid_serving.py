"""A hybrid model (Gated DeltaNet + attention, the Qwen3.5 layer pattern) behind the real gateway:
a conversation's second turn resumes from the prefix cache's state snapshot, concurrent requests
answer as they do alone, and /v1/workers shows the state slots beside the pages."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.e2e.harness import Server
from tools.tiny_models.build import build

pytestmark = pytest.mark.slow

STORY = ("Once upon a time there was a little girl named Lily. She loved to play outside in the "
         "park with her friends and her big red ball. One day she saw a cat in a tree. ") * 2


@pytest.fixture(scope="module", params=["k8v4", "none"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    folder = build("qwen3_5", tmp_path_factory.mktemp("qwen3_5") / "m")
    srv = Server(str(folder), "--served-model-name", "m", "--kv-cache-turboquant",
                 str(request.param)).wait_ready()
    try:
        yield srv
    finally:
        srv.stop()


def _client(srv: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url, api_key="x", timeout=120)


def test_second_turn_hits_the_first_turns_state(server: Server) -> None:
    c = _client(server)
    messages = [{"role": "user", "content": STORY}]
    one = c.chat.completions.create(model="m", messages=messages, max_tokens=40, temperature=0)
    assert one.usage is not None and one.usage.prompt_tokens > 64
    messages += [{"role": "assistant", "content": one.choices[0].message.content or ""},
                 {"role": "user", "content": "And then what happened?"}]
    two = c.chat.completions.create(model="m", messages=messages, max_tokens=8, temperature=0)
    assert two.usage is not None and two.usage.prompt_tokens_details is not None
    cached = two.usage.prompt_tokens_details.cached_tokens or 0
    assert cached >= 0.8 * one.usage.prompt_tokens, (cached, one.usage.prompt_tokens)
    status = server.worker("m")["live"]
    assert status["kv_recurrent_layers"] == 3 and status["kv_attention_layers"] == 1
    assert status["state_snapshots"] > 0 and status["state_bytes_per_slot"] > 0
    metrics = httpx.get(server.url.removesuffix("/v1") + "/metrics", timeout=10).text
    assert 'rapid_mlx_state_snapshots{model_name="m"}' in metrics
    assert 'rapid_mlx_state_slots_usage_perc{model_name="m"}' in metrics


def test_eight_at_once_answer_as_alone(server: Server) -> None:
    c = _client(server)
    prompts = [f"{STORY} Question {i}: what did Lily see?" for i in range(8)]

    def ask(p: str) -> str:
        r = c.completions.create(model="m", prompt=p, max_tokens=16, temperature=0)
        return r.choices[0].text

    alone = [ask(p) for p in prompts]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(ask, prompts))
    assert together == alone
