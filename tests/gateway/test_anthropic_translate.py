"""The Anthropic Messages adapter's pure parts: request -> chat messages/tools/params, deltas ->
blocks and events, and the error envelope."""

from __future__ import annotations

import json

import msgspec
import pytest

from gateway.anthropic.blocks import BlockBuilder, tool_id, tool_input
from gateway.anthropic.errors import envelope, is_messages_path
from gateway.anthropic.schemas import CountTokensRequest, MessagesRequest
from gateway.anthropic.translate import chat_messages, chat_tools, sampling, template_kwargs
from gateway.doors.choice import Delta
from gateway.edge.errors import APIError

WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


def _req(**body: object) -> MessagesRequest:
    base = {"model": "default", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    return msgspec.json.decode(msgspec.json.encode({**base, **body}), type=MessagesRequest)


def test_system_string_blocks_and_system_role_fold_into_one_system() -> None:
    req = _req(system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
               messages=[{"role": "system", "content": "C"}, {"role": "user", "content": "hi"}])
    assert chat_messages(req) == [{"role": "system", "content": "A\nB\n\nC"},
                                  {"role": "user", "content": "hi"}]
    assert chat_messages(_req(system="S"))[0] == {"role": "system", "content": "S"}
    assert chat_messages(_req())[0]["role"] == "user"


def test_tool_round_trip_becomes_tool_calls_and_tool_messages() -> None:
    req = _req(messages=[
        {"role": "user", "content": [{"type": "text", "text": "Weather?",
                                      "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should call", "signature": "x"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
             "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1",
             "content": [{"type": "text", "text": "18C"}]},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom", "is_error": True},
            {"type": "text", "text": "Thanks"}]}])
    assert chat_messages(req) == [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "I should call",
         "tool_calls": [{"id": "toolu_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: boom"},
        {"role": "user", "content": "Thanks"}]


@pytest.mark.parametrize("content", [
    [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}],
    [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
])
def test_refused_user_blocks_are_400(content: list[dict[str, object]]) -> None:
    with pytest.raises(APIError) as info:
        chat_messages(_req(messages=[{"role": "user", "content": content}]))
    assert info.value.status == 400 and info.value.param == "messages[0].content[0]"


def test_unknown_block_type_fails_validation() -> None:
    with pytest.raises(msgspec.ValidationError):
        _req(messages=[{"role": "user", "content": [{"type": "video", "x": 1}]}])


def test_tools_and_tool_choice_map_like_chat() -> None:
    tools, parse, prefix, grammar = chat_tools(_req(tools=[WEATHER]), "hermes")
    assert parse and prefix == "" and grammar is None and tools == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": WEATHER["input_schema"]}}]
    assert chat_tools(_req(tools=[WEATHER], tool_choice={"type": "none"}), "hermes") == (
        None, False, "", None)
    _, _, prefix, any_call = chat_tools(_req(tools=[WEATHER], tool_choice={
        "type": "any", "disable_parallel_tool_use": True}), "hermes")
    assert prefix == "" and any_call is not None and any_call.kind == "tool_calls"
    assert json.loads(any_call.text)["multiple"] is False
    _, _, _, named = chat_tools(_req(tools=[WEATHER], tool_choice={"type": "tool",
                                                                   "name": "get_weather"}),
                                "hermes")
    assert named is not None and json.loads(named.text)["tools"][0][0] == "get_weather"
    for bad in ({"type": "tool", "name": "other"},):
        with pytest.raises(APIError):
            chat_tools(_req(tools=[WEATHER], tool_choice=bad), "hermes")
    with pytest.raises(APIError):
        chat_tools(_req(tool_choice={"type": "any"}), "hermes")
    with pytest.raises(APIError):
        chat_tools(_req(tools=[{**WEATHER, "type": "web_search_20250305"}]), "hermes")


def test_thinking_and_sampling() -> None:
    assert template_kwargs(_req(thinking={"type": "enabled", "budget_tokens": 1024})) == {
        "enable_thinking": True}
    assert template_kwargs(_req(thinking={"type": "disabled"})) == {"enable_thinking": False}
    assert template_kwargs(_req()) == {"enable_thinking": False}  # Claude Code without thinking
    assert template_kwargs(_req(thinking={"type": "adaptive"})) == {}
    p = sampling(_req(temperature=0, top_p=0.5, top_k=7, stop_sequences=["END"],
                      metadata={"user_id": "u"}), {"temperature": 0.6, "min_p": 0.1})
    assert (p.max_tokens, p.temperature, p.top_p, p.top_k, p.min_p, p.stop) == (
        16, 0.0, 0.5, 7, 0.1, ["END"])
    assert sampling(_req(), {"temperature": 0.6}).temperature == 0.6
    with pytest.raises(APIError):
        sampling(_req(stop_sequences=[""]), None)


def test_count_tokens_request_needs_no_max_tokens() -> None:
    req = msgspec.json.decode(b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}',
                              type=CountTokensRequest)
    assert chat_messages(req) == [{"role": "user", "content": "x"}]
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}',
                            type=MessagesRequest)


