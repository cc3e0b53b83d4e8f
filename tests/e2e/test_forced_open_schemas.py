"""Forced tool calls with the embedded demo model, one alias per call family: whether or not the
parameter schema says `additionalProperties: false`, every forced answer comes back as a parsed
call (the call grammar closes the arguments' objects, parsers/closedschema.py), 5 of 5 per
family, choice and schema. (An unbounded string is another matter: sampled at temperature 1 the
demo model can write one until max_tokens, so the strings here have a maxLength.)"""

from __future__ import annotations

import concurrent.futures as cf
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest

from parsers.callgrammar import families
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

FAMILIES = [f for f in families() if f != "qwen3_coder_xml"]  # the same parser as qwen3_xml
OPEN = {"type": "object", "required": ["city"],
        "properties": {"city": {"type": "string", "maxLength": 20},
                       "unit": {"enum": ["celsius", "fahrenheit"]}}}
CLOSED = {**OPEN, "additionalProperties": False}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
SAMPLES = 5


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    aliases = tmp_path_factory.mktemp("forced-open") / "aliases.toml"
    aliases.write_text("".join(f'[{f}]\nrepo = "embedded://demo"\ntool_call_parser = "{f}"\n\n'
                               for f in FAMILIES))
    srv = Server(*FAMILIES, "--aliases", str(aliases), "--max-batch", "16").wait_ready(300)
    yield srv
    srv.stop()


def _answers(server: Server, family: str, choice: Any, schema: dict[str, Any]) -> list[Any]:
    client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=300)
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                               "parameters": schema}},
             {"type": "function", "function": {"name": "get_time", "description": "Time",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string", "maxLength": 20}}}}}]
    r = client.chat.completions.create(model=family, messages=ASK, tools=tools,  # type: ignore[arg-type]
                                       tool_choice=choice, n=SAMPLES, temperature=1.0,
                                       max_tokens=200, parallel_tool_calls=False)
    return list(r.choices)


def test_forced_calls_with_open_and_closed_schemas(server: Server) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    jobs = [(f, choice, schema) for f in FAMILIES for choice in ("required", named)
            for schema in (OPEN, CLOSED)]
    with cf.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda job: (job, _answers(server, *job)), jobs))
    missed = []
    for (family, choice, schema), choices in results:
        assert len(choices) == SAMPLES
        for c in choices:
            calls = c.message.tool_calls or []
            if c.finish_reason != "tool_calls" or len(calls) != 1:
                missed.append((family, choice, schema is OPEN, c.finish_reason, c.message.content))
                continue
            name = calls[0].function.name
            assert choice == "required" or name == "get_weather"
            args = json.loads(calls[0].function.arguments)
            if name == "get_weather":
                jsonschema.validate(args, CLOSED)
    assert not missed, missed
