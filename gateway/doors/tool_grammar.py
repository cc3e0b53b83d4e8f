"""The grammar that forces a tool call (tool_choice required / named) in the parser family's
own syntax, its arguments constrained by the tool's JSON schema (built in the worker)."""

from __future__ import annotations

import json
from typing import Any

from gateway.doors.structured import check_schema
from parsers.callgrammar import families
from protocol.messages import GrammarSpec


def call_grammar_spec(tools: list[dict[str, Any]], tool_parser: str | None, *, multiple: bool,
                      auto: bool = False, param: str = "tools") -> GrammarSpec | None:
    """A ``tool_calls`` GrammarSpec for TOOLS (one call, or with MULTIPLE one or more), or
    None when the parser family has no call grammar; an oversized schema is a 400 on PARAM.

    With AUTO the answer stays free text, and only the calls it makes are constrained: the
    arguments of ``strict`` tools by their schema, the others to any object.
    """
    if tool_parser is None or tool_parser not in families():
        return None
    pairs = []
    for tool in tools:
        fn = tool["function"]
        params = fn.get("parameters")
        params = params if isinstance(params, dict) else {}
        if auto and fn.get("strict") is not True:
            params = {}
        check_schema(params, param)
        pairs.append((fn["name"], params))
    data = {"family": tool_parser, "tools": pairs, "multiple": multiple}
    text = json.dumps({**data, "auto": True} if auto else data, separators=(",", ":"))
    return GrammarSpec(kind="tool_calls", text=text)
