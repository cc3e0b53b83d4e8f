"""Anthropic Messages API bodies as msgspec structs: validation and OpenAPI from one source."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from gateway.openai.schemas import MaxTokens, Temperature, TopP, User


class _In(msgspec.Struct, omit_defaults=True):
    """Base of request structs: unknown fields (cache_control, citations...) are ignored."""


class AnthropicTextBlock(_In, tag="text", tag_field="type", kw_only=True):
    """A text block."""

    text: str


class AnthropicImageBlock(_In, tag="image", tag_field="type", kw_only=True):
    """An image block (refused until vision lands)."""

    source: dict[str, Any]


class AnthropicToolUseBlock(_In, tag="tool_use", tag_field="type", kw_only=True):
    """A tool call the assistant made in an earlier turn."""

    id: str
    name: str
    input: dict[str, Any] = {}


class AnthropicToolResultBlock(_In, tag="tool_result", tag_field="type", kw_only=True):
    """The client's result of a tool call."""

    tool_use_id: str
    content: str | list[AnthropicTextBlock | AnthropicImageBlock] | None = None
    is_error: bool = False


class AnthropicThinkingBlock(_In, tag="thinking", tag_field="type", kw_only=True):
    """Reasoning replayed from an earlier turn."""

    thinking: str
    signature: str | None = None


class AnthropicRedactedThinkingBlock(_In, tag="redacted_thinking", tag_field="type", kw_only=True):
    """Redacted reasoning replayed from an earlier turn (dropped)."""

    data: str = ""


Block = AnthropicTextBlock | AnthropicImageBlock | AnthropicToolUseBlock | AnthropicToolResultBlock | AnthropicThinkingBlock | \
    AnthropicRedactedThinkingBlock


class AnthropicInputMessage(_In, kw_only=True):
    """One message of the conversation."""

    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class AnthropicTool(_In, kw_only=True):
    """A client tool the model may call."""

    name: Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[a-zA-Z0-9_.\-]+$")]
    description: str | None = None
    input_schema: dict[str, Any]
    type: str | None = None  # "custom" or absent; server tools are refused


class AnthropicToolChoice(_In, kw_only=True):
    """How the model picks tools: auto, any, tool (with name) or none."""

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class AnthropicThinking(_In, kw_only=True):
    """Extended thinking: enabled (with a budget), disabled, or adaptive (the model's default)."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Annotated[int, Meta(ge=1)] | None = None


class AnthropicMetadata(msgspec.Struct):
    """`metadata`: only `user_id` (at most 256 characters, as Anthropic's API)."""

    user_id: User | None = None


class CountTokensRequest(_In, kw_only=True):
    """POST /v1/messages/count_tokens."""

    model: str
    messages: Annotated[list[AnthropicInputMessage], Meta(min_length=1)]
    system: str | list[AnthropicTextBlock] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: AnthropicToolChoice | None = None
    thinking: AnthropicThinking | None = None


class MessagesRequest(CountTokensRequest, kw_only=True):
    """POST /v1/messages."""

    max_tokens: MaxTokens
    stop_sequences: list[str] | None = None
    temperature: Temperature | None = None  # Anthropic allows 0-1; 0-2 as the chat route
    top_p: TopP | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    stream: bool = False
    metadata: AnthropicMetadata | None = None
    service_tier: str | None = None

