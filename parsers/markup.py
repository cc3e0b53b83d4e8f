"""Generic streaming engine for tool calls delimited by text markers.

A *block* (e.g. ``<tool_call>...</tool_call>``) holds one call, or several calls each
delimited by their own markers (e.g. ``<function=...>...</function>``). A call either has
a *header* naming it (the name is streamed as soon as it is known and the arguments at its
close) or is *deferred* (the whole body, e.g. JSON, is parsed at its close). Subclasses
supply the markers and three hooks: ``read_header``, ``parse_args`` and ``parse_deferred``.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

from parsers.base import Handler, StateMachineToolParser
from parsers.buffer import MarkerSet, TextBuffer
from parsers.jsonutil import dumps_canonical
from parsers.types import ParseDelta

Header = tuple[int, str | None] | None
"""``None``: undecided; ``(consumed, name)``: header read; ``(consumed, None)``: deferred."""
BAD_HEADER: tuple[int, str | None] = (-1, None)


class _State(enum.Enum):
    TEXT = 0
    BLOCK = 1
    HEADER = 2
    BODY = 3


class MarkupToolParser(StateMachineToolParser):
    """Base class for marker-delimited tool-call formats."""

    BLOCK_OPEN: ClassVar[tuple[str, ...]] = ()
    BLOCK_CLOSE: ClassVar[str] = ""
    # openers whose blocks end with their own closer (a Markdown fence: "```json" ... "```");
    # they are not reasoning exits
    OWN_CLOSE: ClassVar[dict[str, str]] = {}
    CALL_OPEN: ClassVar[str | None] = None
    CALL_CLOSE: ClassVar[str | None] = None
    BARE_CALLS: ClassVar[bool] = False
    MAX_HEADER: ClassVar[int] = 256

    def __init__(self, tools: list[dict[str, Any]] | None = None) -> None:
        super().__init__(tools)
        cls = type(self)
        bare = (cls.CALL_OPEN,) if cls.BARE_CALLS and cls.CALL_OPEN else ()
        self._text_marks = MarkerSet(cls.BLOCK_OPEN + bare)
        self._marks = {close: (MarkerSet((cls.CALL_OPEN or "", close)),
                               MarkerSet((cls.CALL_CLOSE or "", close)))
                       for close in {cls.BLOCK_CLOSE, *cls.OWN_CLOSE.values()}}
        self._block_marks, self._body_marks = self._marks[cls.BLOCK_CLOSE]
        self.opener = ""  # the marker that opened the current block
        self._buf = TextBuffer()
        self._state = _State.TEXT
        self._raw_from = 0  # where raw text starts if the current block must become content
        self._implicit = False  # block opened by a bare call marker
        self._block_calls = 0
        self._name: str | None = None

    def reasoning_exits(self) -> tuple[tuple[str, str], ...]:
        """The block markers: a block may end a ``<think>`` section (``parsers.thinkcalls``)."""
        return tuple((opener, self.BLOCK_CLOSE) for opener in self.BLOCK_OPEN
                     if opener not in self.OWN_CLOSE)

    # -- hooks -------------------------------------------------------------------------
    def read_header(self, text: str, pos: int, end: int) -> Header:
        """Read a call header in ``text[pos:end]``; default: every call is deferred."""
        return (0, None)

    def parse_args(self, name: str, body: str, closed: bool) -> dict[str, Any]:
        """Arguments of a named call from its body (``closed``: its end marker was seen)."""
        return {}

    def parse_deferred(self, body: str) -> list[tuple[str, dict[str, Any]]] | None:
        """Calls from a deferred body, or None if it is not a valid call."""
        return None

    # -- driver ------------------------------------------------------------------------
    def _handlers(self) -> dict[enum.Enum, Handler]:
        return {
            _State.TEXT: self._on_text,
            _State.BLOCK: self._on_block,
            _State.HEADER: self._on_header,
            _State.BODY: self._on_body,
        }

    def _on_text(self, out: ParseDelta, final: bool) -> bool:
        buf = self._buf
        hit = buf.find(self._text_marks)
        if hit is None:
            keep = 0 if final else buf.held(self._text_marks)
            self.emit_content(out, buf.take(len(buf) - keep))
            buf.compact()
            return False
        idx, marker = hit
        self.emit_content(out, buf.take(idx))
        buf.compact()
        self._raw_from = buf.pos
        self._block_calls = 0
        buf.pos += len(marker)
        self.opener = marker
        self._block_marks, self._body_marks = self._marks[
            self.OWN_CLOSE.get(marker, self.BLOCK_CLOSE)]
        self._implicit = marker not in self.BLOCK_OPEN
        if self._implicit or self.CALL_OPEN is None:
            self._state = _State.HEADER
        else:
            self._state = _State.BLOCK
        return True

    def _on_block(self, out: ParseDelta, final: bool) -> bool:
        buf = self._buf
        hit = buf.find(self._block_marks)
        if hit is None:
            if not final:
                return False
            junk = buf.slice(buf.pos, len(buf) - buf.held(self._block_marks))
            self._end_block(out, junk, len(buf))
            return True
        idx, marker = hit
        if marker == self.CALL_OPEN:
            buf.pos = idx + len(marker)
            self._state = _State.HEADER
            return True
        self._end_block(out, buf.slice(buf.pos, idx), idx + len(marker))
        return True

    def _end_block(self, out: ParseDelta, junk: str, end: int) -> None:
        if self._block_calls == 0:
            calls = self.parse_deferred(junk)
            if not (calls and self.emit_calls(out, calls)):
                self.emit_content(out, self._buf.slice(self._raw_from, end))
        else:
            out.content += self.content.cut()
        self._buf.pos = end
        self._state = _State.TEXT

    def _on_header(self, out: ParseDelta, final: bool) -> bool:
        buf = self._buf
        end = min(len(buf), buf.pos + self.MAX_HEADER)
        res = self.read_header(buf.text, buf.pos, end)
        if res is None:
            if not final and end - buf.pos < self.MAX_HEADER:
                return False
            res = BAD_HEADER
        consumed, name = res
        if consumed < 0:
            if self._block_calls == 0 or self._implicit:
                self.emit_content(out, buf.slice(self._raw_from, buf.pos))
                self._raw_from = buf.pos
                self._state = _State.TEXT
            else:
                self._state = _State.BLOCK
            return True
        buf.pos += consumed
        self._name = name
        if name is not None:
            self.open_call(out, name)
            self._block_calls += 1
        self._state = _State.BODY
        return True

    def _on_body(self, out: ParseDelta, final: bool) -> bool:
        buf = self._buf
        hit = buf.find(self._body_marks)
        if hit is None:
            if not final:
                return False
            body = buf.slice(buf.pos, len(buf) - buf.held(self._body_marks))
            self._close_call(out, body, False, len(buf))
            self._state = _State.TEXT
            return True
        idx, marker = hit
        self._close_call(out, buf.slice(buf.pos, idx), True, idx + len(marker))
        if marker == self.CALL_CLOSE and not self._implicit:
            self._state = _State.BLOCK
        else:
            if self._block_calls:
                out.content += self.content.cut()
            self._state = _State.TEXT
        return True

    def _close_call(self, out: ParseDelta, body: str, closed: bool, end: int) -> None:
        if self._name is not None:
            args = self.parse_args(self._name, body, closed)
            self.emit_args(out, dumps_canonical(args) or "{}")
        else:  # a fenced block is a call only once its fence closes
            calls = (self.parse_deferred(body) if closed or self.opener not in self.OWN_CLOSE
                     else None)
            if calls and self.emit_calls(out, calls):
                self._block_calls += len(calls)
            else:
                self.emit_content(out, self._buf.slice(self._raw_from, end))
        self._buf.pos = end
        self._raw_from = end
