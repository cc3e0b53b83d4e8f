"""Tool-call id and index bookkeeping for one response."""

from __future__ import annotations

import uuid

from parsers.types import ToolCallDelta


def new_call_id() -> str:
    """A fresh OpenAI-style tool-call id: ``call_`` + 24 hex characters."""
    return "call_" + uuid.uuid4().hex[:24]


class CallCounter:
    """Numbers the calls of one response 0, 1, 2... and builds their deltas."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def start(self, name: str, arguments: str = "") -> ToolCallDelta:
        """Open a new call: the delta carrying its id and name."""
        delta = ToolCallDelta(self.count, new_call_id(), name, arguments)
        self.count += 1
        return delta

    def more(self, arguments: str) -> ToolCallDelta:
        """An arguments increment for the most recently started call."""
        return ToolCallDelta(self.count - 1, None, None, arguments)
