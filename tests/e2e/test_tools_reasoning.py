"""Tool calls and reasoning end to end: the real server, the demo model, the openai SDK."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.e2e.harness import Server

WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}


def _client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)


def _streamed(stream: Any) -> tuple[str, str, list[dict[str, Any]], str | None]:
    """Content, reasoning, tool calls (assembled from deltas) and finish reason of a stream."""
    content = reasoning = ""
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        reasoning += getattr(d, "reasoning_content", None) or ""
        for tc in d.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                assert call["id"] in (None, tc.id), "tool-call id changed mid-stream"
                call["id"] = tc.id
            if tc.function and tc.function.name:
                call["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                call["arguments"] += tc.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    return content, reasoning, [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("city", ["Paris", "Tokyo"])
def test_tool_call_streamed_equals_non_streamed(server: Server, city: str) -> None:
    client = _client(server)
    ask = [{"role": "user", "content": f"What's the weather in {city}?"}]
    whole = client.chat.completions.create(model="default", messages=ask, tools=WEATHER,
                                           temperature=0, max_tokens=80, extra_body=NO_THINK)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"city": city}
    content, _, calls, finish = _streamed(client.chat.completions.create(
        model="default", messages=ask, tools=WEATHER, temperature=0, max_tokens=80, stream=True,
        extra_body=NO_THINK))
    assert finish == "tool_calls" and content == (choice.message.content or "")
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("get_weather", {"city": city})]


def test_thinking_gives_reasoning_content(server: Server) -> None:
    client = _client(server)
    out = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hello!"}], temperature=0,
        max_tokens=120, extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    msg = out.choices[0].message
    assert getattr(msg, "reasoning_content", None), msg
    assert "<think>" not in (msg.content or "") and "</think>" not in (msg.content or "")
    _, reasoning, _, _ = _streamed(client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hello!"}], temperature=0,
        max_tokens=120, stream=True, extra_body={"chat_template_kwargs": {"enable_thinking": True}}))
    assert reasoning == msg.reasoning_content


def test_tool_choice_none_never_returns_calls(server: Server) -> None:
    out = _client(server).chat.completions.create(
        model="default", messages=ASK, tools=WEATHER, tool_choice="none", temperature=0,
        max_tokens=60, extra_body=NO_THINK)
    assert not out.choices[0].message.tool_calls and out.choices[0].finish_reason != "tool_calls"


TIME = [{"type": "function", "function": {
    "name": "get_time", "description": "Get the current time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def test_named_tool_choice_forces_the_call(server: Server) -> None:
    client = _client(server)
    free = client.chat.completions.create(model="default", messages=ASK, tools=WEATHER + TIME,
                                          temperature=0, max_tokens=60, extra_body=NO_THINK)
    assert free.choices[0].message.tool_calls[0].function.name == "get_weather"
    forced = client.chat.completions.create(
        model="default", messages=ASK, tools=WEATHER + TIME, temperature=0, max_tokens=60,
        tool_choice={"type": "function", "function": {"name": "get_time"}}, extra_body=NO_THINK)
    calls = forced.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_time"
    assert isinstance(json.loads(calls[0].function.arguments), dict)


def test_tool_result_round_trip(server: Server) -> None:
    client = _client(server)
    first = client.chat.completions.create(model="default", messages=ASK, tools=WEATHER,
                                           temperature=0, max_tokens=80, extra_body=NO_THINK)
    call = first.choices[0].message.tool_calls[0]
    history = [*ASK, first.choices[0].message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id,
                "content": json.dumps({"temperature": 18, "condition": "sunny"})}]
    out = client.chat.completions.create(model="default", messages=history, tools=WEATHER,
                                         temperature=0, max_tokens=80, extra_body=NO_THINK)
    assert out.choices[0].finish_reason == "stop" and out.choices[0].message.content


def test_models_show_parsers(server: Server) -> None:
    (card,) = _client(server).models.list().data
    extra = card.model_dump()
    assert extra["tool_call_parser"] == "hermes" and extra["reasoning_parser"] == "qwen3"
    assert extra["is_moe"] is False and extra["is_hybrid"] is False
    assert extra["supports_spec_decode"] is False
