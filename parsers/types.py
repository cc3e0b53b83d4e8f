"""Data types exchanged between the parsers and the gateway."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolCallDelta:
    """One streamed piece of a tool call.

    ``id`` and ``name`` are set on the first delta of a call only; ``arguments`` is
    an increment of the call's JSON arguments text (possibly empty).
    """

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass
class ParseDelta:
    """What one ``feed``/``finish`` call produced: content, reasoning and tool-call deltas."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)

    def extend(self, other: ParseDelta) -> None:
        """Append another delta's pieces to this one."""
        self.content += other.content
        self.reasoning += other.reasoning
        self.tool_calls.extend(other.tool_calls)


@dataclass(frozen=True)
class ToolCall:
    """A complete tool call; ``arguments`` is compact canonical JSON object text."""

    id: str
    name: str
    arguments: str


@dataclass
class ParsedMessage:
    """A whole parsed assistant message."""

    content: str
    reasoning: str
    tool_calls: list[ToolCall]
