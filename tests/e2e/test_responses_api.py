"""POST /v1/responses end to end: the real server, the demo model, the openai SDK."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

WEATHER = [{"type": "function", "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}]
NO_THINK = {"effort": "none"}


def _client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)


def _events(server: Server, **body: Any) -> list[tuple[str, dict[str, Any]]]:
    """(event line, payload) of every event of a streamed request, read raw."""
    out: list[tuple[str, dict[str, Any]]] = []
    with httpx.stream("POST", f"{server.url}/responses", timeout=60,
                      json={"model": "default", "stream": True, **body}) as r:
        assert r.status_code == 200
        name = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                assert name is not None
                out.append((name, json.loads(line[6:])))
                name = None
    return out


def _check_stream(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Event lines equal types, sequence numbers increase, deltas add up; the final response."""
    assert all(name == ev["type"] for name, ev in events)
    seqs = [ev["sequence_number"] for _, ev in events]
    assert seqs == sorted(set(seqs))
    types = [ev["type"] for _, ev in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    final = events[-1][1]
    assert final["type"] in ("response.completed", "response.incomplete")
    texts: dict[tuple[str, str], str] = {}
    for _, ev in events:
        kind = ev["type"]
        if kind.endswith(".delta"):
            key = (kind.rsplit(".", 1)[0], ev["item_id"])
            texts[key] = texts.get(key, "") + ev["delta"]
        elif kind in ("response.output_text.done", "response.reasoning_text.done"):
            assert texts.get((kind.rsplit(".", 1)[0], ev["item_id"]), "") == ev["text"]
        elif kind == "response.function_call_arguments.done":
            key = ("response.function_call_arguments", ev["item_id"])
            assert texts.get(key, "") == ev["arguments"]
    return final["response"]


def _shape(resp: dict[str, Any]) -> list[tuple[str, str]]:
    """Output items as (type, text) without the random ids."""
    out = []
    for it in resp["output"]:
        if it["type"] == "function_call":
            out.append((it["type"], it["name"] + it["arguments"]))
        else:
            out.append((it["type"], "".join(p["text"] for p in it["content"])))
    return out


def test_plain_answer(server: Server) -> None:
    resp = _client(server).responses.create(model="default", input="Say hello.",
                                            reasoning=NO_THINK, max_output_tokens=40,
                                            temperature=0)
    assert resp.object == "response" and resp.id.startswith("resp_")
    assert resp.status in ("completed", "incomplete") and resp.output_text
    assert resp.store is True  # OpenAI's default; storage is on in the harness's data dir
    assert [o.type for o in resp.output] == ["message"]
    assert resp.output[0].id.startswith("msg_")
    u = resp.usage
    assert u is not None and u.input_tokens > 0 and u.output_tokens > 0
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.output_tokens_details.reasoning_tokens == 0
    # a prompt several KV pages long, twice: the second reuses the first's pages (radix cache)
    kw: dict[str, Any] = dict(model="default", input="Say hello.", reasoning=NO_THINK,
                              instructions="You are a helpful assistant. " * 20,
                              max_output_tokens=8, temperature=0)
    _client(server).responses.create(**kw)
    again = _client(server).responses.create(**kw)
    assert again.usage is not None and again.usage.input_tokens_details.cached_tokens > 0


def test_reasoning_answer_and_incomplete(server: Server) -> None:
    client = _client(server)
    resp = client.responses.create(model="default", input=[{"role": "user", "content": "Hello!"}],
                                   instructions="You are terse.", temperature=0,
                                   max_output_tokens=200, reasoning={"effort": "high"},
                                   extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    kinds = [o.type for o in resp.output]
    assert kinds[0] == "reasoning", kinds
    rs = resp.output[0]
    assert rs.id.startswith("rs_") and rs.summary == [] and rs.content[0].text
    assert "<think>" not in resp.output_text
    assert resp.usage.output_tokens_details.reasoning_tokens > 0
    short = client.responses.create(model="default", input="Hello!", temperature=0,
                                    max_output_tokens=5)
    assert short.status == "incomplete"
    assert short.incomplete_details.reason == "max_output_tokens"


def test_tool_round_trip(server: Server) -> None:
    client = _client(server)
    ask = [{"role": "user", "content": "What's the weather in Paris?"}]
    first = client.responses.create(model="default", input=ask, tools=WEATHER, temperature=0,
                                    max_output_tokens=80, reasoning=NO_THINK)
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1, first.output
    call = calls[0]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert call.id.startswith("fc_") and call.call_id
    follow = ask + [o.model_dump(exclude_none=True) for o in first.output] + [
        {"type": "function_call_output", "call_id": call.call_id,
         "output": json.dumps({"city": "Paris", "temperature_c": 21, "sky": "sunny"})}]
    second = client.responses.create(model="default", input=follow, tools=WEATHER,
                                     temperature=0, max_output_tokens=80, reasoning=NO_THINK)
    assert second.output_text and not [o for o in second.output if o.type == "function_call"]
    assert "21" in second.output_text or "sunny" in second.output_text.lower()


@pytest.mark.parametrize("case", ["plain", "thinking", "tool"])
def test_streamed_equals_non_streamed(server: Server, case: str) -> None:
    body: dict[str, Any] = {"model": "default", "temperature": 0, "max_output_tokens": 60,
                            "input": "Hello!"}
    if case == "thinking":
        body["chat_template_kwargs"] = {"enable_thinking": True}
    else:
        body["reasoning"] = NO_THINK
    if case == "tool":
        body.update(input="What's the weather in Tokyo?", tools=WEATHER)
    whole = httpx.post(f"{server.url}/responses", json=body, timeout=60).json()
    streamed = _check_stream(_events(server, **{k: v for k, v in body.items() if k != "model"}))
    assert _shape(streamed) == _shape(whole)
    assert streamed["status"] == whole["status"]
    assert streamed["usage"]["output_tokens"] == whole["usage"]["output_tokens"]
    if case == "tool":
        assert [t for t, _ in _shape(whole)] == ["function_call"]


def test_sdk_stream_helper(server: Server) -> None:
    client = _client(server)
    with client.responses.stream(model="default", input="Say hello.", reasoning=NO_THINK,
                                 temperature=0, max_output_tokens=30) as stream:
        deltas = "".join(ev.delta for ev in stream if ev.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert deltas and final.output_text == deltas
    with client.responses.stream(model="default", input="What's the weather in Paris?",
                                 tools=WEATHER, temperature=0, max_output_tokens=200,
                                 extra_body={"chat_template_kwargs": {"enable_thinking": True}}
                                 ) as stream:
        kinds = {ev.type for ev in stream}
        final = stream.get_final_response()
    assert "response.reasoning_text.delta" in kinds and "response.completed" in kinds
    assert final.output[0].type == "reasoning"
    assert [o.name for o in final.output if o.type == "function_call"] == ["get_weather"]
    assert final.tools[0].name == "get_weather"


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "default", "input": 5}, "input"),
    ({"model": "default", "input": "hi", "temperature": "hot"}, "temperature"),
    ({"model": "default", "input": "hi", "tools": [{"type": "nope"}]}, "tools[0].type"),
    ({"model": "default", "input": "hi", "tools": [{"type": "web_search"}],
      "tool_choice": {"type": "web_search"}}, "tool_choice"),
    ({"model": "default", "input": "hi", "previous_response_id": "resp_x"},
     "previous_response_id"),
    ({"model": "default", "input": "hi", "text": {"format": {"type": "json_schema",
                                                             "schema": {"type": "strin"}}}},
     "text.format"),
    ({"model": "default", "input": [{"type": "nope"}]}, "input[0].type"),
    ({"model": "default", "input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
    ({"model": "default", "input": []}, "input"),
])
def test_bad_requests_are_400(server: Server, body: dict[str, Any], param: str) -> None:
    r = httpx.post(f"{server.url}/responses", json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_sdk_sees_400(server: Server) -> None:
    with pytest.raises(openai.BadRequestError):
        _client(server).responses.create(model="default", input="hi", tools=[
            {"type": "web_search"}], tool_choice={"type": "web_search"})  # type: ignore[list-item,typeddict-item]


def test_disconnect_aborts(server: Server) -> None:
    with httpx.stream("POST", f"{server.url}/responses", timeout=30, json={
            "model": "default", "input": "Hello", "max_output_tokens": 1500,
            "ignore_eos": True, "stream": True}) as r:
        for _ in r.iter_lines():
            assert server.worker("default")["live"]["running"] == 1
            break
    deadline = time.monotonic() + 10
    while server.worker("default")["live"]["running"] != 0:
        assert time.monotonic() < deadline, "generation not aborted"
        time.sleep(0.1)


def test_worker_death_mid_stream_ends_with_failed() -> None:
    import os
    import signal

    srv = Server().wait_ready()
    try:
        pid = srv.worker("default")["pid"]
        types: list[str] = []
        last = ""
        with httpx.stream("POST", f"{srv.url}/responses", timeout=30, json={
                "model": "default", "input": "Hello", "max_output_tokens": 1500,
                "ignore_eos": True, "stream": True}) as r:
            started = time.monotonic()
            for line in r.iter_lines():
                if line.startswith("event: "):
                    types.append(line[7:])
                    if sum(t.endswith(".delta") for t in types) == 3 and pid:
                        os.kill(pid, signal.SIGKILL)
                        pid = 0
                elif line.startswith("data: "):
                    last = line[6:]
        assert time.monotonic() - started < 20
        assert types[-1] == "response.failed", types[-5:]
        failed = json.loads(last)["response"]  # stored too, as OpenAI keeps failed responses
        stored = httpx.get(f"{srv.url}/responses/{failed['id']}", timeout=10).json()
        assert stored == failed and stored["status"] == "failed"
    finally:
        srv.stop()


def test_non_streamed_disconnect_aborts(server: Server) -> None:
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{server.url}/responses", timeout=1.5, json={
            "model": "default", "input": "Hello", "max_output_tokens": 1500,
            "ignore_eos": True})
    deadline = time.monotonic() + 10
    while server.worker("default")["live"]["running"] != 0:
        assert time.monotonic() < deadline, "generation not aborted"
        time.sleep(0.1)
