"""GLM-4.5/4.6/4.7 tool calls: ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>``."""

from __future__ import annotations

import re
from typing import Any, ClassVar

from parsers.jsoncalls import calls_from_json_text
from parsers.jsonutil import Finder
from parsers.markup import BAD_HEADER, Header, MarkupToolParser
from parsers.xmlargs import strip_one_newline

_NAME_RE = re.compile(r"[^\s<]+")
_K_OPEN, _K_CLOSE = "<arg_key>", "</arg_key>"
_V_OPEN, _V_CLOSE = "<arg_value>", "</arg_value>"


class Glm47ToolParser(MarkupToolParser):
    """GLM tool calls, one per ``<tool_call>`` block, newline-separated or not."""

    BLOCK_OPEN: ClassVar[tuple[str, ...]] = ("<tool_call>",)
    BLOCK_CLOSE: ClassVar[str] = "</tool_call>"
    CONTENT_SEP: ClassVar[str] = "\n"  # GLM-4.5+ templates: content + "\n<tool_call>"

    def read_header(self, text: str, pos: int, end: int) -> Header:
        """The function name: the first run of non-space, non-``<`` characters."""
        i = pos
        while i < end and text[i].isspace():
            i += 1
        if i >= end:
            return None
        if text[i] in "{[":
            return (0, None)  # JSON body: parse it whole at the close
        m = _NAME_RE.match(text, i, end)
        if m is None:
            return BAD_HEADER
        if m.end() >= end:
            return None  # the name may continue
        return (m.end() - pos, m.group())

    def parse_args(self, name: str, body: str, closed: bool) -> dict[str, Any]:
        """``<arg_key>K</arg_key><arg_value>V</arg_value>`` pairs."""
        args: dict[str, Any] = {}
        find = Finder(body)
        i = 0
        while True:
            ks = find.find(_K_OPEN, i)
            if ks < 0:
                break
            ke = find.find(_K_CLOSE, ks)
            if ke < 0:
                break
            key = body[ks + len(_K_OPEN) : ke].strip()
            vs = find.find(_V_OPEN, ke)
            if vs < 0:
                break
            ve = find.find(_V_CLOSE, vs)
            nk = find.find(_K_OPEN, vs)
            if ve >= 0 and (nk < 0 or ve < nk):
                value, i = body[vs + len(_V_OPEN) : ve], ve + len(_V_CLOSE)
            elif closed:
                stop = nk if nk >= 0 else len(body)
                value, i = body[vs + len(_V_OPEN) : stop], stop
            else:
                break
            if key:
                args[key] = self.schemas.convert(name, key, strip_one_newline(value))
            if i >= len(body):
                break
        return args

    def parse_deferred(self, body: str) -> list[tuple[str, dict[str, Any]]] | None:
        """A JSON body instead of the key/value markup."""
        return calls_from_json_text(body)
