"""Hermes / Qwen2.5 / Qwen3 JSON tool calls: ``<tool_call>{"name":..,"arguments":..}</tool_call>``.

Small Qwen2.5 models (Qwen2.5-Coder-1.5B-Instruct, checked with its real weights) often write
the call as a Markdown JSON block instead: ````` ```json {"name": .., "arguments": ..} ``` `````.
Such a block is a call when every object in it names a tool the request declared; any other
``json`` block comes back as content, exactly (it streams once its fence closes).
"""

from __future__ import annotations

from typing import Any, ClassVar

from parsers.jsoncalls import calls_from_json_text
from parsers.markup import MarkupToolParser
from parsers.schema import tool_functions

FENCE = "```json"


class HermesToolParser(MarkupToolParser):
    """``<tool_call>`` blocks (or a fenced JSON block naming declared tools) holding a JSON
    object (or several) with name and arguments."""

    BLOCK_OPEN: ClassVar[tuple[str, ...]] = ("<tool_call>", FENCE)
    BLOCK_CLOSE: ClassVar[str] = "</tool_call>"
    OWN_CLOSE: ClassVar[dict[str, str]] = {FENCE: "```"}
    CONTENT_SEP: ClassVar[str] = "\n"  # Qwen2.5/Qwen3 templates: content + "\n<tool_call>"

    def __init__(self, tools: list[dict[str, Any]] | None = None) -> None:
        super().__init__(tools)
        self._known = frozenset(tool_functions(tools))

    def parse_deferred(self, body: str) -> list[tuple[str, dict[str, Any]]] | None:
        """The JSON call(s) in a block, or None when it is not valid JSON calls (a fenced
        block: or when it names a tool the request did not declare)."""
        calls = calls_from_json_text(body)
        if calls and self.opener == FENCE and not all(name in self._known for name, _ in calls):
            return None
        return calls
