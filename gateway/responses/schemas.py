"""Responses API request and response bodies as msgspec structs (validation and OpenAPI)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from gateway.schemas import MaxTokens, Temperature, TopP, _Body


class ContentPart(_Body):
    """A content part of an input message (`input_text`, `output_text`, ...)."""

    type: str
    text: str | None = None


class InputItem(_Body):
    """One input item: a message (typed or not), a function_call, a function_call_output or a
    reasoning item. Which fields apply depends on `type`; translate.py checks them."""

    type: str | None = None
    role: str | None = None
    content: str | list[ContentPart] | None = None
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[ContentPart] | None = None
    summary: list[ContentPart] | None = None
    status: str | None = None


class FunctionTool(_Body):
    """A tool of a Responses request; only `function` tools are served."""

    type: str
    name: Annotated[str, Meta(min_length=1, max_length=64,
                              pattern=r"^[a-zA-Z0-9_.\-]+$")] | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolChoiceNamed(_Body):
    """tool_choice forcing one function: {"type": "function", "name": ...}."""

    type: str
    name: str | None = None


class ReasoningParam(_Body):
    """reasoning: effort (none/minimal disable thinking; others go to the template)."""

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: str | None = None


class TextFormat(_Body):
    """text.format: only `text` is served (structured output is a later issue)."""

    type: str = "text"


class TextParam(_Body):
    """text: the output format."""

    format: TextFormat | None = None
    verbosity: str | None = None


class CreateResponse(_Body):
    """POST /v1/responses."""

    model: str
    input: str | list[InputItem]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceNamed | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    reasoning: ReasoningParam | None = None
    text: TextParam | None = None
    user: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None  # extension, as on chat completions
    ignore_eos: bool = False  # extension, as on chat completions


# ---- the response object (documentation of what endpoint.py builds) ---------------------


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
    usage: ResponseUsage | None
    user: str | None
    metadata: dict[str, str]
