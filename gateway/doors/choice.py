"""Assemble one choice: text deltas in; content, reasoning and tool-call deltas out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protocol.messages import RequestOutput, TokenLogprob


@dataclass
class Delta:
    """What one step adds to a choice."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.tool_calls)


class ChoiceAssembler:
    """Feeds a choice's text through the alias's parsers and keeps the running totals."""

    def __init__(self, index: int, *, tool_parser: str | None, reasoning_parser: str | None,
                 tools: list[dict[str, Any]] | None, parse_tools: bool, think_opened: bool,
                 prefix: str = "") -> None:
        self.index = index
        self.prefix = prefix  # forced start of the answer, part of the model's output
        self.parser: Any = None
        if tool_parser or reasoning_parser:
            from parsers.pipeline import OutputParser

            self.parser = OutputParser(tool_parser if tools else None, reasoning_parser,
                                       tools=tools, think_opened=think_opened,
                                       parse_tools=parse_tools)
        self.content = ""
        self.reasoning = ""
        self.calls: list[dict[str, Any]] = []
        self.logprobs: list[TokenLogprob] = []
        self.finish_reason: str | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_tokens = 0

    def feed(self, out: RequestOutput) -> Delta:
        """Account one output; return the delta it produces (finish flushes the parsers)."""
        self.logprobs.extend(out.logprobs)
        self.prompt_tokens = out.prompt_tokens or self.prompt_tokens
        self.completion_tokens = out.completion_tokens or self.completion_tokens
        self.cached_tokens = out.cached_tokens or self.cached_tokens
        delta = self._parse(out.text, final=out.finish_reason is not None)
        if out.finish_reason is not None:
            self.finish_reason = out.finish_reason
            if self.calls and out.finish_reason == "stop":
                self.finish_reason = "tool_calls"
        return delta

    def _parse(self, text: str, final: bool) -> Delta:
        text, self.prefix = self.prefix + text, ""
        if self.parser is None:
            self.content += text
            return Delta(content=text)
        parts = [self.parser.feed(text)] if text else []
        if final:
            parts.append(self.parser.finish())
        delta = Delta()
        for p in parts:
            delta.content += p.content
            delta.reasoning += p.reasoning
            for tc in p.tool_calls:
                delta.tool_calls.append(self._call_delta(tc))
        self.content += delta.content
        self.reasoning += delta.reasoning
        return delta

    def _call_delta(self, tc: Any) -> dict[str, Any]:
        if tc.index >= len(self.calls):
            self.calls.append({"id": tc.id, "type": "function",
                               "function": {"name": tc.name or "", "arguments": ""}})
        call = self.calls[tc.index]
        call["function"]["arguments"] += tc.arguments
        fn: dict[str, Any] = {"arguments": tc.arguments}
        out: dict[str, Any] = {"index": tc.index, "function": fn}
        if tc.id is not None:
            out["id"] = tc.id
            out["type"] = "function"
        if tc.name is not None:
            fn["name"] = tc.name
        return out
