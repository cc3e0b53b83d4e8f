"""Abstract tool-call and reasoning parsers (one instance per response/choice)."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from parsers.buffer import TextBuffer
from parsers.calls import CallCounter
from parsers.jsonutil import dumps_canonical
from parsers.schema import ToolSchemas
from parsers.segments import ContentSegments
from parsers.types import ParseDelta


class ContentSink(Protocol):
    """Where a tool parser's content goes: ContentSegments, or Harmony's message channel."""

    def push(self, text: str) -> str:
        """Feed text; return what can be released now."""

    def cut(self) -> str:
        """A call starts (or a message ends) here; return what that releases."""

    def flush(self) -> str:
        """End of stream: release held text."""


class ToolParser(ABC):
    """Streaming extractor of tool calls from a model's output text.

    ``feed`` takes the next text delta and returns the content and tool-call deltas it
    decided; ``finish`` flushes whatever was held back. Text that might be the start of a
    marker is held until it is decided, so chunking never changes the aggregated result.
    """

    CONTENT_SEP: ClassVar[str] = ""
    """What the format's chat template puts between content and a call (see ContentSegments)."""

    def __init__(self, tools: list[dict[str, Any]] | None = None) -> None:
        self.schemas = ToolSchemas(tools)
        self.calls = CallCounter()
        self.content: ContentSink = ContentSegments(self.CONTENT_SEP)

    def feed(self, text: str) -> ParseDelta:
        """Parse the next text delta."""
        out = ParseDelta()
        if text:
            self._feed(text, out)
        return out

    def finish(self) -> ParseDelta:
        """Flush held text at the end of the response."""
        out = ParseDelta()
        self._finish(out)
        out.content += self.content.flush()
        return out

    @abstractmethod
    def _feed(self, text: str, out: ParseDelta) -> None:
        """Family-specific incremental parsing."""

    @abstractmethod
    def _finish(self, out: ParseDelta) -> None:
        """Family-specific end-of-stream handling."""

    def reasoning_exits(self) -> tuple[tuple[str, str], ...]:
        """``(opener, closer)`` markers of call blocks that may end a reasoning section."""
        return ()

    def emit_content(self, out: ParseDelta, text: str) -> None:
        """Send plain text to the content channel."""
        out.content += self.content.push(text)

    def open_call(self, out: ParseDelta, name: str) -> None:
        """Start a call whose arguments will follow as increments."""
        out.content += self.content.cut()
        out.tool_calls.append(self.calls.start(name))

    def emit_args(self, out: ParseDelta, arguments: str) -> None:
        """Add an arguments increment to the current call."""
        out.tool_calls.append(self.calls.more(arguments))

    def emit_call(self, out: ParseDelta, name: str, arguments: str) -> None:
        """Emit a complete call in a single delta."""
        out.content += self.content.cut()
        out.tool_calls.append(self.calls.start(name, arguments))

    def emit_calls(self, out: ParseDelta, calls: list[tuple[str, dict[str, Any]]]) -> bool:
        """Emit complete calls if all their arguments serialise; False (nothing emitted) if not."""
        encoded = []
        for name, args in calls:
            text = dumps_canonical(args)
            if text is None:
                return False
            encoded.append((name, text))
        for name, text in encoded:
            self.emit_call(out, name, text)
        return True


Handler = Callable[[ParseDelta, bool], bool]


class StateMachineToolParser(ToolParser):
    """A tool parser run as a state machine over a resumable buffer.

    Each state's handler consumes what it can decide and returns True to run again (usually
    in a new state) or False to wait for more text; ``final`` is True once the text has ended.
    """

    _state: enum.Enum
    _buf: TextBuffer

    @abstractmethod
    def _handlers(self) -> Mapping[enum.Enum, Handler]:
        """The handler of each state."""

    def _feed(self, text: str, out: ParseDelta) -> None:
        self._buf.append(text)
        self._run(out, final=False)

    def _finish(self, out: ParseDelta) -> None:
        self._run(out, final=True)

    def _run(self, out: ParseDelta, final: bool) -> None:
        handlers = self._handlers()
        while handlers[self._state](out, final):
            pass


class ReasoningParser(ABC):
    """Streaming splitter of a model's output into reasoning and content.

    ``tool_blocks``: the tool parser's ``(opener, closer)`` block markers, for formats where
    a tool call may end the reasoning implicitly (``parsers.thinkcalls``).
    """

    def __init__(
        self, *, think_opened: bool = False, tool_blocks: Sequence[tuple[str, str]] = ()
    ) -> None:
        self.think_opened = think_opened

    @abstractmethod
    def feed(self, text: str) -> ParseDelta:
        """Parse the next text delta into reasoning and content."""

    @abstractmethod
    def finish(self) -> ParseDelta:
        """Flush held text at the end of the response."""
