"""The Anthropic Messages API end to end: the real server, the demo model, the anthropic SDK."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import httpx
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

WEATHER = [{"name": "get_weather", "description": "Get the current weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}]
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
GREEDY = {"temperature": 0}  # this SDK has no sampling arguments: sent as extra_body
NO_THINK = {"type": "disabled"}


def _client(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base, api_key="x", max_retries=0)


def _dump(msg: Any) -> tuple[list[dict[str, Any]], str | None, int]:
    blocks = [{k: v for k, v in b.model_dump(exclude_none=True).items() if k != "id"}
              for b in msg.content]
    return blocks, msg.stop_reason, msg.usage.output_tokens


def test_plain_answer(server: Server) -> None:
    msg = _client(server).messages.create(
        model="default", max_tokens=60, messages=[{"role": "user", "content": "Hello!"}],
        system="You are terse.", thinking=NO_THINK, extra_body=GREEDY)
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text.strip()
    assert msg.stop_reason in ("end_turn", "max_tokens") and msg.model == "default"
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0


def test_reasoning_answer_has_a_thinking_block(server: Server) -> None:
    msg = _client(server).messages.create(
        model="default", max_tokens=120, messages=[{"role": "user", "content": "Hello!"}],
        thinking={"type": "enabled", "budget_tokens": 1024}, extra_body=GREEDY)
    kinds = [b.type for b in msg.content]
    assert kinds[0] == "thinking" and msg.content[0].thinking.strip(), msg
    assert all("<think>" not in (getattr(b, "text", "") or "") for b in msg.content)


def test_tool_round_trip(server: Server) -> None:
    client = _client(server)
    first = client.messages.create(model="default", max_tokens=80, messages=ASK, tools=WEATHER,
                                   thinking=NO_THINK, extra_body=GREEDY)
    assert first.stop_reason == "tool_use", first
    (call,) = [b for b in first.content if b.type == "tool_use"]
    assert call.name == "get_weather" and call.input == {"city": "Paris"}
    assert call.id.startswith("toolu_")
    history = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                       for b in first.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                             "content": json.dumps({"temperature": 18,
                                                                    "condition": "sunny"})}]}]
    out = client.messages.create(model="default", max_tokens=80, messages=history, tools=WEATHER,
                                 thinking=NO_THINK, extra_body=GREEDY)
    assert out.stop_reason == "end_turn" and out.content[-1].type == "text", out
    assert out.content[-1].text.strip()


@pytest.mark.parametrize("kw", [
    {"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 120},
    {"messages": ASK, "tools": WEATHER, "thinking": NO_THINK, "max_tokens": 80},
], ids=["reasoning", "tool"])
def test_streamed_equals_non_streamed(server: Server, kw: dict[str, Any]) -> None:
    client = _client(server)
    whole = client.messages.create(model="default", extra_body=GREEDY, **kw)
    with client.messages.stream(model="default", extra_body=GREEDY, **kw) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert _dump(final) == _dump(whole)
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "message_delta" in events


def test_raw_stream_event_lines(server: Server) -> None:
    with httpx.stream("POST", f"{server.base}/v1/messages", timeout=60, json={
            "model": "default", "max_tokens": 20, "stream": True,
            "messages": [{"role": "user", "content": "Hi"}]}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        frames = r.read().decode().strip().split("\n\n")
    for frame in frames:
        name, data = frame.split("\n")
        assert name.startswith("event: ") and json.loads(data[6:])["type"] == name[7:]


def test_count_tokens(server: Server) -> None:
    client = _client(server)
    few = client.messages.count_tokens(model="default",
                                       messages=[{"role": "user", "content": "Hello!"}])
    more = client.messages.count_tokens(model="default", messages=ASK, tools=WEATHER)
    assert 0 < few.input_tokens < more.input_tokens
    whole = client.messages.create(model="default", max_tokens=4, extra_body=GREEDY,
                                   messages=[{"role": "user", "content": "Hello!"}])
    assert whole.usage.input_tokens + whole.usage.cache_read_input_tokens == few.input_tokens


@pytest.mark.parametrize("body,status,kind", [
    (b"{not json", 400, "invalid_request_error"),
    (b'{"model": "default", "messages": [{"role": "user", "content": "x"}]}', 400,
     "invalid_request_error"),  # max_tokens missing
    (b'{"model": "default", "max_tokens": 5, "messages": [{"role": "user", "content": '
     b'[{"type": "nope"}]}]}', 400, "invalid_request_error"),
    (b'{"model": "default", "max_tokens": 5, "messages": ' + b"[" * 100 + b"]" * 100 + b"}",
     400, "invalid_request_error"),
    (b'{"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}',
     404, "not_found_error"),
])
def test_errors_in_anthropic_shape(server: Server, body: bytes, status: int, kind: str) -> None:
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = httpx.post(f"{server.base}{path}", content=body, timeout=30,
                       headers={"content-type": "application/json"})
        if path.endswith("count_tokens") and b"max_tokens" not in body and r.status_code == 200:
            continue  # count_tokens needs no max_tokens
        assert r.status_code == status, (path, r.text)
        err = r.json()
        assert err["type"] == "error" and err["error"]["type"] == kind, err
        assert err["error"]["message"]
    if status == 404:
        assert "default" in r.json()["error"]["message"]


def test_limits_in_anthropic_shape(server: Server) -> None:
    big = b'{"model": "default", "max_tokens": 5, "messages": [{"role": "user", "content": "' + \
        b"x" * (9 * 1024 * 1024) + b'"}]}'
    r = httpx.post(f"{server.base}/v1/messages", content=big, timeout=60,
                   headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
    huge = b'{"model": "default", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]' \
        b', "top_k": 99999999999999999999999}'
    r = httpx.post(f"{server.base}/v1/messages", content=huge, timeout=30,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.get(f"{server.base}/v1/messages", timeout=10)
    assert r.status_code == 405 and r.json()["type"] == "error"
    long = "word " * 200_000  # far more characters than the context can hold
    r = httpx.post(f"{server.base}/v1/messages", timeout=30, json={
        "model": "default", "max_tokens": 5, "messages": [{"role": "user", "content": long}]})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_sdk_raises_typed_errors(server: Server) -> None:
    with pytest.raises(anthropic.NotFoundError):
        _client(server).messages.create(model="claude-sonnet-4", max_tokens=5,
                                        messages=[{"role": "user", "content": "x"}])
    r = httpx.post(f"{server.base}/v1/messages", content=b"x", timeout=10,
                   headers={"content-type": "text/plain"})
    assert r.status_code == 415 and r.json()["type"] == "error"


def test_disconnect_mid_stream_aborts_generation(server: Server) -> None:
    with httpx.stream("POST", f"{server.base}/v1/messages", timeout=30, json={
            "model": "default", "max_tokens": 1500, "stream": True,
            "messages": [{"role": "user", "content": "Count to a thousand."}]}) as r:
        for line in r.iter_lines():
            if "content_block_delta" in line:
                break
    deadline = time.monotonic() + 10
    while server.worker("default")["live"]["running"] != 0:
        assert time.monotonic() < deadline, "generation not aborted"
        time.sleep(0.1)


def test_api_key_via_x_api_key() -> None:
    srv = Server("--api-key", "sekret").wait_ready()
    try:
        ok = anthropic.Anthropic(base_url=srv.base, api_key="sekret", max_retries=0)
        msg = ok.messages.create(model="default", max_tokens=4,
                                 messages=[{"role": "user", "content": "Hi"}])
        assert msg.usage.output_tokens > 0
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=srv.base, api_key="wrong", max_retries=0).messages.create(
                model="default", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
        r = httpx.post(f"{srv.base}/v1/messages", json={}, headers={"x-api-key": "wrong"})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        r = httpx.get(f"{srv.url}/models", headers={"x-api-key": "sekret"})
        assert r.status_code == 200
    finally:
        srv.stop()


def test_stop_sequence_is_reported(server: Server) -> None:
    client = _client(server)
    free = client.messages.create(model="default", max_tokens=40, thinking=NO_THINK,
                                  extra_body=GREEDY,
                                  messages=[{"role": "user", "content": "Hello!"}])
    text = free.content[-1].text
    word = text.strip().split()[1]  # a word in the middle of the greedy answer
    for stream in (False, True):
        kw: dict[str, Any] = dict(model="default", max_tokens=40, thinking=NO_THINK,
                                  stop_sequences=[word], extra_body=GREEDY,
                                  messages=[{"role": "user", "content": "Hello!"}])
        if stream:
            with client.messages.stream(**kw) as s:
                msg = s.get_final_message()
        else:
            msg = client.messages.create(**kw)
        assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == word, msg
        assert word not in msg.content[-1].text


def test_anthropic_model_map_serves_claude_names() -> None:
    srv = Server("--anthropic-model-map", "claude-*=default").wait_ready()
    try:
        client = _client(srv)
        msg = client.messages.create(model="claude-local-test", max_tokens=4,
                                     messages=[{"role": "user", "content": "Hi"}])
        assert msg.model == "claude-local-test" and msg.usage.output_tokens > 0
        assert client.messages.count_tokens(model="claude-local-other", messages=[
            {"role": "user", "content": "Hi"}]).input_tokens > 0
        with pytest.raises(anthropic.NotFoundError):
            client.messages.create(model="gpt-4o", max_tokens=4,
                                   messages=[{"role": "user", "content": "Hi"}])
    finally:
        srv.stop()
