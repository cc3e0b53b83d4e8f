"""UI-TARS ``Thought: ...`` / ``Action: click(start_box='(x,y)')`` outputs."""

from __future__ import annotations

import enum
import re
from typing import Any

from parsers.base import Handler, StateMachineToolParser
from parsers.buffer import MarkerSet, TextBuffer
from parsers.pyliteral import parse_call
from parsers.scan import BracketScanner
from parsers.types import ParseDelta

ACTION = "Action:"
_MARKS = MarkerSet(("\n" + ACTION,))
_HEAD = re.compile(r"[A-Za-z_]\w*\s*\(")
_HEAD_PREFIX = re.compile(r"[A-Za-z_]\w*\s*")
HEAD_WINDOW = 64
_BOX_TOKENS = ("<|box_start|>", "<|box_end|>", "<point>", "</point>", "<bbox>", "</bbox>")
_COORDS_RE = re.compile(r"[\s()\[\],\-+\d.]*")
_NUMBER_RE = re.compile(r"[-+]?\d+(?:\.\d+)?")


def coordinates(value: str) -> list[int | float] | None:
    """``"(x,y)"``, ``"<|box_start|>(x1,y1,x2,y2)<|box_end|>"``, ``"<point>x y</point>"`` -> numbers."""
    for token in _BOX_TOKENS:
        value = value.replace(token, " ")
    if not _COORDS_RE.fullmatch(value):
        return None
    numbers = _NUMBER_RE.findall(value)
    if len(numbers) not in (2, 4):
        return None
    return [float(x) if "." in x else int(x) for x in numbers]


def action_arguments(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of an action with box/point strings turned into number lists."""
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if isinstance(value, str) and (key.endswith("_box") or key.endswith("point")):
            coords = coordinates(value)
            out[key] = coords if coords is not None else value
        else:
            out[key] = value
    return out


class _State(enum.Enum):
    TEXT = 0
    LEAD = 1  # after "Action:" or between actions
    CANDIDATE = 2


class UiTarsToolParser(StateMachineToolParser):
    """Each action after a line-initial ``Action:`` becomes a tool call named by the action.

    The thought text stays content (verbatim, including its ``Thought:`` label).
    """

    def __init__(self, tools: list[dict[str, Any]] | None = None) -> None:
        super().__init__(tools)
        self._buf = TextBuffer()
        self._state = _State.TEXT
        self._raw_from = 0
        self._section_calls = 0
        self._start = 0
        self._head_ok = False
        self._scanner = BracketScanner(0, python=True)

    def _handlers(self) -> dict[enum.Enum, Handler]:
        return {
            _State.TEXT: self._on_text,
            _State.LEAD: self._on_lead,
            _State.CANDIDATE: self._on_candidate,
        }

    def _enter(self, raw_from: int, pos: int) -> bool:
        self._raw_from = raw_from
        self._buf.pos = pos
        self._section_calls = 0
        self._state = _State.LEAD
        return True

    def _on_text(self, out: ParseDelta, final: bool) -> bool:
        buf = self._buf
        text, pos = buf.text, buf.pos
        if pos == 0 or text[pos - 1] == "\n":  # at a line start: "Action:" needs no newline
            if text.startswith(ACTION, pos):
                return self._enter(pos, pos + len(ACTION))
            piece = text[pos : pos + len(ACTION)]
            if not final and len(piece) < len(ACTION) and ACTION.startswith(piece):
                return False
        hit = buf.find(_MARKS)
        if hit is None:
            keep = 0 if final else buf.held(_MARKS)
            self.emit_content(out, buf.take(len(buf) - keep))
            buf.compact(keep_before=1)
            return False
        idx, marker = hit
        self.emit_content(out, buf.take(idx))
        return self._enter(idx, idx + len(marker))

    def _abandon(self, out: ParseDelta, upto: int) -> bool:
        """Leave the action section; with no call yet its text so far becomes content."""
        buf = self._buf
        if self._section_calls == 0:
            self.emit_content(out, buf.slice(self._raw_from, upto))
        buf.pos = upto
        self._state = _State.TEXT
        return True

    def _on_lead(self, out: ParseDelta, final: bool) -> bool:
        buf = self._buf
        text, n = buf.text, len(buf)
        i = buf.pos
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return self._abandon(out, n) if final else False
        if not (text[i].isalpha() or text[i] == "_"):
            return self._abandon(out, i)
        buf.pos = i
        self._start = i
        self._head_ok = False
        self._scanner = BracketScanner(i, python=True)
        self._state = _State.CANDIDATE
        return True

    def _on_candidate(self, out: ParseDelta, final: bool) -> bool:
        buf = self._buf
        text = buf.text
        if not self._head_ok:
            end = min(len(text), self._start + HEAD_WINDOW)
            if _HEAD.match(text, self._start, end):
                self._head_ok = True
            else:
                m = _HEAD_PREFIX.match(text, self._start, end)
                if (
                    not final
                    and m is not None
                    and m.end() == end
                    and end - self._start < HEAD_WINDOW
                ):
                    return False
                return self._abandon(out, self._start)
        end = self._scanner.scan(text)
        if end < 0:
            return self._abandon(out, self._start) if final else False
        call = parse_call(text[self._start : end])
        if call is None or not self.emit_calls(out, [(call[0], action_arguments(call[1]))]):
            return self._abandon(out, self._start)
        self._section_calls += 1
        self._raw_from = end
        buf.pos = end
        self._state = _State.LEAD
        return True
