"""The server-sent events of POST /v1/messages with `stream: true` as msgspec structs (they
document /openapi.json; tests check the wire against them). Each frame is `event: TYPE` then
`data: {...}` with the same `type`."""

from __future__ import annotations

from typing import Literal

import msgspec

from gateway.anthropic.reply import (
    AnthropicError,
    AnthropicMessage,
    AnthropicOutText,
    AnthropicOutThinking,
    AnthropicOutToolUse,
    AnthropicUsage,
)


class AnthropicMessageStartEvent(msgspec.Struct, tag="message_start", tag_field="type"):
    """The first event: the message with no content yet (stop_reason null)."""

    message: AnthropicMessage


class AnthropicPingEvent(msgspec.Struct, tag="ping", tag_field="type"):
    """Keeps the connection alive while a long prompt is read."""


class AnthropicContentBlockStartEvent(msgspec.Struct, tag="content_block_start",
                                      tag_field="type"):
    """A content block starts (its text, thinking or input comes in deltas)."""

    index: int
    content_block: AnthropicOutText | AnthropicOutThinking | AnthropicOutToolUse


class AnthropicTextDelta(msgspec.Struct, tag="text_delta", tag_field="type"):
    """Text added to a text block."""

    text: str


class AnthropicThinkingDelta(msgspec.Struct, tag="thinking_delta", tag_field="type"):
    """Reasoning added to a thinking block."""

    thinking: str


class AnthropicInputJsonDelta(msgspec.Struct, tag="input_json_delta", tag_field="type"):
    """Part of a tool_use block's input JSON."""

    partial_json: str


class AnthropicContentBlockDeltaEvent(msgspec.Struct, tag="content_block_delta",
                                      tag_field="type"):
    """Content added to the block at index."""

    index: int
    delta: AnthropicTextDelta | AnthropicThinkingDelta | AnthropicInputJsonDelta


class AnthropicContentBlockStopEvent(msgspec.Struct, tag="content_block_stop", tag_field="type"):
    """The block at index is complete."""

    index: int


class AnthropicStop(msgspec.Struct):
    """Why the message ended."""

    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]
    stop_sequence: str | None


class AnthropicMessageDeltaEvent(msgspec.Struct, tag="message_delta", tag_field="type"):
    """The stop reason and the final usage."""

    delta: AnthropicStop
    usage: AnthropicUsage


class AnthropicMessageStopEvent(msgspec.Struct, tag="message_stop", tag_field="type"):
    """The last event of a finished message."""


# AnthropicError (`event: error`): a failure after the stream started ends it
MESSAGE_EVENTS: tuple[type, ...] = (
    AnthropicMessageStartEvent, AnthropicPingEvent, AnthropicContentBlockStartEvent,
    AnthropicContentBlockDeltaEvent, AnthropicContentBlockStopEvent, AnthropicMessageDeltaEvent,
    AnthropicMessageStopEvent, AnthropicError)
