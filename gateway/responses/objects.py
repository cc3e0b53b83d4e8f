"""The Responses API response object as msgspec structs (what endpoint.py builds, for OpenAPI)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class OutputContent(msgspec.Struct, kw_only=True):
    """An `output_text` part of a message, or a `reasoning_text` part of a reasoning item."""

    type: Literal["output_text", "reasoning_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class OutputItem(msgspec.Struct, kw_only=True):
    """An output item: `reasoning`, `message` or `function_call`."""

    type: Literal["reasoning", "message", "function_call"]
    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    role: Literal["assistant"] | None = None
    content: list[OutputContent] | None = None
    summary: list[Any] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    namespace: str | None = None  # a function_call to a function of a namespace tool


class InputTokensDetails(msgspec.Struct):
    """Input token breakdown."""

    cached_tokens: int
    cache_write_tokens: int


class OutputTokensDetails(msgspec.Struct):
    """Output token breakdown."""

    reasoning_tokens: int


class ResponseUsage(msgspec.Struct):
    """Token accounting of a response."""

    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseError(msgspec.Struct):
    """Why a response failed."""

    code: str
    message: str


class ResponseObject(msgspec.Struct, kw_only=True):
    """Response of POST /v1/responses (and the `response` of its stream events)."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    completed_at: int | None
    status: Literal["completed", "incomplete", "failed", "in_progress"]
    error: ResponseError | None
    incomplete_details: dict[str, str] | None
    instructions: str | None
    max_output_tokens: int | None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None
    reasoning: dict[str, Any]
    store: bool
    temperature: float
    text: dict[str, Any]
    tool_choice: Any
    tools: list[dict[str, Any]]
    top_p: float
    truncation: str
    usage: ResponseUsage | msgspec.UnsetType = msgspec.UNSET  # absent until the response ends
    user: str | msgspec.UnsetType = msgspec.UNSET  # absent unless the request gave one
    metadata: dict[str, str]


class DeletedResponse(msgspec.Struct, kw_only=True):
    """Response of DELETE /v1/responses/{response_id}."""

    id: str
    object: Literal["response"] = "response"
    deleted: bool


class ResponseItemList(msgspec.Struct, kw_only=True):
    """Response of GET /v1/responses/{response_id}/input_items: one page of input items (each
    a `message`, `function_call`, `function_call_output` or `reasoning` item with an `id`)."""

    object: Literal["list"] = "list"
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
