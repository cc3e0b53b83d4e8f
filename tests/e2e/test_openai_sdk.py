"""The official openai SDK against the real server: sync and async, streamed and not."""

from __future__ import annotations

import asyncio

import openai
import pytest

from tests.e2e.harness import Server

MSG = [{"role": "user", "content": "Hello!"}]


def test_models_list(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="x")
    models = client.models.list().data
    assert [m.id for m in models] == ["default"]
    card = models[0].model_dump()
    for key in ("tool_call_parser", "reasoning_parser", "is_hybrid", "is_moe",
                "supports_spec_decode"):
        assert key in card


def test_chat_sync_non_stream_and_stream_agree(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="x")
    kw = dict(model="default", messages=MSG, max_tokens=24, temperature=0)
    whole = client.chat.completions.create(**kw)
    choice = whole.choices[0]
    assert choice.finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens > 0 and whole.usage.prompt_tokens > 0
    chunks = list(client.chat.completions.create(**kw, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or ""
                        for c in chunks if c.choices)
    assert text == (choice.message.content or "")
    assert reasoning == (getattr(choice.message, "reasoning_content", None) or "")
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [choice.finish_reason]


async def test_async_client_stream_and_not(server: Server) -> None:
    client = openai.AsyncOpenAI(base_url=server.url, api_key="x")
    whole = await client.chat.completions.create(model="default", messages=MSG, max_tokens=8)
    assert whole.choices[0].message.role == "assistant"
    stream = await client.chat.completions.create(model="default", messages=MSG, max_tokens=8,
                                                  stream=True)
    n = 0
    async for chunk in stream:
        n += 1
        assert chunk.object == "chat.completion.chunk"
    assert n >= 2
    await client.close()


def test_text_completions(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="x")
    out = client.completions.create(model="default", prompt=["Hello", "Good"], max_tokens=5,
                                    temperature=0, n=2)
    assert sorted(c.index for c in out.choices) == [0, 1, 2, 3]
    assert out.choices[0].text == out.choices[1].text  # greedy: both choices agree
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="default", prompt="Hello", max_tokens=5, temperature=0, stream=True))
    assert streamed == out.choices[0].text


def test_logprobs_and_seed(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="x")
    out = client.chat.completions.create(model="default", messages=MSG, max_tokens=4,
                                         logprobs=True, top_logprobs=2, temperature=0)
    content = out.choices[0].logprobs.content
    assert content and all(len(e.top_logprobs) == 2 and e.logprob <= 0 for e in content)
    a, b = (client.chat.completions.create(model="default", messages=MSG, max_tokens=12,
                                           temperature=1.0, seed=7).choices[0].message.content
            for _ in range(2))
    assert a == b


async def test_16_concurrent_streams_share_decode_steps(server: Server) -> None:
    client = openai.AsyncOpenAI(base_url=server.url, api_key="x", max_retries=0)
    before = server.worker("default")["live"]

    async def one(i: int) -> int:
        stream = await client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": f"Tell me a story {i}"}],
            max_tokens=32, temperature=0.8, seed=i, stream=True,
            extra_body={"ignore_eos": True})
        tokens = 0
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].finish_reason:
                assert chunk.choices[0].finish_reason in ("stop", "length")
            tokens += 1
        return tokens

    results = await asyncio.gather(*(one(i) for i in range(16)))
    assert all(r >= 2 for r in results)
    after = server.worker("default")["live"]
    steps = after["steps"] - before["steps"]
    generated = after["generated_tokens"] - before["generated_tokens"]
    assert generated >= 16
    # decode steps were shared: far fewer engine steps than tokens generated
    assert steps < generated / 3, (steps, generated)
    await client.close()


@pytest.mark.parametrize("n", [1, 3])
def test_n_choices(server: Server, n: int) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="x")
    out = client.chat.completions.create(model="default", messages=MSG, max_tokens=4, n=n)
    assert [c.index for c in out.choices] == list(range(n))


def test_metrics_count_engine_queue_time(server: Server) -> None:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    client = openai.OpenAI(base_url=server.url, api_key="x")
    client.chat.completions.create(model="default", messages=MSG, max_tokens=2)
    text = httpx.get(f"{server.base}/metrics").text
    samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.labels.get("model_name") == "default"}
    assert samples["rapid_mlx_request_queue_time_seconds_count"] >= 1
    assert samples["rapid_mlx_generation_tokens_total"] >= 1


def test_workers_show_the_k8v4_working_set(server: Server) -> None:
    """The default K8V4 pages keep float copies of running rows' full pages; /v1/workers counts."""
    client = openai.OpenAI(base_url=server.url, api_key="x")
    text = "Tell me a long story about a cat and a dog who go to the sea together. " * 6
    client.chat.completions.create(model="default", max_tokens=8,
                                   messages=[{"role": "user", "content": text}])
    live = server.worker("default")["live"]
    assert live["kv_format"] == "k8v4"
    assert live["kv_working_set_pages"] > 0 and live["kv_working_set_loads"] > 0
    assert live["kv_row_writes_in_place"] > 0  # worker/kv/rows.py (built on Linux x86-64)
    assert live["kv_working_set_refused"] == 0
    assert live["kv_dense_cache_bytes"] == 0  # the demo model's dense decode cache: freed, idle
