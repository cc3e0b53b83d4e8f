"""The SSE events the stream builders emit conform to /openapi.json's text/event-stream schemas,
the error envelopes to the documented 4xx schemas (strictly: no undocumented field), and every
route the app serves is documented."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest
from openapi_spec_validator import validate
from starlette.routing import Route

from gateway.anthropic.blocks import BlockBuilder
from gateway.anthropic.errors import envelope
from gateway.app import build_app
from gateway.audio import formats
from gateway.audio.transcription_schemas import (
    Transcription,
    TranscriptTextDelta,
    TranscriptTextDone,
)
from gateway.config import GatewayConfig
from gateway.doors.choice import ChoiceAssembler, Delta
from gateway.edge.errors import APIError
from gateway.ops.openapi import FORM_BODIES, OTHER_ANSWERS, STREAM_EVENTS, build_openapi
from gateway.responses.events import ResponseBuilder
from gateway.served import ServedModel
from protocol.messages import RequestOutput, Segment, Word
from tests.spec_check import SpecCheck

SPEC = build_openapi("test")
CHECK = SpecCheck(SPEC)
SSE = "text/event-stream"
CALL = {"index": 0, "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": '}}
MORE = {"index": 0, "function": {"arguments": '"Paris"}'}}
ECHO: dict[str, Any] = {
    "instructions": None, "max_output_tokens": 5, "model": "m", "parallel_tool_calls": True,
    "previous_response_id": None, "reasoning": {"effort": None, "summary": None}, "store": False,
    "temperature": 1.0, "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
    "top_p": 1.0, "truncation": "disabled", "metadata": {}}
USAGE = {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 3},
         "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 7}
STEPS = [Delta(reasoning="Let me think."), Delta(content="Hello"), Delta(content=" there"),
         Delta(tool_calls=[CALL]), Delta(tool_calls=[MORE])]


def test_spec_is_valid_and_every_stream_is_a_oneof_of_events() -> None:
    validate(SPEC)
    for path, events in STREAM_EVENTS.items():
        schema = CHECK.schema(path, "post", "200", SSE)
        assert [r["$ref"].rsplit("/", 1)[-1] for r in schema["oneOf"]] == [
            t.__name__ for t in events]
        assert schema["description"]


def test_error_shapes_per_protocol() -> None:
    for path, ops in SPEC["paths"].items():
        for op in ops.values():
            for status in {"400", "401", "404", "503"} - set(OTHER_ANSWERS.get(path, {})):
                ref = op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
                want = "AnthropicError" if path.startswith("/v1/messages") else "ErrorResponse"
                assert ref.endswith("/" + want), (path, status)
    err = APIError(400, "bad", param="model", code="invalid_value")
    CHECK.check("/v1/chat/completions", "post", 400, err.body())
    CHECK.check("/v1/messages", "post", 400, envelope(err))
    with pytest.raises(AssertionError):  # the checker is strict: the other shape fails
        CHECK.check("/v1/messages", "post", 400, err.body())


def test_response_builder_events_conform() -> None:
    for finish in ("stop", "length"):
        b = ResponseBuilder("resp_1", ECHO, parallel_tool_calls=True)
        events = b.start()
        for step in STEPS:
            events += b.feed(step, 1)
        events += b.finish(finish, {**USAGE, "output_tokens_details": {"reasoning_tokens": 0}})
        failed = ResponseBuilder("resp_2", ECHO, True)
        events += failed.start() + failed.feed(STEPS[1], 1) + failed.fail("server_error", "boom")
        kinds = {e["type"] for e in events}
        assert {"response.reasoning_text.delta", "response.output_text.done",
                "response.function_call_arguments.done", "response.failed"} <= kinds
        for ev in events:
            CHECK.check("/v1/responses", "post", 200, ev, SSE)


def test_block_builder_events_conform() -> None:
    b = BlockBuilder()
    events = [e for step in STEPS for e in b.feed(step)] + b.close()
    assert {name for name, _ in events} == {"content_block_start", "content_block_delta",
                                            "content_block_stop"}
    for name, data in events:
        assert data["type"] == name
        CHECK.check("/v1/messages", "post", 200, data, SSE)
    CHECK.check("/v1/messages", "post", 200, envelope(APIError(503, "busy")), SSE)


def test_chat_tool_call_deltas_conform() -> None:
    asm = ChoiceAssembler(0, tool_parser="hermes", reasoning_parser=None, tools=[
        {"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
        parse_tools=True, think_opened=False)
    delta = asm.feed(RequestOutput(request_id="r", text='<tool_call>\n{"name": "get_weather", '
                                   '"arguments": {"city": "Paris"}}\n</tool_call>',
                                   finish_reason="stop"))
    assert delta.tool_calls
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"tool_calls": delta.tool_calls}, "logprobs": None,
                          "finish_reason": asm.finish_reason}]}
    CHECK.check("/v1/chat/completions", "post", 200, chunk, SSE)
    with pytest.raises(AssertionError):
        CHECK.check("/v1/chat/completions", "post", 200, {**chunk, "surprise": 1}, SSE)


# served for people and probes, not part of the API the document describes
UNDOCUMENTED = {("/openapi.json", "get"), ("/docs", "get"), ("/docs/static/{name}", "get"),
                ("/health", "get")}


def test_every_route_of_the_app_is_documented() -> None:
    app = build_app(GatewayConfig(served=[ServedModel("m", "x")], spawn_workers=False,
                                  worker_address="inproc://openapi-routes"))
    app.state.hub.sock.close(0)
    app.state.hub.ctx.term()
    served = {(re.sub(r"{(\w+)(:\w+)?}", r"{\1}", r.path), m.lower())
              for r in app.routes if isinstance(r, Route) for m in (r.methods or ()) - {"HEAD"}}
    documented = {(p, m) for p, ops in SPEC["paths"].items() for m in ops}
    assert served - UNDOCUMENTED == documented


def test_transcription_answers_conform() -> None:
    segs = [Segment(id=0, start=0.0, end=1.5, text=" Hi there.", tokens=[1, 2], seek=0,
                    words=[Word(word=" Hi", start=0.0, end=0.5), Word(word=" there.", start=0.6,
                                                                     end=1.5)])]
    for path in FORM_BODIES:
        body = SPEC["paths"][path]["post"]["requestBody"]["content"]["multipart/form-data"]
        form = SPEC["components"]["schemas"][body["schema"]["$ref"].rsplit("/", 1)[-1]]
        assert form["properties"]["file"] == {**form["properties"]["file"], "type": "string",
                                              "format": "binary"}
        assert set(form["required"]) == {"file", "model"}
        for words in (True, False):
            verbose = formats.verbose("transcribe", "english", 1.5, segs, words=words)
            CHECK.check(path, "post", 200, msgspec.to_builtins(verbose))
        plain = Transcription(text="Hi there.", usage=formats.usage(1.5))
        CHECK.check(path, "post", 200, msgspec.to_builtins(plain))
        for event in (TranscriptTextDelta(delta=" Hi"), TranscriptTextDone(
                text="Hi there.", usage=formats.usage(1.5))):
            CHECK.check(path, "post", 200, msgspec.to_builtins(event), media=SSE)
        with pytest.raises(AssertionError):  # the checker is strict
            CHECK.check(path, "post", 200, {"type": "transcript.text.done", "delta": "x"},
                        media=SSE)
