"""The server-sent events of the streamed OpenAI routes as msgspec structs (they document
/openapi.json; tests check the wire against them): each `data:` line is one of these objects, and
the stream ends with `data: [DONE]`."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from gateway.openai.schemas import ChoiceLogprobs, ErrorResponse, Usage


class ChunkFunction(msgspec.Struct, kw_only=True):
    """The part of a tool call's function a chunk adds: its name comes once, then arguments."""

    name: str | UnsetType = UNSET
    arguments: str


class ChunkToolCall(msgspec.Struct, kw_only=True):
    """A tool-call delta; id and type come with the call's first delta."""

    index: int
    id: str | UnsetType = UNSET
    type: Literal["function"] | UnsetType = UNSET
    function: ChunkFunction


class ChunkDelta(msgspec.Struct, kw_only=True):
    """What a chunk adds to a choice's message; the first chunk of each choice carries the role."""

    role: Literal["assistant"] | UnsetType = UNSET
    content: str | UnsetType = UNSET
    refusal: None | UnsetType = UNSET
    reasoning_content: str | UnsetType = UNSET
    tool_calls: list[ChunkToolCall] | UnsetType = UNSET


class ChatChunkChoice(msgspec.Struct):
    """One choice's part of a chat chunk."""

    index: int
    delta: ChunkDelta
    logprobs: ChoiceLogprobs | None
    finish_reason: str | None


class ChatCompletionChunk(msgspec.Struct, kw_only=True):
    """An event of POST /v1/chat/completions with `stream: true`. With
    `stream_options.include_usage` every chunk has `usage: null` and a last one with no choices
    carries the usage."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None | UnsetType = UNSET


class CompletionChunkChoice(msgspec.Struct):
    """One choice's part of a text-completion chunk."""

    index: int
    text: str
    logprobs: dict[str, Any] | None
    finish_reason: str | None


class CompletionChunk(msgspec.Struct, kw_only=True):
    """An event of POST /v1/completions with `stream: true` (a last one with no choices carries
    the usage when `stream_options.include_usage` is set)."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChunkChoice]
    usage: Usage | UnsetType = UNSET


# ErrorResponse: a failure after the stream started (the worker died, the model broke) ends it
CHAT_EVENTS: tuple[type, ...] = (ChatCompletionChunk, ErrorResponse)
COMPLETION_EVENTS: tuple[type, ...] = (CompletionChunk, ErrorResponse)
