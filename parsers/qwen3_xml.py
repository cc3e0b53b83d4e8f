"""Qwen3-Coder XML tool calls: ``<tool_call><function=NAME><parameter=K>V</parameter>...``."""

from __future__ import annotations

from typing import Any, ClassVar

from parsers.jsoncalls import calls_from_json_text
from parsers.markup import BAD_HEADER, Header, MarkupToolParser
from parsers.xmlargs import parameter_pairs, plain_name, strip_one_newline

_P_OPEN = "<parameter="
_P_CLOSE = "</parameter>"


class Qwen3XmlToolParser(MarkupToolParser):
    """Qwen3-Coder / Qwen3.5 XML calls; values are typed by the tool's JSON schema.

    A bare ``<function=...>`` without the ``<tool_call>`` wrapper is accepted too, and a
    ``<tool_call>`` block holding Hermes JSON instead of XML is parsed as JSON.
    """

    BLOCK_OPEN: ClassVar[tuple[str, ...]] = ("<tool_call>",)
    BLOCK_CLOSE: ClassVar[str] = "</tool_call>"
    CALL_OPEN: ClassVar[str | None] = "<function="
    CALL_CLOSE: ClassVar[str | None] = "</function>"
    BARE_CALLS: ClassVar[bool] = True
    CONTENT_SEP: ClassVar[str] = "\n\n"  # Qwen3-Coder/Qwen3.5 templates: content + "\n\n<tool_call>"

    def read_header(self, text: str, pos: int, end: int) -> Header:
        """``NAME>`` after ``<function=``."""
        gt = text.find(">", pos, end)
        if gt < 0:
            return None
        name = plain_name(text[pos:gt])
        return BAD_HEADER if name is None else (gt + 1 - pos, name)

    def parse_args(self, name: str, body: str, closed: bool) -> dict[str, Any]:
        """``<parameter=K>V</parameter>`` pairs; an unterminated last value counts if closed."""
        args: dict[str, Any] = {}
        for key, value in parameter_pairs(body, _P_OPEN, _P_CLOSE, lambda k: k.strip(), closed):
            args[key] = self.schemas.convert(name, key, strip_one_newline(value))
        return args

    def parse_deferred(self, body: str) -> list[tuple[str, dict[str, Any]]] | None:
        """A ``<tool_call>`` block without ``<function=``: try Hermes JSON."""
        return calls_from_json_text(body)
