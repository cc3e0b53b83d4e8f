"""gpt-oss Harmony output: analysis -> reasoning, final -> content, ``to=`` messages -> calls."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from typing import Any

from parsers.base import ReasoningParser, ToolParser
from parsers.buffer import MarkerSet, TextBuffer
from parsers.channel import TextChannel
from parsers.jsonutil import loads_strict, strip_code_fence
from parsers.types import ParseDelta

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
_STOPS = (END, CALL, RETURN)
_OUTSIDE = MarkerSet((START, CHANNEL, END, CALL, RETURN))
_HEADER_END = MarkerSet((MESSAGE, END, CALL, RETURN))
_BODY_END = MarkerSet((END, CALL, RETURN, START, CHANNEL))
MAX_HEADER = 512
MESSAGE_SEP = "\n\n"  # joins the texts of consecutive messages of the same kind
_CHANNEL_RE = re.compile(r"\s*([^\s<]+)")
_RECIPIENT_RE = re.compile(r"(?:^|[\s>])to=([^\s<]+)")

CallSink = Callable[[ParseDelta, str, dict[str, Any]], bool]


def parse_header(header: str) -> tuple[str, str | None]:
    """``(channel, recipient)`` of a message header such as ``<|channel|>commentary to=x``."""
    channel = ""
    i = header.find(CHANNEL)
    if i >= 0:
        m = _CHANNEL_RE.match(header, i + len(CHANNEL))
        channel = m.group(1) if m else ""
    r = _RECIPIENT_RE.search(header)
    return channel, (r.group(1) if r else None)


class _Kind(enum.Enum):
    REASONING = 0
    CONTENT = 1
    RAW = 2  # passed through verbatim (tool messages when not parsing tools)
    TOOL = 3


class _State(enum.Enum):
    OUTSIDE = 0
    HEADER = 1
    BODY = 2


class HarmonyMachine:
    """Streaming Harmony message splitter shared by the tool and reasoning parsers.

    With a ``call_sink`` messages addressed ``to=`` a recipient become tool calls (invalid
    ones come back verbatim as content); without one they pass through verbatim as content,
    so a downstream Harmony tool parser can still read them.
    """

    def __init__(self, content: TextChannel, call_sink: CallSink | None) -> None:
        self.content = content
        self.reasoning = TextChannel(skip_leading=True, default_sep=MESSAGE_SEP)
        self._sink = call_sink
        self._buf = TextBuffer()
        self._state = _State.OUTSIDE
        self._kind = _Kind.CONTENT
        self._header_start = 0
        self._opener = ""
        self._recipient = ""

    def feed(self, text: str, out: ParseDelta) -> None:
        """Consume a text delta."""
        self._buf.append(text)
        self._run(out, final=False)

    def finish(self, out: ParseDelta) -> None:
        """Flush at the end of the response (content flushing is the owner's job)."""
        self._run(out, final=True)
        self.reasoning.cut()

    def _run(self, out: ParseDelta, final: bool) -> None:
        while True:
            if self._state is _State.OUTSIDE:
                more = self._on_outside(out, final)
            elif self._state is _State.HEADER:
                more = self._on_header(out, final)
            else:
                more = self._on_body(out, final)
            if not more:
                return

    def _on_outside(self, out: ParseDelta, final: bool) -> bool:
        buf = self._buf
        hit = buf.find(_OUTSIDE)
        if hit is None:
            keep = 0 if final else buf.held(_OUTSIDE)
            out.content += self.content.push(buf.take(len(buf) - keep))
            buf.compact()
            return False
        idx, marker = hit
        out.content += self.content.push(buf.take(idx))
        buf.pos += len(marker)
        if marker in _STOPS:  # a stray stop token outside a message: drop it
            return True
        self._header_start = idx
        self._opener = marker
        self._state = _State.HEADER
        return True

    def _on_header(self, out: ParseDelta, final: bool) -> bool:
        buf = self._buf
        hit = buf.find(_HEADER_END)
        limit = self._header_start + MAX_HEADER
        if hit is not None and hit[0] <= limit and hit[1] == MESSAGE:
            channel, recipient = parse_header(buf.slice(self._header_start, hit[0]))
            buf.pos = hit[0] + len(MESSAGE)
            if recipient is not None:
                self._recipient = recipient
                self._kind = _Kind.TOOL if self._sink else _Kind.RAW
                if self._kind is _Kind.RAW:
                    out.content += self.content.push(buf.slice(self._header_start, buf.pos))
            elif channel == "analysis":
                self._kind = _Kind.REASONING
                self.reasoning.cut()
            else:
                self._kind = _Kind.CONTENT
                self.content.cut()
            self._state = _State.BODY
            return True
        if hit is None and not final and len(buf) < limit + _HEADER_END.max_len:
            return False
        # malformed header: the opener is plain text; rescan after it
        end = self._header_start + len(self._opener)
        out.content += self.content.push(buf.slice(self._header_start, end))
        buf.pos = end
        self._state = _State.OUTSIDE
        return True

    def _on_body(self, out: ParseDelta, final: bool) -> bool:
        buf = self._buf
        kind = self._kind
        hit = buf.find(_BODY_END)
        if hit is None:
            if kind is _Kind.TOOL:
                if not final:
                    return False
                body = buf.slice(buf.pos, len(buf) - buf.held(_BODY_END))
                self._close_tool(out, body, len(buf))
            else:
                keep = 0 if final else buf.held(_BODY_END)
                self._emit(out, buf.take(len(buf) - keep))
                buf.compact()
                if not final:
                    return False
            self._state = _State.OUTSIDE
            return True
        idx, marker = hit
        end = idx + len(marker) if marker in _STOPS else idx
        if kind is _Kind.TOOL:
            self._close_tool(out, buf.slice(buf.pos, idx), end)
        else:
            self._emit(out, buf.take(idx))
            if kind is _Kind.RAW:
                out.content += self.content.push(buf.slice(idx, end))
            elif kind is _Kind.REASONING:
                self.reasoning.cut()
            else:
                self.content.cut()
        buf.pos = end
        self._state = _State.OUTSIDE
        return True

    def _emit(self, out: ParseDelta, text: str) -> None:
        if self._kind is _Kind.REASONING:
            out.reasoning += self.reasoning.push(text)
        else:
            out.content += self.content.push(text)

    def _close_tool(self, out: ParseDelta, body: str, end: int) -> None:
        name = self._recipient.removeprefix("functions.")
        text = strip_code_fence(body)
        ok, args = loads_strict(text) if text else (True, {})
        emitted = ok and isinstance(args, dict) and self._sink is not None and bool(name)
        if emitted and self._sink is not None:
            emitted = self._sink(out, name, args)
        if not emitted:
            out.content += self.content.push(self._buf.slice(self._header_start, end))
        self._buf.pos = end


class HarmonyToolParser(ToolParser):
    """Harmony as a tool parser: also routes analysis to reasoning and final to content."""

    def __init__(self, tools: list[dict[str, Any]] | None = None) -> None:
        super().__init__(tools)
        self.content = TextChannel(default_sep=MESSAGE_SEP)
        self._machine = HarmonyMachine(self.content, self._sink)

    def _sink(self, out: ParseDelta, name: str, args: dict[str, Any]) -> bool:
        return self.emit_calls(out, [(name, args)])

    def _feed(self, text: str, out: ParseDelta) -> None:
        self._machine.feed(text, out)

    def _finish(self, out: ParseDelta) -> None:
        self._machine.finish(out)


class HarmonyReasoningParser(ReasoningParser):
    """Harmony as a reasoning parser: analysis -> reasoning, final -> content.

    Tool-call messages pass through verbatim as content for a Harmony tool parser.
    """

    def __init__(
        self, *, think_opened: bool = False, tool_blocks: Sequence[tuple[str, str]] = ()
    ) -> None:
        super().__init__(think_opened=think_opened)
        self._content = TextChannel(default_sep=MESSAGE_SEP)
        self._machine = HarmonyMachine(self._content, None)

    def feed(self, text: str) -> ParseDelta:
        """Split the next text delta."""
        out = ParseDelta()
        if text:
            self._machine.feed(text, out)
        return out

    def finish(self) -> ParseDelta:
        """Release held text at the end of the response."""
        out = ParseDelta()
        self._machine.finish(out)
        out.content += self._content.flush()
        return out
