"""MiniMax-M2 tool calls: ``<minimax:tool_call><invoke name=".."><parameter name="..">``."""

from __future__ import annotations

from typing import Any, ClassVar

from parsers.markup import BAD_HEADER, Header, MarkupToolParser
from parsers.xmlargs import name_attribute, parameter_pairs

_P_OPEN = "<parameter"
_P_CLOSE = "</parameter>"


class MiniMaxToolParser(MarkupToolParser):
    """MiniMax-M2 XML calls, several ``<invoke>`` per block; values typed by schema."""

    BLOCK_OPEN: ClassVar[tuple[str, ...]] = ("<minimax:tool_call>",)
    BLOCK_CLOSE: ClassVar[str] = "</minimax:tool_call>"
    CALL_OPEN: ClassVar[str | None] = "<invoke"
    CALL_CLOSE: ClassVar[str | None] = "</invoke>"
    CONTENT_SEP: ClassVar[str] = "\n"  # MiniMax-M2 template: content + "\n<minimax:tool_call>"

    def read_header(self, text: str, pos: int, end: int) -> Header:
        """`` name="NAME">`` after ``<invoke``."""
        gt = text.find(">", pos, end)
        if gt < 0:
            return None
        name = name_attribute(text[pos:gt])
        return BAD_HEADER if name is None else (gt + 1 - pos, name)

    def parse_args(self, name: str, body: str, closed: bool) -> dict[str, Any]:
        """``<parameter name="K">V</parameter>`` pairs (values stripped, then typed)."""
        args: dict[str, Any] = {}
        for key, value in parameter_pairs(body, _P_OPEN, _P_CLOSE, name_attribute, closed):
            args[key] = self.schemas.convert(name, key, value.strip())
        return args