def _tc(i: int, args: str, name: str | None = None) -> dict[str, object]:
    fn: dict[str, object] = {"arguments": args}
    out: dict[str, object] = {"index": i, "function": fn}
    if name:
        fn["name"] = name
        out["id"] = f"call_{i}"
    return out


def test_blocks_from_deltas_and_events_agree() -> None:
    b = BlockBuilder()
    events = []
    for d in [Delta(reasoning="think "), Delta(reasoning="more"), Delta(content="\n\n"),
              Delta(content="Hi"), Delta(content=" there"), Delta(content="\n"),
              Delta(tool_calls=[_tc(0, "", "get_weather")]),
              Delta(tool_calls=[_tc(0, '{"city": ')]), Delta(tool_calls=[_tc(0, '"Paris"}')])]:
        events += b.feed(d)
    events += b.close()
    assert b.blocks == [{"type": "thinking", "thinking": "think more", "signature": ""},
                        {"type": "text", "text": "\n\nHi there\n"},
                        {"type": "tool_use", "id": "toolu_0", "name": "get_weather",
                         "input": {"city": "Paris"}}]
    names = [n for n, _ in events]
    assert names.count("content_block_start") == 3 == names.count("content_block_stop")
    text = "".join(e["delta"]["text"] for n, e in events
                   if n == "content_block_delta" and e["delta"]["type"] == "text_delta")
    args = "".join(e["delta"]["partial_json"] for n, e in events
                   if n == "content_block_delta" and e["delta"]["type"] == "input_json_delta")
    assert text == "\n\nHi there\n" and args == '{"city": "Paris"}'
    assert [e["index"] for n, e in events if n == "content_block_stop"] == [0, 1, 2]


def test_whitespace_only_text_makes_no_block_and_single_call_keeps_the_first() -> None:
    b = BlockBuilder(single_call=True)
    b.feed(Delta(content="\n"))
    b.feed(Delta(tool_calls=[_tc(0, "{}", "a"), _tc(1, "{}", "b")]))
    b.close()
    assert [x["type"] for x in b.blocks] == ["tool_use"] and b.blocks[0]["name"] == "a"


def test_helpers_and_error_envelope() -> None:
    assert tool_input('{"a": 1}') == {"a": 1} and tool_input("") == {} and tool_input("[1]") == {}
    assert tool_input("{oops") == {}
    assert tool_id("call_abc") == "toolu_abc"
    assert is_messages_path("/v1/messages") and is_messages_path("/v1/messages/count_tokens")
    assert not is_messages_path("/v1/messagesx") and not is_messages_path("/v1/chat/completions")
    for status, kind in [(400, "invalid_request_error"), (401, "authentication_error"),
                         (404, "not_found_error"), (413, "request_too_large"),
                         (503, "overloaded_error"), (500, "api_error")]:
        assert envelope(APIError(status, "m")) == {"type": "error",
                                                   "error": {"type": kind, "message": "m"}}


def test_model_map() -> None:
    from gateway.anthropic.models import parse_model_map, resolve_model

    m = parse_model_map(["claude-*=default", "big"], {"default", "big"})
    assert m == [("claude-*", "default"), ("*", "big")]
    assert resolve_model("claude-sonnet-4-5", {"default", "big"}, m) == "default"
    assert resolve_model("gpt-4", {"default", "big"}, m) == "big"
    assert resolve_model("default", {"default"}, m) == "default"
    assert resolve_model("x", {"default"}, []) == "x"
    with pytest.raises(ValueError, match="not a served alias"):
        parse_model_map(["claude-*=nope"], {"default"})
