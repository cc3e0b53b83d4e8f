"""Anthropic Messages API answers as msgspec structs (they document /openapi.json)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class AnthropicOutText(msgspec.Struct, tag="text", tag_field="type"):
    """Text the model wrote."""

    text: str


class AnthropicOutThinking(msgspec.Struct, tag="thinking", tag_field="type"):
    """The model's reasoning (no signature: it is not Anthropic's)."""

    thinking: str
    signature: str = ""


class AnthropicOutToolUse(msgspec.Struct, tag="tool_use", tag_field="type"):
    """A tool call: input is the parsed arguments object."""

    id: str
    name: str
    input: dict[str, Any]


class AnthropicUsage(msgspec.Struct):
    """Token accounting; input_tokens excludes the prompt tokens read from the prefix cache."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


class AnthropicMessage(msgspec.Struct, kw_only=True):
    """Response of POST /v1/messages."""

    id: str
    model: str
    content: list[AnthropicOutText | AnthropicOutThinking | AnthropicOutToolUse]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"] | None
    stop_sequence: str | None
    usage: AnthropicUsage
    type: str = "message"
    role: str = "assistant"


class AnthropicTokenCount(msgspec.Struct):
    """Response of POST /v1/messages/count_tokens."""

    input_tokens: int


class AnthropicErrorDetail(msgspec.Struct):
    """The body of an Anthropic-style error."""

    type: str
    message: str


class AnthropicError(msgspec.Struct):
    """Every error of the /v1/messages routes."""

    error: AnthropicErrorDetail
    type: str = "error"
