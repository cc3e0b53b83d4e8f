"""Per-choice output parsing: reasoning first, then tool calls in the content."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from parsers.base import ReasoningParser, ToolParser
from parsers.registry import make_reasoning_parser, make_tool_parser
from parsers.types import ParseDelta, ParsedMessage, ToolCall


class OutputParser:
    """Streams one choice's text through a reasoning parser and a tool parser.

    Content leaving the reasoning parser goes through the tool parser (when one is named and
    ``parse_tools`` is true; with ``parse_tools=False``, e.g. ``tool_choice="none"``, tool
    markup stays plain content).
    """

    def __init__(
        self,
        tool_parser: str | None,
        reasoning_parser: str | None,
        *,
        tools: list[dict[str, Any]] | None = None,
        think_opened: bool = False,
        parse_tools: bool = True,
    ) -> None:
        self._tools: ToolParser | None = (
            make_tool_parser(tool_parser, tools) if tool_parser and parse_tools else None
        )
        blocks = self._tools.reasoning_exits() if self._tools else ()
        self._reasoning: ReasoningParser | None = (
            make_reasoning_parser(reasoning_parser, think_opened=think_opened, tool_blocks=blocks)
            if reasoning_parser
            else None
        )

    def feed(self, text: str) -> ParseDelta:
        """Parse the next text delta."""
        if self._reasoning is None:
            return self._tools.feed(text) if self._tools else ParseDelta(content=text)
        out = self._reasoning.feed(text)
        if self._tools is not None:
            tools_out = self._tools.feed(out.content)
            out.content = ""
            out.extend(tools_out)
        return out

    def finish(self) -> ParseDelta:
        """Flush everything held back at the end of the choice."""
        out = self._reasoning.finish() if self._reasoning else ParseDelta()
        if self._tools is not None:
            tools_out = self._tools.feed(out.content)
            out.content = ""
            out.extend(tools_out)
            out.extend(self._tools.finish())
        return out


def aggregate(deltas: Iterable[ParseDelta]) -> ParsedMessage:
    """Combine streamed deltas into a whole message (calls grouped by index)."""
    content: list[str] = []
    reasoning: list[str] = []
    ids: dict[int, str] = {}
    names: dict[int, str] = {}
    args: dict[int, list[str]] = {}
    for delta in deltas:
        content.append(delta.content)
        reasoning.append(delta.reasoning)
        for call in delta.tool_calls:
            if call.id is not None and call.index not in ids:
                ids[call.index] = call.id
            if call.name is not None and call.index not in names:
                names[call.index] = call.name
            args.setdefault(call.index, []).append(call.arguments)
    calls = [
        ToolCall(id=ids.get(i, ""), name=names.get(i, ""), arguments="".join(args[i]))
        for i in sorted(args)
    ]
    return ParsedMessage(content="".join(content), reasoning="".join(reasoning), tool_calls=calls)


def parse_whole(
    text: str,
    tool_parser: str | None = None,
    reasoning_parser: str | None = None,
    *,
    tools: list[dict[str, Any]] | None = None,
    think_opened: bool = False,
    parse_tools: bool = True,
) -> ParsedMessage:
    """Non-streaming parse of a complete output text."""
    parser = OutputParser(
        tool_parser,
        reasoning_parser,
        tools=tools,
        think_opened=think_opened,
        parse_tools=parse_tools,
    )
    return aggregate([parser.feed(text), parser.finish()])
