"""``<think>...</think>`` reasoning parsers (Qwen3, DeepSeek-R1, GLM-4.5+, MiniMax-M2)."""

from __future__ import annotations

import enum
from typing import ClassVar

from parsers.base import ReasoningParser
from parsers.buffer import MarkerSet, TextBuffer
from parsers.channel import TextChannel
from parsers.types import ParseDelta


class _State(enum.Enum):
    START = 0  # nothing but whitespace seen; an opening tag may still come
    REASONING = 1
    CONTENT = 2


class ThinkReasoningParser(ReasoningParser):
    """Splits ``<think>reasoning</think>content``.

    The opening tag is recognised only at the very start of the output (after whitespace);
    with ``think_opened`` (or ``IMPLICIT_OPEN``) the output starts inside the reasoning and a
    redundant opening tag is swallowed. Without tags and not opened, everything is content.
    Whitespace right inside the tags and right after the closing tag is trimmed.
    """

    OPEN: ClassVar[str] = "<think>"
    CLOSE: ClassVar[str] = "</think>"
    IMPLICIT_OPEN: ClassVar[bool] = False

    def __init__(self, *, think_opened: bool = False) -> None:
        super().__init__(think_opened=think_opened)
        self._buf = TextBuffer()
        self._close_marks = MarkerSet((self.CLOSE,))
        opened = think_opened or self.IMPLICIT_OPEN
        self._state = _State.REASONING if opened else _State.START
        self._at_reasoning_start = opened
        self._reasoning = TextChannel(skip_leading=True)
        self._content = TextChannel(hold_trailing=False)
        self._lead = 0  # end of the leading whitespace already scanned

    def feed(self, text: str) -> ParseDelta:
        """Split the next text delta into reasoning and content."""
        out = ParseDelta()
        if text:
            self._buf.append(text)
            self._run(out, final=False)
        return out

    def finish(self) -> ParseDelta:
        """Release held text at the end of the response."""
        out = ParseDelta()
        self._run(out, final=True)
        self._reasoning.cut()
        return out

    def _run(self, out: ParseDelta, final: bool) -> None:
        buf = self._buf
        while True:
            if self._state is _State.CONTENT:
                out.content += self._content.push(buf.take(len(buf)))
                buf.compact()
                return
            if self._state is _State.START or self._at_reasoning_start:
                decided = self._leading_tag(out, final)
                if not decided:
                    return
                continue
            hit = buf.find(self._close_marks)
            if hit is None:
                keep = 0 if final else buf.held(self._close_marks)
                out.reasoning += self._reasoning.push(buf.take(len(buf) - keep))
                buf.compact()
                return
            idx, marker = hit
            out.reasoning += self._reasoning.push(buf.take(idx))
            buf.pos += len(marker)
            self._reasoning.cut()
            self._content.cut()
            self._state = _State.CONTENT

    def _leading_tag(self, out: ParseDelta, final: bool) -> bool:
        """Look for the opening tag at the start; False when more text is needed."""
        buf = self._buf
        text = buf.text
        i = max(buf.pos, self._lead)
        while i < len(text) and text[i].isspace():
            i += 1
        self._lead = i
        rest_len = len(text) - i
        if rest_len == 0 and not final:
            return False
        if text.startswith(self.OPEN, i):
            buf.pos = i + len(self.OPEN)
            self._state = _State.REASONING
        elif rest_len < len(self.OPEN) and self.OPEN.startswith(text[i:]) and not final:
            return False
        elif self._state is _State.START:
            self._state = _State.CONTENT
            return True
        self._at_reasoning_start = False
        return True


class Qwen3ReasoningParser(ThinkReasoningParser):
    """Qwen3: ``<think>...</think>``; pass ``think_opened`` when the template opened it."""


class DeepSeekR1ReasoningParser(ThinkReasoningParser):
    """DeepSeek-R1: the opening ``<think>`` is often omitted, so output starts as reasoning."""

    IMPLICIT_OPEN: ClassVar[bool] = True


class Glm4ReasoningParser(ThinkReasoningParser):
    """GLM-4.5/4.6/4.7: ``<think>...</think>``."""


class MiniMaxReasoningParser(ThinkReasoningParser):
    """MiniMax-M2: ``<think>...</think>`` (its template usually opens the tag itself)."""
