"""Forced prefixes parse back into the forced call when the model completes them."""

from __future__ import annotations

import json

import pytest

from parsers.forcing import forced_prefix
from parsers.pipeline import parse_whole

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]

COMPLETIONS = {
    "hermes": (' {"city": "Paris"}}\n</tool_call>',
               '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    "qwen3_xml": ("<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
                  "get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"),
    "glm47": ("<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
              "get_weather\n<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"),
    "minimax": ('<parameter name="city">Paris</parameter>\n</invoke>\n</minimax:tool_call>',
                'get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>\n</minimax:tool_call>'),
}


@pytest.mark.parametrize("family", sorted(COMPLETIONS))
@pytest.mark.parametrize("named", [True, False])
def test_prefix_plus_completion_is_the_call(family: str, named: bool) -> None:
    prefix = forced_prefix(family, "get_weather" if named else None)
    assert prefix
    text = prefix + COMPLETIONS[family][0 if named else 1]
    msg = parse_whole(text, family, tools=TOOLS)
    assert msg.content == ""
    assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == [
        ("get_weather", {"city": "Paris"})]


def test_unknown_family_forces_nothing() -> None:
    assert forced_prefix("harmony", "f") == "" and forced_prefix(None, None) == ""
