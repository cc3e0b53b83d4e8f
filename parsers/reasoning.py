"""``<think>...</think>`` reasoning parsers (Qwen3, DeepSeek-R1, GLM-4.5+, MiniMax-M2)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import ClassVar

from parsers.base import ReasoningParser
from parsers.buffer import MarkerSet, TextBuffer
from parsers.channel import TextChannel
from parsers.thinkcalls import CallRegion, Verdict
from parsers.types import ParseDelta


class _State(enum.Enum):
    START = 0  # nothing but whitespace seen; an opening tag may still come
    REASONING = 1
    REGION = 2  # tool-call blocks inside the reasoning: calls or a draft (parsers.thinkcalls)
    CONTENT = 3


class ThinkReasoningParser(ReasoningParser):
    """Splits ``<think>reasoning</think>content``.

    The opening tag is recognised only at the very start of the output (after whitespace);
    with ``think_opened`` the output starts inside the reasoning and a redundant opening tag
    is swallowed. Without tags and not opened, everything is content. Whitespace right
    inside the tags is trimmed from the reasoning; the content after the closing tag loses
    its leading line breaks only (the separator templates put there; Qwen3's template
    renders ``</think>\n\n`` + ``content.lstrip('\n')``), everything else is kept exactly.

    ``tool_blocks`` (the tool parser's ``(opener, closer)`` pairs) let a call written
    before the closing tag end the reasoning implicitly when the output ends in such calls;
    see ``parsers.thinkcalls``.
    """

    OPEN: ClassVar[str] = "<think>"
    CLOSE: ClassVar[str] = "</think>"

    def __init__(
        self, *, think_opened: bool = False, tool_blocks: Sequence[tuple[str, str]] = ()
    ) -> None:
        super().__init__(think_opened=think_opened, tool_blocks=tool_blocks)
        self._buf = TextBuffer()
        self._blocks = tuple((o, c) for o, c in tool_blocks if o and c)
        self._closers = dict(self._blocks)
        self._marks = MarkerSet((self.CLOSE,) + tuple(self._closers))
        self._state = _State.REASONING if think_opened else _State.START
        self._at_reasoning_start = think_opened
        self._reasoning = TextChannel(skip_leading=True)
        self._strip_newlines = False  # content right after the closing tag
        self._region: CallRegion | None = None
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
                self._emit_content(out, buf.take(len(buf)))
                buf.compact()
                return
            if self._state is _State.START or self._at_reasoning_start:
                if not self._leading_tag(out, final):
                    return
                continue
            if self._state is _State.REGION:
                if not self._on_region(out, final):
                    return
                continue
            hit = buf.find(self._marks)
            if hit is None:
                keep = 0 if final else buf.held(self._marks)
                out.reasoning += self._reasoning.push(buf.take(len(buf) - keep))
                buf.compact()
                return
            idx, marker = hit
            out.reasoning += self._reasoning.push(buf.take(idx))
            buf.compact()
            if marker == self.CLOSE:
                buf.pos += len(marker)
                self._end_reasoning()
            else:
                end = buf.pos + len(marker)
                self._region = CallRegion(self._blocks, self.CLOSE, end, self._closers[marker])
                self._state = _State.REGION

    def _on_region(self, out: ParseDelta, final: bool) -> bool:
        """Decide a region (which starts at ``buf.pos``); False when more text is needed."""
        assert self._region is not None
        buf = self._buf
        text = buf.text
        decision = self._region.decide(text, final)
        if decision.verdict is Verdict.WAIT:
            return False
        self._region = None
        if decision.verdict is Verdict.CALLS:
            tag = decision.end
            region = text[buf.pos :] if tag < 0 else text[buf.pos : tag] + text[tag + len(self.CLOSE) :]
            buf.pos = len(buf)
            self._reasoning.cut()
            self._state = _State.CONTENT
            out.content += region
            return True
        out.reasoning += self._reasoning.push(buf.take(decision.end))
        if decision.closed:
            buf.pos += len(self.CLOSE)
            self._end_reasoning()
        else:
            self._state = _State.REASONING
        return True

    def _end_reasoning(self) -> None:
        self._reasoning.cut()
        self._strip_newlines = True
        self._state = _State.CONTENT

    def _emit_content(self, out: ParseDelta, text: str) -> None:
        if self._strip_newlines:
            stripped = text.lstrip("\r\n")
            if not stripped:
                return
            self._strip_newlines = False
            text = stripped
        out.content += text

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
    """DeepSeek-R1 / V3.1: starts in reasoning only when the prompt opened ``<think>``.

    R1's template ends the generation prompt with ``<think>\n``, V3.1's thinking mode with
    ``<think>`` and its non-thinking mode with ``</think>``; the worker's ``think_opened``
    signal tells these apart, so a non-thinking reply is content, not reasoning.
    """


class Glm4ReasoningParser(ThinkReasoningParser):
    """GLM-4.5/4.6/4.7: ``<think>...</think>``."""


class MiniMaxReasoningParser(ThinkReasoningParser):
    """MiniMax-M2: ``<think>...</think>`` (its template usually opens the tag itself)."""
