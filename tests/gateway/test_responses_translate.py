"""Responses API input items -> chat messages, tools and template options (no server)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.doors.choice import Delta
from gateway.edge.errors import APIError, decode_body
from gateway.responses.events import ResponseBuilder
from gateway.responses.schemas import CreateResponse
from gateway.responses.translate import (
    template_kwargs,
    to_grammar,
    to_messages,
    to_tools,
)
from protocol.messages import GrammarSpec


def _req(**body: Any) -> CreateResponse:
    return msgspec.convert({"model": "m", "input": "hi", **body}, CreateResponse)


def test_string_input_and_instructions() -> None:
    assert to_messages(_req(instructions="Be brief.")) == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


def test_items_become_chat_messages() -> None:
    req = _req(input=[
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "rules"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "a"},
                                     {"type": "input_text", "text": "b"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "think"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"x\": 1}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "not json"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "done", "annotations": []}]},
    ])
    assert to_messages(req) == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "", "reasoning_content": "think", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
            {"id": "c2", "type": "function", "function": {"name": "g",
                                                          "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42", "name": "f"},
        {"role": "assistant", "content": "done"},
    ]


@pytest.mark.parametrize(("items", "param"), [
    ([], "input"),
    ([{"type": "function_call", "name": "f"}], "input[0]"),
    ([{"type": "function_call_output", "call_id": "c"}], "input[0]"),
    ([{"role": "tool", "content": "x"}], "input[0].role"),
    ([{"type": "computer_call"}], "input[0].type"),
    ([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
     "input[0].content[0]"),
])
def test_bad_items(items: list[Any], param: str) -> None:
    with pytest.raises(APIError) as exc:
        to_messages(_req(input=items))
    assert exc.value.status == 400 and exc.value.param == param


def test_function_tools_and_choice() -> None:
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}},
             {"type": "function", "name": "g", "description": "G", "strict": True}]
    got, parse, prefix, grammar = to_tools(_req(tools=tools), None)
    assert got == [{"type": "function", "function": {"name": "f",
                                                     "parameters": {"type": "object"}}},
                   {"type": "function", "function": {"name": "g", "description": "G",
                                                     "strict": True}}]
    assert parse and prefix == "" and grammar is None
    assert to_tools(_req(tools=tools, tool_choice="none"), None) == (None, False, "", None)
    got, _, _, _ = to_tools(_req(tools=tools, tool_choice={"type": "function", "name": "g"}),
                         None)
    assert got is not None and [t["function"]["name"] for t in got] == ["g"]
    for bad, param in [({"tools": [{"type": "nope"}]}, "tools[0].type"),
                       ({"tools": tools, "tool_choice": {"type": "function", "name": "h"}},
                        "tool_choice"),
                       ({"tool_choice": "required"}, "tool_choice")]:
        with pytest.raises(APIError) as exc:
            to_tools(_req(**bad), None)
        assert exc.value.param == param


def test_effort() -> None:
    assert template_kwargs(_req(reasoning={"effort": "none"})) == {"enable_thinking": False}
    assert template_kwargs(_req(reasoning={"effort": "high"})) == {"reasoning_effort": "high"}
    assert template_kwargs(_req()) == {}


def test_text_format_becomes_the_grammar() -> None:
    assert to_grammar(_req()) is None
    assert to_grammar(_req(text={"format": {"type": "text"}})) is None
    assert to_grammar(_req(text={"format": {"type": "json_object"}})) == GrammarSpec(
        kind="json_object")
    spec = to_grammar(_req(text={"format": {"type": "json_schema", "name": "n", "strict": True,
                                            "schema": {"type": "object"}}}))
    assert spec == GrammarSpec(kind="json_schema", text='{"type":"object"}')
    for bad in ({"type": "yaml"}, {"type": "json_schema", "name": "bad name"},
                {"type": "json_schema", "schema": {"enum": list(range(5000))}}):
        with pytest.raises(APIError) as exc:
            to_grammar(_req(text={"format": bad}))
        assert exc.value.param == "text.format", bad


def _usage() -> dict[str, Any]:
    return {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0,
                                                        "cache_write_tokens": 3},
            "output_tokens": 6, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 9}


def test_builder_events_add_up() -> None:
    b = ResponseBuilder("resp_1", {"model": "m"}, parallel_tool_calls=False)
    evs = b.start()
    evs += b.feed(Delta(reasoning="th"), 1) + b.feed(Delta(reasoning="ink"), 1)
    evs += b.feed(Delta(content="Hi"), 1) + b.feed(Delta(tool_calls=[
        {"index": 0, "id": "call_1", "type": "function",
         "function": {"name": "f", "arguments": "{"}}]), 1)
    evs += b.feed(Delta(tool_calls=[{"index": 0, "function": {"arguments": "}"}}]), 1)
    evs += b.feed(Delta(tool_calls=[{"index": 1, "id": "call_2", "type": "function",
                                     "function": {"name": "g", "arguments": "{}"}}]), 1)
    evs += b.finish("tool_calls", _usage())
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    final = evs[-1]
    assert final["type"] == "response.completed"
    resp = final["response"]
    assert [o["type"] for o in resp["output"]] == ["reasoning", "message", "function_call"]
    assert resp["output"][0]["content"] == [{"type": "reasoning_text", "text": "think"}]
    assert resp["output"][2]["arguments"] == "{}" and resp["output"][2]["call_id"] == "call_1"
    assert resp["usage"]["output_tokens_details"]["reasoning_tokens"] == 2
    assert all(o["status"] == "completed" for o in resp["output"])


def test_builder_output_indexes_name_their_items() -> None:
    """Every event's output_index is where its item sits in the output (the builder keeps the
    indexes instead of searching the list: thousands of calls stay linear), items interleaved:
    reasoning, text, many parallel calls fed in turns, then text again."""
    b = ResponseBuilder("resp_1", {"model": "m"}, parallel_tool_calls=True)
    evs = b.start() + b.feed(Delta(reasoning="r"), 1) + b.feed(Delta(content="a"), 1)
    calls = 300
    for i in range(calls):
        evs += b.feed(Delta(tool_calls=[{"index": i, "id": f"c{i}", "type": "function",
                                         "function": {"name": "f", "arguments": "{"}}]), 1)
    for i in range(calls):
        evs += b.feed(Delta(tool_calls=[{"index": i, "function": {"arguments": "}"}}]), 1)
    evs += b.feed(Delta(content="b"), 1)
    evs += b.finish("tool_calls", _usage())
    output = evs[-1]["response"]["output"]
    assert len(output) == calls + 3 and [o["type"] for o in output[:3]] == [
        "reasoning", "message", "function_call"] and output[-1]["type"] == "message"
    seen = 0
    for ev in evs:
        if "output_index" not in ev:
            continue
        seen += 1
        item_id = ev.get("item_id") or ev["item"]["id"]
        assert output[ev["output_index"]]["id"] == item_id, ev["type"]
    assert seen > 5 * calls  # each call: added, two deltas, arguments done, item done
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))


def test_builder_incomplete_and_failed() -> None:
    b = ResponseBuilder("resp_1", {}, parallel_tool_calls=True)
    b.feed(Delta(content="Hel"), 1)
    final = b.finish("length", _usage())[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["response"]["output"][0]["status"] == "incomplete"
    failed = ResponseBuilder("resp_2", {}, True).fail("server_error", "boom")[-1]
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {"code": "server_error", "message": "boom"}


@pytest.mark.parametrize(("metadata", "ok"), [
    ({f"k{i}": "v" for i in range(16)}, True),
    ({"k" * 64: "v" * 512}, True),
    ({f"k{i}": "v" for i in range(17)}, False),  # OpenAI's bounds: 16 pairs,
    ({"k" * 65: "v"}, False),  # keys of at most 64 characters,
    ({"k": "v" * 513}, False),  # values of at most 512 (the map is stored with the response)
])
def test_metadata_is_bounded(metadata: dict[str, str], ok: bool) -> None:
    body = msgspec.json.encode({"model": "m", "input": "hi", "metadata": metadata})
    if ok:
        assert decode_body(body, CreateResponse).metadata == metadata
        return
    with pytest.raises(APIError) as info:
        decode_body(body, CreateResponse)
    assert info.value.status == 400 and info.value.param == "metadata"
