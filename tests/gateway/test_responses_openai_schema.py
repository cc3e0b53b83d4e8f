"""Our Responses objects and stream events validate against OpenAI's published OpenAPI schemas
(../shared/openai-openapi): in particular no `null` where OpenAI's schema has none (`user`,
`usage` of the created/in_progress events)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from jsonschema import Draft202012Validator

from gateway.doors.choice import Delta
from gateway.responses.endpoint import _echo
from gateway.responses.events import ResponseBuilder
from gateway.responses.schemas import CreateResponse
from protocol.messages import SamplingParams

SPEC_FILE = Path(__file__).resolve().parents[3] / "shared" / "openai-openapi" / "openai-openapi.json"
USAGE = {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 3},
         "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 7}
TOOLS = [{"type": "function", "name": "get_weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
CALL = {"index": 0, "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    if not SPEC_FILE.exists():
        pytest.skip("../shared/openai-openapi is absent (only CI and dev machines have it)")
    return json.loads(SPEC_FILE.read_text())


def problems(spec: dict[str, Any], name: str, instance: Any) -> list[str]:
    """What is wrong with INSTANCE as OpenAI's components/schemas/NAME."""
    root = {"$ref": f"#/components/schemas/{name}", "components": spec["components"]}
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:160]}"
            for e in Draft202012Validator(root).iter_errors(instance)]


def event_schemas(spec: dict[str, Any]) -> dict[str, str]:
    """Event type -> the name of its schema in OpenAI's ResponseStreamEvent."""
    schemas = spec["components"]["schemas"]
    names = [r["$ref"].rsplit("/", 1)[-1] for r in schemas["ResponseStreamEvent"]["anyOf"]]
    return {schemas[n]["properties"]["type"]["enum"][0]: n for n in names}


def stream(body: dict[str, Any], finish: str) -> list[dict[str, Any]]:
    """Every event of one response to BODY that reasons, answers, calls a tool and ends."""
    echo = _echo(msgspec.convert(body, CreateResponse), SamplingParams(), True)
    b = ResponseBuilder("resp_1", echo, parallel_tool_calls=True)
    events = b.start()
    for step in (Delta(reasoning="Let me think."), Delta(content="Hello"), Delta(tool_calls=[CALL])):
        events += b.feed(step, 1)
    events += b.finish(finish, json.loads(json.dumps(USAGE)))
    return events + ResponseBuilder("resp_2", echo, True).fail("server_error", "it broke")


@pytest.mark.parametrize("body", [
    {"model": "m", "input": "hi"},
    {"model": "m", "input": "hi", "tools": TOOLS, "tool_choice": "required", "user": "u-1",
     "instructions": "Be brief.", "max_output_tokens": 9, "metadata": {"k": "v"}}])
@pytest.mark.parametrize("finish", ["stop", "length"])
def test_events_and_objects_validate_against_openai(spec: dict[str, Any], body: dict[str, Any],
                                                    finish: str) -> None:
    names = event_schemas(spec)
    events = stream(body, finish)
    assert {e["type"] for e in events} >= {"response.created", "response.in_progress",
                                           "response.output_item.added", "response.failed",
                                           "response.function_call_arguments.done"}
    for ev in events:
        assert problems(spec, names[ev["type"]], ev) == [], ev["type"]
        if "response" in ev:
            assert problems(spec, "Response", ev["response"]) == []
            assert ("user" in ev["response"]) == ("user" in body)
            assert ("usage" in ev["response"]) == (ev["response"]["status"] in
                                                   ("completed", "incomplete"))


def test_the_check_catches_a_null_user(spec: dict[str, Any]) -> None:
    """A `user: null` (what the objects carried before) is a violation the check reports."""
    created = stream({"model": "m", "input": "hi"}, "stop")[0]
    created["response"]["user"] = None
    created["response"]["usage"] = None
    found = problems(spec, "ResponseCreatedEvent", created)
    assert any(p.startswith("response/user") for p in found)
    assert any(p.startswith("response/usage") for p in found)
