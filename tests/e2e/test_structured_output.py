"""Structured output end to end: the real server, the demo model and a random-weight model
(whose free output is garbage, so the grammar does all the work), the openai SDK.

The issue's acceptance, 10 schemas x 30 samples at temperature 1.0 on each model (about 30 s on
2 cores; RAPID_MLX_GRAMMAR_SAMPLES=6 for a quicker loop), plus streamed == non-streamed, a mixed
batch, the other front doors, max_tokens before the end, a reasoning section before the schema,
and 20 hostile schemas.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from tests.e2e.harness import ROOT, Server
from tests.random_model import random_model

pytestmark = pytest.mark.slow

DEMO = str(ROOT / "worker" / "model" / "demo" / "weights")
SAMPLES = int(os.environ.get("RAPID_MLX_GRAMMAR_SAMPLES", "30"))
S = {"type": "string", "maxLength": 10}

SCHEMAS: dict[str, dict[str, Any]] = {
    "nested": {"type": "object", "additionalProperties": False, "required": ["user", "ok"],
               "properties": {"ok": {"type": "boolean"}, "user": {
                   "type": "object", "additionalProperties": False, "required": ["name", "id"],
                   "properties": {"name": S, "id": {"type": "integer", "minimum": 1,
                                                    "maximum": 999}}}}},
    "array": {"type": "object", "additionalProperties": False, "required": ["items"],
              "properties": {"items": {"type": "array", "minItems": 2, "maxItems": 4,
                                       "items": {"type": "integer", "minimum": -5,
                                                 "maximum": 50}}}},
    "enum": {"type": "object", "additionalProperties": False, "required": ["color", "size"],
             "properties": {"color": {"enum": ["red", "green", "blue"]},
                            "size": {"const": "XL"}}},
    "numbers": {"type": "object", "additionalProperties": False, "required": ["p", "t"],
                "properties": {"p": {"type": "number", "minimum": 0, "maximum": 1},
                               "t": {"type": "integer", "exclusiveMinimum": -10,
                                     "exclusiveMaximum": 10}}},
    "optional": {"type": "object", "additionalProperties": False, "required": ["id"],
                 "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 9},
                                "note": S, "flag": {"type": "boolean"}}},
    "anyof": {"type": "object", "additionalProperties": False, "required": ["r"],
              "properties": {"r": {"anyOf": [
                  {"type": "object", "additionalProperties": False, "required": ["ok"],
                   "properties": {"ok": {"type": "boolean"}}},
                  {"type": "object", "additionalProperties": False, "required": ["err"],
                   "properties": {"err": S}}, {"type": "null"}]}}},
    "pattern": {"type": "object", "additionalProperties": False, "required": ["code", "ip"],
                "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
                               "ip": {"type": "string", "format": "ipv4"}}},
    "list-of-objects": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
        "type": "object", "additionalProperties": False, "required": ["k", "v"],
        "properties": {"k": {"enum": ["a", "b"]}, "v": {"type": ["integer", "null"],
                                                        "maximum": 100, "minimum": 0}}}},
    "matrix": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "boolean"}}},
    "mixed": {"type": "object", "additionalProperties": False,
              "required": ["id", "when", "scores", "meta"],
              "properties": {"id": {"type": "string", "format": "uuid"},
                             "when": {"type": "string", "pattern": "^20[0-9]{2}-[01][0-9]-[0-3][0-9]$"},
                             "scores": {"type": "array", "maxItems": 3, "items": {
                                 "type": "integer", "minimum": -1, "maximum": 1}},
                             "meta": {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 5},
                                                {"enum": ["none", "all"]}]}}},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    rand = random_model(tmp_path_factory.mktemp("random") / "rand")
    srv = Server(DEMO, str(rand), "--served-model-name", "default", "--served-model-name",
                 "rand", "--max-batch", "32").wait_ready()
    yield srv
    srv.stop()


def _client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=120)


def _fmt(name: str) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name],
                                                   "strict": True}}


ASK = [{"role": "user", "content": "Describe a user as JSON."}]
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}  # the grammar from token one


@pytest.mark.parametrize("model", ["default", "rand"])
def test_every_sample_validates(server: Server, model: str) -> None:
    client = _client(server)

    def one(job: tuple[str, int]) -> list[tuple[str, Any, str | None]]:
        name, n = job
        r = client.chat.completions.create(model=model, messages=ASK, n=n, temperature=1.0,
                                           max_tokens=200, response_format=_fmt(name),
                                           extra_body=NO_THINK)
        return [(name, c.message.content, c.finish_reason) for c in r.choices]

    jobs = [(name, min(15, SAMPLES - k)) for name in SCHEMAS for k in range(0, SAMPLES, 15)]
    with cf.ThreadPoolExecutor(len(SCHEMAS)) as pool:  # constrained rows share batches
        results = [x for batch in pool.map(one, jobs) for x in batch]
    assert len(results) == len(SCHEMAS) * SAMPLES
    for name, content, finish in results:
        assert finish == "stop", (name, content)
        jsonschema.validate(json.loads(content), SCHEMAS[name],
                            format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def test_json_object_and_length(server: Server) -> None:
    client = _client(server)
    r = client.chat.completions.create(model="rand", messages=ASK, n=4, temperature=1.0,
                                       max_tokens=60, response_format={"type": "json_object"},
                                       extra_body=NO_THINK)
    for c in r.choices:  # an unbounded object may run out of tokens: a prefix, as OpenAI does
        assert c.message.content.startswith("{")
        if c.finish_reason == "stop":
            assert isinstance(json.loads(c.message.content), dict)
        else:
            assert c.finish_reason == "length"
    short = client.chat.completions.create(model="rand", messages=ASK, max_tokens=4,
                                           response_format=_fmt("nested"), extra_body=NO_THINK)
    assert short.choices[0].finish_reason == "length"
    assert short.choices[0].message.content.startswith('{"')


@pytest.mark.parametrize("model", ["default", "rand"])
def test_streamed_equals_non_streamed(server: Server, model: str) -> None:
    client = _client(server)
    for name in ("nested", "anyof"):
        args: dict[str, Any] = {"model": model, "messages": ASK, "temperature": 1.0, "seed": 11,
                                "max_tokens": 200, "response_format": _fmt(name),
                                "extra_body": NO_THINK}
        whole = client.chat.completions.create(**args)
        text, finish = "", None
        for chunk in client.chat.completions.create(stream=True, **args):
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        assert (text, finish) == (whole.choices[0].message.content, "stop")
        jsonschema.validate(json.loads(text), SCHEMAS[name])


def test_thinking_comes_first_then_the_schema(server: Server) -> None:
    """The demo model (qwen3 reasoning parser) may think freely, then answers in the schema;
    with enable_thinking off the grammar starts at once."""
    client = _client(server)
    for kwargs, thinks in (({"enable_thinking": True}, True), ({"enable_thinking": False}, False)):
        r = client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "Hello!"}], temperature=0,
            max_tokens=200, response_format=_fmt("nested"),
            extra_body={"chat_template_kwargs": kwargs})
        message = r.choices[0].message
        assert r.choices[0].finish_reason == "stop"
        assert bool(getattr(message, "reasoning_content", None)) is thinks, message
        jsonschema.validate(json.loads(message.content or ""), SCHEMAS["nested"])


def test_constrained_and_free_in_one_batch(server: Server) -> None:
    client = _client(server)

    def constrained(i: int) -> str | None:
        r = client.chat.completions.create(model="rand", messages=ASK, temperature=1.0,
                                           max_tokens=200, response_format=_fmt("array"),
                                           extra_body=NO_THINK)
        jsonschema.validate(json.loads(r.choices[0].message.content or ""), SCHEMAS["array"])
        return r.choices[0].finish_reason

    def free(i: int) -> str | None:
        r = client.chat.completions.create(model="rand", messages=ASK, temperature=1.0,
                                           max_tokens=40, extra_body={"ignore_eos": True})
        return r.choices[0].finish_reason

    with cf.ThreadPoolExecutor(12) as pool:
        got = [pool.submit(constrained, i) for i in range(6)]
        got += [pool.submit(free, i) for i in range(6)]
        finishes = [f.result() for f in got]
    assert finishes == ["stop"] * 6 + ["length"] * 6
    status = httpx.get(f"{server.base}/v1/workers/rand", timeout=10).json()
    assert status["live"]["grammar_mask_seconds"] > 0


def test_completions_and_responses(server: Server) -> None:
    client = _client(server)
    r = client.completions.create(model="rand", prompt="JSON:", max_tokens=200, temperature=1.0,
                                  extra_body={"response_format": _fmt("enum")})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].text), SCHEMAS["enum"])
    resp = client.responses.create(model="rand", input="JSON please", max_output_tokens=200,
                                   reasoning={"effort": "none"},
                                   text={"format": {"type": "json_schema", "name": "enum",
                                                    "schema": SCHEMAS["enum"], "strict": True}})
    jsonschema.validate(json.loads(resp.output_text), SCHEMAS["enum"])
    bad = httpx.post(f"{server.url}/responses", timeout=30, json={
        "model": "rand", "input": "x", "text": {"format": {"type": "json_schema", "name": "b",
                                                            "schema": {"not": {}}}}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "text.format", bad.text


def _bomb(n: int) -> dict[str, Any]:
    defs = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"},
                                {"type": "array", "items": {"$ref": f"#/$defs/d{i + 1}"}}]}
            for i in range(n)}
    return {"$defs": {**defs, f"d{n}": {"type": "string"}}, "$ref": "#/$defs/d0"}


HOSTILE: list[Any] = [
    {"type": "strin"}, {"$ref": "#/$defs/nope"}, {"$ref": "http://example.com/s.json"},
    {"type": "string", "pattern": "(unclosed"}, {"type": "array", "minItems": 5, "maxItems": 2},
    {"type": "integer", "minimum": 5, "maximum": 2}, {"not": {"type": "string"}},
    {"if": {"type": "string"}, "then": {"minLength": 3}}, {"uniqueItems": True, "type": "array"},
    {"propertyNames": {"pattern": "^x"}, "type": "object"}, {"type": "string", "format": "cc"},
    {"allOf": [{"type": "string"}, {"type": "integer"}]},
    {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"enum": list(range(5000))}, {"description": "x" * 100_000},
    {"properties": {f"p{i}": {"type": "string"} for i in range(3000)}, "type": "object"},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "[" * 5000}}},
    {"anyOf": [_bomb(30)] * 50}, [1, 2, 3], "not a schema",
]


def test_hostile_schemas_are_4xx_fast_while_others_are_served(server: Server) -> None:
    client = _client(server)
    with cf.ThreadPoolExecutor(1) as pool:  # a normal request runs all the while
        fine = pool.submit(lambda: client.chat.completions.create(
            model="rand", messages=ASK, max_tokens=200, response_format=_fmt("nested"),
            extra_body=NO_THINK))
        for schema in HOSTILE:
            t0 = time.monotonic()
            r = httpx.post(f"{server.url}/chat/completions", timeout=30, json={
                "model": "rand", "messages": ASK, "max_tokens": 20, "response_format": {
                    "type": "json_schema", "json_schema": {"name": "h", "schema": schema}}})
            took = time.monotonic() - t0
            assert 400 <= r.status_code < 500, (schema, r.text[:300])
            assert r.json()["error"]["param"].startswith("response_format"), r.text[:300]
            assert took < 5.0, (schema, took)
        content = fine.result().choices[0].message.content
    jsonschema.validate(json.loads(content or ""), SCHEMAS["nested"])
    after = client.chat.completions.create(model="rand", messages=ASK, max_tokens=20)
    assert after.choices[0].finish_reason in ("stop", "length")


def test_random_model_is_garbage_without_the_grammar(server: Server) -> None:
    """Without response_format the random model does not write JSON: the tests above can fail."""
    r = _client(server).chat.completions.create(model="rand", messages=ASK, n=4, temperature=1.0,
                                                max_tokens=30, extra_body={"ignore_eos": True})
    for c in r.choices:
        with pytest.raises(ValueError):
            json.loads(c.message.content or "")


