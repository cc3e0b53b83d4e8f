"""plan_tools: one tool_choice resolution for chat, Responses and Messages."""

from __future__ import annotations

import json

import pytest

from gateway.doors.tool_choice import plan_tools
from gateway.edge.errors import APIError
from parsers.callgrammar import families

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}},
         {"type": "function", "function": {"name": "other", "parameters": {}}}]


def test_none_and_auto() -> None:
    assert plan_tools(TOOLS, "none", None, "hermes") == (None, False, "", None)
    assert plan_tools(TOOLS, "auto", None, "hermes") == (TOOLS, True, "", None)
    assert plan_tools(None, "auto", None, "hermes") == (None, False, "", None)
    assert plan_tools(None, "none", None, "hermes") == (None, False, "", None)


@pytest.mark.parametrize("family", families())
def test_required_and_named_force_a_call_by_grammar(family: str) -> None:
    tools, parse, prefix, grammar = plan_tools(TOOLS, "required", None, family)
    assert tools == TOOLS and parse and prefix == "" and grammar is not None
    spec = json.loads(grammar.text)
    assert grammar.kind == "tool_calls" and spec["family"] == family and spec["multiple"]
    assert [name for name, _ in spec["tools"]] == ["get_weather", "other"]
    _, _, _, single = plan_tools(TOOLS, "required", None, family, parallel=False)
    assert single is not None and json.loads(single.text)["multiple"] is False
    tools, parse, prefix, grammar = plan_tools(TOOLS, "named", "get_weather", family)
    assert tools == TOOLS[:1] and parse and prefix == "" and grammar is not None
    spec = json.loads(grammar.text)
    assert [name for name, _ in spec["tools"]] == ["get_weather"] and not spec["multiple"]


def test_a_model_without_a_tool_parser_is_asked_but_not_forced() -> None:
    assert plan_tools(TOOLS, "required", None, None) == (TOOLS, True, "", None)


def test_an_oversized_tool_schema_is_a_400_on_tools() -> None:
    big = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"enum": list(range(2000))}}}}}]
    with pytest.raises(APIError) as info:
        plan_tools(big, "required", None, "hermes")
    assert info.value.status == 400 and info.value.param == "tools"
    assert plan_tools(big, "auto", None, "hermes")[3] is None  # auto stays free: not checked


@pytest.mark.parametrize("mode", ["required", "named"])
def test_forcing_without_tools_is_a_400(mode: str) -> None:
    with pytest.raises(APIError) as info:
        plan_tools(None, mode, "x", "hermes", param="tool_choice")  # type: ignore[arg-type]
    assert info.value.status == 400 and info.value.param == "tool_choice"


def test_unknown_name_names_its_param() -> None:
    with pytest.raises(APIError) as info:
        plan_tools(TOOLS, "named", "nope", "hermes", name_param="tool_choice.name")
    assert info.value.status == 400 and info.value.param == "tool_choice.name"


def test_strict_tools_under_auto_constrain_only_the_calls() -> None:
    strict = [{"type": "function", "function": {"name": "s", "strict": True, "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}}}}, TOOLS[0]]
    tools, parse, prefix, grammar = plan_tools(strict, "auto", None, "hermes")
    assert tools == strict and parse and prefix == "" and grammar is not None
    spec = json.loads(grammar.text)
    assert spec["auto"] and spec["tools"] == [["s", strict[0]["function"]["parameters"]],
                                              ["get_weather", {}]]
    assert plan_tools(strict, "auto", None, None)[3] is None  # no parser: nothing to constrain
