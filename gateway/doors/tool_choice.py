"""tool_choice resolved once for every front door: what to render, parse and force."""

from __future__ import annotations

from typing import Any, Literal

from gateway.doors.tool_grammar import call_grammar_spec
from gateway.edge.errors import bad_request
from parsers.forcing import forced_prefix
from protocol.messages import GrammarSpec

ToolPlan = tuple[list[dict[str, Any]] | None, bool, str, GrammarSpec | None]
Mode = Literal["none", "auto", "required", "named"]


def plan_tools(tools: list[dict[str, Any]] | None, mode: Mode, name: str | None,
               tool_parser: str | None, param: str = "tool_choice",
               name_param: str | None = None, parallel: bool = True) -> ToolPlan:
    """The chat-format tools to render, whether tool calls are parsed, the forced prefix and
    the forcing grammar.

    `none` renders no tools and parses none; `auto` is free (with ``strict`` tools, the calls
    the answer makes are constrained, see ``call_grammar_spec``); `required` (one or more calls of any tool, exactly
    one unless PARALLEL) and a named function (exactly one call of it) get a grammar of the
    parser family's call syntax with the arguments constrained by the tool's schema; a family
    without one falls back to starting the answer with its tool-call opening, where it has one.
    """
    if not tools:
        if mode in ("required", "named"):
            raise bad_request("tool_choice requires tools.", param=param)
        return None, False, "", None
    if mode == "none":
        return None, False, "", None
    if mode == "auto":  # free, but strict tools' calls follow their schema where feasible
        strict = any(t["function"].get("strict") is True for t in tools)
        return tools, True, "", (call_grammar_spec(tools, tool_parser, multiple=True, auto=True)
                                 if strict else None)
    if mode == "required":
        grammar = call_grammar_spec(tools, tool_parser, multiple=parallel)
        return tools, True, "" if grammar else forced_prefix(tool_parser, None), grammar
    chosen = [t for t in tools if t["function"]["name"] == name]
    if not chosen:
        raise bad_request(f"tool_choice names '{name}', which is not among tools.",
                          param=name_param or param)
    grammar = call_grammar_spec(chosen, tool_parser, multiple=False)
    return chosen, True, "" if grammar else forced_prefix(tool_parser, name), grammar
