"""plan_tools: one tool_choice resolution for chat, Responses and Messages."""

from __future__ import annotations

import pytest

from gateway.doors.tool_choice import plan_tools
from gateway.edge.errors import APIError

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}},
         {"type": "function", "function": {"name": "other", "parameters": {}}}]


def test_none_and_auto() -> None:
    assert plan_tools(TOOLS, "none", None, "hermes") == (None, False, "")
    assert plan_tools(TOOLS, "auto", None, "hermes") == (TOOLS, True, "")
    assert plan_tools(None, "auto", None, "hermes") == (None, False, "")
    assert plan_tools(None, "none", None, "hermes") == (None, False, "")


def test_required_and_named_force_the_family_opening() -> None:
    tools, parse, prefix = plan_tools(TOOLS, "required", None, "hermes")
    assert tools == TOOLS and parse and prefix.startswith("<tool_call>")
    tools, parse, prefix = plan_tools(TOOLS, "named", "get_weather", "hermes")
    assert tools == TOOLS[:1] and parse and "get_weather" in prefix


@pytest.mark.parametrize("mode", ["required", "named"])
def test_forcing_without_tools_is_a_400(mode: str) -> None:
    with pytest.raises(APIError) as info:
        plan_tools(None, mode, "x", "hermes", param="tool_choice")  # type: ignore[arg-type]
    assert info.value.status == 400 and info.value.param == "tool_choice"


def test_unknown_name_names_its_param() -> None:
    with pytest.raises(APIError) as info:
        plan_tools(TOOLS, "named", "nope", "hermes", name_param="tool_choice.name")
    assert info.value.status == 400 and info.value.param == "tool_choice.name"
