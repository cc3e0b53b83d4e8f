"""Hermes / Qwen2.5 / Qwen3 JSON tool calls: ``<tool_call>{"name":..,"arguments":..}</tool_call>``."""

from __future__ import annotations

from typing import Any, ClassVar

from parsers.jsoncalls import calls_from_json_text
from parsers.markup import MarkupToolParser


class HermesToolParser(MarkupToolParser):
    """``<tool_call>`` blocks holding a JSON object (or several) with name and arguments."""

    BLOCK_OPEN: ClassVar[tuple[str, ...]] = ("<tool_call>",)
    BLOCK_CLOSE: ClassVar[str] = "</tool_call>"
    CONTENT_SEP: ClassVar[str] = "\n"  # Qwen2.5/Qwen3 templates: content + "\n<tool_call>"

    def parse_deferred(self, body: str) -> list[tuple[str, dict[str, Any]]] | None:
        """The JSON call(s) in a block, or None when it is not valid JSON calls."""
        return calls_from_json_text(body)
