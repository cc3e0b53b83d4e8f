"""MiniMax-M2 tool calls: ``<minimax:tool_call><invoke name=".."><parameter name="..">``."""

from __future__ import annotations

from typing import Any, ClassVar

from parsers.jsonutil import Finder
from parsers.markup import BAD_HEADER, Header, MarkupToolParser
from parsers.xmlargs import name_attribute

_P_OPEN = "<parameter"
_P_CLOSE = "</parameter>"


class MiniMaxToolParser(MarkupToolParser):
    """MiniMax-M2 XML calls, several ``<invoke>`` per block; values typed by schema."""

    BLOCK_OPEN: ClassVar[tuple[str, ...]] = ("<minimax:tool_call>",)
    BLOCK_CLOSE: ClassVar[str] = "</minimax:tool_call>"
    CALL_OPEN: ClassVar[str | None] = "<invoke"
    CALL_CLOSE: ClassVar[str | None] = "</invoke>"

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
        find = Finder(body)
        i = find.find(_P_OPEN, 0)
        while i >= 0:
            gt = body.find(">", i + len(_P_OPEN))
            if gt < 0:
                break
            key = name_attribute(body[i + len(_P_OPEN) : gt])
            close = find.find(_P_CLOSE, gt + 1)
            nxt = find.find(_P_OPEN, gt + 1)
            if close >= 0 and (nxt < 0 or close < nxt):
                value, i = body[gt + 1 : close], find.find(_P_OPEN, close + len(_P_CLOSE))
            elif closed:
                stop = nxt if nxt >= 0 else len(body)
                value, i = body[gt + 1 : stop], nxt
            else:
                break
            if key:
                args[key] = self.schemas.convert(name, key, value.strip())
        return args
