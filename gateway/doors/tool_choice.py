"""tool_choice resolved once for every front door: what to render, parse and force."""

from __future__ import annotations

from typing import Any, Literal

from gateway.edge.errors import bad_request
from parsers.forcing import forced_prefix

ToolPlan = tuple[list[dict[str, Any]] | None, bool, str]
Mode = Literal["none", "auto", "required", "named"]


def plan_tools(tools: list[dict[str, Any]] | None, mode: Mode, name: str | None,
               tool_parser: str | None, param: str = "tool_choice",
               name_param: str | None = None) -> ToolPlan:
    """The chat-format tools to render, whether tool calls are parsed, and the forced prefix.

    `none` renders no tools and parses none; `required` and a named function start the answer
    with the family's tool-call opening (and the name) where the parser family has one.
    """
    if not tools:
        if mode in ("required", "named"):
            raise bad_request("tool_choice requires tools.", param=param)
        return None, False, ""
    if mode == "none":
        return None, False, ""
    if mode == "auto":
        return tools, True, ""
    if mode == "required":
        return tools, True, forced_prefix(tool_parser, None)
    chosen = [t for t in tools if t["function"]["name"] == name]
    if not chosen:
        raise bad_request(f"tool_choice names '{name}', which is not among tools.",
                          param=name_param or param)
    return chosen, True, forced_prefix(tool_parser, name)
