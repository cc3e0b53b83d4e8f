"""Turn a choice's deltas (reasoning, content, tool calls) into Anthropic content blocks and the
stream events that build them, so the streamed and the whole message agree by construction."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.doors.choice import ChoiceAssembler, Delta

Event = tuple[str, dict[str, Any]]


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments JSON as an object ({} when empty or not an object)."""
    try:
        value = msgspec.json.decode(arguments.encode() or b"{}")
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def tool_id(call_id: str | None) -> str:
    """A tool-call id in Anthropic's toolu_ form."""
    raw = call_id or ""
    return "toolu_" + (raw[5:] if raw.startswith("call_") else raw)


class BlockBuilder:
    """Keeps the content blocks of one message and emits the events that build them.

    Text that is only whitespace is held back until more text comes (so a newline between
    reasoning and a tool call makes no empty text block); single_call keeps the first call only.
    """

    def __init__(self, single_call: bool = False) -> None:
        self.blocks: list[dict[str, Any]] = []
        self.single_call = single_call
        self._open: str | None = None  # kind of the open block: thinking, text, tool_use
        self._call: int | None = None  # the open tool_use's call index
        self._held = ""
        self._args: dict[int, str] = {}

    def _start(self, block: dict[str, Any]) -> list[Event]:
        events = self.close()
        self.blocks.append(block)
        self._open = block["type"]
        start = {**block, "input": {}} if block["type"] == "tool_use" else dict(block)
        if block["type"] == "text":
            start["text"] = ""
        elif block["type"] == "thinking":
            start["thinking"] = ""
        events.append(("content_block_start", {"type": "content_block_start",
                                               "index": len(self.blocks) - 1,
                                               "content_block": start}))
        return events

    def _delta(self, delta: dict[str, Any]) -> Event:
        return ("content_block_delta", {"type": "content_block_delta",
                                        "index": len(self.blocks) - 1, "delta": delta})

    def close(self) -> list[Event]:
        """Close the open block, if any."""
        if self._open is None:
            return []
        if self._open == "tool_use" and self._call is not None:
            self.blocks[-1]["input"] = tool_input(self._args.get(self._call, ""))
        self._open, self._call = None, None
        return [("content_block_stop", {"type": "content_block_stop",
                                        "index": len(self.blocks) - 1})]

    def feed(self, delta: Delta) -> list[Event]:
        """The events for one delta."""
        events: list[Event] = []
        if delta.reasoning:
            if self._open != "thinking":
                self._held = ""
                events += self._start({"type": "thinking", "thinking": "", "signature": ""})
            self.blocks[-1]["thinking"] += delta.reasoning
            events.append(self._delta({"type": "thinking_delta", "thinking": delta.reasoning}))
        if delta.content:
            text = self._held + delta.content
            if self._open != "text" and not text.strip():
                self._held = text
            else:
                self._held = ""
                if self._open != "text":
                    events += self._start({"type": "text", "text": ""})
                self.blocks[-1]["text"] += text
                events.append(self._delta({"type": "text_delta", "text": text}))
        for tc in delta.tool_calls:
            events += self._tool(tc)
        return events

    def _tool(self, tc: dict[str, Any]) -> list[Event]:
        i = tc["index"]
        if self.single_call and i > 0:
            return []
        events: list[Event] = []
        if i not in self._args:
            self._held = ""
            self._args[i] = ""
            events += self._start({"type": "tool_use", "id": tool_id(tc.get("id")),
                                   "name": tc["function"].get("name", ""), "input": {}})
            self._call = i
        args = tc["function"].get("arguments") or ""
        if args:
            self._args[i] += args
            if self._call == i:
                events.append(self._delta({"type": "input_json_delta", "partial_json": args}))
        return events


def stop_reason(asm: ChoiceAssembler, blocks: list[dict[str, Any]],
                stop_sequence: str | None = None) -> str:
    """Anthropic's stop_reason for a finished choice."""
    if any(b["type"] == "tool_use" for b in blocks):
        return "tool_use"
    if stop_sequence is not None:
        return "stop_sequence"
    return "max_tokens" if asm.finish_reason == "length" else "end_turn"


def usage(asm: ChoiceAssembler) -> dict[str, int]:
    """Anthropic usage: input_tokens are the prompt tokens not read from the prefix cache."""
    return {"input_tokens": asm.prompt_tokens - asm.cached_tokens,
            "output_tokens": asm.completion_tokens,
            "cache_read_input_tokens": asm.cached_tokens, "cache_creation_input_tokens": 0}
